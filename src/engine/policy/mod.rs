//! Thresholds and actions for every rule, with the seeds' defaults, overridable globally,
//! per tenant and per agent. Validated once into typed values; resolved per (tenant, agent).

use super::intents::{default_intents, Intent};
use super::verdict::{Action, Rule};
pub use mode::{Mode, ModeSource};
use serde::{Deserialize, Serialize};

/// Tool-call repeat rules (seed 000, seed 004, ours).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolPolicy {
    /// Calls kept for the repeat rules (000: DOOM_LOOP_WINDOW).
    pub window: usize,
    /// Identical or similar calls in the window that count as a loop (000: DOOM_LOOP_THRESHOLD).
    pub repeat_threshold: usize,
    /// Serialized-args length from which fuzzy matching applies (000).
    pub fuzzy_min_chars: usize,
    /// 3-gram Jaccard similarity for "similar" (000).
    pub fuzzy_similarity: f64,
    /// Polling tools that never count for repeat rules (000: DOOM_LOOP_EXEMPT).
    pub exempt_tools: Vec<String>,
    /// Keys whose values make two calls different work (ours).
    pub identity_keys: Vec<String>,
    /// Keys dropped before near-duplicate comparison (004).
    pub volatile_keys: Vec<String>,
    /// Consecutive near-identical calls before the one-time warning (004).
    pub near_duplicate_streak: usize,
    pub cycle_min_period: usize,
    pub cycle_max_period: usize,
    pub cycle_repeats: usize,
    /// Identical failures in a row (ours).
    pub error_repeat: usize,
    /// The same call failing with the same error this many times in a session, across its
    /// requests (ours: a refused action retried each time the user says "try again").
    pub session_error_repeat: usize,
    /// The same call failing this many times in a session, one per request, whatever its
    /// error text says (ours, CONTRACT.md: "not found", then "still not found").
    pub session_failure_repeat: usize,
    /// The same restore (a file put back from a copy, or back to a state seen before) this
    /// many times in a request (ours: edit / test / revert cycles).
    pub revert_repeat: usize,
    /// Command-line tools whose command text is parsed for the files it writes and runs.
    pub shell_tools: Vec<String>,
    /// Tools that change the world by their nature (used when a result carries no effect).
    pub mutation_tools: Vec<String>,
    /// A tool whose name starts with one of these verbs (`cancel_order`, `updateUser`,
    /// `book-flight`) changes the world too (used when a result carries no effect).
    pub mutation_verbs: Vec<String>,
    /// A tool (or a tool's sub-command) whose name starts with one of these verbs moves the
    /// agent somewhere (`click`, `go_back`, `scroll_down`): going back to a page after
    /// finding something new elsewhere is navigation, not a repeat (ours, issue 20).
    pub navigation_verbs: Vec<String>,
    /// Rounds of proven no-change before the steer (004: LOOP_WARN).
    pub no_change_steer_rounds: usize,
    /// Rounds of proven no-change before the abort (004: LOOP_HARD = LOOP_WARN + 2).
    pub no_change_abort_rounds: usize,
}

