//! The retry bound: no record can make the guard retry its offset more than
//! `max_record_retries` times. After a batch failed in a way a record may have caused
//! (`Outcome::blames_record`), each partition that had records in it processes them again
//! one at a time, each in its own transaction, up to the last one the failed batch held, so
//! a further failure is that record's own (a failure that blames no record replays the
//! batch whole); a record that keeps
//! failing is given up (dead-lettered minimally, passed). Bookkeeping only: the worker
//! does the IO.

use crate::service::kafka::outcome::Outcome;
use rdkafka::error::KafkaError;
use std::collections::{BTreeMap, BTreeSet};

/// A partition that failed since its last committed progress.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Failing {
    /// The committed offset the partition was rewound to.
    offset: Option<i64>,
    /// Rewinds to that offset.
    rewinds: u32,
    /// Failures that can be the records' fault (not a broker outage).
    strikes: u32,
    /// The last offset a failed batch held: records up to it are processed alone.
    until: i64,
}

/// One failed attempt, applied at the next rewind (when the committed offsets are known).
#[derive(Debug, Clone, Copy)]
struct Failure {
    partition: i32,
    /// The offset of the record processed alone, when the failure is certainly its own.
    alone: Option<i64>,
    strike: bool,
    until: i64,
}

#[derive(Debug)]
pub struct Retries {
    max_retries: u32,
    failing: BTreeMap<i32, Failing>,
    /// The record the open transaction holds alone.
    alone: Option<(i32, i64)>,
    pending: Vec<Failure>,
    given_up: BTreeSet<(i32, i64)>,
}

impl Retries {
    pub fn new(max_retries: u32) -> Self {
        Retries {
            max_retries: max_retries.max(1),
            failing: BTreeMap::new(),
            alone: None,
            pending: Vec::new(),
            given_up: BTreeSet::new(),
        }
    }

    /// True when the record at `offset` of `partition` must be processed in a transaction
    /// of its own.
    pub fn isolated(&self, partition: i32, offset: i64) -> bool {
        self.failing
            .get(&partition)
            .is_some_and(|f| offset <= f.until)
    }

    /// The open transaction holds `offset` of `partition` alone.
    pub fn alone(&mut self, partition: i32, offset: i64) {
        self.alone = Some((partition, offset));
    }

    /// True (once) for a record given up: it is dead-lettered minimally, not processed.
    pub fn take_given_up(&mut self, partition: i32, offset: i64) -> bool {
        self.given_up.remove(&(partition, offset))
    }

    /// A batch (or a record alone) failed; `batch` are the partitions it held records of,
    /// each with the last offset it held.
    pub fn failed(&mut self, e: &KafkaError, batch: impl IntoIterator<Item = (i32, i64)>) {
        let strike = Outcome::of(e).blames_record();
        let alone = self.alone.take();
        let mut parts: BTreeMap<i32, i64> = BTreeMap::new();
        for (p, o) in batch.into_iter().chain(alone) {
            let last = parts.entry(p).or_insert(o);
            *last = (*last).max(o);
        }
        for (partition, until) in parts {
            self.pending.push(Failure {
                partition,
                alone: alone.filter(|(p, _)| *p == partition).map(|(_, o)| o),
                strike,
                until,
            });
        }
    }

    /// True when a failure waiting for the rewind may be a record's fault: the producer is
    /// then renewed, since a record the broker refused can leave the idempotent producer's
    /// sequence numbers behind ("skipped sequence numbers" on the next transaction).
    pub fn pending_strike(&self) -> bool {
        self.pending.iter().any(|f| f.strike)
    }

    /// The failed batch is rewound to `committed`: counts the failures against the offsets
    /// they happened at. Returns the records given up by this rewind.
    pub fn rewound(&mut self, committed: &BTreeMap<i32, Option<i64>>) -> Vec<(i32, i64)> {
        let mut given_up = Vec::new();
        for f in std::mem::take(&mut self.pending) {
            let Some(&offset) = committed.get(&f.partition) else {
                continue;
            };
            let state = self.failing.entry(f.partition).or_default();
            if state.offset != offset {
                *state = Failing {
                    offset,
                    until: state.until,
                    ..Failing::default()
                };
            }
            // Only a failure a record may have caused is replayed record by record: a
            // refused generation or an absent broker says nothing about the records, and
            // a batch of a backlog (up to 100,000 events) replayed one transaction each
            // took 40 s (docs/benchmarks.md, the cost anchor).
            if f.strike {
                state.until = state.until.max(f.until);
            }
            state.rewinds += 1;
            state.strikes += u32::from(f.strike);
            // A record processed alone (right after a commit, so it is the first record
            // past the committed offset) failed on its own: only such a record is given up.
            if let Some(o) = f.alone.filter(|_| state.strikes >= self.max_retries) {
                self.given_up.insert((f.partition, o));
                given_up.push((f.partition, o));
            }
        }
        given_up
    }

    /// Rewinds of `partition` to one offset so far.
    pub fn rewinds(&self, partition: i32) -> u32 {
        self.failing.get(&partition).map_or(0, |f| f.rewinds)
    }

