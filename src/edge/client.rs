//! The edge's own client, blocking and small: what a hook command (a new process per tool
//! call) and the MCP proxy use to reach `loopguard edge` on loopback. Every failure to reach
//! it is a fail-open answer that says why; nothing here waits past the caller's deadline.

use serde_json::Value;
use std::time::{Duration, Instant};

/// Where the edge is unless told otherwise (`LOOPGUARD_EDGE`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:9465";

/// The edge's answer to a check, as a caller acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum EdgeAnswer {
    /// An enforced verdict: `action` (`warn`, `steer`, `block`, `abort`), `message`, and the
    /// whole verdict.
    Verdict {
        action: String,
        message: String,
        verdict: Value,
    },
    /// Judged, nothing to say.
    None,
    /// No answer in time, or the edge unreachable: run the tool; `why` says so.
    FailOpen { why: String },
    /// The edge refused the event (400): a bug in the adapter's mapping; `why` names the field.
    Invalid { why: String },
}

pub struct EdgeClient {
    base: String,
    agent: ureq::Agent,
    /// `Authorization: Bearer <token>` on every request (an edge with `--token-file`).
    token: Option<String>,
}

impl EdgeClient {
    pub fn new(base: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_millis(500)))
            .build()
            .into();
        EdgeClient {
            base: base.trim_end_matches('/').to_string(),
            agent,
            token: None,
        }
    }

    /// Sends `token` as `Authorization: Bearer <token>` on every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The client of a hook or the MCP proxy: the edge at `base`, with the token of
    /// `token_file` when one is given (`--token-file`, `LOOPGUARD_EDGE_TOKEN_FILE`). A file
    /// it cannot read is said in the second value, and the requests go without a token (the
    /// edge then answers 401: a fail-open that says so).
    pub fn for_caller(base: &str, token_file: Option<&std::path::Path>) -> (Self, Option<String>) {
        match token_file.map(super::trust::read_token) {
            None => (EdgeClient::new(base), None),
            Some(Ok(t)) => (EdgeClient::new(base).with_token(Some(t)), None),
            Some(Err(e)) => (EdgeClient::new(base), Some(e)),
        }
    }

    fn authorization(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// Posts `event` to `/v1/check`, asking the edge to answer within `deadline` less a
    /// margin for the round trip; the whole call never takes longer than `deadline`.
    pub fn check(&self, event: &Value, deadline: Duration) -> EdgeAnswer {
        let started = Instant::now();
        let margin = (deadline / 10).clamp(Duration::from_millis(20), Duration::from_millis(200));
        let ask = deadline
            .saturating_sub(margin)
            .max(Duration::from_millis(1));
        let url = format!("{}/v1/check?deadline_ms={}", self.base, ask.as_millis());
        let (status, body) = match self.post(&url, event, deadline) {
            Ok(r) => r,
            Err(e) => {
                return EdgeAnswer::FailOpen {
                    why: format!(
                        "the edge at {} did not answer ({e}) after {} ms",
                        self.base,
                        started.elapsed().as_millis()
                    ),
                }
            }
        };
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        match status {
            200 => match &parsed["verdict"] {
                Value::Object(v) => EdgeAnswer::Verdict {
                    action: v
                        .get("action")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown")
                        .into(),
                    message: v
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    verdict: parsed["verdict"].clone(),
                },
                _ if parsed["answer"] == "fail_open" => EdgeAnswer::FailOpen {
                    why: format!(
                        "the guard did not answer in time ({}: {})",
                        parsed["fail_open"]["reason"].as_str().unwrap_or("?"),
                        parsed["fail_open"]["detail"].as_str().unwrap_or("")
                    ),
                },
                _ => EdgeAnswer::None,
            },
            400 => EdgeAnswer::Invalid {
                why: parsed["detail"].as_str().unwrap_or(&body).to_string(),
            },
            code => EdgeAnswer::FailOpen {
                why: format!("the edge answered HTTP {code}: {}", body.trim()),
            },
        }
    }

    /// Posts events to `/v1/events`; Err says why they were not taken.
    pub fn publish(&self, events: &Value, within: Duration) -> Result<(), String> {
        let url = format!("{}/v1/events", self.base);
        match self.post(&url, events, within) {
            Ok((202, _)) => Ok(()),
            Ok((code, body)) => Err(format!("the edge answered HTTP {code}: {}", body.trim())),
            Err(e) => Err(format!("the edge at {} did not answer ({e})", self.base)),
        }
    }

    /// Follows `GET /v1/sessions/{id}/verdicts` until `on_verdict` returns false, handing
    /// it each verdict; reconnects (after a pause) when the edge goes away. Blocking: run it
    /// on a thread of its own.
    pub fn follow_verdicts(&self, session_id: &str, mut on_verdict: impl FnMut(Value) -> bool) {
        use std::io::BufRead;
        let url = format!(
            "{}/v1/sessions/{}/verdicts",
            self.base,
            encode_segment(session_id)
        );
        loop {
            let mut req = self.agent.get(&url);
            if let Some(a) = self.authorization() {
                req = req.header("authorization", a);
            }
            if let Ok(resp) = req.call() {
                if resp.status() == 200 {
                    let reader = std::io::BufReader::new(resp.into_body().into_reader());
                    for line in reader.lines() {
                        let Ok(line) = line else { break };
                        let Some(data) = line.strip_prefix("data:") else {
                            continue;
                        };
                        if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                            if v.get("verdict_id").is_some() && !on_verdict(v) {
                                return;
                            }
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn post(
        &self,
        url: &str,
        body: &Value,
        within: Duration,
    ) -> Result<(u16, String), ureq::Error> {
        let mut req = self
            .agent
            .post(url)
            .config()
            .timeout_global(Some(within))
            .build()
            .header("content-type", "application/json");
        if let Some(a) = self.authorization() {
            req = req.header("authorization", a);
        }
        let mut resp = req.send(serde_json::to_vec(body).expect("JSON serialises"))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string()?;
        Ok((status, text))
    }
}

/// A session id as one URL path segment.
fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