impl ToolPolicy {
    /// `tool` runs command lines (`tool.shell_tools`, compared without case: Claude Code's
    /// `Bash` is `bash`).
    pub fn is_shell(&self, tool: &str) -> bool {
        self.shell_tools
            .iter()
            .any(|t| t.eq_ignore_ascii_case(tool))
    }
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            window: 6,
            repeat_threshold: 3,
            fuzzy_min_chars: 50,
            fuzzy_similarity: 0.8,
            exempt_tools: vec!["check_background_tasks".into()],
            identity_keys: strings(&[
                "path",
                "file",
                "file_path",
                "filename",
                "url",
                "uri",
                "id",
                "page",
                "offset",
                "cursor",
                "line",
                "start",
                "end",
                "start_line",
                "end_line",
                "range",
                "view_range",
                "line_range",
                "insert_line",
                "index",
                "name",
                "function",
                "function_name",
                "symbol",
            ]),
            volatile_keys: strings(&[
                "request_id",
                "trace_id",
                "span_id",
                "nonce",
                "timestamp",
                "ts",
                "created_at",
                "updated_at",
                "idempotency_key",
                "client_request_id",
            ]),
            near_duplicate_streak: 6,
            cycle_min_period: 2,
            cycle_max_period: 5,
            cycle_repeats: 3,
            error_repeat: 3,
            session_error_repeat: 3,
            session_failure_repeat: 4,
            revert_repeat: 3,
            shell_tools: strings(&[
                "bash",
                "sh",
                "shell",
                "zsh",
                "run",
                "execute",
                "execute_bash",
                "execute_command",
                "run_command",
                "run_shell_command",
                "run_terminal_cmd",
                "terminal",
                "exec",
                "cmd",
            ]),
            mutation_tools: strings(&[
                "edit",
                "edit_file",
                "write",
                "write_file",
                "create",
                "create_file",
                "str_replace",
                "insert",
                "apply_patch",
                "patch",
                "delete_file",
                "move_file",
                "rename_file",
                "multi_edit",
            ]),
            mutation_verbs: strings(&[
                "add", "apply", "book", "cancel", "charge", "create", "delete", "edit", "exchange",
                "grant", "insert", "install", "modify", "move", "patch", "pay", "post", "put",
                "refund", "remove", "rename", "replace", "reset", "return", "send", "set",
                "transfer", "undo", "update", "upsert", "write",
            ]),
            navigation_verbs: strings(&[
                "click", "navigate", "goto", "go", "back", "forward", "scroll", "visit", "browse",
                "follow", "next", "prev", "previous", "press", "tap", "hover",
            ]),
            no_change_steer_rounds: 3,
            no_change_abort_rounds: 5,
        }
    }
}

/// The progress governor (seed 004).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressPolicy {
    /// Consecutive rounds proven to produce nothing new (004: RUN_NO_PROGRESS_NUDGE_ROUNDS).
    pub no_progress_rounds: usize,
    /// Consecutive read/search/list-only rounds (004: RUN_DISCOVERY_NUDGE_ROUNDS).
    pub discovery_rounds: usize,
    /// With a large round budget, the streak must also reach this share of it (ours: 8
    /// rounds is half of a 15-round runtime, 3 % of the fleet default; see docs/decisions.md).
    pub discovery_budget_ratio: f64,
    /// Tools that only read, search or list (004: DISCOVERY_ONLY_TOOLS). A result whose
    /// evidence says `effect: read` counts as discovery whatever its tool.
    pub discovery_tools: Vec<String>,
}

impl Default for ProgressPolicy {
    fn default() -> Self {
        ProgressPolicy {
            no_progress_rounds: 2,
            discovery_rounds: 8,
            discovery_budget_ratio: 0.1,
            discovery_tools: strings(&[
                "read",
                "read_file",
                "view",
                "cat",
                "open",
                "grep",
                "search",
                "search_files",
                "find",
                "glob",
                "ls",
                "list",
                "list_dir",
                "list_files",
                "web_search",
                "fetch",
                "browse",
            ]),
        }
    }
}

/// Budgets and the three convergence signals (seeds 000 and 004).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetPolicy {
    /// Model-tool rounds per user request when the runtime announces none (fleet default
    /// 250: seed 000's MAX_TOOL_ROUNDS = 15 is its own runtime's limit, see docs/decisions.md).
    pub max_tool_rounds: usize,
    pub near_limit_ratio: f64,
    pub slow_after_secs: u64,
    pub slow_min_rounds: usize,
    /// Rounds without new information that make "no new information recently" (ours).
    pub slow_quiet_rounds: usize,
    pub churn_compactions: usize,
    pub churn_ratio: f64,
    /// Compactions in a row with no tool round between them: a compaction storm (ours,
    /// after OpenHands' condensation-loop check).
    pub storm_compactions: usize,
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        BudgetPolicy {
            max_tool_rounds: 250,
            near_limit_ratio: 0.8,
            slow_after_secs: 480,
            slow_min_rounds: 8,
            slow_quiet_rounds: 3,
            churn_compactions: 2,
            churn_ratio: 0.75,
            storm_compactions: 3,
        }
    }
}

