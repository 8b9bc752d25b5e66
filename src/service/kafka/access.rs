//! What the broker lets this guard do, asked before the stream threads start: the
//! operations its principal holds on each topic (DescribeTopics with authorized
//! operations: nothing is written to find out), its consumer group and its transactional
//! ids. A missing ACL is named (resource and operation) instead of surfacing later as a
//! hang, a rewind loop or a crash loop.

use crate::config::{Config, Delivery};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::ffi::{CStr, CString};
use std::time::Duration;

/// One refusal: the resource (`Topic:agent-verdicts`) and the operation (`Write`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the broker refuses {operation} on {resource} to this guard's principal: grant it (`loopguard topics acls --guard User:...`, docs/operations.md)")]
pub struct Denied {
    pub resource: String,
    pub operation: &'static str,
}

/// Why the check could not say yes.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// Every refusal found, in the order asked.
    #[error("{}", .0.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; "))]
    Denied(Vec<Denied>),
    #[error("cannot check the guard's ACLs: {0}")]
    Unknown(String),
    /// The broker could not answer yet (a coordinator moving or loading, a leader being
    /// elected, a timeout): asked again, not a reason to exit.
    #[error("the broker cannot answer the guard's ACL check yet: {0}")]
    BrokerBusy(String),
}

impl AccessError {
    /// A failed call's reading: the broker busy or away is asked again (a group or
    /// transaction coordinator moves for seconds after a broker fails).
    fn of(e: KafkaError) -> AccessError {
        use crate::service::kafka::outcome::Outcome;
        match Outcome::of(&e) {
            Outcome::WaitForBroker | Outcome::AbortBatch | Outcome::Retry => {
                AccessError::BrokerBusy(e.to_string())
            }
            _ => AccessError::Unknown(e.to_string()),
        }
    }
}

/// librdkafka's `rd_kafka_AclOperation_t`: the values the broker lists.
const OP_ALL: i32 = 2;
const OP_READ: i32 = 3;
const OP_WRITE: i32 = 4;

const TIMEOUT: Duration = Duration::from_secs(10);
/// The group's committed offsets: a coordinator that answers does so in milliseconds.
const GROUP_TIMEOUT: Duration = Duration::from_secs(3);

/// The topics the guard reads and writes, and how.
fn needs(cfg: &Config) -> Vec<(&str, &'static [(&'static str, i32)])> {
    let k = &cfg.kafka;
    const READ: &[(&str, i32)] = &[("Read", OP_READ)];
    const WRITE: &[(&str, i32)] = &[("Write", OP_WRITE)];
    const BOTH: &[(&str, i32)] = &[("Read", OP_READ), ("Write", OP_WRITE)];
    vec![
        (k.events_topic.as_str(), READ),
        (k.verdicts_topic.as_str(), WRITE),
        (k.dlq_topic.as_str(), WRITE),
        (k.state_topic.as_str(), BOTH),
        (k.policy_topic.as_str(), READ),
    ]
}

/// The operations needed on a topic, each with its name for a refusal.
type Ops = &'static [(&'static str, i32)];

/// With tenants from the writer, the topics of every tenant on the broker: its own events
/// topic read, its state topic read and written (the guard's prefixed ACLs, checked on
/// the topics they must cover).
fn tenant_needs(cfg: &Config, probe: &BaseConsumer) -> Result<Vec<(String, Ops)>, KafkaError> {
    const READ: &[(&str, i32)] = &[("Read", OP_READ)];
    const BOTH: &[(&str, i32)] = &[("Read", OP_READ), ("Write", OP_WRITE)];
    if !cfg.kafka.tenants_from_topics() {
        return Ok(Vec::new());
    }
    let found = crate::service::kafka::tenants::discover(cfg, probe)?;
    let mut out = Vec::new();
    for t in found.ready {
        if let Some(events) = cfg.kafka.events_topic_for(&t) {
            out.push((events, READ));
            out.push((cfg.kafka.state_topic_for(Some(&t)), BOTH));
        }
    }
    Ok(out)
}

