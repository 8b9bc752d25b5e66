//! The session state's encoding for checkpoints and hand-overs (`engine::snapshot`):
//! states written as JSON by the versions before issue 19 still restore and judge as
//! before; the binary encoding round-trips every field and gives the same verdicts; it is
//! a fraction of JSON's size; its layout is pinned; broken records are refused, never a
//! panic.

use loopguard::engine::event::Event;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::snapshot::{
    self, StateError, FORMAT_BINARY, FORMAT_BINARY_DEFLATE, FORMAT_BINARY_LZ4,
};
use loopguard::engine::verdict::Verdict;
use loopguard::engine::{Clock, Engine, Limits};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn engine() -> Engine {
    Engine::new(PolicySet::default(), Limits::default())
}

fn run(engine: &mut Engine, events: &[Event], out: &mut Vec<Verdict>) {
    for e in events {
        engine.handle_event(e.clone(), out);
    }
}

fn to_json(v: &[Verdict]) -> String {
    serde_json::to_string(v).expect("verdicts serialize")
}

/// `fleet(sessions)` judged whole, and judged with every session handed over after `cut`
/// events through `encode` (the states' bytes) to a fresh engine: the verdicts must agree.
fn hand_over_through(
    events: &[Event],
    cut: usize,
    encode: impl Fn(&Engine, &str) -> Vec<u8>,
) -> (String, String) {
    let mut whole = Vec::new();
    run(&mut engine(), events, &mut whole);
    let mut before = engine();
    let mut out = Vec::new();
    run(&mut before, &events[..cut], &mut out);
    let mut after = engine();
    for id in before.session_ids() {
        after
            .restore(&id, &encode(&before, &id))
            .expect("a state restores");
    }
    after.restore_clock(before.clock());
    run(&mut after, &events[cut..], &mut out);
    (to_json(&whole), to_json(&out))
}

fn fleet() -> Vec<Event> {
    loopguard::fleet::fleet(45, "enc-", 1_767_225_600_000, 250, 7)
}

/// `tests/data/state/json-states.jsonl` holds the JSON states written by the build before
/// issue 19 (commit 9af5510) for `fleet(18, "fx-", T0, 250, 19)` cut after half of its
/// events, and that engine's clock. Restored into this build, they judge the rest of the
/// events as an engine that saw them all.
#[test]
fn json_states_of_the_build_before_issue_19_restore_and_judge_as_before() {
    let text = include_str!("data/state/json-states.jsonl");
    let mut lines = text.lines();
    let head: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let events = loopguard::fleet::fleet(18, "fx-", 1_767_225_600_000, 250, 19);
    assert_eq!(head["events"], events.len(), "the fixture's fleet changed");
    let cut = head["cut"].as_u64().unwrap() as usize;
    let clock: Clock = serde_json::from_value(head["clock"].clone()).unwrap();

    let mut first = engine();
    let mut out = Vec::new();
    run(&mut first, &events[..cut], &mut out);
    let mut restored = engine();
    let mut ids = BTreeSet::new();
    for line in lines {
        let rec: serde_json::Value = serde_json::from_str(line).unwrap();
        let (id, state) = (
            rec["session"].as_str().unwrap(),
            rec["state"].as_str().unwrap(),
        );
        assert!(state.starts_with('{'), "a JSON state");
        restored
            .restore(id, state.as_bytes())
            .expect("an old JSON state restores");
        // Re-encoded in the binary format, it restores to the same state again.
        let binary = restored.snapshot(id).unwrap();
        assert!([FORMAT_BINARY, FORMAT_BINARY_LZ4].contains(&binary[0]));
        let again = snapshot::decode(&binary).expect("decodes");
        assert_eq!(snapshot::encode(&again), binary);
        ids.insert(id.to_string());
    }
    assert_eq!(ids.len(), 18, "every session of the fixture");
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), first.session_ids());
    restored.restore_clock(clock);
    let (mut expected, mut got) = (Vec::new(), Vec::new());
    run(&mut first, &events[cut..], &mut expected);
    run(&mut restored, &events[cut..], &mut got);
    assert!(
        expected.len() >= 5,
        "the second half has verdicts to compare"
    );
    assert_eq!(to_json(&expected), to_json(&got));
}

