//! `loopguard feedback`: an operator marks a verdict right or wrong (issue 32). The
//! judgement is a `feedback` event on the events topic, keyed by the session like the
//! runtime's own events, so the guard owning the session matches it to the verdict and
//! counts it toward the verdict's rule (`loopguard_verdict_feedback_total`).

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

/// Sends the judgement to the events topic; where it landed (partition, offset).
pub fn send(cfg: &Config, j: &Judgement<'_>) -> Result<(i32, i64), PolicyCliError> {
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
    deliver_one(
        cfg,
        &cfg.kafka.events_topic,
        j.session.as_bytes(),
        &payload,
        None,
    )
    .map_err(|e| match e {
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
}
