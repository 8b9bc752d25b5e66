//! Pacing under a backlog: how far behind its events a stream thread is, and how that
//! spaces its markers and commits. While the guard keeps up, markers go out when the burst
//! ends (or every `kafka.judged_max_ms`) and batches commit every `kafka.batch_max_ms`;
//! when its events already waited D in the topic, markers and commits may be spaced up to
//! `kafka.backlog_pace_percent` of D (10 %: an answer D late comes at most D x 1.1 late),
//! markers never further apart than a commit, commits never more than
//! `BACKLOG_COMMIT_FACTOR` x `batch_max_ms` apart, with `batch_max_events` stretched alike
//! (docs/decisions.md (cg)).
//!
//! Each marker and each transaction is a fixed cost to the broker (a produce request per
//! marker burst; for a commit, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
//! EndTxn and the control records it writes to every partition): a backlog spreads it
//! over more events.

use crate::config::KafkaConfig;
use std::time::Duration;

/// A backlog stretches the commit interval to at most this many `batch_max_ms`.
pub const BACKLOG_COMMIT_FACTOR: u64 = 10;

/// How far behind a stream thread is, and the spacing that allows.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pace {
    /// How long the latest record read had waited in the topic, in ms.
    behind_ms: u64,
}

impl Pace {
    /// Notes how long the record just read waited in the topic: its broker or producer
    /// timestamp against the guard's clock (a clock ahead of the guard's counts as no
    /// wait; one far behind paces at the ceilings, never beyond).
    pub fn waited(&mut self, record_ms: Option<i64>, now_ms: i64) {
        self.behind_ms = record_ms.map_or(0, |t| now_ms.saturating_sub(t).max(0) as u64);
    }

    /// The consumer had nothing ready: the backlog, if any, is read.
    pub fn caught_up(&mut self) {
        self.behind_ms = 0;
    }

    /// The backlog's share the answers may wait on top of it.
    fn share_ms(&self, cfg: &KafkaConfig) -> u64 {
        self.behind_ms.saturating_mul(cfg.backlog_pace_percent) / 100
    }

    /// How long owed markers (and the verdicts held with them) may wait while events keep
    /// coming.
    pub fn markers(&self, cfg: &KafkaConfig) -> Duration {
        let floor = cfg.judged_max_ms;
        let ceiling = cfg.batch_max_ms.max(floor);
        Duration::from_millis(self.share_ms(cfg).clamp(floor, ceiling))
    }

    /// The commit interval in force: `batch_max_ms`, stretched under a backlog.
    pub fn commits(&self, cfg: &KafkaConfig) -> Duration {
        let floor = cfg.batch_max_ms;
        let ceiling = floor.saturating_mul(BACKLOG_COMMIT_FACTOR);
        Duration::from_millis(self.share_ms(cfg).clamp(floor, ceiling))
    }

    /// The events a batch may hold: `batch_max_events`, stretched as much as the interval
    /// (a drain reaches 10,000 events well within 100 ms).
    pub fn batch_events(&self, cfg: &KafkaConfig) -> usize {
        let stretch = self.commits(cfg).as_millis() as u64 / cfg.batch_max_ms.max(1);
        let stretch = stretch.clamp(1, BACKLOG_COMMIT_FACTOR) as usize;
        cfg.batch_max_events.get().saturating_mul(stretch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(percent: u64) -> KafkaConfig {
        let mut k = crate::config::load_with_env(None, std::iter::empty())
            .expect("embedded defaults")
            .kafka;
        k.backlog_pace_percent = percent;
        k
    }

    fn behind(ms: i64) -> Pace {
        let mut p = Pace::default();
        p.waited(Some(1_000_000), 1_000_000 + ms);
        p
    }

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn keeping_up_paces_as_configured() {
        let k = kafka(10);
        for p in [Pace::default(), behind(0), behind(40), behind(-5_000)] {
            assert_eq!(p.markers(&k), ms(5));
            assert_eq!(p.commits(&k), ms(100));
        }
        let mut p = Pace::default();
        p.waited(None, 5_000);
        assert_eq!(p.markers(&k), ms(5), "no timestamp: no backlog seen");
    }

    #[test]
    fn a_backlog_spaces_markers_and_commits_by_its_share() {
        let k = kafka(10);
        assert_eq!(behind(300).markers(&k), ms(30));
        assert_eq!(behind(300).commits(&k), ms(100));
        assert_eq!(
            behind(4_000).markers(&k),
            ms(100),
            "markers: a commit apart at most"
        );
        assert_eq!(behind(4_000).commits(&k), ms(400));
        assert_eq!(behind(300).batch_events(&k), 10_000);
        assert_eq!(
            behind(4_000).batch_events(&k),
            40_000,
            "events stretch with time"
        );
        assert_eq!(behind(3_600_000).batch_events(&k), 100_000);
        assert_eq!(
            behind(3_600_000).commits(&k),
            ms(1_000),
            "ten commit intervals at most"
        );
    }

    #[test]
    fn caught_up_forgets_the_backlog() {
        let k = kafka(10);
        let mut p = behind(4_000);
        p.caught_up();
        assert_eq!(p.markers(&k), ms(5));
        assert_eq!(p.commits(&k), ms(100));
    }

    #[test]
    fn zero_percent_never_paces() {
        let k = kafka(0);
        assert_eq!(behind(3_600_000).markers(&k), ms(5));
        assert_eq!(behind(3_600_000).commits(&k), ms(100));
        assert_eq!(behind(3_600_000).batch_events(&k), 10_000);
    }
}