/// Reasoning, content and turn rules (seed 003).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReasoningPolicy {
    pub repeat_span_min: usize,
    /// Chars left in the repeated span once punctuation and spaces are stripped.
    pub repeat_body_min: usize,
    pub variant_count: usize,
    /// Shortest sentence (alphanumeric chars) that counts for variant repeats (ours).
    pub variant_min_chars: usize,
    pub block_repeat_min: usize,
    pub block_repeat_count: usize,
    pub max_reasoning_secs: u64,
    pub reasoning_char_limit: usize,
    pub content_repeat_span_min: usize,
    /// Identical assistant answers in a row, any length (ours, after OpenHands).
    pub answer_repeat: usize,
    pub max_total_secs: u64,
    pub max_retries: u32,
    /// Chars of the request's text kept for the repetition rules (ours; bounds memory).
    pub tail_chars: usize,
    pub intervention: String,
    pub escalation: String,
    pub escalation_reasoning_effort: String,
}

impl Default for ReasoningPolicy {
    fn default() -> Self {
        ReasoningPolicy {
            repeat_span_min: 24,
            repeat_body_min: 5,
            variant_count: 3,
            variant_min_chars: 4,
            block_repeat_min: 100,
            block_repeat_count: 3,
            max_reasoning_secs: 60,
            reasoning_char_limit: 20_000,
            content_repeat_span_min: 100,
            answer_repeat: 3,
            max_total_secs: 120,
            max_retries: 2,
            tail_chars: 8192,
            intervention: "Loop guard: stop this line of reasoning and give your final answer directly.".into(),
            escalation: "You are still repeating yourself. Stop reasoning in circles now: state what you know and answer."
                .into(),
            escalation_reasoning_effort: "low".into(),
        }
    }
}

/// Required-tool expectation (seed 000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpectPolicy {
    /// Retries before giving up (000: MAX_INCOMPLETE_TOOL_RETRIES).
    pub max_retries: u32,
    /// Messages before the current one searched for context (000: limit=4).
    pub context_messages: usize,
    pub intents: Vec<Intent>,
}

impl Default for ExpectPolicy {
    fn default() -> Self {
        ExpectPolicy {
            max_retries: 2,
            context_messages: 4,
            intents: default_intents(),
        }
    }
}

/// Automatic demotion (issue 32): a rule whose verdicts people judge wrong is put in
/// observe mode for the tenant and agent concerned, by a policy version the guard
/// publishes itself (promotion back stays a person's decision). Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemotionPolicy {
    /// Demote a rule whose precision (judged useful / judged) falls below this; 0: never.
    pub below: f64,
    /// ... once at least this many of its verdicts were judged.
    pub min_judgements: u32,
    /// Over the latest this many judgements per rule, tenant and agent (on one instance).
    pub window: u32,
}

impl Default for DemotionPolicy {
    fn default() -> Self {
        DemotionPolicy {
            below: 0.0,
            min_judgements: 20,
            window: 50,
        }
    }
}

impl DemotionPolicy {
    /// Never demotes: left out of the policy's serialized form, so a policy without it
    /// keeps its version.
    pub fn is_off(&self) -> bool {
        self.below <= 0.0
    }
}

/// An operator's change to one rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSetting {
    pub rule: String,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub action: Option<Action>,
    /// `enforce`, `observe` or `off` (`enabled = false` is `off`, `enabled = true` is
    /// `enforce`; both in one entry must agree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