/// Every state of the fleet, at several points of its run, decodes from the binary
/// encoding to a state with the same JSON (every field, which JSON spells out) and
/// encodes again to the same bytes.
#[test]
fn the_binary_encoding_round_trips_every_field() {
    let events = fleet();
    let mut e = engine();
    let mut out = Vec::new();
    let mut checked = 0;
    for chunk in events.chunks(events.len() / 7 + 1) {
        run(&mut e, chunk, &mut out);
        for id in e.session_ids() {
            let binary = e.snapshot(&id).unwrap();
            let state = snapshot::decode(&binary).expect("decodes");
            assert_eq!(
                snapshot::encode_json(&state),
                e.snapshot_json(&id).unwrap(),
                "{id}"
            );
            assert_eq!(snapshot::encode(&state), binary, "{id}");
            checked += 1;
        }
    }
    assert!(checked > 200, "{checked} states");
}

/// A hand-over through the binary encoding, at many cuts of the fleet, changes no verdict;
/// so does one through JSON (the format older instances hand over).
#[test]
fn a_hand_over_through_either_encoding_changes_no_verdict() {
    let events = fleet();
    for cut in (0..=events.len()).step_by(events.len() / 9) {
        let (whole, handed) = hand_over_through(&events, cut, |e, id| e.snapshot(id).unwrap());
        assert_eq!(whole, handed, "binary, cut {cut}");
        let (whole, handed) = hand_over_through(&events, cut, |e, id| e.snapshot_json(id).unwrap());
        assert_eq!(whole, handed, "JSON, cut {cut}");
    }
}

/// An engine that freezes every session idle at a sweep judges the fleet as one that never
/// freezes, and hands over the same bytes for every session at every point.
#[test]
fn frozen_sessions_judge_and_hand_over_as_live_ones() {
    let events = fleet();
    let limits = |freeze_idle_ms| Limits {
        freeze_idle_ms,
        ..Limits::default()
    };
    let mut live = Engine::new(PolicySet::default(), limits(i64::MAX));
    let mut frozen = Engine::new(PolicySet::default(), limits(0));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut seen_frozen = 0;
    for chunk in events.chunks(97) {
        run(&mut live, chunk, &mut a);
        run(&mut frozen, chunk, &mut b);
        assert_eq!(live.session_ids(), frozen.session_ids());
        for id in live.session_ids() {
            assert_eq!(live.snapshot(&id), frozen.snapshot(&id), "{id}");
        }
        assert_eq!(live.frozen_count(), 0);
        seen_frozen += frozen.frozen_count();
    }
    assert!(seen_frozen > 40, "{seen_frozen} frozen sessions seen");
    assert!(a.len() > 20);
    assert_eq!(to_json(&a), to_json(&b));
}

/// A live policy switch while sessions are frozen: each frozen session takes its
/// (tenant, agent)'s policy of the new set when it thaws, as a live one does at once.
#[test]
fn a_policy_switch_reaches_frozen_sessions_when_they_thaw() {
    let events = fleet();
    let switched = PolicySet::compile(&serde_json::json!({
        "tool": {"window": 6},
        "overrides": [{"tenant": "team-blue", "set": {"mode": "observe"}}]
    }))
    .expect("a valid policy");
    let limits = |freeze_idle_ms| Limits {
        freeze_idle_ms,
        ..Limits::default()
    };
    // The switch comes after the first event past half-way at which sessions are frozen.
    let mut probe = Engine::new(PolicySet::default(), limits(0));
    let mut out = Vec::new();
    run(&mut probe, &events[..events.len() / 2], &mut out);
    let mut at = events.len() / 2;
    while probe.frozen_count() == 0 {
        run(&mut probe, &events[at..at + 1], &mut out);
        at += 1;
    }
    let frozen = probe.frozen_count();
    let judge = |freeze_idle_ms| {
        let mut engine = Engine::new(PolicySet::default(), limits(freeze_idle_ms));
        let mut out = Vec::new();
        run(&mut engine, &events[..at], &mut out);
        engine.set_policies(switched.clone());
        run(&mut engine, &events[at..], &mut out);
        to_json(&out)
    };
    let (live, thawed) = (judge(i64::MAX), judge(0));
    assert!(frozen > 3, "{frozen} sessions frozen at the switch");
    assert!(
        live.contains("\"enforce\":false"),
        "the switch shows in the verdicts"
    );
    assert_eq!(live, thawed);
}