/// Asks the broker what this guard may do and names everything it may not. Blocking
/// (a few requests; up to `TIMEOUT` each against a broker that does not answer).
pub fn check(cfg: &Config, instance: &str) -> Result<(), AccessError> {
    let unknown = AccessError::of;
    let mut denied = Vec::new();
    let probe: BaseConsumer = crate::service::kafka::settings::base_config(cfg)
        .create()
        .map_err(unknown)?;
    let mut needs: Vec<(String, Ops)> = needs(cfg)
        .into_iter()
        .map(|(t, ops)| (t.to_string(), ops))
        .collect();
    needs.extend(tenant_needs(cfg, &probe).map_err(unknown)?);
    let names: Vec<&str> = needs.iter().map(|(t, _)| t.as_str()).collect();
    let described = describe_topics(probe.client(), &names).map_err(AccessError::Unknown)?;
    for ((topic, ops), (_, allowed)) in needs.iter().zip(described) {
        let resource = format!("Topic:{topic}");
        match allowed {
            // Not even Describe: every operation the guard needs on it is missing (each
            // would grant Describe).
            Err(RDKafkaErrorCode::TopicAuthorizationFailed) => {
                denied.extend(ops.iter().map(|(name, _)| Denied {
                    resource: resource.clone(),
                    operation: name,
                }))
            }
            // A missing topic is `ensure_topics`' to report.
            Err(_) => {}
            Ok(allowed) => {
                for (name, op) in ops.iter() {
                    if !allowed.iter().any(|a| a == op || *a == OP_ALL) {
                        denied.push(Denied {
                            resource: resource.clone(),
                            operation: name,
                        });
                    }
                }
            }
        }
    }
    // Tenants' verdicts topics come and go: the prefix they share is checked with a name
    // no topic has (a principal may describe it only when the prefix grants it something).
    // So are tenants' own events topics (with `events_topic_template`): one the guard may
    // not even describe is not listed to it, so its prefix is probed the same way.
    let prefixes = [
        cfg.kafka.tenant_topic_prefix().map(|p| (p, "Write")),
        cfg.kafka.tenant_events_prefix().map(|p| (p, "Read")),
    ];
    for (prefix, operation) in prefixes.into_iter().flatten() {
        let probe_topic = format!("{prefix}loopguard-access-check");
        let found =
            describe_topics(probe.client(), &[&probe_topic]).map_err(AccessError::Unknown)?;
        if matches!(
            found.first(),
            Some((_, Err(RDKafkaErrorCode::TopicAuthorizationFailed)))
        ) {
            denied.push(Denied {
                resource: format!("Topic:{prefix}* (prefixed)"),
                operation,
            });
        }
    }
    // The group and transactional checks need the topics: their refusals first.
    if !denied.is_empty() {
        return Err(AccessError::Denied(denied));
    }
    if let Some(d) = group_denied(cfg).map_err(unknown)? {
        denied.push(d);
    }
    if cfg.kafka.delivery == Delivery::ExactlyOnce {
        if let Some(d) = transactional_id_denied(cfg, instance).map_err(unknown)? {
            denied.push(d);
        }
    }
    match denied.is_empty() {
        true => Ok(()),
        false => Err(AccessError::Denied(denied)),
    }
}

/// Fetching the group's committed offsets needs Describe on it (which Read implies):
/// refused, the group cannot be joined either.
fn group_denied(cfg: &Config) -> Result<Option<Denied>, KafkaError> {
    let mut c = crate::service::kafka::settings::base_config(cfg);
    c.set("group.id", &cfg.kafka.group_id)
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = c.create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&cfg.kafka.events_topic, 0, Offset::Invalid)?;
    let refused = || Denied {
        resource: format!("Group:{}", cfg.kafka.group_id),
        operation: "Read",
    };
    let is_refusal =
        |e: &KafkaError| e.rdkafka_error_code() == Some(RDKafkaErrorCode::GroupAuthorizationFailed);
    match consumer.committed_offsets(tpl, GROUP_TIMEOUT) {
        Ok(_) => Ok(None),
        Err(e) if is_refusal(&e) => Ok(Some(refused())),
        // librdkafka retries a refused coordinator lookup until the timeout, and reports
        // the refusal itself on the consumer's queue.
        Err(e) => {
            for _ in 0..10 {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Err(p)) if is_refusal(&p) => return Ok(Some(refused())),
                    _ => {}
                }
            }
            Err(e)
        }
    }
}

