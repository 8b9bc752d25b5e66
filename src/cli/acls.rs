//! `loopguard topics acls`: the least-privilege ACLs of every principal that talks to the
//! guard's topics, from the configuration's names; printed as a table or as the broker's
//! own `kafka-acls` commands, so nobody types them by hand. Pure: nothing is applied here.

use crate::config::Config;

/// Who gets ACLs: each a Kafka principal (`User:guard`); an absent one gets none.
#[derive(Debug, Clone, clap::Args)]
pub struct AclArgs {
    /// The guard service (every instance shares it).
    #[arg(long)]
    pub guard: Option<String>,
    /// An agent runtime (client library, edge, hooks) of every tenant, or of events
    /// without tenant: Write on the events topic, Read on the plain verdicts topic.
    #[arg(long)]
    pub runtime: Vec<String>,
    /// A tenant's runtime, `TENANT=User:name`: Write on the events topic, Read on that
    /// tenant's verdicts topic only (`kafka.verdicts_topic_template`).
    #[arg(long = "tenant-runtime", value_name = "TENANT=PRINCIPAL")]
    pub tenant_runtime: Vec<String>,
    /// The operator: creates the topics, publishes and reads policy versions.
    #[arg(long)]
    pub operator: Option<String>,
    /// A reader of dead letters (whole payloads: grant it with care).
    #[arg(long)]
    pub dlq_reader: Option<String>,
    /// The consumer group the dead-letter reader uses.
    #[arg(long, default_value = "loopguard-dlq-reader")]
    pub dlq_group: String,
    /// `table` (for people), `kafka-acls` (one command per binding, to run as an admin) or
    /// `kafka-quotas` (one `kafka-configs` command per runtime principal).
    #[arg(long, default_value = "table")]
    pub format: String,
    /// Each runtime principal's produce quota (bytes/s, Kafka's `producer_byte_rate`):
    /// one tenant's flood is throttled by the broker before it reaches the guard.
    #[arg(long, default_value_t = PRODUCER_BYTE_RATE)]
    pub producer_byte_rate: u64,
    /// Each runtime principal's consume quota (bytes/s, `consumer_byte_rate`).
    #[arg(long, default_value_t = CONSUMER_BYTE_RATE)]
    pub consumer_byte_rate: u64,
    /// Each runtime principal's share of a broker's request threads (percent of one
    /// thread, `request_percentage`).
    #[arg(long, default_value_t = REQUEST_PERCENTAGE)]
    pub request_percentage: u32,
}

/// Each runtime principal's quotas unless told otherwise: 1 MiB/s produced (about a
/// thousand events a second), 2 MiB/s consumed, a quarter of a broker request thread.
const PRODUCER_BYTE_RATE: u64 = 1_048_576;
const CONSUMER_BYTE_RATE: u64 = 2_097_152;
const REQUEST_PERCENTAGE: u32 = 25;

impl Default for AclArgs {
    /// No principal, the flags' defaults otherwise.
    fn default() -> Self {
        AclArgs {
            guard: None,
            runtime: Vec::new(),
            tenant_runtime: Vec::new(),
            operator: None,
            dlq_reader: None,
            dlq_group: "loopguard-dlq-reader".into(),
            format: "table".into(),
            producer_byte_rate: PRODUCER_BYTE_RATE,
            consumer_byte_rate: CONSUMER_BYTE_RATE,
            request_percentage: REQUEST_PERCENTAGE,
        }
    }
}

/// One principal's quotas (Kafka's per-user client quotas).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The user name (a quota is set on `--entity-type users`).
    pub user: String,
    pub producer_byte_rate: u64,
    pub consumer_byte_rate: u64,
    pub request_percentage: u32,
}

/// The quotas of every runtime principal (tenants' and the shared topic's): a principal's
/// flood is throttled by the brokers, whichever topic it writes.
pub fn quotas(args: &AclArgs) -> Result<Vec<Quota>, AclError> {
    let mut out = Vec::new();
    let who = args.runtime.iter().cloned().chain(
        args.tenant_runtime
            .iter()
            .map(|t| t.split_once('=').map_or(t.clone(), |(_, p)| p.to_string())),
    );
    for p in who {
        let p = principal(&p)?;
        let user = p.split_once(':').map_or(p.clone(), |(_, n)| n.to_string());
        out.push(Quota {
            user,
            producer_byte_rate: args.producer_byte_rate,
            consumer_byte_rate: args.consumer_byte_rate,
            request_percentage: args.request_percentage,
        });
    }
    Ok(out)
}

