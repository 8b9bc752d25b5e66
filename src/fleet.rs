//! A simulated fleet of agent sessions, healthy and looping (including the real reasoning
//! loops and chanting samples kept in tests/data/real with their licenses), as contract
//! events. Deterministic for a given seed. Used by `demo`, `loadgen` and tests.

use crate::engine::event::{Body, Event, Evidence, Meta, ToolStatus, Usage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const REAL_LOOP: &str = include_str!("../tests/data/real/dsh-thinking-loop-guard/real_loop.txt");
const REAL_LOOP2: &str = include_str!("../tests/data/real/dsh-thinking-loop-guard/real_loop2.txt");
const CHANT: &str = "I will not output any text.\n  I will just end the turn.\n  I am done.\n  I will not do anything else.\n  I will wait for the user's next command.\n";

/// The kinds of session the fleet plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    HealthyCoder,
    Paging,
    Polling,
    DoomLoop,
    Cycle,
    ReasoningLoop,
    ReasoningLoopVariants,
    Chanting,
    MissingTool,
}

impl Scenario {
    pub const ALL: [Scenario; 9] = [
        Scenario::HealthyCoder,
        Scenario::Paging,
        Scenario::Polling,
        Scenario::DoomLoop,
        Scenario::Cycle,
        Scenario::ReasoningLoop,
        Scenario::ReasoningLoopVariants,
        Scenario::Chanting,
        Scenario::MissingTool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::HealthyCoder => "healthy-coder",
            Scenario::Paging => "paging",
            Scenario::Polling => "polling",
            Scenario::DoomLoop => "doom-loop",
            Scenario::Cycle => "cycle",
            Scenario::ReasoningLoop => "reasoning-loop",
            Scenario::ReasoningLoopVariants => "reasoning-loop-variants",
            Scenario::Chanting => "chanting",
            Scenario::MissingTool => "missing-tool",
        }
    }

    pub fn loops(self) -> bool {
        !matches!(
            self,
            Scenario::HealthyCoder | Scenario::Paging | Scenario::Polling
        )
    }
}

/// Builds one session's events; times advance `step_ms` per event.
pub struct SessionWriter {
    session: String,
    ts: i64,
    step_ms: i64,
    n: u64,
    turn: u64,
    call: u64,
    model: String,
    tenant: String,
    pub events: Vec<Event>,
}

impl SessionWriter {
    pub fn new(session: &str, start_ms: i64, step_ms: i64, tenant: &str, model: &str) -> Self {
        SessionWriter {
            session: session.into(),
            ts: start_ms,
            step_ms,
            n: 0,
            turn: 0,
            call: 0,
            model: model.into(),
            tenant: tenant.into(),
            events: Vec::new(),
        }
    }

    fn push(&mut self, body: Body) {
        self.n += 1;
        self.ts += self.step_ms;
        let meta = Meta {
            event_id: format!("{}-{}", self.session, self.n),
            session_id: self.session.clone(),
            ts_ms: self.ts,
            seq: Some(self.n),
            tenant: Some(self.tenant.clone()),
            agent: Some("fleet-agent".into()),
            model: Some(self.model.clone()),
        };
        self.events.push(Event { meta, body });
    }