/// Initialising a transactional producer needs Write on its transactional id. A check of
/// its own (`PREFIX-INSTANCE-access-check`), so no thread's producer is fenced by it.
fn transactional_id_denied(cfg: &Config, instance: &str) -> Result<Option<Denied>, KafkaError> {
    let id = format!(
        "{}-{instance}-access-check",
        cfg.kafka.transactional_id_prefix
    );
    let mut c = crate::service::kafka::settings::base_config(cfg);
    c.set("transactional.id", &id)
        .set("enable.idempotence", "true");
    let producer: BaseProducer = c.create()?;
    match producer.init_transactions(TIMEOUT) {
        Err(e)
            if e.rdkafka_error_code()
                == Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed) =>
        {
            Ok(Some(Denied {
                resource: format!("TransactionalId:{id}"),
                operation: "Write",
            }))
        }
        Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::ClusterAuthorizationFailed) => {
            Ok(Some(Denied {
                resource: "Cluster:kafka-cluster".into(),
                operation: "IdempotentWrite",
            }))
        }
        Err(e) => Err(e),
        Ok(()) => Ok(None),
    }
}

/// Each topic's operations this principal is allowed (`rd_kafka_DescribeTopics` with
/// authorized operations; rust-rdkafka has no wrapper for it), or the topic's error.
#[allow(clippy::type_complexity, unsafe_code)]
fn describe_topics<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topics: &[&str],
) -> Result<Vec<(String, Result<Vec<i32>, RDKafkaErrorCode>)>, String> {
    use rdkafka_sys as rd;
    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(*t).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const std::os::raw::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = client.native_ptr();
    // SAFETY: every handle made here is destroyed before returning, the names outlive the
    // request (librdkafka copies them into the collection), and the result's memory is
    // read only while its event lives.
    unsafe {
        let collection = rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        let err = rd::rd_kafka_AdminOptions_set_include_authorized_operations(options, 1);
        if !err.is_null() {
            rd::rd_kafka_error_destroy(err);
        }
        let mut errstr = [0 as std::os::raw::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            TIMEOUT.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeTopics(rk, collection, options, queue);
        let event = rd::rd_kafka_queue_poll(queue, (TIMEOUT.as_millis() + 2_000) as i32);
        let out = if event.is_null() {
            Err("no answer to DescribeTopics".to_string())
        } else if rd::rd_kafka_event_error(event)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            Err(CStr::from_ptr(rd::rd_kafka_event_error_string(event))
                .to_string_lossy()
                .into_owned())
        } else {
            let result = rd::rd_kafka_event_DescribeTopics_result(event);
            let mut count = 0;
            let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
            let mut out = Vec::with_capacity(count);
            for i in 0..count {
                let d = *descriptions.add(i);
                let name = CStr::from_ptr(rd::rd_kafka_TopicDescription_name(d))
                    .to_string_lossy()
                    .into_owned();
                let error = rd::rd_kafka_TopicDescription_error(d);
                let code = if error.is_null() {
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                } else {
                    rd::rd_kafka_error_code(error)
                };
                if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    out.push((name, Err(RDKafkaErrorCode::from(code))));
                    continue;
                }
                let mut n = 0;
                let ops = rd::rd_kafka_TopicDescription_authorized_operations(d, &mut n);
                let allowed = (0..n).map(|j| *ops.add(j) as i32).collect();
                out.push((name, Ok(allowed)));
            }
            Ok(out)
        };
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_TopicCollection_destroy(collection);
        // In the order asked (the broker's answer may come in another).
        out.map(|found| {
            topics
                .iter()
                .map(|t| {
                    found
                        .iter()
                        .find(|(name, _)| name == t)
                        .cloned()
                        .unwrap_or_else(|| {
                            (
                                t.to_string(),
                                Err(RDKafkaErrorCode::UnknownTopicOrPartition),
                            )
                        })
                })
                .collect()
        })
    }
}
