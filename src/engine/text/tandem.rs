//! Tight repeats: a span of at least `span_min` chars immediately followed by itself
//! (seed 003's `repeat_span_min`), found incrementally with k-gram anchors and run lengths.

use super::ring::{CharRing, Rolling};
use super::{is_body, HashMap64, Hit, HitKind};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

const MAX_CANDIDATES: usize = 8;
const CHAIN_STEPS: usize = 4;

/// A period under watch: the last `run` chars each equal the char `period` before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Candidate {
    period: u64,
    run: u64,
    /// Run length at which the next check is due.
    need: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tandem {
    span_min: usize,
    body_min: usize,
    tail: usize,
    ring: CharRing,
    candidates: Vec<Candidate>,
    /// Derived from `ring` by `rebuild`: k-gram hash ending at each kept position (0 = none),
    /// the previous position with the same hash (+1, 0 = none), the last position per hash.
    #[serde(skip)]
    grams: VecDeque<(u64, u64)>,
    #[serde(skip)]
    last: HashMap64<u64>,
    #[serde(skip)]
    roll: Rolling,
    /// False while the derived tables are dropped (after `compact` or a hand-over): the next
    /// char rebuilds them from `ring` first.
    #[serde(skip)]
    built: bool,
}

impl Tandem {
    pub fn new(span_min: usize, body_min: usize, tail: usize) -> Self {
        let mut t = Tandem {
            span_min,
            body_min,
            tail,
            ring: CharRing::default(),
            candidates: Vec::new(),
            grams: VecDeque::new(),
            last: HashMap64::default(),
            roll: Rolling::default(),
            built: true,
        };
        t.roll = Rolling::new(t.k());
        t
    }

    fn k(&self) -> usize {
        self.span_min.min(32)
    }

    /// Chars of periodic run needed before `period` makes a tandem of >= `span_min`.
    fn need(&self, period: u64) -> u64 {
        let m = (self.span_min as u64).div_ceil(period);
        (2 * m - 1) * period
    }

    #[inline]
    pub fn push(&mut self, c: char) -> Option<Hit> {
        if !self.built {
            self.rebuild();
        }
        // Evict first, so the buffers never outgrow `tail` (no doubling past it).
        while self.ring.chars.len() >= self.tail {
            self.evict();
        }
        let pos = self.ring.end();
        self.ring.push(c);
        let ring = &self.ring;
        self.candidates.retain_mut(|cand| {
            let same = pos >= cand.period && ring.at(pos - cand.period) == Some(c);
            cand.run += 1;
            same
        });
        self.index(pos, true);
        self.check(pos)
    }

    /// Updates the k-gram tables for the char at `pos`; with `discover`, opens candidates.
    #[inline]
    fn index(&mut self, pos: u64, discover: bool) {
        let Some(h) = self.roll.roll(&self.ring, pos) else {
            self.grams.push_back((0, 0));
            return;
        };
        let prev = self.last.insert(h, pos);
        self.grams.push_back((h, prev.map_or(0, |p| p + 1)));
        if !discover {
            return;
        }
        let mut q = prev;
        for _ in 0..CHAIN_STEPS {
            let Some(at) = q.filter(|&p| p >= self.ring.start) else {
                break;
            };
            self.consider(pos, pos - at);
            q = self
                .grams
                .get((at - self.ring.start) as usize)
                .and_then(|g| g.1.checked_sub(1));
        }
    }

    /// Verifies period `period` at `pos` by comparing back, and watches it if it holds for k.
    fn consider(&mut self, pos: u64, period: u64) {
        if self.candidates.iter().any(|c| c.period == period) {
            return;
        }
        let cap = self.need(period);
        let mut run = 0;
        while run < cap {
            let (a, b) = (pos - run, pos.checked_sub(run + period));
            match (self.ring.at(a), b.and_then(|b| self.ring.at(b))) {
                (Some(x), Some(y)) if x == y => run += 1,
                _ => break,
            }
        }
        if run < self.k() as u64 {
            return;
        }
        let cand = Candidate {
            period,
            run,
            need: cap,
        };
        if self.candidates.len() < MAX_CANDIDATES {
            self.candidates.push(cand);
        } else if let Some(min) = self.candidates.iter_mut().min_by_key(|c| (c.run, c.period)) {
            if min.run < run {
                *min = cand;
            }
        }
    }

    fn check(&mut self, pos: u64) -> Option<Hit> {
        let mut i = 0;
        while i < self.candidates.len() {
            let Candidate { period, run, need } = self.candidates[i];
            if run < need {
                i += 1;
                continue;
            }
            // Enough repeats for the length; are there enough body chars in the span?
            let unit_body = self
                .ring
                .slice(pos + 1 - period, pos + 1)
                .chars()
                .filter(|c| is_body(*c))
                .count() as u64;
            if unit_body == 0 {
                // A span with no body never gets one by repeating: stop watching it.
                self.candidates.swap_remove(i);
                continue;
            }
            let m = (self.span_min as u64)
                .div_ceil(period)
                .max((self.body_min as u64).div_ceil(unit_body));
            let full = (2 * m - 1) * period;
            if run >= full {
                let span = self.ring.slice(pos + 1 - m * period, pos + 1);
                return Some(Hit {
                    kind: HitKind::Tandem,
                    span: crate::engine::verdict::clip(&span, 200),
                    size: (m * period) as usize,
                    count: ((run + period) / (m * period)) as usize,
                });
            }
            self.candidates[i].need = full;
            i += 1;
        }
        None
    }

    /// Drops the oldest char. Its entry in `last` stays: every lookup ignores positions
    /// before the ring's start, so a stale entry reads as none, and not removing it saves
    /// a lookup per char and the tombstones removals leave behind; stale entries are
    /// dropped together once the table holds 7/4 of the tail (the bucket count a full
    /// tail needs anyway).
    fn evict(&mut self) {
        self.grams.pop_front();
        self.ring.pop_front();
        if self.last.len() >= self.tail + self.tail * 3 / 4 {
            let start = self.ring.start;
            self.last.retain(|_, p| *p >= start);
        }
    }

    pub fn reset(&mut self) {
        self.ring.clear();
        self.candidates.clear();
        self.grams.clear();
        self.last.clear();
        self.roll.reset();
    }

    /// Makes room in the lookup tables for `chars` more chars (capped at the tail), so
    /// they grow once per chunk, not by doubling char after char.
    pub fn reserve(&mut self, chars: usize) {
        let want = (self.ring.chars.len() + chars).min(self.tail);
        self.grams.reserve(want.saturating_sub(self.grams.len()));
        self.last.reserve(want.saturating_sub(self.last.len()));
    }

    /// Rebuilds the derived tables from the kept chars (after deserialization).
    pub fn rebuild(&mut self) {
        self.roll = Rolling::new(self.k());
        self.grams.clear();
        self.last.clear();
        self.reserve(0);
        for pos in self.ring.start..self.ring.end() {
            self.index(pos, false);
        }
        self.built = true;
    }

    /// Frees the derived tables between responses; `ring` and the candidates stay.
    pub fn compact(&mut self) {
        self.grams = VecDeque::new();
        self.last = HashMap64::default();
        self.built = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + self.grams.capacity() * 16
            + self.last.capacity() * 17
            + self.candidates.capacity() * 16
    }
}
