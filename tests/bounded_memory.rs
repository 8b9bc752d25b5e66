//! Bounded memory, whatever the input: the session count stays under its cap as sessions
//! come and go, and one session's state stops growing once its windows and tails are full.

mod common;
#[allow(dead_code)]
#[path = "../benches/workloads/mod.rs"]
mod workloads;

use common::Script;
use rand::rngs::StdRng;
use rand::SeedableRng;

use loopguard::engine::event::{Body, Event, Meta, ToolStatus};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::{Engine, Limits};
use proptest::prelude::*;
use serde_json::json;
use workloads::healthy_text;

const T0: i64 = 1_767_225_600_000;

// ---- (f) bounded memory ----------------------------------------------------------------

/// Sessions kept may exceed `max_sessions` by at most this much at any time.
const SESSION_SLACK: usize = 4;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]

    #[test]
    fn session_count_stays_bounded(
        ops in prop::collection::vec((0..3000u32, 0..6u8, 0..3_000i64), 3000..4000),
    ) {
        let cap = 50;
        let mut engine = Engine::new(PolicySet::default(), Limits { max_sessions: cap, ..Limits::default() });
        let mut out = Vec::new();
        let mut ts = T0;
        for (n, (session, kind, dt)) in ops.into_iter().enumerate() {
            ts += dt;
            let turn_id = format!("t{}", n % 3);
            let body = match kind {
                0 => Body::UserMessage { text: "fix the build".into(), limits: Default::default() },
                1 => Body::ToolCall { turn_id, call_id: format!("c{n}"), tool: "bash".into(), args: json!({"cmd": "cargo build"}) },
                2 => Body::ToolResult { call_id: format!("c{}", n.saturating_sub(1)), tool: "bash".into(), status: ToolStatus::Ok, error: None, evidence: None },
                3 => Body::Reasoning { turn_id, text: "thinking about the build. ".into(), is_final: false },
                4 => Body::TurnEnd { turn_id, usage: None },
                _ => Body::SessionEnd,
            };
            let meta = Meta {
                event_id: format!("e{n}"),
                session_id: format!("session-{session}"),
                ts_ms: ts,
                seq: None,
                tenant: None,
                agent: None,
                model: None,
            };
            engine.handle_event(Event { meta, body }, &mut out);
            prop_assert!(engine.session_count() <= cap + SESSION_SLACK, "{} sessions", engine.session_count());
            out.clear();
        }
    }
}

/// With the default policy one session's state is bounded by the kept text tails
/// (`reasoning.tail_chars` = 8192 chars, for reasoning and again for content), the call
/// window, 256 pending calls and a few context messages. Measured (`session_bytes`): ~0.15 MB
/// once the reasoning tail is full, ~0.25 MB with the content tail full too
/// (docs/benchmarks.md; 0.67 and 1.02 MB while the text tables indexed every position, 1.13
/// and 1.98 MB before they were hash chains). The bounds below leave ~25 % headroom.
#[test]
fn one_session_stays_small_whatever_it_is_fed() {
    const REASONING_BOUND: usize = 185_000;
    const BOUND: usize = 315_000;
    let mut engine = Engine::new(PolicySet::default(), Limits::default());
    let mut out = Vec::new();
    let mut peak = 0;
    let mut feed = |s: &mut Script| {
        for e in s.events.drain(..) {
            engine.handle_event(e, &mut out);
            peak = peak.max(engine.session_bytes("big").expect("session kept"));
            out.clear();
        }
        peak
    };
    let mut s = Script::new("big");
    s.user("explain the failure");
    s.new_turn();
    // 1 MB of reasoning in one response, 4096 chars per event, loops mixed in.
    let mut rng = StdRng::seed_from_u64(7);
    let healthy: Vec<char> = healthy_text(&mut rng, 1 << 20).chars().collect();
    let mut peaks = Vec::new();
    for (i, chunk) in healthy.chunks(4096).enumerate() {
        if i % 16 == 15 {
            s.reasoning(&"继续分析！".repeat(40));
        }
        s.reasoning(&chunk.iter().collect::<String>());
        if i % 64 == 63 {
            peaks.push(feed(&mut s));
        }
    }
    // Visible content, then many tool calls with large arguments, never answered.
    for _ in 0..300 {
        s.content(&healthy_text(&mut rng, 900));
    }
    for i in 0..2000 {
        s.call(
            "bash",
            json!({"cmd": format!("run {i} {}", "x".repeat(400))}),
        );
    }
    peaks.push(feed(&mut s));
    let (reasoning, all) = (peaks[peaks.len() - 2], peaks[peaks.len() - 1]);
    eprintln!("peak session_bytes: {peaks:?}");
    assert!(reasoning < REASONING_BOUND, "{peaks:?}");
    assert!(all < BOUND, "{peaks:?}");
    // The reasoning part stops growing once its tail is full (by 256 KB of text).
    assert_eq!(peaks[0], reasoning, "{peaks:?}");
}
