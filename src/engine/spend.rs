//! What loops cost (issue 18): the usage a session's runtime reports (`usage` on `turn_end`
//! and `assistant_message`) attributed to the loop it was spent in, from the loop's first
//! event (its first repeated call or chunk, as its rule saw it) until the loop ends: the
//! agent moves on (a whole response without another verdict of the rule), the request
//! ends, the run is aborted, the session ends. A verdict carries `loop_cost` so far. Every
//! usage report is attributed to one loop at most (the oldest open one), so "spent in
//! loops" never counts a token twice. Time is the events' own; pure and deterministic, and
//! part of the session's handed-over state.

use super::verdict::{Action, LoopCost, Rule, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Usage reports remembered per session (enough to reach back to any loop's start).
const LEDGER: usize = 64;
/// Loops open at once per session, at most (the oldest is ended first).
const OPEN: usize = 8;

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
                        spent.push(ended(&oldest, at.now));
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
        }
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

    /// Response `turn` ended at `ts`, before its usage is counted: the loops whose latest
    /// verdict came in an earlier response end (the agent moved on).
    pub fn on_turn_end(&mut self, turn: &str, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, |o| o.turn.as_deref() != Some(turn));
    }

    /// After the usage of response `turn` is counted: aborted loops end with it.
    pub fn after_turn_end(&mut self, turn: &str, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, |o| o.aborted && o.turn.as_deref() == Some(turn));
    }

    /// The request or the session ended at `ts`: every open loop ends.
    pub fn end_all(&mut self, ts: i64, spent: &mut Vec<Spent>) {
        self.end_where(ts, spent, |_| true);
    }

    fn end_where(&mut self, ts: i64, spent: &mut Vec<Spent>, ends: impl Fn(&OpenLoop) -> bool) {
        self.open.retain(|o| {
            let end = ends(o);
            if end {
                spent.push(ended(o, ts));
            }
            !end
        });
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

fn ended(o: &OpenLoop, ts: i64) -> Spent {
    Spent::Ended {
        rule: o.rule,
        seconds: seconds(o.since, ts),
    }
}
