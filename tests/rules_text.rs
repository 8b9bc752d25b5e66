//! Reasoning, content, turn and required-tool rules, on synthetic and real text.
mod common;

use common::*;
use loopguard::engine::policy::PolicySet;
use loopguard::engine::verdict::{Action, Rule, Verdict};
use loopguard::engine::{Engine, Limits};
use serde_json::json;

const LOOP1: &str = include_str!("data/real/dsh-thinking-loop-guard/real_loop.txt");
const LOOP2: &str = include_str!("data/real/dsh-thinking-loop-guard/real_loop2.txt");
const LOOP3: &str = include_str!("data/real/dsh-thinking-loop-guard/real_loop3.txt");

fn chunks(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Streams `text` as reasoning chunks of `size` chars; returns verdicts and chunk count.
fn stream(text: &str, size: usize) -> (Vec<Verdict>, Script) {
    let mut s = Script::new("r");
    s.user("why is the benchmark slow?");
    s.new_turn();
    for c in chunks(text, size) {
        s.reasoning(&c);
    }
    s.turn_end();
    (run(&s.events), s)
}

fn key(v: &[Verdict]) -> Vec<(Rule, Action, u32, String)> {
    v.iter()
        .map(|v| (v.rule, v.action, v.attempt, v.message.clone()))
        .collect()
}

#[test]
fn deepseek_loops_are_flagged_mid_stream_in_small_chunks() {
    for (name, text) in [
        ("real_loop", LOOP1),
        ("real_loop2", LOOP2),
        ("real_loop3", LOOP3),
    ] {
        for size in [8, 13, 32] {
            let (v, s) = stream(text, size);
            assert!(!v.is_empty(), "{name} in {size}-char chunks not flagged");
            let first = &v[0];
            let at = s
                .events
                .iter()
                .position(|e| e.meta.event_id == first.event_id)
                .unwrap();
            let total = s.events.len();
            assert!(
                at < total * 9 / 10,
                "{name}: flagged at event {at} of {total}"
            );
            assert_eq!(first.action, Action::Steer);
            assert!(matches!(
                first.rule,
                Rule::ReasoningRepeat | Rule::BlockRepeat | Rule::VariantRepeat
            ));
        }
    }
}

#[test]
fn deepseek_loop1_is_flagged_where_its_second_copy_completes() {
    // real_loop.txt is one 1362-char block three times: the back-to-back repeat is visible
    // once the second copy is complete, at char 2724 (chunk 341 of 8 chars).
    let (v, s) = stream(LOOP1, 8);
    let at = s
        .events
        .iter()
        .position(|e| e.meta.event_id == v[0].event_id)
        .unwrap();
    assert_eq!(v[0].rule, Rule::ReasoningRepeat);
    assert_eq!(
        at,
        1 + (2724 - 1) / 8,
        "event index = the user message + the chunk holding char 2724"
    );
}

#[test]
fn first_block_of_real_loop_alone_is_healthy() {
    let block: String = LOOP1.chars().take(1362).collect();
    let (v, _) = stream(&block, 8);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn one_final_chunk_gets_the_same_verdicts_as_streaming() {
    for text in [LOOP1, LOOP2, LOOP3] {
        let (streamed, _) = stream(text, 8);
        let mut s = Script::new("r");
        s.user("why is the benchmark slow?");
        s.new_turn();
        s.reasoning_final(text);
        s.turn_end();
        assert_eq!(key(&run(&s.events)), key(&streamed));
    }
}

#[test]
fn escalation_ladder_steers_twice_then_gives_up() {
    let text = LOOP1.repeat(4);
    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    for c in chunks(&text, 32) {
        s.reasoning(&c);
    }
    let set = PolicySet::default();
    let mut engine = Engine::new(set, Limits::default());
    let mut v = Vec::new();
    for e in &s.events {
        engine.handle_event(e.clone(), &mut v);
    }
    let steer: Vec<_> = v
        .iter()
        .filter(|x| x.rule.as_str().starts_with("reasoning."))
        .collect();
    assert_eq!(steer.len(), 2, "{steer:#?}");
    assert_eq!(steer[0].attempt, 1);
    assert_eq!(steer[0].directives.reasoning_effort, None);
    assert_eq!(steer[1].attempt, 2);
    assert_eq!(steer[1].directives.reasoning_effort.as_deref(), Some("low"));
    assert_eq!(engine.stats().escalations_given_up, 1);
}

#[test]
fn variant_repeat_of_the_seed_example() {
    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    s.reasoning("让我想想。继续分析！");
    s.reasoning("继续分析？");
    let third = s.reasoning("继续分析。");
    let v = run(&s.events);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(
        (v[0].rule, v[0].event_id.as_str()),
        (Rule::VariantRepeat, third.as_str())
    );
}

#[test]
fn idle_reasoning_is_steered_after_sixty_seconds() {
    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(s.reasoning(&format!(
            "step {i}: considering option {} carefully. ",
            i * 7
        )));
        s.advance(10_000);
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ReasoningIdle);
    assert_eq!(hits.len(), 1, "{v:#?}");
    // Chunk 6 is 60.06 s after the first: > 60 s.
    assert_eq!(hits[0].event_id, ids[6]);
    // With visible content in between, no idle verdict.
    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    s.reasoning("thinking");
    s.content("Here is a partial answer");
    for _ in 0..8 {
        s.advance(10_000);
        s.reasoning("more thinking about a different aspect");
    }
    assert!(of_rule(&run(&s.events), Rule::ReasoningIdle).is_empty());
}

#[test]
fn overflow_and_turn_timeout() {
    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    let mut ids = Vec::new();
    for i in 0..25 {
        // 1000 distinct chars per chunk.
        let text: String = (0..100).map(|j| format!("{:09} ", i * 100 + j)).collect();
        ids.push(s.reasoning(&text));
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::ReasoningOverflow);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(
        hits[0].event_id, ids[20],
        "20 000 chars after chunk 20; > 20 000 at chunk 21"
    );

    let mut s = Script::new("r");
    s.user("q");
    s.new_turn();
    s.content("start");
    s.advance(119_000);
    s.content(" still going");
    s.advance(2_000);
    let late = s.content(" and more");
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::TurnTimeout);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].event_id, late);
}

