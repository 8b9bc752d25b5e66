//! What loops cost (issue 18), and whether a steer worked (issue 32): the usage a session's runtime reports (`usage` on `turn_end`
//! and `assistant_message`) attributed to the loop it was spent in, from the loop's first
//! event (its first repeated call or chunk, as its rule saw it) until the loop ends: the
//! agent moves on (a whole response without another verdict of the rule), the request
//! ends, the run is aborted, the session ends. A verdict carries `loop_cost` so far. Every
//! usage report is attributed to one loop at most (the oldest open one), so "spent in
//! loops" never counts a token twice. Time is the events' own; pure and deterministic, and
//! part of the session's handed-over state.
//!
//! A loop whose first verdict was soft (warn or steer) has an outcome when it ends:
//! `worked` (the agent moved on: a whole response without another verdict of the rule),
//! `stopped` (a block or an abort came after the steer), or `unresolved` (the request or
//! session ended, or the loop was pushed out, while it was open), with the tool calls and
//! tokens it took from the steer to that end.

use super::canon::hash64;
use super::verdict::{Action, LoopCost, Rule, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Usage reports remembered per session (enough to reach back to any loop's start).
const LEDGER: usize = 64;
/// Loops open at once per session, at most (the oldest is ended first).
const OPEN: usize = 8;
/// Verdicts a session remembers for feedback on them (issue 32): the latest ones.
const JUDGEABLE: usize = 32;

/// One usage report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Entry {
    ts: i64,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    cost: Option<f64>,
    /// Already attributed to a loop.
    counted: bool,
}

/// A loop found and not ended yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenLoop {
    rule: Rule,
    since: i64,
    /// The response of its latest verdict.
    turn: Option<String>,
    /// An abort stopped the run: it ends with the response it stopped.
    aborted: bool,
    /// A block or an abort stopped it once already (what that saved is counted once).
    #[serde(default)]
    stopped: bool,
}

/// A loop that got a warn or steer, waiting for its outcome: decided at a block or abort
/// (stopped) or when its request ends (worked if the agent had moved on, else unresolved).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Steer {
    rule: Rule,
    /// The soft verdict's time.
    at: i64,
    /// Tool calls since.
    calls: u32,
    /// When the agent moved on (its loop ended), the calls and time then; cleared when the
    /// rule speaks again in the same request.
    #[serde(default)]
    moved_on: Option<(u32, i64)>,
}

/// How a steered loop ended (decided at a stop or at its request's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerOutcome {
    /// The agent moved on: a whole response without another verdict of the rule.
    Worked,
    /// A block or an abort came after the steer.
    Stopped,
    /// The request or the session ended (or the loop was pushed out) while it was open.
    Unresolved,
}

impl SteerOutcome {
    pub const ALL: [SteerOutcome; 3] = [
        SteerOutcome::Worked,
        SteerOutcome::Stopped,
        SteerOutcome::Unresolved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SteerOutcome::Worked => "worked",
            SteerOutcome::Stopped => "stopped",
            SteerOutcome::Unresolved => "unresolved",
        }
    }
}

/// Why open loops end now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    MovedOn,
    RunAborted,
    RequestEnded,
}

