//! The embedded default: an in-process Kafka-protocol broker (librdkafka's mock cluster)
//! with the guard's topics, for demos and quick checks. Never a production broker.

use crate::config::Config;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

pub struct EmbeddedKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl EmbeddedKafka {
    pub fn start(cfg: &Config) -> anyhow::Result<EmbeddedKafka> {
        let cluster = MockCluster::new(1)?;
        let k = &cfg.kafka;
        let partitions = k.embedded_partitions.get() as i32;
        for topic in [
            &k.events_topic,
            &k.verdicts_topic,
            &k.dlq_topic,
            &k.state_topic,
        ] {
            cluster.create_topic(topic, partitions, 1)?;
        }
        tracing::warn!(
            bootstrap = %cluster.bootstrap_servers(),
            "NO KAFKA CONFIGURED: running an EMBEDDED in-process mock broker. Data is not durable; \
             set kafka.bootstrap_servers (or LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS) for real use."
        );
        Ok(EmbeddedKafka { cluster })
    }

    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }
}
