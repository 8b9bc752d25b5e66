//! The checkpoint record of a state partition: the engine's clock and the events offset
//! the partition's session records are current to, under a key no session can have.

use crate::engine::Clock;

/// Key of the checkpoint record in each state partition. Not valid UTF-8, so it can
/// never be a session id.
pub const CLOCK_KEY: &[u8] = b"\xffloopguard-clock";

/// The record under `CLOCK_KEY`, written with every checkpoint: the engine's clock and the
/// events offset the sessions' records are current to (the next event to process).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    #[serde(flatten)]
    pub clock: Clock,
    /// Absent in records of versions that wrote state with every batch: nothing to re-run.
    #[serde(default)]
    pub offset: Option<i64>,
}