/// What one event moved, for the adapters (metrics, `replay --summary`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spent {
    /// A usage report, loop or not (the denominator of "share spent in loops").
    Usage { tokens: u64, cost: f64 },
    /// Usage attributed to a loop found by `rule`.
    InLoop { rule: Rule, tokens: u64, cost: f64 },
    /// A loop found by `rule` was first blocked or aborted: what that saved, as a range.
    /// `tokens`, the upper bound: had it run to its request's budget (its tokens per
    /// response so far, times the responses the budget still allowed). `at_least`: the one
    /// response the refused call would have fed had it run (its tokens per response so
    /// far; 0 when the budget allowed none).
    Saved {
        rule: Rule,
        tokens: u64,
        at_least: u64,
    },
    /// A loop found by `rule` ended after `seconds` (from its first event).
    Ended { rule: Rule, seconds: f64 },
    /// Feedback on a verdict of `rule` the session got: `useful` or not.
    Feedback { rule: Rule, useful: bool },
    /// Feedback not counted: `unknown_verdict` (not among the session's latest verdicts),
    /// `unknown_session` (no state: ended, expired, never seen), `repeat` (a verdict judged
    /// before, judged the same again) or `changed` (judged before, now judged otherwise:
    /// the first judgement stands).
    FeedbackUnmatched { reason: &'static str },
    /// A loop found by `rule` whose first verdict was soft ended so: after `calls` tool
    /// calls and `tokens` reported since that verdict.
    Steered {
        rule: Rule,
        outcome: SteerOutcome,
        calls: u32,
        tokens: u64,
    },
}

/// When a verdict came, and what its request still had.
#[derive(Debug, Clone, Copy)]
pub struct At {
    pub now: i64,
    /// Where a loop whose rule did not say began: the response's start, else the request's.
    pub default_since: i64,
    /// Responses the request's budget still allows.
    pub rounds_left: u32,
}

/// A session's usage ledger and open loops.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoopSpend {
    ledger: VecDeque<Entry>,
    open: Vec<OpenLoop>,
    /// Steered loops of the request in progress, their outcome not decided yet. The last
    /// field of the last field of `SessionState`: a layout-2 record is this layout without
    /// it (`engine::snapshot` reads one as having none).
    #[serde(default)]
    steers: Vec<Steer>,
    /// The latest verdicts (a hash of their id, their rule), for feedback on them. Also a
    /// last field: a layout-2 record has none.
    #[serde(default)]
    verdicts: VecDeque<(u64, Rule)>,
    /// The remembered verdicts already judged (the hash of their id, the first judgement's
    /// `useful`): a verdict's first judgement counts, a repeat is not counted again
    /// (docs/decisions.md (gr)). Only verdicts still among `verdicts` are kept, so at most
    /// `JUDGEABLE`. The last field of layout 4: a layout-3 record has none.
    #[serde(default)]
    judged: Vec<(u64, bool)>,
}

impl LoopSpend {
    /// The runtime reported usage at `ts`: counted, and attributed to the oldest open loop.
    pub fn on_usage(
        &mut self,
        ts: i64,
        tokens: Option<u64>,
        cost: Option<f64>,
        spent: &mut Vec<Spent>,
    ) {
        let (t, c) = (tokens.unwrap_or(0), cost.unwrap_or(0.0));
        spent.push(Spent::Usage { tokens: t, cost: c });
        if let Some(open) = self.open.first() {
            spent.push(Spent::InLoop {
                rule: open.rule,
                tokens: t,
                cost: c,
            });
        }
        self.ledger.push_back(Entry {
            ts,
            tokens,
            cost,
            counted: !self.open.is_empty(),
        });
        if self.ledger.len() > LEDGER {
            self.ledger.pop_front();
        }
    }

