//! The Rust client of the wire contract: publish a session's events, answer each tool call
//! with its verdict or "judged, no verdict" from the judged-through markers, fail open on a
//! deadline. The edge (`loopguard edge`) serves it over HTTP; Rust runtimes use it directly.
//!
//! One `Guard` per process: one producer, one verdict reader (a thread that reads every
//! partition of the verdicts topic from its end at start-up, so no session's first call
//! waits for a partition to be added), and the pending tool calls (`pending`).

mod guard;
mod pending;
mod reader;
mod settings;
mod verdict;

pub use guard::{Answer, ClientError, FailOpen, Guard};
pub use pending::Settled;
pub use settings::GuardSettings;
pub use verdict::{Action, Verdict};
