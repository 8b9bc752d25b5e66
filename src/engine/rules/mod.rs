//! Per-session state and the dispatch of one event to the rules, in a fixed order.
//! One file per rule (or per family sharing one state); this module only routes. Pure.

mod answer_repeat;
mod budget;
mod call_kind;
mod calls;
mod cycle;
mod discovery_only;
mod error_repeat;
mod error_spread;
mod escalation;
mod exact_repeat;
mod failures;
mod fresh;
mod fuzzy_repeat;
mod ignored_steer;
mod near_duplicate;
mod no_change;
mod no_progress;
mod required_tool;
mod revert_cycle;
pub mod round;
mod text_repeats;
mod tool_events;
mod turn_limits;

use super::canon::hash64;
use super::emit::Cx;
use super::event::{Body, Event};
use super::spend::{LoopSpend, Spent};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Most tool calls awaiting their result that a session remembers.
pub(super) const MAX_PENDING_CALLS: usize = 256;

/// A call waiting for its result.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    call_id: String,
    turn_id: String,
    sig: u64,
    round: u32,
    exempt: bool,
    /// Its tool is on the read/search/list list.
    named_discovery: bool,
    /// The call changes the world by its nature, and whether it restores a file.
    #[serde(default)]
    mutates: bool,
    /// Position of the call in its request.
    #[serde(default)]
    at: u64,
    #[serde(default)]
    restores: bool,
    /// Which restore it is (`CallRecord::restore_id`; 0 in states written before it).
    #[serde(default)]
    restore_key: u64,
    /// A non-shell call's arguments, for the wider error forms.
    #[serde(default)]
    digest: Option<Box<error_spread::ArgDigest>>,
    /// The file it writes whole, and what it writes there (its state after a success).
    #[serde(default)]
    whole_write: Option<(String, u64)>,
    /// Which try of the request it is (`Request::tries`).
    #[serde(default)]
    try_no: u32,
    /// Its arguments' shape (`calls::arg_shape`).
    #[serde(default)]
    shape: u64,
    /// The file a partial edit changes, and how (`call_kind::swap_edit`).
    #[serde(default)]
    swap: Option<Box<(String, u64)>>,
}

/// Everything scoped to one user request (reset by a `user_message`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Request {
    started_ms: Option<i64>,
    window: calls::CallWindow,
    pending: VecDeque<Pending>,
    open_round: Option<round::OpenRound>,
    /// Calls of the open round not (yet) shown to be discovery.
    non_discovery: u32,
    /// Calls of the open round that are not polling (exempt) calls.
    counted_calls: u32,
    reads: round::ReadLog,
    exact: exact_repeat::ExactRepeat,
    fuzzy: fuzzy_repeat::FuzzyRepeat,
    near: near_duplicate::NearDuplicate,
    cycle: cycle::Cycle,
    #[serde(default)]
    reverts: revert_cycle::RevertCycle,
    errors: error_repeat::ErrorRepeat,
    #[serde(default)]
    failures: error_repeat::SameFailures,
    #[serde(default)]
    spread: error_spread::SpreadFailures,
    no_change: no_change::NoChange,
    no_progress: no_progress::NoProgress,
    discovery: discovery_only::DiscoveryOnly,
    budget: budget::Budget,
    required: required_tool::RequiredTool,
    text: text_repeats::TextRepeats,
    /// Outputs the request's calls brought back (what is new information).
    #[serde(default)]
    seen: fresh::SeenOutputs,
    /// Tries so far: a call starts a new one when it opens a response or comes after a
    /// result (calls made together, before any of them was answered, are one try).
    #[serde(default)]
    tries: u32,
    #[serde(default)]
    answered_since_call: bool,
    /// A failure steered about and tried again (`tool.error_repeat`'s ladder).
    #[serde(default)]
    ignored: ignored_steer::IgnoredSteer,
}

/// One session's detector state: what is handed over between instances. Every field of
/// it and of the types it holds is written every time (no `skip_serializing_if`): the
/// binary encoding is positional (`engine::snapshot`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionState {
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub last_ms: i64,
    pub events: u64,
    recent_ids: VecDeque<u64>,
    context: required_tool::RecentMessages,
    /// User requests seen (numbers the requests for the session-wide rules).
    #[serde(default)]
    requests: u32,
    #[serde(default)]
    failures: error_repeat::SameFailures,
    #[serde(default)]
    spread: error_spread::SpreadFailures,
    #[serde(default)]
    answers: answer_repeat::AnswerRepeat,
    request: Request,
    turn: Option<turn_limits::Turn>,
    /// Usage reported, and the loops it is attributed to (issue 18).
    #[serde(default)]
    spend: LoopSpend,
}

