//! Pure record formats the guard reads and writes, no IO: events read or dead-lettered
//! (`dead_letter`), judged-through markers, state checkpoints, policy changes.

pub mod checkpoint;
pub mod dead_letter;
pub mod marker;
pub mod policy_change;
