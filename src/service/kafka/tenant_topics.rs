//! Which topic takes an event's verdicts and markers: the plain verdicts topic, or with
//! tenant isolation (`kafka.verdicts_topic_template`) its tenant's own, checked to exist
//! on the broker once and re-checked while it is missing.

use crate::config::KafkaConfig;
use crate::service::records::dead_letter::Rejected;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a missing tenant topic is believed missing before the broker is asked again.
const RECHECK: Duration = Duration::from_secs(10);
/// Tenants remembered at most (a flood of made-up tenants cannot grow the map for ever).
const MAX_KNOWN: usize = 10_000;

/// The dead-letter reason of an event whose tenant has no verdicts topic.
pub const NO_TENANT_TOPIC: &str = "no_tenant_topic";

enum Known {
    Exists(Arc<str>),
    Missing { why: String, since: Instant },
}

/// The verdicts topics of one stream thread.
pub struct VerdictTopics {
    plain: Arc<str>,
    isolated: bool,
    known: HashMap<String, Known>,
}

impl VerdictTopics {
    /// The verdicts topics of a thread reading the shared events topic (`pinned` `None`),
    /// or tenant `pinned`'s own events topic: then every event, dead letters' included,
    /// is answered on that tenant's verdicts topic, whatever the event says.
    pub fn new(k: &KafkaConfig, pinned: Option<&str>) -> Self {
        let pinned = pinned.and_then(|t| k.verdicts_topic_for(Some(t)));
        VerdictTopics {
            isolated: pinned.is_none() && !k.verdicts_topic_template.is_empty(),
            plain: Arc::from(pinned.as_deref().unwrap_or(&k.verdicts_topic)),
            known: HashMap::new(),
        }
    }

    /// The plain verdicts topic (events without tenant, dead letters' markers); on a
    /// tenant's own events topic, that tenant's.
    pub fn plain(&self) -> &Arc<str> {
        &self.plain
    }

    /// The topic of `tenant`'s verdicts; `exists` asks the broker whether a topic exists
    /// (`Err` says why it cannot be written: missing, or refused). An event whose tenant
    /// has no topic is still judged (its state must be what a replay makes of it), and is
    /// dead-lettered with the reason so nothing is lost.
    pub fn for_tenant(
        &mut self,
        k: &KafkaConfig,
        tenant: Option<&str>,
        now: Instant,
        exists: impl FnOnce(&str) -> Result<(), String>,
    ) -> Result<Arc<str>, Rejected> {
        let Some(tenant) = tenant.filter(|_| self.isolated) else {
            return Ok(self.plain.clone());
        };
        match self.known.get(tenant) {
            Some(Known::Exists(topic)) => return Ok(topic.clone()),
            Some(Known::Missing { why, since }) if now.duration_since(*since) < RECHECK => {
                return Err(rejected(why));
            }
            _ => {}
        }
        let found = match k.verdicts_topic_for(Some(tenant)) {
            None => Err(format!(
                "tenant `{tenant}` cannot name a topic (ASCII letters, digits, `.`, `_`, `-`)"
            )),
            Some(topic) => exists(&topic)
                .map(|()| Arc::<str>::from(topic.as_str()))
                .map_err(|why| {
                    format!("verdicts topic `{topic}` of tenant `{tenant}`: {why} (create it with `loopguard topics create --tenant {tenant}`)")
                }),
        };
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        match found {
            Ok(topic) => {
                self.known
                    .insert(tenant.to_string(), Known::Exists(topic.clone()));
                Ok(topic)
            }
            Err(why) => {
                tracing::warn!(tenant, reason = %why, "events of this tenant are judged but their verdicts cannot be written: dead-lettered");
                let r = rejected(&why);
                self.known
                    .insert(tenant.to_string(), Known::Missing { why, since: now });
                Err(r)
            }
        }
    }
}

fn rejected(why: &str) -> Rejected {
    Rejected {
        reason: NO_TENANT_TOPIC,
        detail: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(template: &str) -> KafkaConfig {
        let mut c = crate::config::load_with_env(None, std::iter::empty())
            .unwrap()
            .kafka;
        c.verdicts_topic_template = template.into();
        c
    }

    #[test]
    fn without_a_template_every_event_keeps_the_plain_topic() {
        let k = kafka("");
        let mut t = VerdictTopics::new(&k, None);
        let got = t.for_tenant(&k, Some("acme"), Instant::now(), |_| {
            panic!("no broker asked")
        });
        assert_eq!(&*got.unwrap(), "agent-verdicts");
    }

    #[test]
    fn on_a_tenant_topic_every_answer_goes_to_that_tenant() {
        let k = kafka("agent-verdicts.{tenant}");
        let mut t = VerdictTopics::new(&k, Some("acme"));
        assert_eq!(&**t.plain(), "agent-verdicts.acme");
        for named in [None, Some("acme"), Some("beta")] {
            let got = t.for_tenant(&k, named, Instant::now(), |_| panic!("no broker asked"));
            assert_eq!(&*got.unwrap(), "agent-verdicts.acme");
        }
    }

    #[test]
    fn a_tenant_topic_is_asked_for_once_and_a_missing_one_again_later() {
        let k = kafka("agent-verdicts.{tenant}");
        let mut t = VerdictTopics::new(&k, None);
        let now = Instant::now();
        let got = t.for_tenant(&k, Some("acme"), now, |topic| {
            assert_eq!(topic, "agent-verdicts.acme");
            Ok(())
        });
        assert_eq!(&*got.unwrap(), "agent-verdicts.acme");
        let again = t.for_tenant(&k, Some("acme"), now, |_| panic!("cached"));
        assert!(again.is_ok());
        assert_eq!(
            &*t.for_tenant(&k, None, now, |_| panic!()).unwrap(),
            "agent-verdicts"
        );
        let missing = t.for_tenant(&k, Some("beta"), now, |_| Err("does not exist".into()));
        let r = missing.unwrap_err();
        assert_eq!(r.reason, NO_TENANT_TOPIC);
        assert!(
            r.detail.contains("loopguard topics create --tenant beta"),
            "{}",
            r.detail
        );
        assert!(t
            .for_tenant(&k, Some("beta"), now, |_| panic!("cached"))
            .is_err());
        let later = now + RECHECK;
        assert!(t.for_tenant(&k, Some("beta"), later, |_| Ok(())).is_ok());
        let bad = t.for_tenant(&k, Some("a b"), now, |_| panic!("never a topic"));
        assert!(bad.unwrap_err().detail.contains("cannot name a topic"));
    }
}