#[test]
fn gemini_chanting_is_flagged_as_content_repeat() {
    let raw =
        std::fs::read_to_string("tests/data/real/gemini-cli/content_loop_examples.json").unwrap();
    let doc: serde_json::Value = serde_json::from_str(&raw).unwrap();
    for ex in doc["examples"].as_array().unwrap() {
        let chunk = ex["chunk"].as_str().unwrap();
        let mut s = Script::new("g");
        s.user("finish the task");
        s.new_turn();
        for _ in 0..15 {
            s.content(chunk);
        }
        let v = run(&s.events);
        let hits = of_rule(&v, Rule::ContentRepeat);
        assert!(!hits.is_empty(), "{}", ex["test"]);
        assert_eq!(hits[0].action, Action::Steer);
    }
}

#[test]
fn quoting_the_same_code_line_in_several_rounds_is_not_a_loop() {
    let line = "let total = items.iter().map(|i| i.price * i.qty).sum::<u64>();";
    let mut s = Script::new("r");
    s.user("why is the total wrong?");
    let paragraphs = [
        "First I look at how the total is computed in the cart module.",
        "Now the tests: the fixture uses quantities of zero for gift items, which matters.",
        "Finally the discount path applies after the sum, so the order is fine.",
    ];
    for (i, p) in paragraphs.iter().enumerate() {
        s.new_turn();
        for c in chunks(
            &format!(
                "{p} The line is `{line}`. Round {i} notes: checking case {}.\n",
                i * 13
            ),
            16,
        ) {
            s.reasoning(&c);
        }
        s.round(
            "read_file",
            json!({"path": format!("src/cart{i}.rs")}),
            None,
        );
    }
    let v = run(&s.events);
    assert!(reasoning_verdicts(&v).is_empty(), "{v:#?}");
}

#[test]
fn loop_split_across_responses_of_one_request_is_caught() {
    let paras: Vec<&str> = LOOP2.split("\n\n").collect();
    let mut s = Script::new("r");
    s.user("q");
    for group in paras.chunks(3) {
        s.new_turn();
        s.reasoning(&group.join("\n\n"));
        s.reasoning("\n\n");
        s.turn_end();
    }
    let v = run(&s.events);
    assert!(!reasoning_verdicts(&v).is_empty(), "{v:#?}");
}

#[test]
fn required_tool_steers_twice_then_warns_with_prefix() {
    let mut s = Script::new("p");
    s.user("<relevant-memories>用户喜欢茅台</relevant-memories><current-user-message>我有什么持仓？</current-user-message>");
    let mut ends = Vec::new();
    for _ in 0..4 {
        s.new_turn();
        s.content("根据记忆，你持有茅台。");
        ends.push(s.turn_end());
    }
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RequiredTool);
    assert_eq!(hits.len(), 3, "{v:#?}");
    assert_eq!(
        (hits[0].event_id.as_str(), hits[0].action, hits[0].attempt),
        (ends[0].as_str(), Action::Steer, 1)
    );
    assert_eq!((hits[1].action, hits[1].attempt), (Action::Steer, 2));
    assert_eq!((hits[2].action, hits[2].attempt), (Action::Warn, 3));
    assert!(hits[2].directives.prefix_warning.is_some());
    assert!(hits[0].message.contains("portfolio"));
}

#[test]
fn required_tool_is_satisfied_by_the_call_and_follow_ups_use_context() {
    let mut s = Script::new("p");
    s.user("我有什么持仓");
    s.new_turn();
    let (_, c) = s.call("portfolio", json!({"mode": "view"}));
    s.turn_end();
    s.result(&c, "portfolio", true, None, None);
    s.new_turn();
    s.assistant("代码 | 名称 | 持股\n600519 | 贵州茅台 | 100");
    s.turn_end();
    // A short follow-up with the holdings table in context requires the diagnose call.
    s.user("体检");
    s.new_turn();
    let end = s.turn_end();
    let v = run(&s.events);
    let hits = of_rule(&v, Rule::RequiredTool);
    assert_eq!(hits.len(), 1, "{v:#?}");
    assert_eq!(hits[0].event_id, end);
    assert_eq!(hits[0].evidence["intent"], "portfolio.diagnose");
    // A different session never shares the context.
    let mut other = Script::new("q");
    other.user("体检");
    other.new_turn();
    other.turn_end();
    assert!(run(&other.events).is_empty());
}