/// What a session's step reports back to the engine.
#[derive(Debug, Default, Clone)]
pub struct StepReport {
    pub gave_up: u32,
    /// Usage counted and attributed to loops, loops ended.
    pub spent: Vec<Spent>,
}

/// A short, text-free summary of a session for the debug view.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub events: u64,
    pub last_ts_ms: i64,
    pub request_rounds: u32,
    pub compactions: u32,
    pub window_calls: usize,
    pub pending_calls: usize,
    pub turn_id: Option<String>,
    pub turn_reasoning_chars: usize,
    pub state_bytes: usize,
}

impl SessionState {
    pub fn new(tenant: Option<String>, agent: Option<String>) -> Self {
        SessionState {
            tenant,
            agent,
            ..Default::default()
        }
    }

    /// True when `event_id` was already seen recently (a producer retry); remembers it.
    pub fn seen_before(&mut self, event_id: &str, keep: usize) -> bool {
        let h = hash64(event_id.as_bytes());
        if self.recent_ids.contains(&h) {
            return true;
        }
        self.recent_ids.push_back(h);
        while self.recent_ids.len() > keep {
            self.recent_ids.pop_front();
        }
        false
    }

    /// Runs every rule concerned by `event`.
    pub fn step(&mut self, event: &Event, outer: &mut Cx) -> StepReport {
        if let Body::Feedback {
            verdict_id, useful, ..
        } = &event.body
        {
            // A judgement of a verdict, not agent activity: no rule, no clock, no count.
            let mut report = StepReport::default();
            report
                .spent
                .push(self.spend.on_feedback(verdict_id, *useful));
            return report;
        }
        // A tool result belongs to the response that made the call.
        let call_turn = match &event.body {
            Body::ToolResult { call_id, .. } => self
                .request
                .pending
                .iter()
                .find(|p| &p.call_id == call_id)
                .map(|p| p.turn_id.clone()),
            _ => None,
        };
        let cx = &mut Cx {
            policy: outer.policy,
            policy_version: outer.policy_version,
            meta: outer.meta,
            turn_id: call_turn.as_deref().or(outer.turn_id),
            out: &mut *outer.out,
        };
        let ts = event.meta.ts_ms;
        let mut report = StepReport::default();
        let (before, previous_ms) = (cx.out.len(), self.last_ms);
        self.last_ms = ts;
        self.events += 1;
        if let Some(id) = event.body.turn_id() {
            if self.turn.as_ref().map(|t| t.id.as_str()) != Some(id) {
                self.turn = Some(turn_limits::Turn::new(id, ts));
                self.request.text.boundary();
            }
        }
        if !matches!(event.body, Body::UserMessage { .. }) {
            self.request.started_ms.get_or_insert(ts);
        }
        match &event.body {
            Body::UserMessage { text, limits } => {
                self.spend.end_all(previous_ms, &mut report.spent);
                let required =
                    required_tool::RequiredTool::on_user_message(text, &mut self.context, cx);
                self.request = Request {
                    started_ms: Some(ts),
                    required,
                    budget: budget::Budget::announced(limits),
                    ..Default::default()
                };
                self.context.push(text, cx.policy.expect.context_messages);
                self.turn = None;
                self.requests = self.requests.wrapping_add(1);
            }
            Body::AssistantMessage { text, .. } => {
                self.context.push(text, cx.policy.expect.context_messages);
                self.answers.on_answer(text, cx);
                if let Some(turn) = self.turn.as_mut() {
                    if !turn.saw_content && !text.is_empty() {
                        turn.saw_content = true;
                        report.gave_up += self.request.text.on_content(text, &mut turn.ladder, cx);
                    }
                }
            }
            Body::ToolCall {
                turn_id,
                call_id,
                tool,
                args,
            } => {
                self.spend.on_tool_call();
                self.on_tool_call(turn_id, call_id, tool, args, cx)
            }
            Body::ToolResult { .. } => self.on_tool_result(event, cx),
            Body::Reasoning { text, .. } => {
                if let Some(turn) = self.turn.as_mut() {
                    report.gave_up += self.request.text.on_reasoning(text, &mut turn.ladder, cx);
                    report.gave_up += turn.on_reasoning(text.chars().count(), ts, cx);
                }
            }
            Body::Content { text, .. } => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.saw_content |= !text.is_empty();
                    report.gave_up += self.request.text.on_content(text, &mut turn.ladder, cx);
                }
            }
            Body::TurnEnd { turn_id, .. } => {
                let made_calls = self.turn.as_ref().is_some_and(|t| t.tool_calls > 0);
                self.request.required.on_turn_end(made_calls, cx);
                if let Some(open) = self
                    .request
                    .open_round
                    .as_mut()
                    .filter(|r| &r.turn_id == turn_id)
                {
                    open.ended = true;
                    if open.complete() {
                        self.close_round(cx);
                    }
                }
            }
            Body::Compaction => self.request.budget.on_compaction(cx),
            Body::SessionEnd | Body::Feedback { .. } | Body::Unknown { .. } => {}
        }
        if let Some(turn) = self
            .turn
            .as_mut()
            .filter(|t| event.body.turn_id() == Some(t.id.as_str()))
        {
            report.gave_up += turn.on_event(ts, cx);
        }
        if let Some(start) = self.request.started_ms {
            self.request.budget.check_slow(ts.saturating_sub(start), cx);
        }
        // What loops cost: only events that bring verdicts or usage (or end a response)
        // have anything to count; reasoning chunks pay nothing here.
        if cx.out.len() > before {
            let budget = &self.request.budget;
            let left = budget.max_rounds(cx).saturating_sub(budget.rounds as usize);
            let at = super::spend::At {
                now: ts,
                default_since: self
                    .turn
                    .as_ref()
                    .map(|t| t.first_ms)
                    .or(self.request.started_ms)
                    .unwrap_or(ts),
                rounds_left: u32::try_from(left).unwrap_or(u32::MAX),
            };
            self.spend
                .on_verdicts(&mut cx.out[before..], at, &mut report.spent);
        }
        self.count_usage(event, &mut report.spent);
        report
    }

    /// A response's end ends the loops the agent moved on from; usage is counted and
    /// attributed (`engine::spend`).
    fn count_usage(&mut self, event: &Event, spent: &mut Vec<Spent>) {
        let ts = event.meta.ts_ms;
        match &event.body {
            Body::TurnEnd { turn_id, usage } => {
                self.spend.on_turn_end(turn_id, ts, spent);
                if let Some(u) = usage {
                    self.spend.on_usage(ts, u.tokens(), u.cost, spent);
                }
                self.spend.after_turn_end(turn_id, ts, spent);
            }
            Body::AssistantMessage { usage: Some(u), .. } => {
                self.spend.on_usage(ts, u.tokens(), u.cost, spent);
            }
            _ => {}
        }
    }

    /// The session ended at `ts`: its open loops end.
    pub fn end(&mut self, ts: i64, spent: &mut Vec<Spent>) {
        self.spend.end_all(ts, spent);
    }

    /// Frees the text detectors' lookup tables (they are rebuilt from the kept text when more
    /// text comes): the engine keeps them only for its most recently active text sessions.
    pub fn compact_text(&mut self) {
        self.request.text.compact();
    }

    /// Rebuilds derived lookup tables after the state was deserialized.
    pub fn rebuild(&mut self) {
        self.request.window.rebuild();
        // The text detectors rebuild their tables lazily, at the next chunk.
        self.request.text.compact();
    }

    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            events: self.events,
            last_ts_ms: self.last_ms,
            request_rounds: self.request.budget.rounds,
            compactions: self.request.budget.compactions,
            window_calls: self.request.window.calls.len(),
            pending_calls: self.request.pending.len(),
            turn_id: self.turn.as_ref().map(|t| t.id.clone()),
            turn_reasoning_chars: self.turn.as_ref().map_or(0, |t| t.reasoning_chars),
            state_bytes: self.heap_bytes(),
        }
    }

    /// Approximate heap bytes held (for capacity planning; not exact).
    pub fn heap_bytes(&self) -> usize {
        let strings = |s: &Option<String>| s.as_ref().map_or(0, |s| s.capacity());
        let window: usize = self
            .request
            .window
            .calls
            .iter()
            .map(|c| {
                160 + c.fields.as_ref().map_or(0, |f| {
                    f.iter().map(|x| 24 + x.grams.capacity() * 8).sum::<usize>()
                })
            })
            .sum();
        std::mem::size_of::<SessionState>()
            + strings(&self.tenant)
            + strings(&self.agent)
            + strings(&self.model)
            + self.recent_ids.capacity() * 8
            + window
            + self.request.pending.capacity() * std::mem::size_of::<Pending>()
            + self.request.text.heap_bytes()
            + self.request.seen.heap_bytes()
            + self.context_bytes()
    }

    fn context_bytes(&self) -> usize {
        self.context.heap_bytes()
    }
}