impl Quota {
    fn configs(&self) -> String {
        format!(
            "producer_byte_rate={},consumer_byte_rate={},request_percentage={}",
            self.producer_byte_rate, self.consumer_byte_rate, self.request_percentage
        )
    }
}

/// One ACL binding: allow `principal` `operation` on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub principal: String,
    /// `topic`, `group`, `transactional-id` (the `kafka-acls` option names).
    pub resource: &'static str,
    pub name: String,
    /// `literal` or `prefixed`.
    pub pattern: &'static str,
    /// `Read`, `Write`, `Describe`, `Create`, `DescribeConfigs`.
    pub operation: &'static str,
    /// Why the principal needs it, for the table.
    pub why: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("--tenant-runtime `{0}`: expected TENANT=PRINCIPAL (e.g. acme=User:acme-runtime)")]
    TenantRuntime(String),
    #[error("--tenant-runtime needs `kafka.verdicts_topic_template` (e.g. \"agent-verdicts.{{tenant}}\") in the configuration")]
    NoTemplate,
    #[error("principal `{0}`: expected TYPE:NAME (e.g. User:guard)")]
    Principal(String),
    #[error("--format `{0}`: expected `table` or `kafka-acls`")]
    Format(String),
}

fn principal(p: &str) -> Result<String, AclError> {
    match p.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(p.to_string()),
        _ => Err(AclError::Principal(p.to_string())),
    }
}

