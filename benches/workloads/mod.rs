//! Deterministic workloads for the engine benchmarks and the profiling example: a mixed
//! fleet of tool events and streamed reasoning, built in memory before anything is timed.

use loopguard::engine::event::{format_ts, Body, Effect, Event, Evidence, Meta, ToolStatus};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::{Engine, Limits};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const T0: i64 = 1_767_225_600_000;
const LOOPS: [&str; 3] = [
    include_str!("../../tests/data/real/dsh-thinking-loop-guard/real_loop.txt"),
    include_str!("../../tests/data/real/dsh-thinking-loop-guard/real_loop2.txt"),
    include_str!("../../tests/data/real/dsh-thinking-loop-guard/real_loop3.txt"),
];

/// Builds events for one session; the fleet interleaves several.
struct Session {
    id: String,
    tenant: &'static str,
    n: u64,
    events: Vec<Body>,
}

impl Session {
    fn push(&mut self, body: Body) {
        self.events.push(body);
    }
}

const TOOLS: [&str; 6] = [
    "read_file",
    "bash",
    "grep",
    "edit_file",
    "web_search",
    "list_dir",
];

/// One request of a coding agent: a user message, then rounds of 1-2 calls, the turn's end
/// and the results with evidence, then the answer. A looping session repeats one call.
fn request(rng: &mut StdRng, s: &mut Session, looping: bool) {
    s.push(Body::UserMessage {
        text: format!("fix the failing test in module {}", rng.gen_range(0..500)),
        limits: Default::default(),
    });
    let rounds = rng.gen_range(3..10);
    for r in 0..rounds {
        let turn = format!("t{}-{r}", s.n);
        let calls = if looping { 1 } else { rng.gen_range(1..3) };
        let mut made = Vec::new();
        for c in 0..calls {
            let tool = if looping {
                "bash"
            } else {
                TOOLS[rng.gen_range(0..TOOLS.len())]
            };
            let args = if looping {
                json!({"cmd": "cargo test -p core -- --nocapture", "cwd": "/w"})
            } else {
                match tool {
                    "bash" => {
                        json!({"cmd": format!("cargo test -p m{}", rng.gen_range(0..1000)), "cwd": "/w"})
                    }
                    "grep" | "web_search" => {
                        json!({"query": format!("symbol_{}", rng.gen_range(0..10_000)), "path": "src"})
                    }
                    _ => {
                        json!({"path": format!("src/m{}/lib.rs", rng.gen_range(0..1000)), "offset": rng.gen_range(0..20) * 100})
                    }
                }
            };
            let call_id = format!("c{r}-{c}");
            s.push(Body::ToolCall {
                turn_id: turn.clone(),
                call_id: call_id.clone(),
                tool: tool.into(),
                args,
            });
            made.push((call_id, tool));
        }
        s.push(Body::TurnEnd {
            turn_id: turn.clone(),
            usage: None,
        });
        for (call_id, tool) in made {
            let evidence = match (looping, tool) {
                (true, _) => Evidence {
                    effect: Some(Effect::Read),
                    new_info: Some(false),
                    ..Default::default()
                },
                (_, "edit_file") => Evidence {
                    effect: Some(Effect::Mutation),
                    state_before: Some(format!("h{}", rng.gen::<u32>())),
                    state_after: Some(format!("h{}", rng.gen::<u32>())),
                    ..Default::default()
                },
                _ => Evidence {
                    effect: Some(Effect::Read),
                    resource: Some(format!("r{}", rng.gen_range(0..100))),
                    output_hash: Some(format!("o{}", rng.gen::<u32>())),
                    ..Default::default()
                },
            };
            let failed = rng.gen_ratio(1, 10);
            s.push(Body::ToolResult {
                call_id,
                tool: tool.into(),
                status: if failed {
                    ToolStatus::Error
                } else {
                    ToolStatus::Ok
                },
                error: failed.then(|| "exit status 101".into()),
                evidence: Some(evidence),
            });
        }
    }
    let turn = format!("t{}-end", s.n);
    s.push(Body::AssistantMessage {
        turn_id: turn.clone(),
        text: "Done: the test passes now.".into(),
        usage: None,
    });
    s.push(Body::TurnEnd {
        turn_id: turn,
        usage: None,
    });
    s.n += 1;
}

/// Interleaves sessions the way a partition sees them: up to `active` at once, events
/// picked from a random active session, time moving 1-3 ms per event.
fn interleave(rng: &mut StdRng, sessions: Vec<Session>, active: usize) -> Vec<Event> {
    let mut waiting = sessions.into_iter();
    let mut live: Vec<(Session, usize)> = Vec::new();
    let mut out = Vec::new();
    let mut ts = T0;
    loop {
        while live.len() < active {
            match waiting.next() {
                Some(s) => live.push((s, 0)),
                None => break,
            }
        }
        if live.is_empty() {
            return out;
        }
        let i = rng.gen_range(0..live.len());
        let (s, next) = &mut live[i];
        ts += rng.gen_range(1..4);
        let meta = Meta {
            event_id: format!("{}-e{next}", s.id),
            session_id: s.id.clone(),
            ts_ms: ts,
            seq: Some(*next as u64),
            tenant: Some(s.tenant.into()),
            agent: Some("coder".into()),
            model: Some("m1".into()),
        };
        out.push(Event {
            meta,
            body: s.events[*next].clone(),
        });
        *next += 1;
        if *next == s.events.len() {
            live.swap_remove(i);
        }
    }
}