/// The target of issue 19: a checkpointed session at most 25 % of its JSON bytes, over
/// the fleet's sessions mid-run (tool calls, reasoning and content tails).
#[test]
fn binary_states_are_at_most_a_quarter_of_json() {
    let events = loopguard::fleet::fleet(90, "size-", 1_767_225_600_000, 250, 3);
    let mut e = engine();
    let mut out = Vec::new();
    let (mut json, mut binary) = (0, 0);
    for chunk in events.chunks(events.len() / 5 + 1) {
        run(&mut e, chunk, &mut out);
        for id in e.session_ids() {
            json += e.snapshot_json(&id).unwrap().len();
            binary += e.snapshot(&id).unwrap().len();
        }
    }
    assert!(binary * 4 <= json, "binary {binary} bytes, JSON {json}");
}

/// The binary layout of the state types, pinned: the JSON key paths of the fleet's states
/// (what fields exist, not their values). A changed field changes them; then bump
/// `snapshot::LAYOUT` (a record of the old layout is refused rather than misread) and pin
/// the new fingerprint here.
#[test]
fn the_state_layout_is_pinned() {
    fn paths(v: &serde_json::Value, at: &str, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let p = format!("{at}.{k}");
                    out.insert(p.clone());
                    paths(v, &p, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| paths(v, &format!("{at}[]"), out)),
            _ => {}
        }
    }
    let events = fleet();
    let mut e = engine();
    let mut out = Vec::new();
    let mut keys = BTreeSet::new();
    for chunk in events.chunks(events.len() / 7 + 1) {
        run(&mut e, chunk, &mut out);
        for id in e.session_ids() {
            let v: serde_json::Value =
                serde_json::from_slice(&e.snapshot_json(&id).unwrap()).unwrap();
            paths(&v, "", &mut keys);
        }
    }
    let listing = keys.into_iter().collect::<Vec<_>>().join("\n");
    let fingerprint = xxhash_rust::xxh3::xxh3_64(listing.as_bytes());
    assert_eq!(
        (snapshot::LAYOUT, fingerprint),
        (4, PINNED_FINGERPRINT),
        "the state's fields changed: bump snapshot::LAYOUT and pin {fingerprint:#x}; key paths:\n{listing}"
    );
}

const PINNED_FINGERPRINT: u64 = 0xabaf_7d5d_12fb_e86d;

/// Layout 2 (before issue 32) is layout 4 without its last three fields, the steers waiting
/// for an outcome, the latest verdicts and the verdicts judged; layout 3 (before issue 44)
/// without the last: a record of either reads as the same session with none, in every
/// format, so a rolling upgrade keeps every session's state.
#[test]
fn layout_two_and_three_records_read_as_having_none_of_the_later_fields() {
    let events = fleet();
    let mut e = engine();
    run(&mut e, &events, &mut Vec::new());
    let mut read = 0;
    for id in e.session_ids() {
        let json = e.snapshot_json(&id).unwrap();
        let state = snapshot::decode(&json).unwrap();
        let text = String::from_utf8_lossy(&json);
        assert!(text.contains("\"judged\":[]"), "no feedback in the fleet");
        // Layout 3 wrote the same body without the last byte (the empty list of judged
        // verdicts).
        let body = postcard_body(&state);
        assert!(body.ends_with(&[0]));
        for (layout, cut) in [(3u8, 1), (2, 3)] {
            if layout == 2 && (!text.contains("\"steers\":[]") || !text.contains("\"verdicts\":[]"))
            {
                continue;
            }
            assert!(body.ends_with(&vec![0; cut]));
            let old_body = &body[..body.len() - cut];
            let old = [&[snapshot::FORMAT_BINARY, layout][..], old_body].concat();
            let back = snapshot::decode(&old)
                .unwrap_or_else(|e| panic!("a layout-{layout} record reads: {e}"));
            assert_eq!(snapshot::encode_json(&back), snapshot::encode_json(&state));
            let old_lz4 = [
                &[snapshot::FORMAT_BINARY_LZ4, layout][..],
                &lz4_flex::block::compress_prepend_size(old_body),
            ]
            .concat();
            let back = snapshot::decode(&old_lz4)
                .unwrap_or_else(|e| panic!("a layout-{layout} LZ4 record reads: {e}"));
            assert_eq!(snapshot::encode_json(&back), snapshot::encode_json(&state));
            // Restored into an engine, it is written again in this layout.
            let mut fresh = engine();
            fresh.restore(&id, &old_lz4).unwrap();
            assert_eq!(fresh.snapshot(&id).unwrap(), snapshot::encode(&state));
            read += 1;
        }
    }
    assert!(read >= 30, "only {read} records read");
    // Layout 1 is still refused by name.
    let err = snapshot::decode(&[snapshot::FORMAT_BINARY, 1, 0]).unwrap_err();
    assert!(err.to_string().contains("layout 1"), "{err}");
}

