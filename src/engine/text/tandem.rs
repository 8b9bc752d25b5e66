//! Tight repeats: a span of at least `span_min` chars immediately followed by itself
//! (seed 003's `repeat_span_min`), found incrementally: a pair of anchors (content-defined,
//! see `anchors`) at the same k-gram proposes a period, checked by comparing back, then
//! watched char by char as a run length.
//!
//! Every tandem is found where it first completes: its two halves share at least
//! `span_min - k + 1` k-grams, one whole window of anchors (`anchors::shape_for`), so a
//! pair of anchors one period apart is picked by the time the tandem ends.

use super::anchors::{shape_for, Anchors, Winnow};
use super::ring::CharRing;
use super::{is_body, Hit, HitKind};
use serde::{Deserialize, Serialize};

/// Periods watched at once: enough that short repeats proposed by a small k never push a
/// real one out (a list of 8 did, for a 4-char span).
const MAX_CANDIDATES: usize = 64;
/// The k-gram is this share of the shortest span (24 chars: k = 12, a window of 13).
const K_SHARE: usize = 2;
/// Earlier anchors of the same k-gram looked at per anchor.
const CHAIN_STEPS: usize = 16;

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
    /// Derived from `ring` by `rebuild`: the anchors and what picks them.
    #[serde(skip)]
    winnow: Winnow,
    #[serde(skip)]
    anchors: Anchors,
    /// False while the derived tables are dropped (after `compact` or a hand-over): the next
    /// char rebuilds them from `ring` first.
    #[serde(skip)]
    built: bool,
}

impl Tandem {
    pub fn new(span_min: usize, body_min: usize, tail: usize) -> Self {
        let (k, w) = shape_for(span_min, K_SHARE);
        Tandem {
            span_min,
            body_min,
            tail,
            ring: CharRing::default(),
            candidates: Vec::new(),
            winnow: Winnow::new(k, w),
            anchors: Anchors::default(),
            built: true,
        }
    }

    #[inline]
    pub fn push(&mut self, c: char) -> Option<Hit> {
        if !self.built {
            self.rebuild();
        }
        self.step(c)
    }

    #[inline(always)]
    fn step(&mut self, c: char) -> Option<Hit> {
        // Evict first, so the buffer never outgrows `tail` (no doubling past it).
        if self.ring.len() >= self.tail {
            let n = self.ring.len() + 1 - self.tail;
            self.ring.drop_front(n);
        }
        let pos = self.ring.end();
        self.ring.push(c);
        if !self.candidates.is_empty() {
            let ring = &self.ring;
            self.candidates.retain_mut(|cand| {
                let same = pos >= ring.start() + cand.period && ring.get(pos - cand.period) == c;
                cand.run += 1;
                same
            });
        }
        if let Some((at, hash)) = self.winnow.push(pos, c) {
            self.discover(pos, at, hash);
        }
        if self.candidates.is_empty() {
            return None;
        }
        self.check(pos)
    }

    /// A new anchor at `at`: each earlier anchor of the same k-gram proposes the distance
    /// between them as a period (anchors come up to a window late, so either may be newer).
    #[inline(never)]
    fn discover(&mut self, pos: u64, at: u64, hash: u64) {
        let (ring, candidates) = (&self.ring, &mut self.candidates);
        let (span_min, k) = (self.span_min, shape_for(self.span_min, K_SHARE).0 as u64);
        self.anchors
            .add(at, hash, ring.start(), CHAIN_STEPS, |other| {
                consider(ring, candidates, span_min, k, pos, at.abs_diff(other));
            });
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

    pub fn reset(&mut self) {
        self.ring.clear();
        self.candidates.clear();
        self.winnow.reset();
        self.anchors.clear();
    }

    /// Makes room in the tail for `chars` more chars (capped at it), so it grows once per
    /// chunk, not by doubling char after char.
    pub fn reserve(&mut self, chars: usize) {
        let want = (self.ring.len() + chars).min(self.tail);
        self.ring.reserve(want);
        if self.built {
            // About 2 anchors in every w + 1 chars.
            self.anchors
                .reserve(2 * want / (shape_for(self.span_min, K_SHARE).1 + 1));
        }
    }

    /// Derives the anchors again from the kept chars (after deserialization or `compact`).
    pub fn rebuild(&mut self) {
        let (k, w) = shape_for(self.span_min, K_SHARE);
        self.winnow = Winnow::new(k, w);
        self.anchors.clear();
        self.anchors.reserve(2 * self.ring.len() / (w + 1));
        // Only the anchors are derived: the watched periods stay as they were (a run may be
        // longer than the tail), so no period is proposed on the way.
        let start = self.ring.start();
        for pos in start..self.ring.end() {
            if let Some((at, hash)) = self.winnow.push(pos, self.ring.get(pos)) {
                self.anchors.add(at, hash, start, 0, |_| {});
            }
        }
        self.built = true;
    }

    /// Frees the derived tables between responses; `ring` and the watched periods stay.
    pub fn compact(&mut self) {
        self.anchors.free();
        self.winnow = Winnow::default();
        self.built = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + self.anchors.heap_bytes()
            + self.winnow.heap_bytes()
            + self.candidates.capacity() * 24
    }
}

/// Chars of periodic run needed before `period` makes a tandem of >= `span_min`.
fn need(span_min: usize, period: u64) -> u64 {
    let m = (span_min as u64).div_ceil(period);
    (2 * m - 1) * period
}

/// Verifies `period` at `pos` by comparing back, and watches it if it holds for `k` chars.
fn consider(
    ring: &CharRing,
    candidates: &mut Vec<Candidate>,
    span_min: usize,
    k: u64,
    pos: u64,
    period: u64,
) {
    if candidates.iter().any(|c| c.period == period) {
        return;
    }
    let cap = need(span_min, period);
    // Both chars compared must be kept: the older one is `period` back.
    let Some(room) = (pos + 1).checked_sub(ring.start() + period) else {
        return;
    };
    let limit = cap.min(room);
    let mut run = 0;
    while run < limit && ring.get(pos - run) == ring.get(pos - run - period) {
        run += 1;
    }
    if run < k {
        return;
    }
    let cand = Candidate {
        period,
        run,
        need: cap,
    };
    if candidates.len() < MAX_CANDIDATES {
        candidates.push(cand);
    } else if let Some(min) = candidates.iter_mut().min_by_key(|c| (c.run, c.period)) {
        if min.run < run {
            *min = cand;
        }
    }
}
