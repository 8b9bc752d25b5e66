//! How long a failing rewind is tried again before its stream thread gives up, by what the
//! error says (`kafka::outcome`).

use crate::service::kafka::outcome::Outcome;
use rdkafka::error::KafkaError;
use std::time::{Duration, Instant};

/// How a failed rewind is retried: without bound while the broker is away or busy (it will
/// answer again), for `REWIND_GIVE_UP` when the error says something else (authorization,
/// a missing topic, a refused seek), never when waiting cannot mend it (a destroyed broker
/// handle, which `committed` already asked for 20 s: an exit lets a fresh process or
/// another instance take over).
#[derive(Debug, PartialEq, Eq)]
pub enum RewindRetry {
    Unbounded,
    Bounded,
    Never,
}

/// How long a rewind failing with an error other than the broker's absence is retried.
pub const REWIND_GIVE_UP: Duration = Duration::from_secs(120);

pub fn rewind_retry(e: &KafkaError) -> RewindRetry {
    match Outcome::of(e) {
        Outcome::Closing => RewindRetry::Never,
        Outcome::WaitForBroker => RewindRetry::Unbounded,
        _ => RewindRetry::Bounded,
    }
}

/// Whether a failed rewind ends the stream thread (the reason when it does), by
/// `rewind_retry`; `failing_since` is when the bounded kind of failure began.
pub fn rewind_gives_up(e: &KafkaError, failing_since: &mut Option<Instant>) -> Option<String> {
    match rewind_retry(e) {
        RewindRetry::Never => Some(format!("rewinding to the last commit: {e}")),
        RewindRetry::Unbounded => None,
        RewindRetry::Bounded => {
            let since = *failing_since.get_or_insert_with(Instant::now);
            (since.elapsed() > REWIND_GIVE_UP).then(|| {
                format!(
                    "rewinding to the last commit failed for {} s: {e}",
                    REWIND_GIVE_UP.as_secs()
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode as C;

    /// The broker's absence is waited out, a destroyed handle never, anything else a while.
    #[test]
    fn rewind_errors_are_retried_by_what_they_say() {
        let consume = |c| KafkaError::MessageConsumption(c);
        assert_eq!(
            rewind_retry(&consume(C::AllBrokersDown)),
            RewindRetry::Unbounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::MetadataFetch(C::OperationTimedOut)),
            RewindRetry::Unbounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::MetadataFetch(C::BrokerDestroy)),
            RewindRetry::Never
        );
        assert_eq!(
            rewind_retry(&consume(C::TopicAuthorizationFailed)),
            RewindRetry::Bounded
        );
        assert_eq!(
            rewind_retry(&KafkaError::Seek("_INVALID_ARG".into())),
            RewindRetry::Bounded
        );
    }

    /// A destroyed handle ends the thread at once; another error only once it has lasted.
    #[test]
    fn a_bounded_failure_gives_up_only_after_its_time() {
        let mut since = None;
        let denied = KafkaError::MessageConsumption(C::TopicAuthorizationFailed);
        assert_eq!(rewind_gives_up(&denied, &mut since), None);
        assert!(since.is_some());
        since = Instant::now().checked_sub(REWIND_GIVE_UP + Duration::from_secs(1));
        assert!(rewind_gives_up(&denied, &mut since).is_some());
        let away = KafkaError::MessageConsumption(C::AllBrokersDown);
        assert_eq!(rewind_gives_up(&away, &mut since), None);
        let destroyed = KafkaError::MetadataFetch(C::BrokerDestroy);
        assert!(rewind_gives_up(&destroyed, &mut None).is_some());
    }
}
