//! One session as the engine keeps it: live (its detector state in memory), or frozen
//! while idle (its state in the binary encoding, a few hundred bytes to a few KB; a long
//! one deflated once idle for long), thawed by its next event. Freezing and thawing are a
//! hand-over to oneself: the property and golden tests that hold a hand-over to its
//! verdicts hold this too. Pure.

use super::policy::Policy;
use super::rules::SessionState;
use super::snapshot;
use std::sync::Arc;

pub(super) struct Slot {
    pub policy: Arc<Policy>,
    /// The policy set changed while the session was frozen: `policy` is resolved again
    /// from its (tenant, agent) when it thaws.
    pub policy_stale: bool,
    session: Session,
}

enum Session {
    /// Boxed: a frozen slot is a few words, not the ~900 bytes of the state.
    Live(Box<SessionState>),
    Frozen {
        last_ms: i64,
        bytes: Box<[u8]>,
    },
}

impl Slot {
    pub fn new(state: SessionState, policy: Arc<Policy>) -> Self {
        Slot {
            policy,
            policy_stale: false,
            session: Session::Live(Box::new(state)),
        }
    }

    /// A session kept frozen from its hand-over bytes (`bytes` in the current binary
    /// layout, `last_ms` its last event's time) until its next event.
    pub fn frozen(bytes: &[u8], last_ms: i64, policy: Arc<Policy>) -> Self {
        Slot {
            policy,
            policy_stale: false,
            session: Session::Frozen {
                last_ms,
                bytes: Box::from(bytes),
            },
        }
    }

    /// Event time of the session's last event.
    pub fn last_ms(&self) -> i64 {
        match &self.session {
            Session::Live(state) => state.last_ms,
            Session::Frozen { last_ms, .. } => *last_ms,
        }
    }

    pub fn is_frozen(&self) -> bool {
        matches!(self.session, Session::Frozen { .. })
    }

    /// The policy and the live state, thawed first if frozen (as a restore does: the
    /// text detectors' tables are rebuilt at their next chunk).
    pub fn thaw(&mut self) -> (&Arc<Policy>, &mut SessionState) {
        if let Session::Frozen { bytes, .. } = &self.session {
            let mut state =
                snapshot::decode(bytes).expect("a state this engine froze decodes again");
            state.rebuild();
            self.session = Session::Live(Box::new(state));
        }
        match &mut self.session {
            Session::Live(state) => (&self.policy, state),
            Session::Frozen { .. } => unreachable!("thawed above"),
        }
    }

    /// The live state, if not frozen.
    pub fn live(&mut self) -> Option<&mut SessionState> {
        match &mut self.session {
            Session::Live(state) => Some(state),
            Session::Frozen { .. } => None,
        }
    }

    /// Keeps the session encoded until its next event.
    pub fn freeze(&mut self) {
        if let Session::Live(state) = &self.session {
            // An allocation of exactly its size: the encoder's buffer is sized for the
            // worst case, and an allocator may keep a shrunk block whole.
            let bytes = Box::from(snapshot::encode(state).as_slice());
            let last_ms = state.last_ms;
            self.session = Session::Frozen { last_ms, bytes };
        }
    }

    /// A frozen session idle for long: its state deflated if long (smaller, costlier to
    /// pack, so only for sessions that stayed away).
    pub fn deepen(&mut self) {
        if let Session::Frozen { bytes, .. } = &mut self.session {
            if let Some(deflated) = snapshot::deflated(bytes) {
                *bytes = deflated.into_boxed_slice();
            }
        }
    }

    /// The session's state in the hand-over encoding.
    pub fn encoded(&self) -> Vec<u8> {
        match &self.session {
            Session::Live(state) => snapshot::encode(state),
            Session::Frozen { bytes, .. } => snapshot::for_hand_over(bytes),
        }
    }

    /// The state, decoded if frozen (for the views that read without changing it).
    pub fn view<T>(&self, f: impl FnOnce(&SessionState) -> T) -> T {
        match &self.session {
            Session::Live(state) => f(state),
            Session::Frozen { bytes, .. } => {
                f(&snapshot::decode(bytes).expect("a state this engine froze decodes again"))
            }
        }
    }

    /// Approximate heap bytes held by the slot's state.
    pub fn heap_bytes(&self) -> usize {
        match &self.session {
            Session::Live(state) => state.heap_bytes(),
            Session::Frozen { bytes, .. } => bytes.len(),
        }
    }
}
