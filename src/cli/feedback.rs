//! `loopguard feedback`: an operator marks a verdict right or wrong (issue 32). The
//! judgement is a `feedback` event on the events topic, keyed by the session like the
//! runtime's own events, so the guard owning the session matches it to the verdict and
//! counts it toward the verdict's rule (`loopguard_verdict_feedback_total`). With tenants
//! from the writer (`kafka.events_topic_template`), it goes to the session's tenant's own
//! events topic, so `--tenant` is required.

use super::policy::{reachable, unanswered, PolicyCliError};
use crate::config::Config;
use crate::engine::event::Event;
use crate::service::kafka::publish::{deliver_one, Undelivered};
use serde_json::json;

/// What the operator says about one verdict.
pub struct Judgement<'a> {
    pub session: &'a str,
    pub verdict_id: &'a str,
    pub useful: bool,
    pub note: Option<&'a str>,
    pub tenant: Option<&'a str>,
}

/// The feedback event for `j` at `now_ms`, checked as the guard will read it.
pub fn event(j: &Judgement<'_>, now_ms: i64) -> Result<Vec<u8>, PolicyCliError> {
    let mut e = json!({
        "v": 1,
        "event_id": format!("feedback-{}-{now_ms}", j.verdict_id),
        "session_id": j.session,
        "ts": now_ms,
        "type": "feedback",
        "verdict_id": j.verdict_id,
        "useful": j.useful,
    });
    if let Some(n) = j.note {
        e["note"] = n.into();
    }
    if let Some(t) = j.tenant {
        e["tenant"] = t.into();
    }
    let bytes = serde_json::to_vec(&e).unwrap_or_default();
    Event::decode(&bytes).map_err(|err| PolicyCliError::InvalidEvent(err.to_string()))?;
    Ok(bytes)
}

/// The events topic a judgement of a session of `tenant` goes to: the session's tenant's
/// own under `kafka.events_topic_template` (a tenant required then), else
/// `kafka.events_topic`.
pub fn topic(cfg: &Config, tenant: Option<&str>) -> Result<String, PolicyCliError> {
    let template = &cfg.kafka.events_topic_template;
    if template.is_empty() {
        return Ok(cfg.kafka.events_topic.clone());
    }
    if tenant.is_none_or(str::is_empty) {
        return Err(PolicyCliError::InvalidEvent(format!(
            "no --tenant: with kafka.events_topic_template `{template}` each tenant writes its own events topic; give the session's tenant"
        )));
    }
    crate::client::topic_for("kafka.events_topic_template", "events", template, tenant)
        .map_err(|e| PolicyCliError::InvalidEvent(format!("--tenant: {}", e.problem)))
}

/// Sends the judgement to the events topic (`topic`); where it landed (partition, offset).
pub fn send(cfg: &Config, j: &Judgement<'_>) -> Result<(i32, i64), PolicyCliError> {
    let events_topic = topic(cfg, j.tenant)?;
    if cfg.kafka.bootstrap_servers.is_empty() {
        return Err(PolicyCliError::Kafka(
            "no broker configured (kafka.bootstrap_servers)".into(),
        ));
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let payload = event(j, now_ms)?;
    reachable(cfg)?;
    deliver_one(cfg, &events_topic, j.session.as_bytes(), &payload, None).map_err(|e| match e {
        Undelivered::Kafka(e) => PolicyCliError::Kafka(e),
        Undelivered::Unanswered(why) => unanswered(cfg, "feedback event", &why),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_is_one_the_guard_reads_and_a_bad_one_is_refused_here() {
        let j = Judgement {
            session: "s1",
            verdict_id: "abc",
            useful: false,
            note: Some("it was polling a job that does finish"),
            tenant: Some("acme"),
        };
        let e = Event::decode(&event(&j, 5).unwrap()).unwrap();
        assert_eq!(e.body.kind(), "feedback");
        assert_eq!(e.meta.tenant.as_deref(), Some("acme"));
        let empty = Judgement {
            verdict_id: "",
            ..j
        };
        let err = event(&empty, 5).unwrap_err();
        assert!(err.to_string().contains("verdict_id"), "{err}");
    }

    #[test]
    fn with_tenants_from_the_writer_it_goes_to_the_tenants_own_topic() {
        let mut cfg = crate::config::load(None).unwrap();
        assert_eq!(topic(&cfg, None).unwrap(), cfg.kafka.events_topic);
        assert_eq!(topic(&cfg, Some("acme")).unwrap(), cfg.kafka.events_topic);
        cfg.kafka.events_topic_template = "agent-events.{tenant}".into();
        assert_eq!(topic(&cfg, Some("acme")).unwrap(), "agent-events.acme");
        for none in [None, Some("")] {
            let err = topic(&cfg, none).unwrap_err();
            assert_eq!(err.exit_code(), 2, "invalid input");
            assert!(err.to_string().contains("no --tenant"), "{err}");
        }
        let err = topic(&cfg, Some("acme/prod")).unwrap_err();
        assert!(
            err.to_string().contains("not a valid Kafka topic name"),
            "{err}"
        );
        // Refused before anything connects.
        let j = Judgement {
            session: "s1",
            verdict_id: "abc",
            useful: true,
            note: None,
            tenant: None,
        };
        assert!(send(&cfg, &j)
            .unwrap_err()
            .to_string()
            .contains("no --tenant"));
    }
}