/// A state's postcard body as this layout writes it (`encode` without its two header bytes,
/// uncompressed).
fn postcard_body(state: &loopguard::engine::rules::SessionState) -> Vec<u8> {
    let bytes = snapshot::encode(state);
    match bytes[0] {
        snapshot::FORMAT_BINARY => bytes[2..].to_vec(),
        _ => lz4_flex::block::decompress_size_prepended(&bytes[2..]).unwrap(),
    }
}

#[test]
fn broken_records_are_refused_by_name() {
    let mut e = engine();
    let mut out = Vec::new();
    run(&mut e, &fleet()[..400], &mut out);
    let id = e.session_ids().pop().unwrap();
    let good = e.snapshot(&id).unwrap();
    assert!(matches!(snapshot::decode(&[]), Err(StateError::Empty)));
    assert!(matches!(
        snapshot::decode(&[7, 1]),
        Err(StateError::UnknownFormat(7))
    ));
    let mut other_layout = good.clone();
    other_layout[1] = other_layout[1].wrapping_add(1);
    assert!(matches!(
        snapshot::decode(&other_layout),
        Err(StateError::Layout { .. })
    ));
    let mut trailing = good.clone();
    if good[0] == FORMAT_BINARY {
        trailing.push(0);
        assert!(matches!(
            snapshot::decode(&trailing),
            Err(StateError::Binary(_))
        ));
    }
    assert!(e.restore("x", b"{\"tenant\": 3}").is_err());
}

/// States of a fleet mid-run, encoded: what the damage property alters.
fn some_states() -> &'static [Vec<u8>] {
    static STATES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    STATES.get_or_init(|| {
        let events = loopguard::fleet::fleet(40, "dmg-", 1_767_225_600_000, 250, 11);
        let mut e = engine();
        let mut out = Vec::new();
        run(&mut e, &events[..events.len() / 2], &mut out);
        let mut states: Vec<Vec<u8>> = e
            .session_ids()
            .iter()
            .map(|id| e.snapshot(id).unwrap())
            .collect();
        // Deflated ones too.
        let deflated: Vec<Vec<u8>> = states
            .iter()
            .filter_map(|s| snapshot::deflated(s))
            .collect();
        states.extend(deflated);
        states.extend(snapshot::deflated(&snapshot::encode(&long_state())));
        states
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Truncated or altered records of real states decode to an error or to some state,
    /// never a panic.
    #[test]
    fn damaged_records_never_panic(
        session in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let states = some_states();
        let mut bytes = states[session.index(states.len())].clone();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= b;
        }
        let keep = cut.index(bytes.len() + 1);
        let _ = snapshot::decode(&bytes[..keep]);
    }
}