/// ~160k tool events from 4,000 sessions (10% looping), 300 active at a time.
pub fn fleet() -> Vec<Event> {
    let mut rng = StdRng::seed_from_u64(42);
    let sessions = (0..4000)
        .map(|i| {
            let mut s = Session {
                id: format!("sess-{i:05}"),
                tenant: ["acme", "beta", "gamma"][i % 3],
                n: 0,
                events: Vec::new(),
            };
            let looping = i % 10 == 0;
            for _ in 0..rng.gen_range(1..3) {
                request(&mut rng, &mut s, looping);
            }
            s
        })
        .collect();
    interleave(&mut rng, sessions, 300)
}

/// Varied, loop-free reasoning (English and Chinese word salad with numbers).
pub fn healthy_text(rng: &mut StdRng, chars: usize) -> String {
    const WORDS: [&str; 40] = [
        "the",
        "test",
        "fails",
        "because",
        "the",
        "fixture",
        "expects",
        "a",
        "sorted",
        "list",
        "but",
        "we",
        "return",
        "insertion",
        "order",
        "so",
        "maybe",
        "compare",
        "keys",
        "first",
        "然后",
        "检查",
        "这个",
        "函数",
        "的",
        "返回",
        "值",
        "是否",
        "正确",
        "如果",
        "不是",
        "就",
        "修改",
        "排序",
        "逻辑",
        "again",
        "consider",
        "edge",
        "case",
        "empty",
    ];
    let mut s = String::with_capacity(chars * 2);
    let mut n = 0;
    while n < chars {
        let words = rng.gen_range(5..16);
        for i in 0..words {
            let w = WORDS[rng.gen_range(0..WORDS.len())];
            if i > 0 && w.is_ascii() {
                s.push(' ');
            }
            s.push_str(w);
            if rng.gen_ratio(1, 6) {
                s.push_str(&rng.gen_range(0..100_000).to_string());
            }
        }
        s.push_str(if rng.gen_bool(0.3) { "。" } else { ". " });
        n = s.chars().count();
    }
    s
}

/// One session per text: a user message, the text as reasoning chunks of `min..=max` chars,
/// the turn's end. Returns the events and the reasoning bytes they carry.
fn stream(rng: &mut StdRng, texts: &[String], min: usize, max: usize) -> (Vec<Event>, u64) {
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut ts = T0;
    for (i, text) in texts.iter().enumerate() {
        let id = format!("r-{i:04}");
        let mut n = 0;
        let mut push = |out: &mut Vec<Event>, body: Body| {
            ts += 2;
            n += 1;
            let meta = Meta {
                event_id: format!("{id}-e{n}"),
                session_id: id.clone(),
                ts_ms: ts,
                seq: None,
                tenant: None,
                agent: None,
                model: None,
            };
            out.push(Event { meta, body });
        };
        push(
            &mut out,
            Body::UserMessage {
                text: "why does the test fail?".into(),
                limits: Default::default(),
            },
        );
        let chars: Vec<char> = text.chars().collect();
        let mut at = 0;
        while at < chars.len() {
            let end = (at + rng.gen_range(min..=max)).min(chars.len());
            let chunk: String = chars[at..end].iter().collect();
            bytes += chunk.len() as u64;
            push(
                &mut out,
                Body::Reasoning {
                    turn_id: "t1".into(),
                    text: chunk,
                    is_final: end == chars.len(),
                },
            );
            at = end;
        }
        push(
            &mut out,
            Body::TurnEnd {
                turn_id: "t1".into(),
                usage: None,
            },
        );
    }
    (out, bytes)
}

fn engine() -> Engine {
    Engine::new(PolicySet::default(), Limits::default())
}

/// Runs every event through a fresh engine; returns it so dropping is not measured.
pub fn run(events: Vec<Event>) -> (Engine, usize) {
    let mut engine = engine();
    let mut out = Vec::new();
    let mut verdicts = 0;
    for e in events {
        engine.handle_event(e, &mut out);
        verdicts += out.len();
        out.clear();
    }
    (engine, verdicts)
}

/// The events' wire form; half carry RFC 3339 text time, half epoch milliseconds.
pub fn wire(events: &[Event]) -> Vec<Vec<u8>> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut w = e.to_wire();
            if i % 2 == 0 {
                w["ts"] = format_ts(e.meta.ts_ms).into();
            }
            serde_json::to_vec(&w).expect("serializes")
        })
        .collect()
}

/// Decodes and handles every event with a fresh engine.
#[inline(never)]
pub fn decode_and_run(wire: &[Vec<u8>]) -> Engine {
    let mut engine = engine();
    let mut out = Vec::new();
    for bytes in wire {
        let e = Event::decode(bytes).expect("valid");
        engine.handle_event(e, &mut out);
        out.clear();
    }
    engine
}

