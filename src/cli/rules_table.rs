//! `loopguard rules`: the effective rule table (rule, mode and where it was set, action,
//! threshold, seed) for the fleet or for one tenant/agent.

use crate::engine::policy::{Policy, PolicySet};
use crate::engine::verdict::{Action, Rule};

/// One row per rule: (rule, enabled, threshold text, action text, seed).
pub fn rows(p: &Policy) -> Vec<(Rule, bool, String, String, &'static str)> {
    let t = &p.tool;
    let r = &p.reasoning;
    let b = &p.budget;
    let a = |rule: Rule, default: Action| p.action(rule, default).as_str().to_string();
    Rule::ALL
        .iter()
        .map(|&rule| {
            let (threshold, action, source) = match rule {
                Rule::ExactRepeat => (
                    format!(
                        "same tool+args {}x in last {} calls (exempt: {})",
                        t.repeat_threshold,
                        t.window,
                        t.exempt_tools.join(",")
                    ),
                    a(rule, Action::Block),
                    "000",
                ),
                Rule::FuzzyRepeat => (
                    format!(
                        "args >= {} chars, 3-gram Jaccard >= {}, {}x in last {} (steer when results differ)",
                        t.fuzzy_min_chars, t.fuzzy_similarity, t.repeat_threshold, t.window
                    ),
                    a(rule, Action::Block),
                    "000, 004",
                ),
                Rule::Cycle => (
                    format!(
                        "period {}..{} repeated {}x",
                        t.cycle_min_period, t.cycle_max_period, t.cycle_repeats
                    ),
                    a(rule, Action::Steer),
                    "ours",
                ),
                Rule::ErrorRepeat => (
                    format!(
                        "same tool + same error {}x in a row or in {} responses; same tool + \
                         error in {} requests (args 1 field apart); same call failing in {} requests",
                        t.error_repeat, t.error_repeat, t.session_error_repeat, t.session_failure_repeat
                    ),
                    a(rule, Action::Steer),
                    "ours",
                ),
                Rule::RevertCycle => (
                    format!(
                        "same restore or a state seen before {}x in a request",
                        t.revert_repeat
                    ),
                    a(rule, Action::Steer),
                    "ours",
                ),
                Rule::NearDuplicate => (
                    format!(
                        "{} consecutive calls equal without volatile keys",
                        t.near_duplicate_streak
                    ),
                    a(rule, Action::Warn),
                    "004",
                ),
                Rule::NoChange => (
                    format!(
                        "no change {} rounds -> steer, {} -> abort",
                        t.no_change_steer_rounds, t.no_change_abort_rounds
                    ),
                    format!("{} then {}", a(rule, Action::Steer), a(rule, Action::Abort)),
                    "004",
                ),
                Rule::NoProgress => (
                    format!(
                        "{} rounds proven to produce nothing new",
                        p.progress.no_progress_rounds
                    ),
                    a(rule, Action::Warn),
                    "004",
                ),
                Rule::DiscoveryOnly => (
                    format!(
                        "{} rounds of read/search/list only (or {} % of a larger budget)",
                        p.progress.discovery_rounds,
                        p.progress.discovery_budget_ratio * 100.0
                    ),
                    a(rule, Action::Warn),
                    "004",
                ),
                Rule::ToolRounds => (
                    format!(
                        "> announced limits.max_tool_rounds, else {} rounds per request",
                        b.max_tool_rounds
                    ),
                    a(rule, Action::Abort),
                    "000, 004",
                ),
                Rule::NearLimit => (
                    format!("{} % of the round budget", b.near_limit_ratio * 100.0),
                    a(rule, Action::Warn),
                    "004",
                ),
                Rule::SlowConvergence => (
                    format!(
                        "> {} s, >= {} rounds, {} rounds with nothing new",
                        b.slow_after_secs, b.slow_min_rounds, b.slow_quiet_rounds
                    ),
                    a(rule, Action::Warn),
                    "004",
                ),
                Rule::CompactionChurn => (
                    format!(
                        ">= {} compactions and >= {} % of the budget, or {} in a row without a round",
                        b.churn_compactions,
                        b.churn_ratio * 100.0,
                        b.storm_compactions
                    ),
                    a(rule, Action::Warn),
                    "004, ours",
                ),
                Rule::RequiredTool => (
                    format!(
                        "{} intents; {} retries then prefix_warning",
                        p.expect.intents.len(),
                        p.expect.max_retries
                    ),
                    format!("{} then warn", a(rule, Action::Steer)),
                    "000",
                ),
                Rule::ReasoningRepeat => (
                    format!(
                        "span >= {} chars (>= {} body) back to back",
                        r.repeat_span_min, r.repeat_body_min
                    ),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::VariantRepeat => (
                    format!("same sentence {}x in a row", r.variant_count),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::BlockRepeat => (
                    format!(
                        "{}-char normalized window seen {}x",
                        r.block_repeat_min, r.block_repeat_count
                    ),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::ReasoningIdle => (
                    format!("> {} s reasoning without content", r.max_reasoning_secs),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::ReasoningOverflow => (
                    format!("> {} reasoning chars per response", r.reasoning_char_limit),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::ContentRepeat => (
                    format!(
                        "content span >= {} chars back to back (code blocks: whole block)",
                        r.content_repeat_span_min
                    ),
                    a(rule, Action::Steer),
                    "003",
                ),
                Rule::AnswerRepeat => (
                    format!("same answer {}x in a row", r.answer_repeat),
                    a(rule, Action::Steer),
                    "ours",
                ),
                Rule::TurnTimeout => (
                    format!("> {} s per response", r.max_total_secs),
                    a(rule, Action::Steer),
                    "003",
                ),
            };
            (rule, p.enabled(rule), threshold, action, source)
        })
        .collect()
}

/// The table for a (tenant, agent) (both `None`: the fleet's global policy).
pub fn render(set: &mut PolicySet, tenant: Option<&str>, agent: Option<&str>) -> String {
    let p = set.resolve(tenant, agent);
    let mut s = format!(
        "{:<26} {:<8} {:<13} {:<17} {:<9} {}\n",
        "RULE", "MODE", "MODE FROM", "ACTION", "SEED", "FIRES WHEN"
    );
    for (rule, _, threshold, action, seed) in rows(&p) {
        let (mode, from) = set.mode_of(tenant, agent, rule);
        s.push_str(&format!(
            "{:<26} {:<8} {:<13} {:<17} {:<9} {}\n",
            rule.as_str(),
            mode.as_str(),
            from.as_str(),
            action,
            seed,
            threshold
        ));
    }
    s.push_str(&format!(
        "\nreasoning/content/turn rules escalate: steer, then steer + reasoning_effort={}, give up after {} retries\n",
        p.reasoning.escalation_reasoning_effort, p.reasoning.max_retries
    ));
    s.push_str(
        "mode: enforce (the runtime acts), observe (written with enforce: false, never acted on), off (silent)\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_each_rules_mode_and_its_layer() {
        let raw = json!({
            "rules": [{"rule": "tool.cycle", "mode": "observe"}],
            "overrides": [{"tenant": "acme", "set": {"rules": [{"rule": "tool.exact_repeat", "mode": "observe"}]}}]
        });
        let mut set = PolicySet::compile(&raw).unwrap();
        let line = |text: &str, rule: &str| -> Vec<String> {
            let row = text
                .lines()
                .find(|l| l.starts_with(&format!("{rule} ")))
                .unwrap()
                .to_string();
            row.split_whitespace().take(3).map(str::to_string).collect()
        };
        let fleet = render(&mut set, None, None);
        assert_eq!(
            line(&fleet, "tool.cycle"),
            ["tool.cycle", "observe", "policy-file"]
        );
        assert_eq!(
            line(&fleet, "tool.exact_repeat"),
            ["tool.exact_repeat", "enforce", "default"]
        );
        let acme = render(&mut set, Some("acme"), None);
        assert_eq!(
            line(&acme, "tool.exact_repeat"),
            ["tool.exact_repeat", "observe", "tenant"]
        );
    }
}