impl RuleSetting {
    /// The mode this entry sets, if any; an error when `enabled` and `mode` disagree.
    fn mode(&self) -> Result<Option<Mode>, String> {
        let from_enabled = self
            .enabled
            .map(|on| if on { Mode::Enforce } else { Mode::Off });
        match (from_enabled, self.mode) {
            (Some(Mode::Off), Some(m)) if m != Mode::Off => Err(format!(
                "`enabled = false` and `mode = \"{}\"` disagree",
                m.as_str()
            )),
            (Some(Mode::Enforce), Some(Mode::Off)) => {
                Err("`enabled = true` and `mode = \"off\"` disagree".into())
            }
            (_, Some(m)) => Ok(Some(m)),
            (e, None) => Ok(e),
        }
    }
}

/// The full policy for one (tenant, agent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    pub tool: ToolPolicy,
    pub progress: ProgressPolicy,
    pub budget: BudgetPolicy,
    pub reasoning: ReasoningPolicy,
    pub expect: ExpectPolicy,
    pub rules: Vec<RuleSetting>,
    /// The ceiling on every rule's mode: `observe` puts the whole policy (a tenant's, an
    /// agent's, the fleet's) in observe mode, whatever its rules say (decision (ba)).
    #[serde(skip_serializing_if = "Mode::is_enforce")]
    pub mode: Mode,
    #[serde(skip_serializing_if = "DemotionPolicy::is_off")]
    pub demotion: DemotionPolicy,
    #[serde(skip)]
    switches: RuleSwitches,
}

#[derive(Debug, Clone, PartialEq)]
struct RuleSwitches {
    /// Each rule's own mode (before the policy-wide ceiling).
    mode: [Mode; Rule::ALL.len()],
    action: [Option<Action>; Rule::ALL.len()],
}

impl Default for RuleSwitches {
    fn default() -> Self {
        RuleSwitches {
            mode: [Mode::Enforce; Rule::ALL.len()],
            action: [None; Rule::ALL.len()],
        }
    }
}

impl Policy {
    /// False for a rule in mode `off`: it emits nothing (rules skip their work for it).
    pub fn enabled(&self, rule: Rule) -> bool {
        self.mode(rule) != Mode::Off
    }

    /// The rule's effective mode: its own, under the policy-wide ceiling.
    pub fn mode(&self, rule: Rule) -> Mode {
        self.switches.mode[rule.index()].under(self.mode)
    }

    /// The action to emit: the operator's override, else the rule's own.
    pub fn action(&self, rule: Rule, default: Action) -> Action {
        self.switches.action[rule.index()].unwrap_or(default)
    }