/// A session after a long response in mixed Chinese and English with numbers (text LZ4
/// hardly shrinks: no repeats, three bytes a character).
fn long_state() -> loopguard::engine::rules::SessionState {
    const WORDS: [&str; 12] = [
        "检查", "函数", "返回", "不是", "修改", "逻辑", "sorted", "edge", "case", "expects",
        "maybe", "the",
    ];
    let mut seed: u64 = 7;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut text = String::new();
    while text.chars().count() < 20_000 {
        let w = next();
        text.push_str(WORDS[w % WORDS.len()]);
        if w % 5 == 0 {
            text.push_str(&(next() % 100_000).to_string());
        }
        text.push(if w % 7 == 0 { '。' } else { ' ' });
    }
    let chars: Vec<char> = text.chars().collect();
    let mut lines = vec![format!(
        r#"{{"v":1,"event_id":"l-0","session_id":"long","ts":1767225600000,"type":"user_message","seq":0,"text":"explain the sorting change"}}"#
    )];
    for (i, chunk) in chars.chunks(64).enumerate() {
        let chunk: String = chunk.iter().collect();
        lines.push(format!(
            r#"{{"v":1,"event_id":"l-{n}","session_id":"long","ts":{ts},"type":"reasoning","seq":{n},"turn_id":"t1","text":{text}}}"#,
            n = i + 1,
            ts = 1767225600100 + i as i64 * 20,
            text = serde_json::to_string(&chunk).unwrap()
        ));
    }
    let mut e = engine();
    let mut out = Vec::new();
    let events: Vec<Event> = lines
        .iter()
        .map(|l| Event::decode(l.as_bytes()).expect("a valid event"))
        .collect();
    run(&mut e, &events, &mut out);
    snapshot::decode(&e.snapshot("long").unwrap()).unwrap()
}

/// A session frozen after a long response and idle for long is deflated: the same state
/// back, in well under the bytes of its LZ4 record, handed over as LZ4; short states stay
/// as they are.
#[test]
fn long_frozen_states_are_deflated_and_read_back() {
    let state = long_state();
    let lz4 = snapshot::encode(&state);
    let frozen = snapshot::deflated(&lz4).expect("a long state deflates");
    assert_eq!(snapshot::deflated(&frozen), None, "deflated once");
    assert_eq!(snapshot::for_hand_over(&frozen), lz4, "handed over as LZ4");
    assert_eq!(lz4[0], FORMAT_BINARY_LZ4);
    assert_eq!(frozen[0], FORMAT_BINARY_DEFLATE);
    let back = snapshot::decode(&frozen).expect("a frozen state decodes");
    assert_eq!(snapshot::encode(&back), lz4, "the same state");
    assert!(
        frozen.len() * 10 <= lz4.len() * 7,
        "deflated {} bytes against LZ4's {}",
        frozen.len(),
        lz4.len()
    );
    let mut truncated = frozen.clone();
    truncated.truncate(frozen.len() - 9);
    assert!(matches!(
        snapshot::decode(&truncated),
        Err(StateError::Decompress(_))
    ));
    let mut inflated_too_big = frozen.clone();
    inflated_too_big[2..6].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        snapshot::decode(&inflated_too_big),
        Err(StateError::Decompress(_))
    ));
    let mut e = engine();
    let mut out = Vec::new();
    run(&mut e, &fleet()[..400], &mut out);
    for id in e.session_ids() {
        let record = e.snapshot(&id).unwrap();
        match snapshot::deflated(&record) {
            Some(frozen) => assert_eq!(snapshot::for_hand_over(&frozen), record, "{id}"),
            None => assert!(
                record.len() < 4096,
                "{id}: only short states stay as they are"
            ),
        }
    }
}

/// A restore keeps each session frozen in the bytes it was handed (no live state, no
/// rebuilt tables) until its next event: a partition of idle sessions restores at the
/// memory its previous owner held them in, and judges the rest as before
/// (`hand_over_through` above).
#[test]
fn a_restored_session_stays_frozen_in_its_bytes_until_its_next_event() {
    let events = fleet();
    let cut = events.len() / 2;
    let mut before = engine();
    run(&mut before, &events[..cut], &mut Vec::new());
    let mut after = engine();
    let ids = before.session_ids();
    for id in &ids {
        let bytes = before.snapshot(id).unwrap();
        after.restore(id, &bytes).unwrap();
        assert_eq!(
            after.snapshot(id).unwrap(),
            bytes,
            "{id}: the bytes as handed"
        );
    }
    assert_eq!(
        after.frozen_count(),
        ids.len(),
        "every restored session frozen"
    );
    after.restore_clock(before.clock());
    let next = &events[cut];
    let mut out = Vec::new();
    after.handle_event(next.clone(), &mut out);
    assert_eq!(
        after.frozen_count(),
        ids.len() - usize::from(ids.contains(&next.meta.session_id)),
        "only the session with an event thawed"
    );
}