    /// Of those rewinds, the ones a record may have caused (its strikes): what the bound
    /// `kafka.max_record_retries` counts. A rewind for another reason (the group moved on,
    /// the broker away) is not one.
    pub fn strikes(&self, partition: i32) -> u32 {
        self.failing.get(&partition).map_or(0, |f| f.strikes)
    }

    /// Rewound repeatedly without progress: the partition reports unready.
    pub fn stuck(&self, partition: i32) -> bool {
        self.rewinds(partition) >= 2
    }

    /// `partition` committed up to `next` (the next record to process).
    pub fn progressed(&mut self, partition: i32, next: i64) {
        if self.alone.is_some_and(|(p, _)| p == partition) {
            self.alone = None;
        }
        if let Some(f) = self.failing.get_mut(&partition) {
            if next > f.until {
                self.failing.remove(&partition);
            } else {
                // Past the failed offset, not yet past the failed batch: still one at a time.
                f.offset = Some(next);
                f.rewinds = 0;
                f.strikes = 0;
            }
        }
    }

    /// `partition` left this instance.
    pub fn forget(&mut self, partition: i32) {
        self.failing.remove(&partition);
        if self.alone.is_some_and(|(p, _)| p == partition) {
            self.alone = None;
        }
        self.given_up.retain(|(p, _)| *p != partition);
        self.pending.retain(|f| f.partition != partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode;

    fn too_large() -> KafkaError {
        KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
    }

    fn at(p: i32, o: i64) -> BTreeMap<i32, Option<i64>> {
        [(p, Some(o))].into_iter().collect()
    }

    #[test]
    fn a_record_failing_alone_is_given_up_at_the_bound() {
        let mut r = Retries::new(3);
        // The batch fails: partition 0 held offsets up to 14, partition 1 up to 20.
        r.failed(&too_large(), [(0, 14), (1, 20)]);
        let mut committed = at(0, 10);
        committed.insert(1, Some(20));
        assert!(r.rewound(&committed).is_empty());
        assert!(r.isolated(0, 10) && r.isolated(0, 14) && !r.isolated(0, 15));
        assert!(r.isolated(1, 20));
        // Partition 1's record alone commits: it was innocent.
        r.progressed(1, 21);
        assert!(!r.isolated(1, 21));
        // Partition 0's record alone fails twice more: given up at the third failure.
        r.alone(0, 10);
        r.failed(&too_large(), []);
        assert!(r.rewound(&at(0, 10)).is_empty());
        assert!(r.stuck(0));
        r.alone(0, 10);
        r.failed(&too_large(), []);
        assert_eq!(r.rewound(&at(0, 10)), [(0, 10)]);
        assert_eq!(r.rewinds(0), 3);
        assert!(r.take_given_up(0, 10));
        assert!(!r.take_given_up(0, 10));
        // Past it, the rest of the failed batch still goes one at a time.
        r.progressed(0, 11);
        assert!(!r.stuck(0));
        assert!(r.isolated(0, 11));
        r.progressed(0, 15);
        assert!(!r.isolated(0, 15));
    }

    #[test]
    fn a_partition_with_nothing_committed_gives_up_its_first_record_too() {
        let mut r = Retries::new(2);
        let none: BTreeMap<i32, Option<i64>> = [(0, None)].into_iter().collect();
        r.failed(&too_large(), [(0, 3)]);
        assert!(r.rewound(&none).is_empty());
        r.alone(0, 0);
        r.failed(&too_large(), []);
        assert_eq!(r.rewound(&none), [(0, 0)]);
    }

    /// A refused generation or an absent broker blames no record: the batch is replayed
    /// whole, not one record per transaction.
    #[test]
    fn a_failure_that_blames_no_record_isolates_nothing() {
        let mut r = Retries::new(3);
        let refused = KafkaError::Global(RDKafkaErrorCode::IllegalGeneration);
        r.failed(&refused, [(0, 99_999)]);
        assert!(r.rewound(&at(0, 0)).is_empty());
        assert!(!r.isolated(0, 1) && !r.isolated(0, 50_000));
        assert_eq!((r.rewinds(0), r.strikes(0)), (1, 0));
        // A record's own failure still isolates the batch it was in.
        r.failed(&too_large(), [(0, 10)]);
        r.rewound(&at(0, 0));
        assert!(r.isolated(0, 10) && !r.isolated(0, 11));
    }

    #[test]
    fn a_broker_outage_is_retried_without_bound_but_shows_as_stuck() {
        let mut r = Retries::new(1);
        for _ in 0..10 {
            r.alone(0, 5);
            r.failed(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), []);
            assert!(r.rewound(&at(0, 5)).is_empty());
        }
        assert!(r.stuck(0));
    }

    #[test]
    fn a_failure_behind_the_last_one_starts_counting_afresh() {
        let mut r = Retries::new(2);
        r.alone(0, 5);
        r.failed(&too_large(), [(0, 9)]);
        r.rewound(&at(0, 5));
        // Offset 5 committed; offset 6 alone fails once: not given up yet.
        r.progressed(0, 6);
        r.alone(0, 6);
        r.failed(&too_large(), []);
        assert!(r.rewound(&at(0, 6)).is_empty());
        assert_eq!(r.rewinds(0), 1);
    }
}