/// Every binding the given principals need, in a stable order.
pub fn plan(cfg: &Config, args: &AclArgs) -> Result<Vec<Acl>, AclError> {
    let k = &cfg.kafka;
    let mut out = Vec::new();
    let mut add = |who: &str, resource, name: &str, pattern, operation, why| {
        out.push(Acl {
            principal: who.to_string(),
            resource,
            name: name.to_string(),
            pattern,
            operation,
            why,
        })
    };
    if let Some(g) = &args.guard {
        let g = principal(g)?;
        add(
            &g,
            "topic",
            &k.events_topic,
            "literal",
            "Read",
            "consumes the events",
        );
        add(
            &g,
            "topic",
            &k.verdicts_topic,
            "literal",
            "Write",
            "writes verdicts and markers",
        );
        if let Some(prefix) = k.tenant_topic_prefix() {
            add(
                &g,
                "topic",
                &prefix,
                "prefixed",
                "Write",
                "writes each tenant's verdicts and markers",
            );
        }
        if let Some(prefix) = k.tenant_events_prefix() {
            add(
                &g,
                "topic",
                &prefix,
                "prefixed",
                "Read",
                "consumes each tenant's own events topic",
            );
            let state = format!("{}.", k.state_topic);
            add(
                &g,
                "topic",
                &state,
                "prefixed",
                "Read",
                "restores each tenant's sessions",
            );
            add(
                &g,
                "topic",
                &state,
                "prefixed",
                "Write",
                "checkpoints each tenant's sessions",
            );
        }
        add(
            &g,
            "topic",
            &k.dlq_topic,
            "literal",
            "Write",
            "dead-letters what it cannot read",
        );
        add(
            &g,
            "topic",
            &k.state_topic,
            "literal",
            "Read",
            "restores sessions on assignment",
        );
        add(
            &g,
            "topic",
            &k.state_topic,
            "literal",
            "Write",
            "checkpoints sessions",
        );
        add(
            &g,
            "topic",
            &k.policy_topic,
            "literal",
            "Read",
            "follows the live policy",
        );
        add(
            &g,
            "group",
            &k.group_id,
            "prefixed",
            "Read",
            "its consumer group (and the readers named after it)",
        );
        add(
            &g,
            "transactional-id",
            &k.transactional_id_prefix,
            "prefixed",
            "Write",
            "exactly-once: one transactional id per stream thread",
        );
    }
    // A runtime (client, edge, hooks) publishes events to one topic and reads one verdicts
    // topic.
    let mut runtimes = Vec::new();
    for r in &args.runtime {
        runtimes.push((
            principal(r)?,
            k.events_topic.clone(),
            k.verdicts_topic.clone(),
            "reads verdicts and markers",
            None,
        ));
    }
    for t in &args.tenant_runtime {
        let (tenant, who) = t
            .split_once('=')
            .filter(|(t, _)| !t.is_empty())
            .ok_or_else(|| AclError::TenantRuntime(t.clone()))?;
        if k.verdicts_topic_template.is_empty() {
            return Err(AclError::NoTemplate);
        }
        let topic = k
            .verdicts_topic_for(Some(tenant))
            .ok_or_else(|| AclError::TenantRuntime(t.clone()))?;
        // Tenants from the writer: its own events topic, Write granted to it alone.
        let events = match k.tenants_from_topics() {
            true => k
                .events_topic_for(tenant)
                .ok_or_else(|| AclError::TenantRuntime(t.clone()))?,
            false => k.events_topic.clone(),
        };
        runtimes.push((
            principal(who)?,
            events,
            topic,
            "reads its own tenant's verdicts and markers",
            Some(tenant.to_string()),
        ));
    }
    for (who, events, verdicts, why, tenant) in &runtimes {
        let publishes = match (tenant, k.tenants_from_topics()) {
            (Some(_), true) => "publishes its agents' events to its own tenant's topic (the guard takes the tenant from it)",
            _ => "publishes its agents' events",
        };
        add(who, "topic", events, "literal", "Write", publishes);
        add(who, "topic", verdicts, "literal", "Read", why);
    }
    if let Some(o) = &args.operator {
        let o = principal(o)?;
        for topic in [
            &k.events_topic,
            &k.verdicts_topic,
            &k.dlq_topic,
            &k.state_topic,
            &k.policy_topic,
        ] {
            add(
                &o,
                "topic",
                topic,
                "literal",
                "Create",
                "`loopguard topics create`",
            );
            add(
                &o,
                "topic",
                topic,
                "literal",
                "Describe",
                "`loopguard topics create` checks partitions",
            );
        }
        let state = format!("{}.", k.state_topic);
        let tenant_prefixes = [
            k.tenant_topic_prefix(),
            k.tenant_events_prefix(),
            k.tenants_from_topics().then_some(state),
        ];
        for prefix in tenant_prefixes.iter().flatten() {
            add(
                &o,
                "topic",
                prefix,
                "prefixed",
                "Create",
                "`loopguard topics create --tenant`",
            );
            add(
                &o,
                "topic",
                prefix,
                "prefixed",
                "Describe",
                "`loopguard topics create --tenant`",
            );
        }
        add(
            &o,
            "topic",
            &k.policy_topic,
            "literal",
            "Write",
            "`loopguard policy publish`",
        );
        add(
            &o,
            "topic",
            &k.policy_topic,
            "literal",
            "Read",
            "`loopguard policy history`",
        );
        add(
            &o,
            "topic",
            &k.events_topic,
            "literal",
            "Write",
            "`loopguard feedback` (a verdict judged right or wrong)",
        );
        if let Some(prefix) = k.tenant_events_prefix() {
            add(
                &o,
                "topic",
                &prefix,
                "prefixed",
                "Write",
                "`loopguard feedback --tenant` (on that tenant's events topic)",
            );
        }
    }
    if let Some(d) = &args.dlq_reader {
        let d = principal(d)?;
        add(
            &d,
            "topic",
            &k.dlq_topic,
            "literal",
            "Read",
            "reads dead letters",
        );
        add(
            &d,
            "group",
            &args.dlq_group,
            "literal",
            "Read",
            "its consumer group",
        );
    }
    Ok(out)
}

