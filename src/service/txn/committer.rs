//! The commit pipeline of a stream thread under exactly-once: a batch's transaction is
//! handed to this thread to commit while the stream thread goes on with the next batch on
//! its other producer (docs/service.md, "Commit cadence").
//!
//! Two rules keep it exactly-once and in order:
//! - **At most one commit in flight.** The stream thread commits batch N+1 only after it has
//!   seen batch N's commit succeed (`settle`); when N's fails, N+1 is aborted too and both
//!   are redone from the last commit. Offsets therefore never get ahead of a lost batch.
//! - **The next batch writes after the last one is in the log.** Its first record waits for
//!   the handed-off producer's flush (`Gate`), so every partition (verdicts, state) holds
//!   batch N's records before batch N+1's, as with one producer: a compacted state topic
//!   keeps the newer checkpoint and a runtime reads its verdicts in order. What runs after
//!   the flush (the offsets, the commit request and the coordinator's answer) is the part
//!   of a commit the stream thread no longer waits for.

use super::membership::Membership;
use super::producer::{abort_transaction_of, commit_transaction_of, create, flush_while_moving};
use super::producer::{Aborted, GuardProducer};
use crate::config::Config;
use crate::service::kafka::outcome::Outcome;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

/// A transaction to commit: its producer (with its transactional id's instance part), the
/// consumed offsets and the group's metadata when they were taken (sent only when the
/// commit thread cannot read the consumer's own at sending time: `membership`).
pub struct Handoff {
    pub producer: GuardProducer,
    pub instance: String,
    pub offsets: TopicPartitionList,
    pub group: Option<ConsumerGroupMetadata>,
}

/// A handed-off transaction's end: its producer back, ready for a new transaction (aborted
/// or replaced after a failure), and how the commit went.
pub struct Settled {
    /// None only when the commit thread died and no new producer could be made.
    pub producer: Option<GuardProducer>,
    pub instance: String,
    pub result: Result<(), KafkaError>,
    /// After a successful commit the producer's next transaction is begun here, off the
    /// stream thread (an empty transaction: the broker hears of it at its first record).
    pub begun: bool,
}