    /// The verdicts one event brought: each loop verdict gets its `loop_cost` (from its
    /// rule's start, else `at.default_since`), and opens or extends its loop.
    pub fn on_verdicts(&mut self, verdicts: &mut [Verdict], at: At, spent: &mut Vec<Spent>) {
        for v in verdicts.iter_mut() {
            self.verdicts
                .push_back((hash64(v.verdict_id.as_bytes()), v.rule));
            if self.verdicts.len() > JUDGEABLE {
                self.verdicts.pop_front();
            }
            let since = v
                .loop_since_ms
                .take()
                .unwrap_or(at.default_since)
                .min(at.now);
            if !v.rule.is_loop() {
                continue;
            }
            let (cost, responses) = self.cost_since(since, at.now);
            let stops = matches!(v.action, Action::Block | Action::Abort);
            let i = match self.open.iter().position(|o| o.rule == v.rule) {
                Some(i) => {
                    let open = &mut self.open[i];
                    open.since = open.since.min(since);
                    open.turn.clone_from(&v.turn_id);
                    i
                }
                None => {
                    if self.open.len() >= OPEN {
                        let oldest = self.open.remove(0);
                        self.ended(&oldest, at.now, Why::RequestEnded, spent);
                    }
                    self.open.push(OpenLoop {
                        rule: v.rule,
                        since,
                        turn: v.turn_id.clone(),
                        aborted: false,
                        stopped: false,
                    });
                    self.count_uncounted(v.rule, since, spent);
                    self.open.len() - 1
                }
            };
            let open = &mut self.open[i];
            open.aborted |= v.action == Action::Abort;
            if stops && !open.stopped {
                open.stopped = true;
                let per_response = cost.tokens.unwrap_or(0) / u64::from(responses.max(1));
                spent.push(Spent::Saved {
                    rule: v.rule,
                    tokens: per_response.saturating_mul(u64::from(at.rounds_left)),
                    at_least: if at.rounds_left > 0 { per_response } else { 0 },
                });
            }
            v.loop_cost = Some(cost);
            self.steer_verdict(v.rule, v.action, at.now, spent);
        }
    }

    /// A loop verdict's part in steer outcomes: a soft one starts (or reopens) its rule's
    /// steer; a block of the rule, or any abort, stops it.
    fn steer_verdict(&mut self, rule: Rule, action: Action, now: i64, spent: &mut Vec<Spent>) {
        match action {
            Action::Warn | Action::Steer => match self.steers.iter_mut().find(|s| s.rule == rule) {
                Some(s) => s.moved_on = None,
                None => {
                    if self.steers.len() >= OPEN {
                        let oldest = self.steers.remove(0);
                        self.decide(&oldest, SteerOutcome::Unresolved, now, spent);
                    }
                    self.steers.push(Steer {
                        rule,
                        at: now,
                        calls: 0,
                        moved_on: None,
                    });
                }
            },
            Action::Block | Action::Abort => {
                let all = action == Action::Abort;
                let (stopped, rest): (Vec<Steer>, Vec<Steer>) = std::mem::take(&mut self.steers)
                    .into_iter()
                    .partition(|s| all || s.rule == rule);
                self.steers = rest;
                for s in &stopped {
                    self.decide(s, SteerOutcome::Stopped, now, spent);
                }
            }
        }
    }

    /// Steer `s` ended so at `now`: the calls and tokens it took (to when the agent moved on,
    /// for one that worked).
    fn decide(&self, s: &Steer, outcome: SteerOutcome, now: i64, spent: &mut Vec<Spent>) {
        let (calls, until) = match (outcome, s.moved_on) {
            (SteerOutcome::Worked, Some(moved)) => moved,
            _ => (s.calls, now),
        };
        let tokens = self
            .ledger
            .iter()
            .filter(|e| e.ts >= s.at && e.ts <= until)
            .filter_map(|e| e.tokens)
            .sum();
        spent.push(Spent::Steered {
            rule: s.rule,
            outcome,
            calls,
            tokens,
        });
    }

    /// What was spent since a new loop of `rule` began and no other loop has counted.
    fn count_uncounted(&mut self, rule: Rule, since: i64, spent: &mut Vec<Spent>) {
        for e in self
            .ledger
            .iter_mut()
            .filter(|e| e.ts >= since && !e.counted)
        {
            e.counted = true;
            spent.push(Spent::InLoop {
                rule,
                tokens: e.tokens.unwrap_or(0),
                cost: e.cost.unwrap_or(0.0),
            });
        }
    }

