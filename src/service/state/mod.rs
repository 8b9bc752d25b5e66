//! The state topic both ways: a partition's engine and the checkpoints it writes
//! (`partition`), and the restore that reads them back when a partition is gained
//! (`restore`).

pub mod partition;
pub mod restore;
