//! Regression tests for engine bugs the property tests (tests/properties.rs) found, each the
//! minimal event list that showed it: hand-over with out-of-order time, and extreme times.

use loopguard::engine::event::{Body, Event, Meta};
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::{Action, Rule, Verdict};
use loopguard::engine::{Engine, Limits};
use serde_json::json;

const T0: i64 = 1_767_225_600_000;

fn findings(v: &[Verdict]) -> Vec<(Rule, Action, u32)> {
    v.iter().map(|v| (v.rule, v.action, v.attempt)).collect()
}

fn engine() -> Engine {
    Engine::new(PolicySet::default(), Limits::default())
}

// ---- Engine bugs found while writing these properties, now fixed ----------------------
// Each is the minimal event list that showed the bug.

/// Runs `events` with a hand-over (sessions and clock) to a fresh engine after `cut`
/// events, TTL 900 s; returns the findings.
fn handover_at(events: &[Event], cut: usize) -> Vec<(Rule, Action, u32)> {
    let limits = Limits {
        session_ttl_ms: 900_000,
        ..Limits::default()
    };
    let mut before = Engine::new(PolicySet::default(), limits);
    let mut out = Vec::new();
    for e in &events[..cut] {
        before.handle_event(e.clone(), &mut out);
    }
    let mut after = Engine::new(PolicySet::default(), limits);
    for id in before.session_ids() {
        after.restore(&id, &before.snapshot(&id).unwrap()).unwrap();
    }
    after.restore_clock(before.clock());
    for e in &events[cut..] {
        after.handle_event(e.clone(), &mut out);
    }
    findings(&out)
}

fn at(session: &str, id: &str, ts: i64, body: Body) -> Event {
    let meta = Meta {
        event_id: id.into(),
        session_id: session.into(),
        ts_ms: ts,
        seq: None,
        tenant: None,
        agent: None,
        model: None,
    };
    Event { meta, body }
}

fn hello() -> Body {
    Body::UserMessage {
        text: "hello".into(),
        limits: Default::default(),
    }
}

fn cargo_build(turn: &str, call: &str) -> Body {
    Body::ToolCall {
        turn_id: turn.into(),
        call_id: call.into(),
        tool: "bash".into(),
        args: json!({"cmd": "cargo build"}),
    }
}

/// Was: `Engine::restore` started a fresh sweep clock, so the new engine swept at its first
/// event while the old one would not have for up to a minute, and a session idle past the
/// TTL by the watermark but not by its next (out-of-order) event kept its state in one run
/// only. Sweeps now happen when event time crosses a minute boundary, in both engines: here
/// both sweep `x` at y2 (T0+930 s), so its late third call starts a fresh session.
#[test]
fn handover_with_out_of_order_time_keeps_verdicts() {
    let events = [
        at("x", "x1", T0, cargo_build("t1", "c1")),
        at("x", "x2", T0 + 10, cargo_build("t2", "c2")),
        // Session y only moves event time (user messages: no verdict of their own; three
        // compactions in a row would now be a compaction storm).
        at("y", "y1", T0 + 899_000, hello()), // sweep at T0+899 s: x kept
        at("y", "y2", T0 + 930_000, hello()), // x idle 930 s > TTL 900 s; cut here
        at("y", "y3", T0 + 930_001, hello()), // the restored engine sweeps x now
        at("x", "x3", T0 + 899_000, cargo_build("t3", "c3")), // 899 s after x2: within TTL
    ];
    let run = |cut: usize| handover_at(&events, cut);
    assert_eq!(run(events.len()), vec![]);
    for cut in 0..=events.len() {
        assert_eq!(run(cut), run(events.len()), "cut at {cut}");
    }
}

/// Was: `ts` as integer epoch milliseconds was not range-checked and the engine subtracted
/// timestamps unchecked, so extreme values overflowed (a panic in debug builds). Decoding
/// now rejects times outside 1970..=9999 with a clear error, and the engine's time
/// arithmetic saturates for events built in code.
#[test]
fn extreme_timestamps_are_rejected_or_saturate() {
    for ts in [i64::MIN, -1, i64::MAX] {
        let wire =
            format!(r#"{{"v":1,"event_id":"e","session_id":"s","ts":{ts},"type":"compaction"}}"#);
        assert_eq!(
            Event::decode(wire.as_bytes()).unwrap_err().reason(),
            "invalid_field"
        );
    }
    for pair in [
        [i64::MIN, i64::MAX],
        [i64::MIN + 1, i64::MIN + 120_000],
        [i64::MAX, i64::MIN],
    ] {
        let mut engine = engine();
        let mut out = Vec::new();
        for (n, ts) in pair.into_iter().enumerate() {
            engine.handle_event(
                at(
                    "s",
                    &format!("e{n}"),
                    ts,
                    Body::Reasoning {
                        turn_id: "t".into(),
                        text: "x".into(),
                        is_final: false,
                    },
                ),
                &mut out,
            );
            engine.handle_event(at("s", &format!("c{n}"), ts, Body::Compaction), &mut out);
        }
    }
}

/// Was: `restore` set the sweep minute from the newest restored session, but the engine
/// that handed over may have swept in a later minute at an event of a session that then
/// ended: the new engine swept once more in that minute and forgot `x`, which the old engine
/// keeps until its late third call is blocked. The engine's clock is now handed over with
/// the sessions (`Engine::clock`, `restore_clock`; the service writes it to the state topic).
#[test]
fn handover_after_the_sweeping_session_ended() {
    let events = [
        at("x", "x1", T0, cargo_build("t1", "c1")),
        at("x", "x2", T0 + 10, cargo_build("t2", "c2")),
        at("y", "y1", T0 + 899_000, Body::Compaction),
        at("y", "y2", T0 + 900_005, Body::Compaction), // sweeps minute 15: x kept
        at("y", "y3", T0 + 900_006, Body::SessionEnd), // cut after this
        at("z", "z1", T0 + 900_020, Body::Compaction), // only the new engine sweeps: x gone
        at("x", "x3", T0 + 900_009, cargo_build("t3", "c3")), // 899.999 s after x2
    ];
    let run = |cut: usize| handover_at(&events, cut);
    assert_eq!(
        run(events.len()),
        vec![(Rule::ExactRepeat, Action::Block, 1)]
    );
    for cut in 0..=events.len() {
        assert_eq!(run(cut), run(events.len()), "cut at {cut}");
    }
}