/// Opens once the handed-off producer has flushed (or failed to): the next batch may write.
#[derive(Default)]
pub struct Gate {
    opened: AtomicBool,
    lock: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn open(&self) {
        let mut opened = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        *opened = true;
        self.opened.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    /// Returns once the gate is open.
    pub fn wait(&self) {
        if self.opened.load(Ordering::Acquire) {
            return;
        }
        let mut opened = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !*opened {
            opened = self.changed.wait(opened).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Opens its gate when dropped, so a failed or panicking flush never leaves the stream
/// thread waiting.
struct OpenOnDrop<'a>(&'a Gate);

impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A commit handed off and not yet settled.
pub struct InFlight {
    pub flushed: Arc<Gate>,
    done: mpsc::Receiver<Settled>,
    /// The producer's instance part, to create a new one if the commit thread died.
    instance: String,
}

struct Job {
    handoff: Handoff,
    flushed: Arc<Gate>,
    done: mpsc::SyncSender<Settled>,
}

/// The consumer's membership, read just before a commit sends its offsets; set once the
/// consumer exists (it is created after its worker, and so after this thread).
type MembershipSlot = Arc<OnceLock<Box<dyn Membership>>>;

/// The commit thread of one stream thread; it stops when dropped.
pub struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    cfg: Arc<Config>,
    membership: MembershipSlot,
}

impl Committer {
    /// Starts the thread, named after its stream thread's instance.
    pub fn start(cfg: Arc<Config>, instance: &str) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread_cfg = cfg.clone();
        let membership = MembershipSlot::default();
        let thread_membership = membership.clone();
        let thread = std::thread::Builder::new()
            .name(format!("commit-{instance}"))
            .spawn(move || {
                for job in queue {
                    let current = thread_membership.get().map(|m| &**m);
                    let settled = commit(&thread_cfg, job.handoff, &job.flushed, current);
                    // The stream thread may be gone (shutdown): nothing waits then.
                    let _ = job.done.send(settled);
                }
            })?;
        Ok(Committer {
            jobs: Some(jobs),
            thread: Some(thread),
            cfg,
            membership,
        })
    }

    /// From now on, commits send their offsets under the membership `source` holds when
    /// they send them. Only the first call counts.
    pub fn read_membership_from(&self, source: Box<dyn Membership>) {
        if self.membership.set(source).is_err() {
            tracing::warn!("the commit thread already reads a membership");
        }
    }

    /// Hands `handoff` to the thread. When the thread is gone, commits it here and returns
    /// its end at once.
    pub fn hand_off(&self, handoff: Handoff) -> Result<InFlight, Box<Settled>> {
        let flushed = Arc::new(Gate::default());
        let (done, settled) = mpsc::sync_channel(1);
        let instance = handoff.instance.clone();
        let job = Job {
            handoff,
            flushed: flushed.clone(),
            done,
        };
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        match sent {
            Ok(()) => Ok(InFlight {
                flushed,
                done: settled,
                instance,
            }),
            Err(job) => {
                tracing::warn!("commit thread gone: committing on the stream thread");
                let current = self.membership.get().map(|m| &**m);
                Err(Box::new(commit(
                    &self.cfg,
                    job.handoff,
                    &job.flushed,
                    current,
                )))
            }
        }
    }

    /// The end of `in_flight`: waits for it when `wait`, else None while it runs.
    pub fn settle(&self, in_flight: &InFlight, wait: bool) -> Option<Settled> {
        let got = if wait {
            in_flight
                .done
                .recv()
                .map_err(|_| mpsc::TryRecvError::Disconnected)
        } else {
            in_flight.done.try_recv()
        };
        match got {
            Ok(settled) => Some(settled),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                // The thread died with the producer: a new one with its transactional id
                // fences the old and the broker aborts its transaction; without one the
                // stream thread goes on with its other producer alone.
                tracing::error!("commit thread died mid-commit: replacing its producer");
                let producer = create(&self.cfg, &in_flight.instance)
                    .map_err(|e| tracing::error!(error = %e, "producer not replaced"))
                    .ok();
                Some(Settled {
                    producer,
                    instance: in_flight.instance.clone(),
                    result: Err(KafkaError::Global(RDKafkaErrorCode::Fail)),
                    begun: false,
                })
            }
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.jobs = None; // ends the thread's queue
        if let Some(thread) = self.thread.take() {
            // Never the commit thread itself, as the consumer (whose context owns this) is
            // dropped by its stream thread (`SharedConsumer`); if it were, joining itself
            // would panic, while the thread ends by itself once its queue is gone.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// Flushes (then opens `flushed`), sends the offsets and commits; on a failure other than
/// fencing, aborts the transaction so the producer can begin another (or replaces it).
/// The offsets go under the group metadata `membership` holds after the flush, when there
/// is one to read (`membership`), else under the handed-off one.
fn commit(
    cfg: &Config,
    handoff: Handoff,
    flushed: &Gate,
    membership: Option<&dyn Membership>,
) -> Settled {
    let Handoff {
        producer,
        instance,
        offsets,
        group,
    } = handoff;
    let opener = OpenOnDrop(flushed);
    let flush = flush_while_moving(&producer);
    drop(opener);
    let result = flush
        .and_then(|()| group_for(&offsets, group, membership))
        .and_then(|group| commit_transaction_of(&producer, &offsets, group.as_ref()));
    // A failed begin is left to the stream thread's, which replaces the producer.
    let begun = result.is_ok() && producer.begin_transaction().is_ok();
    let producer = match &result {
        Ok(()) => producer,
        Err(e) if Outcome::of(e) == Outcome::Fenced => producer,
        Err(_) => match abort_transaction_of(&producer) {
            Aborted::Clean | Aborted::Fenced(_) => producer,
            Aborted::Replace => match create(cfg, &instance) {
                Ok(fresh) => fresh,
                Err(e) => {
                    // Its next begin fails and replaces it then (`TxnProducer::begin`).
                    tracing::warn!(error = %e, "producer not replaced after a failed commit");
                    producer
                }
            },
        },
    };
    Settled {
        producer: Some(producer),
        instance,
        result,
        begun,
    }
}

/// The group metadata to send `offsets` under: the consumer's now when it can be read (a
/// member that no longer holds them sends nothing), else the one handed off.
fn group_for(
    offsets: &TopicPartitionList,
    handed_off: Option<ConsumerGroupMetadata>,
    membership: Option<&dyn Membership>,
) -> Result<Option<ConsumerGroupMetadata>, KafkaError> {
    match membership {
        Some(m) if offsets.count() > 0 && handed_off.is_some() => {
            m.current_for(offsets).map(Some).inspect_err(|e| {
                tracing::warn!(error = %e, "not a member holding the batch's partitions: aborting its commit")
            })
        }
        _ => Ok(handed_off),
    }
}