    /// What the response that ends now used: a context that grows with the session and a
    /// short output, priced like a mid-size model. Deterministic.
    fn usage(&self) -> Usage {
        let input = 900 + 60 * self.n;
        let output = 40 + 15 * (self.turn % 5);
        let cost = (input as f64) * 3e-6 + (output as f64) * 15e-6;
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cost: Some((cost * 1e6).round() / 1e6),
        }
    }

    fn turn_id(&self) -> String {
        format!("{}-t{}", self.session, self.turn)
    }

    pub fn user(&mut self, text: &str) {
        self.push(Body::UserMessage {
            text: text.into(),
            limits: Default::default(),
        });
    }

    pub fn reasoning(&mut self, text: &str, chunk: usize) {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(chunk.max(1)) {
            let turn_id = self.turn_id();
            self.push(Body::Reasoning {
                turn_id,
                text: piece.iter().collect(),
                is_final: false,
            });
        }
    }

    pub fn content(&mut self, text: &str) {
        let turn_id = self.turn_id();
        self.push(Body::Content {
            turn_id,
            text: text.into(),
        });
    }

    /// A round: a new response with one tool call, its end, and the result.
    pub fn round(&mut self, tool: &str, args: Value, ok: bool, evidence: Option<Value>) {
        self.turn += 1;
        self.call += 1;
        let call_id = format!("{}-c{}", self.session, self.call);
        let turn_id = self.turn_id();
        self.push(Body::ToolCall {
            turn_id: turn_id.clone(),
            call_id: call_id.clone(),
            tool: tool.into(),
            args,
        });
        self.push(Body::TurnEnd {
            turn_id,
            usage: Some(self.usage()),
        });
        let status = if ok {
            ToolStatus::Ok
        } else {
            ToolStatus::Error
        };
        let error = (!ok).then(|| "command failed: exit status 1".to_string());
        let evidence: Option<Evidence> = evidence.and_then(|e| serde_json::from_value(e).ok());
        self.push(Body::ToolResult {
            call_id,
            tool: tool.into(),
            status,
            error,
            evidence,
        });
    }

    /// A final answer: a new response with content and its end.
    pub fn answer(&mut self, text: &str) {
        self.turn += 1;
        self.content(text);
        let turn_id = self.turn_id();
        self.push(Body::TurnEnd {
            turn_id,
            usage: Some(self.usage()),
        });
    }

    pub fn new_turn(&mut self) {
        self.turn += 1;
    }

    pub fn end_turn(&mut self) {
        let turn_id = self.turn_id();
        self.push(Body::TurnEnd {
            turn_id,
            usage: Some(self.usage()),
        });
    }
}

/// Varied, healthy reasoning prose (no sentence repeats).
pub fn healthy_reasoning(rng: &mut StdRng, sentences: usize) -> String {
    const SUBJECTS: [&str; 8] = [
        "the parser",
        "this test",
        "the cache layer",
        "the retry loop",
        "our config",
        "the build script",
        "that index",
        "the handler",
    ];
    const VERBS: [&str; 8] = [
        "reads",
        "skips",
        "rewrites",
        "validates",
        "caches",
        "drops",
        "returns",
        "logs",
    ];
    const OBJECTS: [&str; 8] = [
        "the header",
        "every row",
        "a stale value",
        "the last token",
        "an empty list",
        "two offsets",
        "the error path",
        "its own state",
    ];
    let mut s = String::new();
    for i in 0..sentences {
        s.push_str(&format!(
            "Step {i}: {} {} {} when the input has {} items, so I check line {}. ",
            SUBJECTS[rng.gen_range(0..8)],
            VERBS[rng.gen_range(0..8)],
            OBJECTS[rng.gen_range(0..8)],
            rng.gen_range(2..900),
            rng.gen_range(10..4000)
        ));
    }
    s
}

