//! Tight repeats: a span of at least `span_min` chars immediately followed by itself
//! (seed 003's `repeat_span_min`), found incrementally with k-gram anchors and run lengths.

use super::chains::HashChains;
use super::ring::{CharRing, Rolling};
use super::{is_body, Hit, HitKind};
use serde::{Deserialize, Serialize};

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
    /// Derived from `ring` by `rebuild`: the k-gram hash ending at each kept position and
    /// the previous position with the same one.
    #[serde(skip)]
    grams: HashChains<()>,
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
            grams: HashChains::default(),
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
        if self.ring.len() >= self.tail {
            let n = self.ring.len() + 1 - self.tail;
            self.ring.drop_front(n);
            self.grams.drop_front(n);
        }
        let pos = self.ring.end();
        self.ring.push(c);
        if !self.candidates.is_empty() {
            let ring = &self.ring;
            self.candidates.retain_mut(|cand| {
                let same = pos >= cand.period && ring.at(pos - cand.period) == Some(c);
                cand.run += 1;
                same
            });
        }
        self.index(pos, c, true);
        if self.candidates.is_empty() {
            return None;
        }
        self.check(pos)
    }

    /// Updates the k-gram tables for the char `c` at `pos`; with `discover`, opens
    /// candidates for the earlier positions with the same k-gram (up to `CHAIN_STEPS`).
    #[inline]
    fn index(&mut self, pos: u64, c: char, discover: bool) {
        let start = self.ring.start();
        let Some(h) = self.roll.roll(&self.ring, pos, c) else {
            self.grams.push(0, (), start);
            return;
        };
        let mut q = self.grams.push(h, (), start);
        if !discover {
            return;
        }
        for _ in 0..CHAIN_STEPS {
            let Some(at) = q.filter(|&p| p >= start) else {
                break;
            };
            self.consider(pos, pos - at);
            q = self.grams.same_before(at);
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

    pub fn reset(&mut self) {
        self.ring.clear();
        self.candidates.clear();
        self.grams.restart_at(self.ring.start());
        self.roll.reset();
    }

    /// Makes room in the tables for `chars` more chars (capped at the tail), so they grow
    /// once per chunk, not by doubling char after char.
    pub fn reserve(&mut self, chars: usize) {
        let want = (self.ring.len() + chars).min(self.tail);
        self.ring.reserve(want);
        if self.built {
            self.grams.reserve(want);
        }
    }

    /// Rebuilds the derived tables from the kept chars (after deserialization).
    pub fn rebuild(&mut self) {
        self.roll = Rolling::new(self.k());
        self.grams.restart_at(self.ring.start());
        self.grams.reserve(self.ring.len());
        for pos in self.ring.start()..self.ring.end() {
            self.index(pos, self.ring.get(pos), false);
        }
        self.built = true;
    }

    /// Frees the derived tables between responses; `ring` and the candidates stay.
    pub fn compact(&mut self) {
        self.grams.free();
        self.built = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes() + self.grams.heap_bytes() + self.candidates.capacity() * 24
    }
}
