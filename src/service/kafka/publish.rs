//! Writing events as a runtime does (the demo and the load tool): keyed by session, waiting
//! for queue space rather than dropping, and a flush bounded by wall time.

use std::time::Duration;

/// Publishes one event as a runtime does: JSON value, keyed by its session, waiting for
/// queue space rather than dropping it (used by `demo` and `loadgen`).
pub fn publish_event(
    producer: &rdkafka::producer::BaseProducer,
    topic: &str,
    event: &crate::engine::event::Event,
) -> anyhow::Result<()> {
    use rdkafka::producer::BaseRecord;
    let payload = serde_json::to_vec(&event.to_wire())?;
    let record = BaseRecord::to(topic)
        .key(event.meta.session_id.as_bytes())
        .payload(&payload);
    send_waiting(producer, record);
    Ok(())
}

/// Sends `record`, waiting for room in the producer's queue instead of failing.
pub fn send_waiting<K, P>(
    producer: &rdkafka::producer::BaseProducer,
    mut record: rdkafka::producer::BaseRecord<'_, K, P>,
) where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((_, r)) => {
                producer.poll(Duration::from_millis(5));
                record = r;
            }
        }
    }
    producer.poll(Duration::ZERO);
}

/// Waits until every record `producer` holds is acknowledged (its delivery reports
/// served), for at most `timeout` of wall time. rust-rdkafka's `flush` charges each report
/// it serves a whole poll interval (100 ms): after a stall of the broker, 600 reports due at
/// once used up 60 s of it in half a second and a paced load failed ("Flush error").
pub fn flush_within<C: rdkafka::producer::ProducerContext>(
    producer: &rdkafka::producer::BaseProducer<C>,
    timeout: Duration,
) -> rdkafka::error::KafkaResult<()> {
    use rdkafka::producer::Producer;
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
            break;
        };
        producer.poll(left.min(Duration::from_millis(100)));
    }
    producer.flush(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;

    /// The deadline is wall time: a record no broker takes is waited for that long.
    #[test]
    fn flush_within_waits_its_whole_timeout_for_a_record_nobody_takes() {
        use rdkafka::producer::{BaseProducer, BaseRecord};
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("log_level", "0")
            .create()
            .unwrap();
        producer
            .send(BaseRecord::to("t").key("k").payload("v"))
            .unwrap();
        let started = std::time::Instant::now();
        assert!(flush_within(&producer, Duration::from_millis(300)).is_err());
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
}