/// One session of `scenario`, starting at `start_ms`.
pub fn session(scenario: Scenario, id: &str, start_ms: i64, step_ms: i64, seed: u64) -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(seed);
    let models = ["model-a", "model-b", "model-c"];
    let model = models[(seed % 3) as usize];
    let tenant = if seed % 2 == 0 {
        "team-red"
    } else {
        "team-blue"
    };
    let mut w = SessionWriter::new(id, start_ms, step_ms, tenant, model);
    match scenario {
        Scenario::HealthyCoder => {
            w.user("add input validation to the signup handler and run the tests");
            for i in 0..8 {
                w.new_turn();
                let thought = healthy_reasoning(&mut rng, 3);
                w.reasoning(&thought, 24);
                let (tool, args, ev) = match i % 3 {
                    0 => (
                        "read_file",
                        json!({"path": format!("src/handlers/signup_{i}.rs")}),
                        json!({"effect": "read", "resource": format!("src/handlers/signup_{i}.rs"), "new_info": true}),
                    ),
                    1 => (
                        "edit_file",
                        json!({"path": format!("src/handlers/signup_{i}.rs"), "patch": format!("+ validate(field_{i})")}),
                        json!({"effect": "mutation", "state_before": format!("a{i}"), "state_after": format!("b{i}")}),
                    ),
                    _ => (
                        "run_tests",
                        json!({"filter": format!("signup::case_{i}")}),
                        json!({"effect": "read", "output_hash": format!("out{i}")}),
                    ),
                };
                w.round(tool, args, true, Some(ev));
            }
            w.answer("Validation added for email, password and name; all signup tests pass.");
        }
        Scenario::Paging => {
            w.user("summarise the incident log");
            for page in 0..6 {
                let range = [page * 200, page * 200 + 200];
                w.round("read_file", json!({"path": "/var/log/incident.log", "offset": page * 200, "limit": 200}), true, Some(json!({"effect": "read", "resource": "/var/log/incident.log", "read_range": range})));
            }
            w.answer(
                "The incident began with a certificate expiry at 02:14 and was resolved by 03:05.",
            );
        }
        Scenario::Polling => {
            w.user("deploy the release and tell me when it is live");
            w.round("start_deploy", json!({"release": "v42"}), true, Some(json!({"effect": "mutation", "state_before": "v41", "state_after": "deploying"})));
            for i in 0..9 {
                w.round(
                    "check_background_tasks",
                    json!({}),
                    true,
                    Some(json!({"effect": "read", "output_hash": format!("progress-{i}")})),
                );
            }
            w.answer("Release v42 is live.");
        }
        Scenario::DoomLoop => {
            w.user("why does the build fail?");
            for _ in 0..5 {
                w.round(
                    "bash",
                    json!({"command": "cargo build --release"}),
                    false,
                    None,
                );
            }
        }
        Scenario::Cycle => {
            w.user("make the flaky test pass");
            for _ in 0..3 {
                w.round(
                    "edit_file",
                    json!({"path": "tests/flaky.rs", "patch": "sleep(10)"}),
                    true,
                    None,
                );
                w.round("run_tests", json!({"filter": "flaky"}), false, None);
                w.round(
                    "git_checkout",
                    json!({"path": "tests/flaky.rs"}),
                    true,
                    None,
                );
            }
        }
        Scenario::ReasoningLoop => {
            w.user("为什么 8 chunk 时 finalDensity 这么慢？");
            w.new_turn();
            w.reasoning(REAL_LOOP, rng.gen_range(8..=32));
            w.end_turn();
        }
        Scenario::ReasoningLoopVariants => {
            w.user("分析一下这段代码的性能问题");
            w.new_turn();
            w.reasoning(REAL_LOOP2, 16);
            w.end_turn();
        }
        Scenario::Chanting => {
            w.user("add the logging and finish up");
            w.new_turn();
            for _ in 0..6 {
                w.content(CHANT);
            }
            w.end_turn();
        }
        Scenario::MissingTool => {
            w.user("<relevant-memories>用户关注白酒板块</relevant-memories><current-user-message>我有什么持仓？</current-user-message>");
            for _ in 0..3 {
                w.answer("根据之前的对话，你主要持有白酒股。");
            }
        }
    }
    w.events
}

/// A fleet: `sessions` sessions cycling through the scenarios, interleaved round-robin.
pub fn fleet(sessions: usize, prefix: &str, start_ms: i64, step_ms: i64, seed: u64) -> Vec<Event> {
    let mut streams: Vec<std::collections::VecDeque<Event>> = (0..sessions)
        .map(|i| {
            let sc = Scenario::ALL[i % Scenario::ALL.len()];
            session(
                sc,
                &format!("{prefix}{}-{i}", sc.name()),
                start_ms,
                step_ms,
                seed.wrapping_add(i as u64),
            )
            .into()
        })
        .collect();
    let mut out = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed);
    while streams.iter().any(|s| !s.is_empty()) {
        let i = rng.gen_range(0..streams.len());
        if let Some(e) = streams[i].pop_front() {
            out.push(e);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{policy::PolicySet, Engine, Limits};

    #[test]
    fn looping_scenarios_get_verdicts_and_healthy_ones_none() {
        for sc in Scenario::ALL {
            let events = session(sc, "s", 0, 100, 7);
            let mut engine = Engine::new(PolicySet::default(), Limits::default());
            let mut out = Vec::new();
            for e in events {
                engine.handle_event(e, &mut out);
            }
            assert_eq!(
                !out.is_empty(),
                sc.loops(),
                "{}: {:?}",
                sc.name(),
                out.iter().map(|v| v.rule.as_str()).collect::<Vec<_>>()
            );
        }
    }
}
