//! The Rust client of the wire contract: publish a session's events, answer each tool call
//! with its verdict or "judged, no verdict" from the judged-through markers, fail open on a
//! deadline. The edge (`loopguard edge`) serves it over HTTP; Rust runtimes use it directly.
//!
//! One `Guard` per process: one producer, one verdict reader (a thread that reads every
//! partition of the verdicts topic from its end at start-up, so no session's first call
//! waits for a partition to be added), and the pending tool calls (`pending`).
//!
//! ```no_run
//! # async fn agent() -> Result<(), loopguard::client::ClientError> {
//! use loopguard::client::{Answer, Guard, GuardSettings};
//! use std::time::Duration;
//!
//! let guard = Guard::connect(GuardSettings::new("kafka:9092"))?;
//! let call = serde_json::json!({"v": 1, "event_id": "s1-e4", "session_id": "s1",
//!     "ts": 1767225601600_i64, "type": "tool_call", "turn_id": "t2", "call_id": "c2",
//!     "tool": "bash", "args": {"cmd": "make test"}});
//! match guard.check(&call, Duration::from_secs(1)).await? {
//!     Answer::Verdict(v) if v.stops_the_call() => println!("refused: {}", v.message),
//!     Answer::Verdict(v) => println!("run it, and tell the model: {}", v.message),
//!     Answer::NoVerdict | Answer::FailOpen(_) => println!("run it"),
//! }
//! # Ok(()) }
//! ```

mod guard;
mod pending;
mod reader;
mod settings;
mod verdict;

pub use guard::{Answer, ClientError, FailOpen, Guard};
pub use pending::Settled;
pub use settings::{topic_for, GuardSettings, SettingsError};
pub use verdict::{Action, Verdict};
