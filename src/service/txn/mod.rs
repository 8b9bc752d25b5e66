//! A stream thread's exactly-once producer, in one-way layers: `producer` (librdkafka's
//! producer and its transactional calls) -> `committer` (the commit thread a batch's
//! transaction is handed to) -> `TxnProducer` here (two producers taking turns), with
//! `membership` (the group generation offsets are sent under).
//!
//! A producer fenced by a newer incarnation of this instance (same transactional id) must
//! stop: the service exits and its successor carries on.

pub mod committer;
pub mod membership;
pub mod producer;

use crate::config::{Config, Delivery};
use crate::service::kafka::outcome::Outcome;
use committer::{Committer, Handoff, InFlight, Settled};
use membership::Membership;
use producer::{
    abort_transaction_of, commit_transaction_of, create, flush_while_moving, Aborted, GuardProducer,
};
pub use producer::{send, send_dead_letter, send_record, TXN_TIMEOUT};
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{Producer, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The producer of a stream thread: verdicts, state records and dead letters.
///
/// In exactly-once mode it is two transactional producers that take turns, one batch
/// each. Kafka refuses to add partitions to a producer's next transaction with
/// CONCURRENT_TRANSACTIONS until the broker has written the markers of its previous one,
/// and librdkafka (no transactions v2, KIP-890) retries until then: the first verdicts of
/// every batch waited for the last batch's markers, the read_uncommitted p99 of 20-30 ms
/// (docs/benchmarks.md). The other producer's last transaction ended a whole batch ago.
/// A batch's transaction is committed by the commit thread (`committer`) while the next
/// batch is written on the other producer; at most one commit is in flight, and the next
/// batch writes only after the last one's records are in the log, so records, state and
/// offsets keep their order. The commit thread begins the producer's next transaction
/// once its commit is done (`begun`): beginning is a round trip to librdkafka's main
/// thread, which took 5-6 ms on the stream thread when the machine was busy.
pub struct TxnProducer {
    inner: GuardProducer,
    /// The producer whose turn is next, with its transactional id's instance part and
    /// whether its next transaction is begun; None while its last transaction is being
    /// committed (`in_flight`).
    spare: Option<(GuardProducer, String, bool)>,
    /// The commit pipeline (exactly-once): the thread and the commit handed to it.
    committer: Option<Committer>,
    in_flight: Option<InFlight>,
    cfg: Arc<Config>,
    instance: String,
    /// A batch is being written (its records go into the open transaction).
    open: bool,
    /// `inner`'s next transaction is begun, nothing written in it yet.
    begun: bool,
    failed_at_begin: u64,
}

/// The instance part of the transactional id of a stream thread's second producer.
fn alternate_instance(instance: &str) -> String {
    format!("{instance}-alt")
}

impl TxnProducer {
    /// Creates the producer(s); in exactly-once mode, fences any predecessor with these ids.
    pub fn new(cfg: Arc<Config>, instance: &str) -> KafkaResult<Self> {
        let inner = create(&cfg, instance)?;
        let (spare, committer) = if cfg.kafka.delivery == Delivery::ExactlyOnce {
            let alt = alternate_instance(instance);
            let committer = Committer::start(cfg.clone(), instance)
                .map_err(|e| tracing::warn!(error = %e, "no commit thread: commits inline"))
                .ok();
            (Some((create(&cfg, &alt)?, alt, false)), committer)
        } else {
            (None, None)
        };
        Ok(TxnProducer {
            inner,
            spare,
            committer,
            in_flight: None,
            cfg,
            instance: instance.to_string(),
            open: false,
            begun: false,
            failed_at_begin: 0,
        })
    }

    /// The transaction just ended: the other producer takes the next batch.
    fn take_turns(&mut self) {
        if let Some((spare, id, begun)) = self.spare.as_mut() {
            std::mem::swap(&mut self.inner, spare);
            std::mem::swap(&mut self.instance, id);
            std::mem::swap(&mut self.begun, begun);
        }
    }

    /// The producer of the open batch. While the last batch's commit is in flight, the
    /// first call waits until that batch's records are in the log (`committer`).
    pub fn producer(&self) -> &GuardProducer {
        if let Some(in_flight) = &self.in_flight {
            in_flight.flushed.wait();
        }
        &self.inner
    }

    /// Pipelined commits send their offsets under the membership `source` holds when they
    /// send them (`membership`); without a commit thread, commits take it inline anyway.
    pub fn read_membership_from(&self, source: Box<dyn Membership>) {
        if let Some(committer) = &self.committer {
            committer.read_membership_from(source);
        }
    }

    /// True while a handed-off commit has not been settled.
    pub fn committing(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Hands the open transaction to the commit thread with the consumed offsets and
    /// switches to the other producer for the next batch; `settle` tells how it went. The
    /// caller settles the previous one first. Without a commit thread or a free producer
    /// (at-least-once mode), commits here as `commit` does.
    pub fn hand_off(
        &mut self,
        offsets: TopicPartitionList,
        group: Option<ConsumerGroupMetadata>,
    ) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        debug_assert!(self.in_flight.is_none(), "one commit in flight at most");
        if self.committer.is_none() {
            return self.commit(&offsets, group.as_ref());
        }
        let Some((next, next_instance, next_begun)) = self.spare.take() else {
            return self.commit(&offsets, group.as_ref());
        };
        let handoff = Handoff {
            producer: std::mem::replace(&mut self.inner, next),
            instance: std::mem::replace(&mut self.instance, next_instance),
            offsets,
            group,
        };
        self.open = false;
        self.begun = next_begun;
        let committer = self.committer.as_ref().expect("checked above");
        match committer.hand_off(handoff) {
            Ok(in_flight) => {
                self.in_flight = Some(in_flight);
                Ok(())
            }
            Err(settled) => self.take_back(*settled),
        }
    }

    /// The end of the commit in flight, if there is one (waiting for it when `wait`); None
    /// while it runs or when there is none. Its producer is the spare again.
    pub fn settle(&mut self, wait: bool) -> Option<Result<(), KafkaError>> {
        let in_flight = self.in_flight.as_ref()?;
        let settled = self.committer.as_ref()?.settle(in_flight, wait)?;
        self.in_flight = None;
        Some(self.take_back(settled))
    }

    fn take_back(&mut self, settled: Settled) -> Result<(), KafkaError> {
        if let Some(producer) = settled.producer {
            self.spare = Some((producer, settled.instance, settled.begun));
        }
        settled.result
    }

    /// True while a batch is being written (a transaction is open in exactly-once mode).
    pub fn is_open(&self) -> bool {
        self.open
    }

    fn eos(&self) -> bool {
        self.cfg.kafka.delivery == Delivery::ExactlyOnce
    }

    fn failed(&self) -> u64 {
        self.inner.context().failed.load(Ordering::Relaxed)
    }

    /// Opens a transaction unless one is open (exactly-once), and serves delivery reports.
    pub fn begin(&mut self) -> Result<(), KafkaError> {
        self.inner.poll(Duration::ZERO);
        if self.open {
            return Ok(());
        }
        if self.eos() && !std::mem::take(&mut self.begun) {
            if let Err(e) = self.inner.begin_transaction() {
                // A previous call may have left the producer unusable: start afresh once.
                if Outcome::of(&e) == Outcome::Fenced {
                    return Err(e);
                }
                tracing::warn!(error = %e, "begin_transaction failed; replacing the producer");
                self.replace()?;
                self.inner.begin_transaction()?;
            }
        }
        self.failed_at_begin = self.failed();
        self.open = true;
        Ok(())
    }

    /// Commits the open transaction with the consumed offsets (exactly-once), or waits for
    /// every record to be acknowledged (at-least-once; the caller then commits offsets).
    /// On failure nothing of the batch is committed and the transaction is over.
    pub fn commit(
        &mut self,
        offsets: &TopicPartitionList,
        group: Option<&ConsumerGroupMetadata>,
    ) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        let result = if self.eos() {
            commit_transaction_of(&self.inner, offsets, group)
        } else {
            self.flush_checked()
        };
        match result {
            Ok(()) => {
                self.open = false;
                self.take_turns();
                Ok(())
            }
            Err(e) => {
                if Outcome::of(&e) == Outcome::Fenced {
                    self.open = false;
                    return Err(e);
                }
                self.abort()?;
                Err(e)
            }
        }
    }

    fn flush_checked(&self) -> Result<(), KafkaError> {
        flush_while_moving(&self.inner)?;
        if self.failed() > self.failed_at_begin {
            return Err(KafkaError::MessageProduction(RDKafkaErrorCode::Fail));
        }
        Ok(())
    }

    /// Ends the open transaction without committing it; always finishes, replacing the
    /// producer when its abort cannot (`abort_transaction_of`). Only an instance fenced by
    /// its own successor gets an error back. A commit in flight is not touched: the caller
    /// settles it first.
    pub fn abort(&mut self) -> Result<(), KafkaError> {
        if !self.open {
            return Ok(());
        }
        if !self.eos() {
            // Nothing to undo: what was produced stays produced and is de-duplicated
            // downstream by verdict id; the consumer rewinds to the last commit.
            self.inner.purge(PurgeConfig::default().queue());
            let _ = self.inner.flush(TXN_TIMEOUT);
            self.open = false;
            return Ok(());
        }
        match abort_transaction_of(&self.inner) {
            Aborted::Clean => {
                self.open = false;
                self.take_turns();
                Ok(())
            }
            Aborted::Replace => self.replace(),
            Aborted::Fenced(e) => {
                self.open = false;
                Err(e)
            }
        }
    }

    /// Ends the open transaction and starts afresh with a new producer (same transactional
    /// id, new epoch, sequence numbers from zero).
    pub fn renew(&mut self) -> Result<(), KafkaError> {
        self.abort()?;
        self.replace()
    }

    /// Swaps in a new producer with the same transactional id.
    fn replace(&mut self) -> Result<(), KafkaError> {
        tracing::warn!(instance = %self.instance, "replacing the producer");
        self.open = false;
        self.begun = false;
        let fresh = create(&self.cfg, &self.instance)?;
        // The old one is fenced by now; dropping it purges whatever it still held.
        self.inner = fresh;
        Ok(())
    }
}
