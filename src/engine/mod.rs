//! The detection engine: a pure, deterministic state machine. Events in, verdicts out; time
//! comes from the events (`ts`). It contains no IO, no clock, no threads, no Kafka, no HTTP,
//! no metrics registry: the service, `loopguard replay`, tests and benchmarks all drive
//! this same code and get the same verdicts in the same order.

pub mod canon;
pub mod emit;
pub mod event;
pub mod intents;
pub mod policy;
#[cfg(test)]
mod real_traces;
pub mod rules;
pub mod shell;
pub mod shell_words;
mod slot;
pub mod snapshot;
pub mod spend;
pub mod stats;
pub mod text;
pub mod verdict;

use event::{Body, Event, EVENT_TYPES};
use policy::PolicySet;
use rules::{SessionState, SessionSummary};
use slot::Slot;
pub use stats::EngineStats;
use std::collections::{BTreeSet, HashMap, VecDeque};
use verdict::Verdict;

/// Bounds on what the engine keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A session idle this long (event time) is forgotten.
    pub session_ttl_ms: i64,
    /// Sessions kept at most; the least recently active go first.
    pub max_sessions: usize,
    /// Text of one event is cut to this many bytes (on a char boundary).
    pub max_text_bytes: usize,
    /// Recent event ids remembered per session to drop producer retries.
    pub dedup_ids: usize,
    /// Sessions whose text detectors keep their lookup tables between responses (the most
    /// recently active ones); the others free them when a response ends, keep only their
    /// text, and rebuild the tables from it when they stream again.
    pub hot_text_sessions: usize,
    /// A session with no event for this long (event time) is kept frozen, in the binary
    /// hand-over encoding, until its next event; looked at when the engine sweeps (once a
    /// minute of event time). `i64::MAX` never freezes.
    pub freeze_idle_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            session_ttl_ms: 3_600_000,
            max_sessions: 100_000,
            max_text_bytes: 256 * 1024,
            dedup_ids: 64,
            hot_text_sessions: 64,
            freeze_idle_ms: 60_000,
        }
    }
}

/// What happened to one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    Processed,
    Duplicate,
    UnknownType,
    SessionEnded,
}

/// The engine for one set of sessions (the service runs one per partition).
pub struct Engine {
    policies: PolicySet,
    limits: Limits,
    /// Keyed with xxh3 (fixed seed): fast, and nothing depends on the iteration order.
    /// A slot is a few words (its live state is boxed): when the table grows, it moves
    /// those, not ~900 bytes a session (a growth at 3,000 sessions stalled the event that
    /// caused it ~1.5 ms; at 100,000 it would be ~50 ms).
    sessions: HashMap<String, Slot, xxhash_rust::xxh3::Xxh3DefaultBuilder>,
    watermark: i64,
    last_sweep: i64,
    stats: EngineStats,
    changes: Option<Changes>,
    /// Sessions that streamed text most recently, oldest first (at most
    /// `limits.hot_text_sessions`), by the hash of their id: they keep their text lookup
    /// tables. (Two ids with one hash would both count as hot: a cost, never a verdict.)
    hot_text: VecDeque<u64>,
    /// Usage counted and attributed to loops since the last `take_spending`, when asked for.
    spending: Option<Vec<Spending>>,
}

/// What one session's events moved in the loop accounting, with who it was (adapters
/// label metrics with it under their allow-lists).
#[derive(Debug, Clone, PartialEq)]
pub struct Spending {
    pub spent: spend::Spent,
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
}

/// `spent` with the labels of the session it was spent in.
fn labelled(state: &SessionState, spent: Vec<spend::Spent>) -> impl Iterator<Item = Spending> + '_ {
    spent.into_iter().map(|spent| Spending {
        spent,
        tenant: state.tenant.clone(),
        agent: state.agent.clone(),
        model: state.model.clone(),
    })
}

/// Sessions touched or removed since the last `take_changes` (for state hand-over).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Changes {
    pub touched: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

const SWEEP_EVERY_MS: i64 = 60_000;
/// A frozen session idle this many times `freeze_idle_ms` (10 minutes by default) is
/// deflated if long: the sessions that stay away are the ones an instance holds by the
/// million, and they pay the deflate once (docs/decisions.md (ce)).
const DEFLATE_AFTER_FREEZE_IDLE: i64 = 10;

