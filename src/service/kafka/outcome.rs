//! What a failed Kafka call means for the guard: the one reading of librdkafka's errors,
//! used by the producer, the commit thread, the batch retry bound, rewinds and restores.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// What to do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Call the same function again (a transactional call librdkafka says may be repeated).
    Retry,
    /// Abort the batch's transaction and replay it from the last commit: the failure says
    /// nothing about its records (a timeout, too few replicas, the producer's sequence
    /// state).
    AbortBatch,
    /// The producer is unusable: replace it (same transactional id, new epoch).
    ReplaceProducer,
    /// A newer incarnation of this instance took over its transactional id: stop, and let
    /// it carry on.
    Fenced,
    /// The broker is away or busy (unreachable, timing out, no leader or coordinator yet,
    /// a rebalance or a transaction in flight): librdkafka recovers by itself; wait.
    WaitForBroker,
    /// Possibly a record's fault (too large, refused): the batch is replayed record by
    /// record and a record failing alone `max_record_retries` times is given up.
    BlameRecord,
    /// The client is being destroyed (the thread is stopping): nothing to try again.
    Closing,
}

impl Outcome {
    /// The reading of `e`.
    pub fn of(e: &KafkaError) -> Outcome {
        use RDKafkaErrorCode::*;
        let code = e.rdkafka_error_code();
        if matches!(code, Some(Fenced | ProducerFenced)) {
            return Outcome::Fenced;
        }
        if let KafkaError::Transaction(r) = e {
            if r.is_fatal() {
                return Outcome::ReplaceProducer;
            }
            if !r.txn_requires_abort() && r.is_retriable() {
                return Outcome::Retry;
            }
        }
        match code {
            Some(BrokerDestroy) => Outcome::Closing,
            Some(
                OperationTimedOut
                | RequestTimedOut
                | BrokerTransportFailure
                | AllBrokersDown
                | NetworkException
                | Resolve
                | NotCoordinator
                | CoordinatorNotAvailable
                | CoordinatorLoadInProgress
                | LeaderNotAvailable
                | NotLeaderForPartition
                | UnstableOffsetCommit
                | RebalanceInProgress,
            ) => Outcome::WaitForBroker,
            Some(
                MessageTimedOut
                | NotEnoughReplicas
                | NotEnoughReplicasAfterAppend
                | ConcurrentTransactions
                | OutOfOrderSequenceNumber
                | DuplicateSequenceNumber
                | InvalidProducerEpoch
                | UnknownProducerId
                | IllegalGeneration
                | UnknownMemberId
                | Fatal,
            ) => Outcome::AbortBatch,
            _ => Outcome::BlameRecord,
        }
    }

    /// True when the records of the failed call may be at fault (see `BlameRecord`).
    pub fn blames_record(self) -> bool {
        self == Outcome::BlameRecord
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn a_fenced_producer_stops_whatever_carried_the_code() {
        for e in [
            KafkaError::Global(C::Fenced),
            KafkaError::MessageProduction(C::ProducerFenced),
        ] {
            assert_eq!(Outcome::of(&e), Outcome::Fenced, "{e}");
        }
    }

    #[test]
    fn an_absent_broker_is_waited_for_and_blames_no_record() {
        for code in [C::AllBrokersDown, C::NotCoordinator, C::RebalanceInProgress] {
            let e = KafkaError::Global(code);
            assert_eq!(Outcome::of(&e), Outcome::WaitForBroker, "{e}");
            assert!(!Outcome::of(&e).blames_record());
        }
    }

    #[test]
    fn timeouts_and_sequence_trouble_abort_the_batch_without_blame() {
        for e in [
            KafkaError::Flush(C::MessageTimedOut),
            KafkaError::Global(C::OutOfOrderSequenceNumber),
            KafkaError::MessageProduction(C::NotEnoughReplicas),
        ] {
            assert_eq!(Outcome::of(&e), Outcome::AbortBatch, "{e}");
        }
    }

    #[test]
    fn a_refused_record_is_blamed() {
        let e = KafkaError::MessageProduction(C::MessageSizeTooLarge);
        assert_eq!(Outcome::of(&e), Outcome::BlameRecord);
        assert!(Outcome::of(&e).blames_record());
    }

    #[test]
    fn a_destroyed_client_is_closing() {
        assert_eq!(
            Outcome::of(&KafkaError::Global(C::BrokerDestroy)),
            Outcome::Closing
        );
    }
}