/// The real agent sessions of tests/data/real/agent-traces (SWE-agent and mini-swe-agent,
/// MIT; see its README), as the bytes runtimes would publish: tool calls with large
/// arguments (heredoc scripts), long reasoning, results with evidence.
pub fn real_traces() -> Vec<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/real/agent-traces");
    ["swe-agent.jsonl", "mini-swe-agent.jsonl"]
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(format!("{dir}/{f}")).expect("agent traces");
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.as_bytes().to_vec())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The real traces' records of one kind: the reasoning chunks (`reasoning`), everything
/// else (`tools`: tool calls and results, turn ends, user messages), in their order, or the
/// reasoning cut into streamed chunks (`streamed`); the two ratios, streamed text
/// and tool traffic, each against its own floor.
pub fn real_traces_of(kind: &str) -> Vec<Vec<u8>> {
    if kind == "streamed" {
        return real_reasoning_streamed();
    }
    real_traces()
        .into_iter()
        .filter(|b| {
            let v: serde_json::Value = serde_json::from_slice(b).expect("valid JSON");
            let reasoning = v["type"] == "reasoning";
            reasoning == (kind == "reasoning")
        })
        .collect()
}

/// The real traces' reasoning as runtimes stream it: each response's text in chunks of
/// 8-32 chars (seeded), one record per chunk with the response's fields, `final` on the
/// last; the "streamed reasoning".
fn real_reasoning_streamed() -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(11);
    let mut out = Vec::new();
    for record in real_traces_of("reasoning") {
        let v: serde_json::Value = serde_json::from_slice(&record).expect("valid JSON");
        let chars: Vec<char> = v["text"].as_str().unwrap_or_default().chars().collect();
        let (mut at, mut n) = (0, 0);
        while at < chars.len() {
            let end = (at + rng.gen_range(8..=32)).min(chars.len());
            let mut chunk = v.clone();
            chunk["event_id"] = json!(format!("{}-c{n}", v["event_id"].as_str().unwrap_or("")));
            chunk["text"] = json!(chars[at..end].iter().collect::<String>());
            chunk["final"] = json!(end == chars.len());
            out.push(serde_json::to_vec(&chunk).expect("serializable"));
            at = end;
            n += 1;
        }
    }
    out
}

/// The parse floor: each record parsed into a `serde_json::Value` and dropped, nothing more.
#[inline(never)]
pub fn parse_floor(wire: &[Vec<u8>]) -> usize {
    wire.iter()
        .map(|b| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map(|v| v.as_object().map_or(0, |o| o.len()))
                .unwrap_or(0)
        })
        .sum()
}

/// The reasoning workloads: (name, events, reasoning bytes). Loops: the three real ones, 10
/// sessions each; healthy: 48 sessions of 16k chars; chunks of 8-32 chars, or 1024.
pub fn reasoning() -> Vec<(&'static str, Vec<Event>, u64)> {
    let mut rng = StdRng::seed_from_u64(7);
    let loops: Vec<String> = (0..30).map(|i| LOOPS[i % 3].to_string()).collect();
    let healthy: Vec<String> = (0..48).map(|_| healthy_text(&mut rng, 16_384)).collect();
    [
        ("loops_8_32_chars", &loops, 8, 32),
        ("healthy_8_32_chars", &healthy, 8, 32),
        ("healthy_1k_chars", &healthy, 1024, 1024),
    ]
    .into_iter()
    .map(|(name, texts, min, max)| {
        let (events, bytes) = stream(&mut rng, texts, min, max);
        (name, events, bytes)
    })
    .collect()
}

/// A short healthy request, as one session's events in order: a question, a little
/// reasoning, a read and its result, the answer (the idle-session memory figures of
/// `examples/idle_sessions.rs` and `tests/memory.rs`; the benchmarks do not use it).
#[allow(dead_code)]
pub fn short_request() -> Vec<Body> {
    let t = |s: &str| s.to_string();
    let evidence = Evidence {
        effect: Some(Effect::Read),
        resource: Some(t("src/parser.rs")),
        output_hash: Some(t("9f2c")),
        ..Default::default()
    };
    vec![
        Body::UserMessage {
            text: t("why does the parser test fail on empty input?"),
            limits: Default::default(),
        },
        Body::Reasoning {
            turn_id: t("t1"),
            text: t("The test feeds an empty string; let me read the parser's entry point."),
            is_final: true,
        },
        Body::ToolCall {
            turn_id: t("t1"),
            call_id: t("c1"),
            tool: t("read_file"),
            args: json!({"path": "src/parser.rs"}),
        },
        Body::TurnEnd {
            turn_id: t("t1"),
            usage: None,
        },
        Body::ToolResult {
            call_id: t("c1"),
            tool: t("read_file"),
            status: ToolStatus::Ok,
            error: None,
            evidence: Some(evidence),
        },
        Body::AssistantMessage {
            turn_id: t("t2"),
            text: t("The parser indexes the first byte without checking the length; fixed."),
            usage: None,
        },
        Body::TurnEnd {
            turn_id: t("t2"),
            usage: None,
        },
    ]
}