/// The engine's own event-time clock: what decides when idle sessions are swept. Handed
/// over with the sessions, so a restored engine sweeps exactly when its predecessor would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Clock {
    pub watermark: i64,
    pub last_sweep: i64,
}

impl Engine {
    pub fn new(policies: PolicySet, limits: Limits) -> Self {
        Engine {
            policies,
            limits,
            sessions: HashMap::default(),
            watermark: i64::MIN,
            last_sweep: i64::MIN,
            stats: EngineStats::default(),
            changes: None,
            hot_text: VecDeque::new(),
            spending: None,
        }
    }

    /// Starts recording what loops cost (`take_spending`); the service and `replay
    /// --summary` ask for it, others do not pay for it.
    pub fn track_spending(mut self) -> Self {
        self.spending = Some(Vec::new());
        self
    }

    /// Ends every open loop at the latest event time seen (a recording is over: `replay
    /// --summary` counts them as ended there), in session order.
    pub fn end_open_loops(&mut self) {
        let Some(out) = self.spending.as_mut() else {
            return;
        };
        let mut ids: Vec<&String> = self.sessions.keys().collect();
        ids.sort();
        let ids: Vec<String> = ids.into_iter().cloned().collect();
        for id in ids {
            let (_, state) = self.sessions.get_mut(&id).expect("listed above").thaw();
            let mut spent = Vec::new();
            state.end(self.watermark, &mut spent);
            out.extend(labelled(state, spent));
        }
    }