    /// Checks values and compiles the rule switches; lists every problem.
    fn finish(mut self, problems: &mut Vec<String>, at: &str) -> Policy {
        let mut p = |ok: bool, msg: &str| {
            if !ok {
                problems.push(format!("{at}: {msg}"));
            }
        };
        let t = &self.tool;
        p(t.window >= 1, "tool.window must be >= 1");
        p(
            t.repeat_threshold >= 2 && t.repeat_threshold <= t.window,
            "tool.repeat_threshold must be in 2..=tool.window",
        );
        p(
            t.fuzzy_similarity > 0.0 && t.fuzzy_similarity <= 1.0,
            "tool.fuzzy_similarity must be in (0, 1]",
        );
        p(
            t.near_duplicate_streak >= 2,
            "tool.near_duplicate_streak must be >= 2",
        );
        p(
            t.cycle_min_period >= 2 && t.cycle_min_period <= t.cycle_max_period,
            "tool.cycle_min_period must be in 2..=cycle_max_period",
        );
        p(
            t.cycle_max_period <= 16,
            "tool.cycle_max_period must be <= 16",
        );
        p(t.cycle_repeats >= 2, "tool.cycle_repeats must be >= 2");
        p(t.error_repeat >= 2, "tool.error_repeat must be >= 2");
        p(
            t.session_error_repeat >= 2,
            "tool.session_error_repeat must be >= 2",
        );
        p(
            t.session_failure_repeat >= 2,
            "tool.session_failure_repeat must be >= 2",
        );
        p(t.revert_repeat >= 2, "tool.revert_repeat must be >= 2");
        p(
            t.no_change_steer_rounds >= 1 && t.no_change_abort_rounds > t.no_change_steer_rounds,
            "tool.no_change_abort_rounds must exceed no_change_steer_rounds >= 1",
        );
        p(
            self.progress.no_progress_rounds >= 1,
            "progress.no_progress_rounds must be >= 1",
        );
        p(
            self.progress.discovery_rounds >= 1,
            "progress.discovery_rounds must be >= 1",
        );
        p(
            (0.0..=1.0).contains(&self.progress.discovery_budget_ratio),
            "progress.discovery_budget_ratio must be in [0, 1]",
        );
        let b = &self.budget;
        p(
            b.max_tool_rounds >= 1,
            "budget.max_tool_rounds must be >= 1",
        );
        p(
            b.near_limit_ratio > 0.0 && b.near_limit_ratio <= 1.0,
            "budget.near_limit_ratio must be in (0, 1]",
        );
        p(
            b.churn_ratio > 0.0 && b.churn_ratio <= 1.0,
            "budget.churn_ratio must be in (0, 1]",
        );
        p(
            b.slow_quiet_rounds >= 1,
            "budget.slow_quiet_rounds must be >= 1",
        );
        p(
            b.storm_compactions >= 2,
            "budget.storm_compactions must be >= 2",
        );
        let r = &self.reasoning;
        p(
            r.repeat_span_min >= 4,
            "reasoning.repeat_span_min must be >= 4",
        );
        p(
            r.content_repeat_span_min >= 4,
            "reasoning.content_repeat_span_min must be >= 4",
        );
        p(
            r.block_repeat_min >= 8,
            "reasoning.block_repeat_min must be >= 8",
        );
        p(
            r.block_repeat_count >= 2,
            "reasoning.block_repeat_count must be >= 2",
        );
        p(r.variant_count >= 2, "reasoning.variant_count must be >= 2");
        p(r.answer_repeat >= 2, "reasoning.answer_repeat must be >= 2");
        let longest = r
            .repeat_span_min
            .max(r.content_repeat_span_min)
            .max(r.block_repeat_min);
        p(
            r.tail_chars >= 4 * longest && r.tail_chars <= 1 << 20,
            "reasoning.tail_chars must be in 4*longest span..=1048576",
        );
        p(
            self.expect.context_messages <= 64,
            "expect.context_messages must be <= 64",
        );
        let d = &self.demotion;
        p(
            (0.0..=1.0).contains(&d.below),
            "demotion.below must be in 0..=1 (a precision; 0: never)",
        );
        p(
            d.min_judgements >= 1 && d.window >= d.min_judgements && d.window <= 10_000,
            "demotion.min_judgements must be >= 1 and <= demotion.window <= 10000",
        );
        for (i, intent) in self.expect.intents.iter().enumerate() {
            if let Err(e) = intent.check() {
                problems.push(format!("{at}: expect.intents[{i}]: {e}"));
            }
        }
        let mut switches = RuleSwitches::default();
        for s in &self.rules {
            match Rule::from_name(&s.rule) {
                Some(rule) => {
                    match s.mode() {
                        Ok(Some(m)) => switches.mode[rule.index()] = m,
                        Ok(None) => {}
                        Err(e) => problems.push(format!("{at}: rules: `{}`: {e}", s.rule)),
                    }
                    if s.action.is_some() {
                        switches.action[rule.index()] = s.action;
                    }
                }
                None => problems.push(format!("{at}: rules: unknown rule `{}`", s.rule)),
            }
        }
        self.switches = switches;
        self
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

pub mod every_problem;
mod mode;
mod set;
pub use set::{Override, PolicySet};

#[cfg(test)]
mod tests;