/// The bindings as `args.format` asks: a table, or one `kafka-acls` command per binding
/// (`BOOTSTRAP` and `ADMIN_CONFIG` left for the admin to fill in).
pub fn render(acls: &[Acl], quotas: &[Quota], format: &str) -> Result<String, AclError> {
    let mut s = String::new();
    match format {
        "table" => {
            s.push_str("principal\tresource\tname\tpattern\toperation\twhy\n");
            for a in acls {
                s.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\n",
                    a.principal, a.resource, a.name, a.pattern, a.operation, a.why
                ));
            }
            if !quotas.is_empty() {
                s.push_str("\nuser\tquotas (--format kafka-quotas prints the commands)\n");
                for q in quotas {
                    s.push_str(&format!("{}\t{}\n", q.user, q.configs()));
                }
            }
        }
        "kafka-quotas" => {
            for q in quotas {
                s.push_str(&format!(
                    "kafka-configs.sh --bootstrap-server \"$BOOTSTRAP\" --command-config \"$ADMIN_CONFIG\" --alter --add-config {} --entity-type users --entity-name {}\n",
                    q.configs(),
                    q.user
                ));
            }
        }
        "kafka-acls" => {
            for a in acls {
                s.push_str(&format!(
                    "kafka-acls.sh --bootstrap-server \"$BOOTSTRAP\" --command-config \"$ADMIN_CONFIG\" --add --allow-principal {} --operation {} --{} {} --resource-pattern-type {}\n",
                    a.principal, a.operation, a.resource, a.name, a.pattern
                ));
            }
        }
        other => return Err(AclError::Format(other.to_string())),
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        use std::io::Write;
        let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        crate::config::load_with_env(f.path().to_str(), std::iter::empty()).unwrap()
    }

    #[test]
    fn the_guard_gets_what_it_uses_and_nothing_to_create_or_alter() {
        let args = AclArgs {
            guard: Some("User:guard".into()),
            ..Default::default()
        };
        let acls = plan(&cfg(""), &args).unwrap();
        let has = |r: &str, n: &str, op: &str| {
            acls.iter()
                .any(|a| a.resource == r && a.name == n && a.operation == op)
        };
        assert!(has("topic", "agent-events", "Read"));
        assert!(has("topic", "agent-verdicts", "Write"));
        assert!(has("transactional-id", "loopguard", "Write"));
        assert!(
            !has("topic", "agent-events", "Write"),
            "the guard never writes events"
        );
        assert!(acls
            .iter()
            .all(|a| a.operation != "Create" && a.operation != "Alter"));
    }

    #[test]
    fn a_tenant_runtime_reads_its_own_verdicts_topic_only() {
        let c = cfg("[kafka]\nverdicts_topic_template = \"agent-verdicts.{tenant}\"\n");
        let args = AclArgs {
            tenant_runtime: vec!["acme=User:acme".into()],
            ..Default::default()
        };
        let acls = plan(&c, &args).unwrap();
        let reads: Vec<_> = acls.iter().filter(|a| a.operation == "Read").collect();
        assert_eq!(reads.len(), 1);
        assert_eq!(reads[0].name, "agent-verdicts.acme");
        assert_eq!(reads[0].pattern, "literal");
        let without = plan(&cfg(""), &args).unwrap_err();
        assert!(matches!(without, AclError::NoTemplate), "{without}");
    }

    #[test]
    fn with_tenants_from_the_writer_each_runtime_writes_its_own_events_topic_only() {
        let c = cfg("[kafka]\nverdicts_topic_template = \"agent-verdicts.{tenant}\"\nevents_topic_template = \"agent-events.{tenant}\"\n");
        let args = AclArgs {
            guard: Some("User:guard".into()),
            tenant_runtime: vec!["acme=User:acme".into(), "beta=User:beta".into()],
            operator: Some("User:ops".into()),
            ..Default::default()
        };
        let acls = plan(&c, &args).unwrap();
        let of = |who: &str| -> Vec<(String, &str, &str)> {
            acls.iter()
                .filter(|a| a.principal == who)
                .map(|a| (a.name.clone(), a.pattern, a.operation))
                .collect()
        };
        assert_eq!(
            of("User:beta"),
            [
                ("agent-events.beta".to_string(), "literal", "Write"),
                ("agent-verdicts.beta".to_string(), "literal", "Read")
            ]
        );
        let guard = of("User:guard");
        for want in [
            ("agent-events.".to_string(), "prefixed", "Read"),
            ("loopguard-state.".to_string(), "prefixed", "Read"),
            ("loopguard-state.".to_string(), "prefixed", "Write"),
        ] {
            assert!(guard.contains(&want), "{want:?} in {guard:?}");
        }
        assert!(of("User:ops").contains(&("agent-events.".to_string(), "prefixed", "Create")));
        let q = quotas(&args).unwrap();
        assert_eq!(
            q.iter().map(|q| q.user.as_str()).collect::<Vec<_>>(),
            ["acme", "beta"]
        );
        let out = render(&acls, &q, "kafka-quotas").unwrap();
        assert!(out.contains("--alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=25 --entity-type users --entity-name beta"), "{out}");
        assert!(render(&acls, &q, "table")
            .unwrap()
            .contains("\nbeta\tproducer_byte_rate="));
    }

    #[test]
    fn commands_name_each_binding() {
        let args = AclArgs {
            dlq_reader: Some("User:ops".into()),
            ..Default::default()
        };
        let out = render(&plan(&cfg(""), &args).unwrap(), &[], "kafka-acls").unwrap();
        assert!(out.contains("--allow-principal User:ops --operation Read --topic agent-events-dlq --resource-pattern-type literal"), "{out}");
        assert!(plan(
            &cfg(""),
            &AclArgs {
                guard: Some("guard".into()),
                ..Default::default()
            }
        )
        .is_err());
    }
}