    /// Usage counted and attributed to loops since the last call, in event order.
    pub fn take_spending(&mut self) -> Vec<Spending> {
        self.spending
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Puts `policies` in force from the next event on (a live policy change, applied at a
    /// point the caller records): every held session keeps its state and is judged by its
    /// (tenant, agent)'s policy of the new set; verdicts carry the new version.
    pub fn set_policies(&mut self, policies: PolicySet) {
        self.policies = policies;
        for slot in self.sessions.values_mut() {
            // A frozen session is resolved when it thaws (its tenant and agent are in its
            // encoded state): a switch does not decode every idle session.
            match slot.live() {
                Some(s) => {
                    let policy = self
                        .policies
                        .resolve(s.tenant.as_deref(), s.agent.as_deref());
                    slot.policy = policy;
                }
                None => slot.policy_stale = true,
            }
        }
    }

    /// The version of the policy set in force (what verdicts carry as `policy_version`).
    pub fn policy_version(&self) -> &str {
        self.policies.version()
    }

    /// Starts recording which sessions change (the service needs it; replay does not).
    pub fn track_changes(mut self) -> Self {
        self.changes = Some(Changes::default());
        self
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats;
        s.sessions_active = self.sessions.len() as u64;
        s
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Sessions kept frozen (idle; a walk over every session: for tests and benchmarks).
    pub fn frozen_count(&self) -> usize {
        self.sessions.values().filter(|s| s.is_frozen()).count()
    }

    /// Handles one event, appending its verdicts to `out` in a fixed order.
    pub fn handle_event(&mut self, mut event: Event, out: &mut Vec<Verdict>) -> Handled {
        if let Body::Unknown { .. } = event.body {
            self.stats.unknown_types += 1;
            return Handled::UnknownType;
        }
        self.truncate(&mut event);
        let ts = event.meta.ts_ms;
        self.watermark = self.watermark.max(ts);
        let kind = EVENT_TYPES
            .iter()
            .position(|t| *t == event.body.kind())
            .unwrap_or(0);
        let id = event.meta.session_id.as_str();
        if let Body::SessionEnd = event.body {
            self.stats.events_by_type[kind] += 1;
            if let Some(mut slot) = self.sessions.remove(id) {
                self.stats.sessions_ended += 1;
                self.note_removed(id);
                if let Some(out) = self.spending.as_mut() {
                    let (_, state) = slot.thaw();
                    let mut spent = Vec::new();
                    state.end(ts, &mut spent);
                    out.extend(labelled(state, spent));
                }
            }
            return Handled::SessionEnded;
        }
        let ttl = self.limits.session_ttl_ms;
        let known = match self.sessions.get(id) {
            Some(slot) if ts.saturating_sub(slot.last_ms()) > ttl => {
                self.sessions.remove(id);
                self.stats.evicted_ttl += 1;
                false
            }
            Some(_) => true,
            None => false,
        };
        if let (false, Body::Feedback { .. }) = (known, &event.body) {
            // Feedback makes no session: it is counted as not matched.
            self.stats.events_by_type[kind] += 1;
            if let Some(out) = self.spending.as_mut() {
                out.push(Spending {
                    spent: spend::Spent::FeedbackUnmatched {
                        reason: "unknown_session",
                    },
                    tenant: event.meta.tenant.clone(),
                    agent: event.meta.agent.clone(),
                    model: event.meta.model.clone(),
                });
            }
            return Handled::Processed;
        }
        if !known {
            let m = &event.meta;
            let policy = self
                .policies
                .resolve(m.tenant.as_deref(), m.agent.as_deref());
            let state = SessionState::new(m.tenant.clone(), m.agent.clone());
            self.sessions
                .insert(id.to_string(), Slot::new(state, policy));
        }
        let slot = self.sessions.get_mut(id).expect("inserted above");
        if slot.policy_stale {
            let (_, s) = slot.thaw();
            let policy = self
                .policies
                .resolve(s.tenant.as_deref(), s.agent.as_deref());
            slot.policy = policy;
            slot.policy_stale = false;
        }
        let (policy, state) = slot.thaw();
        if state.seen_before(&event.meta.event_id, self.limits.dedup_ids) {
            self.stats.duplicates += 1;
            return Handled::Duplicate;
        }
        self.stats.events_by_type[kind] += 1;
        if event.meta.model.is_some() {
            state.model = event.meta.model.clone();
        }
        let before = out.len();
        let mut cx = emit::Cx {
            policy,
            policy_version: self.policies.version(),
            meta: &event.meta,
            turn_id: event.body.turn_id(),
            out,
        };
        let report = state.step(&event, &mut cx);
        self.stats.escalations_given_up += u64::from(report.gave_up);
        if let Some(out) = self.spending.as_mut().filter(|_| !report.spent.is_empty()) {
            out.extend(labelled(state, report.spent));
        }
        for v in &out[before..] {
            self.stats.verdicts[v.rule.index()][v.action.index()] += 1;
        }
        if let Some(c) = self.changes.as_mut() {
            // Most events are of a session already touched in the batch: no id copy then.
            if !c.touched.contains(&event.meta.session_id) {
                c.touched.insert(event.meta.session_id.clone());
            }
        }
        if event.body.carries_text() {
            self.keep_hot(&event.meta.session_id);
        } else if let Body::TurnEnd { .. } = event.body {
            self.cool_down(&event.meta.session_id);
        }
        self.maintain();
        Handled::Processed
    }

    /// `id` streamed text: it becomes the most recent hot session, and the least recent one
    /// beyond the bound leaves the set (its tables are freed at its next response end).
    /// Depends only on the order of events: deterministic.
    fn keep_hot(&mut self, id: &str) {
        let h = canon::hash64(id.as_bytes());
        if let Some(i) = self.hot_text.iter().rposition(|s| *s == h) {
            if i + 1 < self.hot_text.len() {
                self.hot_text.remove(i);
                self.hot_text.push_back(h);
            }
            return;
        }
        self.hot_text.push_back(h);
        while self.hot_text.len() > self.limits.hot_text_sessions {
            self.hot_text.pop_front();
        }
    }

    /// A response of `id` ended: unless the session is hot, its text lookup tables are freed
    /// (its text stays; the tables are rebuilt from it when it streams again). A response in
    /// progress always keeps its tables, so a session rebuilds at most once per response.
    fn cool_down(&mut self, id: &str) {
        let h = canon::hash64(id.as_bytes());
        if self.hot_text.contains(&h) {
            return;
        }
        if let Some(state) = self.sessions.get_mut(id).and_then(Slot::live) {
            state.compact_text();
        }
    }

    fn truncate(&mut self, event: &mut Event) {
        let max = self.limits.max_text_bytes;
        let text = match &mut event.body {
            Body::UserMessage { text, .. }
            | Body::AssistantMessage { text, .. }
            | Body::Reasoning { text, .. }
            | Body::Content { text, .. } => text,
            _ => return,
        };
        if text.len() > max {
            let mut cut = max;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            self.stats.truncated_texts += 1;
        }
    }

    /// Forgets idle sessions (event time) and keeps the session count bounded.
    fn maintain(&mut self) {
        // Sweeps happen when event time crosses a minute boundary, so an engine restored
        // from handed-over state sweeps at the same events as the one it replaces.
        let boundary = self.watermark.div_euclid(SWEEP_EVERY_MS);
        if boundary > self.last_sweep {
            self.last_sweep = boundary;
            let horizon = self.watermark.saturating_sub(self.limits.session_ttl_ms);
            let freeze = self.watermark.saturating_sub(self.limits.freeze_idle_ms);
            let deep = self.watermark.saturating_sub(
                self.limits
                    .freeze_idle_ms
                    .saturating_mul(DEFLATE_AFTER_FREEZE_IDLE),
            );
            let mut idle: Vec<String> = Vec::new();
            for (id, slot) in self.sessions.iter_mut() {
                let last = slot.last_ms();
                if last < horizon {
                    idle.push(id.clone());
                } else if last < freeze {
                    slot.freeze();
                    if last < deep {
                        slot.deepen();
                    }
                }
            }
            idle.sort();
            for id in idle {
                self.sessions.remove(&id);
                self.stats.evicted_ttl += 1;
                self.note_removed(&id);
            }
        }
        if self.sessions.len() > self.limits.max_sessions {
            let excess = self.sessions.len() - self.limits.max_sessions;
            let batch = excess
                .max(self.limits.max_sessions / 16)
                .min(self.sessions.len());
            let mut by_age: Vec<(i64, String)> = self
                .sessions
                .iter()
                .map(|(k, s)| (s.last_ms(), k.clone()))
                .collect();
            by_age.sort();
            for (_, id) in by_age.into_iter().take(batch) {
                self.sessions.remove(&id);
                self.stats.evicted_capacity += 1;
                self.note_removed(&id);
            }
        }
    }

    fn note_removed(&mut self, id: &str) {
        if let Some(c) = self.changes.as_mut() {
            c.touched.remove(id);
            c.removed.insert(id.to_string());
        }
    }

    /// Sessions touched and removed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The session's state, encoded for hand-over (`snapshot::encode`).
    pub fn snapshot(&self, session_id: &str) -> Option<Vec<u8>> {
        self.sessions.get(session_id).map(Slot::encoded)
    }

    /// The session's state as JSON, the hand-over format before issue 19 (for the
    /// benchmarks' comparisons).
    pub fn snapshot_json(&self, session_id: &str) -> Option<Vec<u8>> {
        self.sessions
            .get(session_id)
            .map(|s| s.view(snapshot::encode_json))
    }

    pub fn clock(&self) -> Clock {
        Clock {
            watermark: self.watermark,
            last_sweep: self.last_sweep,
        }
    }

    /// Takes over a predecessor's clock (never moves it backwards).
    pub fn restore_clock(&mut self, clock: Clock) {
        self.watermark = self.watermark.max(clock.watermark);
        self.last_sweep = self.last_sweep.max(clock.last_sweep);
    }

    /// Restores a session handed over by another instance, kept frozen until its next
    /// event: a restore holds a partition's sessions in their hand-over bytes, and only
    /// the sessions that go on pay to be live again (decoded, their tables rebuilt), when
    /// they do. The same state either way: thawing is a hand-over to oneself (`slot`).
    /// Any format `snapshot::decode` reads: the binary one, or JSON from older versions
    /// (re-encoded in the current one).
    pub fn restore(&mut self, session_id: &str, bytes: &[u8]) -> Result<(), snapshot::StateError> {
        let state: SessionState = snapshot::decode(bytes)?;
        self.watermark = self.watermark.max(state.last_ms);
        self.last_sweep = self
            .last_sweep
            .max(self.watermark.div_euclid(SWEEP_EVERY_MS));
        let policy = self
            .policies
            .resolve(state.tenant.as_deref(), state.agent.as_deref());
        let slot = if snapshot::is_current(bytes) {
            Slot::frozen(bytes, state.last_ms, policy)
        } else {
            let mut slot = Slot::new(state, policy);
            slot.freeze();
            slot
        };
        self.sessions.insert(session_id.to_string(), slot);
        Ok(())
    }

    pub fn forget(&mut self, session_id: &str) {
        self.sessions.remove(session_id);
    }

    pub fn summary(&self, session_id: &str) -> Option<SessionSummary> {
        self.sessions
            .get(session_id)
            .map(|s| s.view(SessionState::summary))
    }

    /// Session ids in sorted order.
    pub fn session_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.sessions.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Approximate heap bytes of one session (for docs/benchmarks.md).
    pub fn session_bytes(&self, session_id: &str) -> Option<usize> {
        self.sessions
            .get(session_id)
            .map(|s| s.heap_bytes() + session_id.len() + std::mem::size_of::<Slot>() + 24)
    }
}
