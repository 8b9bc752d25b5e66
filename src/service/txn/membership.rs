//! The group membership a pipelined commit sends its offsets under, read by the commit
//! thread at the moment it sends them rather than when the stream thread handed the batch
//! off (docs/service.md, "Commit cadence": rebalances).
//!
//! librdkafka takes a member into a new generation when its JoinGroup answer arrives, well
//! before any rebalance callback; a commit handed off under the old generation and sent
//! after that was refused with ILLEGAL_GENERATION, its transaction aborted and its thread
//! rewound (issue 19: 19-23 % of a rolling restart's events judged twice). Read late, the
//! generation is the one this member holds when the offsets go out, so KIP-447's fence
//! (the broker compares it with the group's) still stops a zombie. The partitions are
//! checked too: a member whose assignment is lost, or that no longer holds one of them,
//! sends nothing.

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use std::collections::HashSet;
use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Where the commit thread reads the consumer's group membership.
pub trait Membership: Send + Sync {
    /// The group metadata to commit `offsets` with, as the consumer holds it now; an error
    /// when the consumer is gone, its assignment is lost or a partition of `offsets` is no
    /// longer in it (the caller aborts the batch and the stream thread rewinds).
    fn current_for(
        &self,
        offsets: &TopicPartitionList,
    ) -> Result<ConsumerGroupMetadata, KafkaError>;
}

/// A stream thread's consumer, held weakly: the consumer's context owns the worker, which
/// owns the commit thread, so a strong reference would keep the consumer alive forever.
pub struct ConsumerMembership<C: ConsumerContext + 'static> {
    consumer: Weak<BaseConsumer<C>>,
}

impl<C: ConsumerContext + 'static> ConsumerMembership<C> {
    pub fn new(consumer: Weak<BaseConsumer<C>>) -> Self {
        ConsumerMembership { consumer }
    }
}

/// A stream thread's consumer, shared weakly with its commit thread, and always dropped
/// by its owner: when dropped it waits until the commit thread is not using it. Were the
/// commit thread left with the last reference, closing the consumer there would serve the
/// revoke callback there, which waits for that very commit to settle.
pub struct SharedConsumer<C: ConsumerContext + 'static> {
    consumer: Option<Arc<BaseConsumer<C>>>,
}

impl<C: ConsumerContext + 'static> SharedConsumer<C> {
    pub fn new(consumer: BaseConsumer<C>) -> Self {
        SharedConsumer {
            consumer: Some(Arc::new(consumer)),
        }
    }

    /// The membership the commit thread reads.
    pub fn membership(&self) -> ConsumerMembership<C> {
        ConsumerMembership::new(Arc::downgrade(
            self.consumer.as_ref().expect("until dropped"),
        ))
    }
}

impl<C: ConsumerContext + 'static> Deref for SharedConsumer<C> {
    type Target = BaseConsumer<C>;

    fn deref(&self) -> &BaseConsumer<C> {
        self.consumer.as_ref().expect("until dropped")
    }
}

impl<C: ConsumerContext + 'static> Drop for SharedConsumer<C> {
    fn drop(&mut self) {
        let mut shared = self.consumer.take();
        // The commit thread holds it for two calls at most (a few milliseconds); once this
        // is the only reference, it cannot take another.
        while let Some(consumer) = shared {
            match Arc::try_unwrap(consumer) {
                Ok(consumer) => {
                    drop(consumer);
                    return;
                }
                Err(consumer) => {
                    shared = Some(consumer);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

/// The refusal of a commit whose membership is not (or no longer) this member's.
fn not_a_member() -> KafkaError {
    KafkaError::Global(RDKafkaErrorCode::State)
}

impl<C: ConsumerContext + 'static> Membership for ConsumerMembership<C> {
    fn current_for(
        &self,
        offsets: &TopicPartitionList,
    ) -> Result<ConsumerGroupMetadata, KafkaError> {
        let consumer = self.consumer.upgrade().ok_or_else(not_a_member)?;
        // The metadata first, then the checks: librdkafka marks an assignment lost in the
        // same step as it drops the member's id or generation, and its partitions leave
        // the assignment only after the revoke callback, which waits for this commit.
        let group = consumer.group_metadata().ok_or_else(not_a_member)?;
        if consumer.assignment_lost() {
            return Err(not_a_member());
        }
        let assigned = consumer.assignment()?;
        let assigned = assigned.elements();
        let owned: HashSet<(&str, i32)> = assigned
            .iter()
            .map(|e| (e.topic(), e.partition()))
            .collect();
        let all_owned = offsets
            .elements()
            .iter()
            .all(|e| owned.contains(&(e.topic(), e.partition())));
        if !all_owned {
            return Err(not_a_member());
        }
        Ok(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::Offset;
    use std::sync::Arc;

    /// A group consumer that never reaches a broker: its assignment is what `assign` sets.
    fn consumer() -> Arc<BaseConsumer> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("group.id", "membership-test")
            .create()
            .expect("consumer");
        Arc::new(consumer)
    }

    fn assign(consumer: &BaseConsumer, partitions: &[i32]) {
        let mut assigned = TopicPartitionList::new();
        for &p in partitions {
            assigned.add_partition("events", p);
        }
        consumer.assign(&assigned).expect("assign");
    }

    fn offsets(partition: i32) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("events", partition, Offset::Offset(7))
            .expect("offset");
        tpl
    }

    #[test]
    fn a_batch_of_assigned_partitions_commits_under_the_current_metadata() {
        let consumer = consumer();
        assign(&consumer, &[0, 1]);
        let membership = ConsumerMembership::new(Arc::downgrade(&consumer));
        assert!(membership.current_for(&offsets(1)).is_ok());
    }

    #[test]
    fn a_partition_no_longer_assigned_sends_nothing() {
        let consumer = consumer();
        assign(&consumer, &[0]);
        let membership = ConsumerMembership::new(Arc::downgrade(&consumer));
        assert!(membership.current_for(&offsets(1)).is_err());
    }

    #[test]
    fn a_consumer_gone_sends_nothing() {
        let consumer = consumer();
        let membership = ConsumerMembership::new(Arc::downgrade(&consumer));
        drop(consumer);
        assert!(membership.current_for(&offsets(0)).is_err());
    }
}
