//! Writing records outside the guard's transactions: events as a runtime does (the demo and
//! the load tool), keyed by session, waiting for queue space rather than dropping, a flush
//! bounded by wall time; and one record acknowledged (`policy publish`, `feedback`, the
//! guard's own demotions).

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
    Ok(send_waiting(producer, record)?)
}

/// Sends `record`, waiting for room in the producer's queue instead of failing; any other
/// refusal is returned (a producer whose fatal error made it refuse every record was
/// retried forever: librdkafka 2.3.0's "Unable to reconstruct MessageSet" under a broker
/// failure).
pub fn send_waiting<K, P>(
    producer: &rdkafka::producer::BaseProducer,
    mut record: rdkafka::producer::BaseRecord<'_, K, P>,
) -> rdkafka::error::KafkaResult<()>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    use rdkafka::types::RDKafkaErrorCode;
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                producer.poll(Duration::from_millis(5));
                record = r;
            }
            Err((e, _)) => return Err(e),
        }
    }
    producer.poll(Duration::ZERO);
    Ok(())
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

/// Why `deliver_one` did not deliver.
pub enum Undelivered {
    Kafka(String),
    /// Not acknowledged in time: a broker that took the connection and never answered.
    Unanswered(String),
}

/// Writes one record (idempotent producer, `kafka.properties` applied) and waits up to 20 s
/// for its acknowledgement: where it landed (partition, offset).
pub fn deliver_one(
    cfg: &crate::config::Config,
    topic: &str,
    key: &[u8],
    payload: &[u8],
    partition: Option<i32>,
) -> Result<(i32, i64), Undelivered> {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let kafka = |e: rdkafka::error::KafkaError| Undelivered::Kafka(e.to_string());
    let delivered = std::sync::Arc::new(std::sync::Mutex::new(None));
    let context = Delivered(delivered.clone());
    let mut client = rdkafka::ClientConfig::new();
    client
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "15000")
        // Java's partitioner (murmur2): a keyed record lands where the runtimes' clients
        // put that session's events.
        .set("partitioner", "murmur2_random");
    for (k, v) in cfg.kafka_properties() {
        client.set(k, v);
    }
    client.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    let producer: ThreadedProducer<Delivered> =
        client.create_with_context(context).map_err(kafka)?;
    let mut record = BaseRecord::to(topic).key(key).payload(payload);
    if let Some(p) = partition {
        record = record.partition(p);
    }
    producer.send(record).map_err(|(e, _)| kafka(e))?;
    producer.flush(Duration::from_secs(20)).map_err(kafka)?;
    let result = delivered.lock().ok().and_then(|mut d| d.take());
    match result {
        Some(Ok(at)) => Ok(at),
        Some(Err(e)) if e.contains("timed out") => Err(Undelivered::Unanswered(e)),
        Some(Err(e)) => Err(Undelivered::Kafka(e)),
        None => Err(Undelivered::Unanswered("not delivered within 20 s".into())),
    }
}

/// Where the one publication landed (partition, offset), or why not.
type Landing = Result<(i32, i64), String>;

/// The delivery report of the one publication, once it came.
struct Delivered(std::sync::Arc<std::sync::Mutex<Option<Landing>>>);

impl rdkafka::ClientContext for Delivered {}

impl rdkafka::producer::ProducerContext for Delivered {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        use rdkafka::message::Message;
        let r = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        if let Ok(mut d) = self.0.lock() {
            *d = Some(r);
        }
    }
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
