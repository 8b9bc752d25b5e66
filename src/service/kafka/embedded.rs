//! The embedded default: an in-process Kafka-protocol broker (librdkafka's mock cluster)
//! with the guard's topics, behind a front door at a fixed address (`kafka.embedded_listen`)
//! so clients have an address to be given. For demos and quick checks; never a production
//! broker.

mod fetch_wait;
mod front;
mod rewrite;

use crate::config::Config;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::net::SocketAddr;
use thiserror::Error;

/// librdkafka numbers a mock cluster's brokers from 1; the embedded cluster has one.
const BROKER_ID: i32 = 1;

#[derive(Debug, Error)]
pub enum EmbeddedError {
    #[error("cannot start the embedded broker: {0}")]
    Mock(String),
    #[error("cannot listen on {addr} (kafka.embedded_listen): {why}")]
    Listen {
        addr: SocketAddr,
        why: std::io::Error,
    },
}

pub struct EmbeddedKafka {
    // Dropped first: no new connection reaches a cluster being torn down.
    front: front::Front,
    _cluster: MockCluster<'static, DefaultProducerContext>,
}

impl EmbeddedKafka {
    /// Starts the mock cluster and its front door; inside a Tokio runtime.
    pub fn start(cfg: &Config) -> Result<EmbeddedKafka, EmbeddedError> {
        let mock = |e: &dyn std::fmt::Display| EmbeddedError::Mock(e.to_string());
        let cluster = MockCluster::new(1).map_err(|e| mock(&e))?;
        let k = &cfg.kafka;
        let partitions = k.embedded_partitions.get() as i32;
        for topic in [
            &k.events_topic,
            &k.verdicts_topic,
            &k.dlq_topic,
            &k.state_topic,
        ] {
            cluster
                .create_topic(topic, partitions, 1)
                .map_err(|e| mock(&e))?;
        }
        cluster
            .create_topic(&k.policy_topic, 1, 1)
            .map_err(|e| mock(&e))?;
        let upstream: SocketAddr = cluster.bootstrap_servers().parse().map_err(|e| mock(&e))?;
        let listen = k.embedded_listen;
        let front = front::Front::start(listen, upstream, BROKER_ID)
            .map_err(|why| EmbeddedError::Listen { addr: listen, why })?;
        tracing::warn!(
            bootstrap = %front.addr(),
            "NO KAFKA CONFIGURED: running an EMBEDDED in-process mock broker. Data is not durable; \
             set kafka.bootstrap_servers (or LOOPGUARD__KAFKA__BOOTSTRAP_SERVERS) for real use."
        );
        Ok(EmbeddedKafka {
            front,
            _cluster: cluster,
        })
    }

    /// The front door's address, the only one clients are given.
    pub fn bootstrap_servers(&self) -> String {
        self.front.addr().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_learn_the_front_doors_address_not_the_mocks() {
        let mut cfg = crate::config::load_with_env(None, std::iter::empty()).unwrap();
        cfg.kafka.embedded_listen = "127.0.0.1:0".parse().unwrap();
        let k = EmbeddedKafka::start(&cfg).unwrap();
        let bootstrap = k.bootstrap_servers();
        let brokers = tokio::task::spawn_blocking({
            let bootstrap = bootstrap.clone();
            move || {
                let c: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .create()
                    .unwrap();
                let md = c
                    .fetch_metadata(Some("agent-events"), Duration::from_secs(10))
                    .unwrap();
                assert_eq!(md.topics()[0].partitions().len(), 4);
                md.brokers()
                    .iter()
                    .map(|b| (b.id(), format!("{}:{}", b.host(), b.port())))
                    .collect::<Vec<_>>()
            }
        })
        .await
        .unwrap();
        assert_eq!(brokers, [(BROKER_ID, bootstrap)]);
    }
}