    /// Feedback on verdict `verdict_id`: its rule when the session remembers it, the first
    /// time it is judged. A repeat judgement of the same verdict is not counted again:
    /// `repeat` when it says the same, `changed` when it says otherwise (the first stands).
    pub fn on_feedback(&mut self, verdict_id: &str, useful: bool) -> Spent {
        let h = hash64(verdict_id.as_bytes());
        let Some(&(_, rule)) = self.verdicts.iter().rev().find(|(id, _)| *id == h) else {
            return Spent::FeedbackUnmatched {
                reason: "unknown_verdict",
            };
        };
        if let Some(&(_, first)) = self.judged.iter().find(|(id, _)| *id == h) {
            return Spent::FeedbackUnmatched {
                reason: if first == useful { "repeat" } else { "changed" },
            };
        }
        // Judged verdicts no longer remembered are forgotten: their feedback is
        // `unknown_verdict` anyway.
        let remembered = &self.verdicts;
        self.judged
            .retain(|(id, _)| remembered.iter().any(|(v, _)| v == id));
        self.judged.push((h, useful));
        Spent::Feedback { rule, useful }
    }

    /// A tool call: one more for every steer waiting for its outcome.
    pub fn on_tool_call(&mut self) {
        for s in &mut self.steers {
            s.calls = s.calls.saturating_add(1);
        }
    }

    /// Response `turn` ended at `ts`, before its usage is counted: the loops whose latest
    /// verdict came in an earlier response end (the agent moved on).
    pub fn on_turn_end(&mut self, turn: &str, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, Why::MovedOn, |o| o.turn.as_deref() != Some(turn));
    }

    /// After the usage of response `turn` is counted: aborted loops end with it.
    pub fn after_turn_end(&mut self, turn: &str, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, Why::RunAborted, |o| {
            o.aborted && o.turn.as_deref() == Some(turn)
        });
    }

    /// The request or the session ended at `ts`: every open loop ends, and every steer is
    /// decided: worked when the agent had moved on from its loop, else unresolved.
    pub fn end_all(&mut self, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, Why::RequestEnded, |_| true);
        for s in std::mem::take(&mut self.steers) {
            let outcome = match s.moved_on {
                Some(_) => SteerOutcome::Worked,
                None => SteerOutcome::Unresolved,
            };
            self.decide(&s, outcome, ts, spent);
        }
    }

    fn end_where(
        &mut self,
        ts: i64,
        spent: &mut Vec<Spent>,
        why: Why,
        ends: impl Fn(&OpenLoop) -> bool,
    ) {
        let (ending, open): (Vec<OpenLoop>, Vec<OpenLoop>) = std::mem::take(&mut self.open)
            .into_iter()
            .partition(|o| ends(o));
        self.open = open;
        for o in &ending {
            self.ended(o, ts, why, spent);
        }
    }

    /// Loop `o` ended at `ts`: how long it ran; a steer of its rule notes that the agent
    /// moved on.
    fn ended(&mut self, o: &OpenLoop, ts: i64, why: Why, spent: &mut Vec<Spent>) {
        spent.push(Spent::Ended {
            rule: o.rule,
            seconds: seconds(o.since, ts),
        });
        if why == Why::MovedOn {
            if let Some(s) = self.steers.iter_mut().find(|s| s.rule == o.rule) {
                s.moved_on = Some((s.calls, ts));
            }
        }
    }

    /// What was spent from `since` to `now` (tokens and cost when the runtime reported
    /// any, seconds always), and in how many usage reports.
    fn cost_since(&self, since: i64, now: i64) -> (LoopCost, u32) {
        let mut cost = LoopCost {
            seconds: Some(seconds(since, now)),
            ..Default::default()
        };
        let mut reports = 0;
        for e in self.ledger.iter().filter(|e| e.ts >= since) {
            reports += 1;
            if let Some(t) = e.tokens {
                *cost.tokens.get_or_insert(0) += t;
            }
            if let Some(c) = e.cost {
                *cost.cost.get_or_insert(0.0) += c;
            }
        }
        // Sums of money in a fixed number of decimals: the same bytes on every replay.
        cost.cost = cost.cost.map(|c| (c * 1e6).round() / 1e6);
        (cost, reports)
    }
}

fn seconds(since: i64, now: i64) -> f64 {
    (now.saturating_sub(since).max(0) as f64) / 1000.0
}
