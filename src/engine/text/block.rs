//! Long-range block repeats: any `window`-char run of the normalized text (punctuation and
//! whitespace removed) seen `count` times within the kept tail (seed 003's block rule).
//! Windows may span model responses (a loop split across responses is still one loop), but
//! a window seen only where it straddles a response boundary at the same offset every time
//! is the same closing and opening phrases of consecutive responses, not a passage
//! recomputed, and does not count (ours).

use super::chains::HashChains;
use super::ring::{CharRing, Rolling};
use super::{HashMap64, Hit, HitKind};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// An anchor value for windows whose occurrences straddle boundaries differently.
const MIXED: u32 = u32::MAX;

/// A window hash seen more than once in the tail since it was last absent: occurrences
/// kept, and where a response boundary fell in them (chars from the boundary to the
/// window's end, 0 = none, `MIXED` once two disagreed). A window seen once needs no entry,
/// so unique prose costs no map update.
#[derive(Debug, Clone, Copy)]
struct Seen {
    count: u32,
    anchor: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockRepeat {
    window: usize,
    count: usize,
    tail: usize,
    /// Normalized chars kept.
    ring: CharRing,
    /// Derived by `rebuild`: the window hash ending at each kept position, the previous
    /// position with the same one, and whether its hash has a `Seen` entry; the entries.
    #[serde(skip)]
    windows: HashChains<bool>,
    #[serde(skip)]
    seen: HashMap64<Seen>,
    /// Ring positions where a response started (the first char after a boundary).
    #[serde(default)]
    boundaries: VecDeque<u64>,
    #[serde(skip)]
    roll: Rolling,
    /// False while the derived tables are dropped: the next char rebuilds them first.
    #[serde(skip)]
    built: bool,
}

impl BlockRepeat {
    pub fn new(window: usize, count: usize, tail: usize) -> Self {
        BlockRepeat {
            window,
            count,
            tail,
            ring: CharRing::default(),
            windows: HashChains::default(),
            seen: HashMap64::default(),
            boundaries: VecDeque::new(),
            roll: Rolling::new(window),
            built: true,
        }
    }

    /// A model response ended: the next char starts another.
    pub fn mark_boundary(&mut self) {
        let at = self.ring.end();
        if self.boundaries.back() != Some(&at) {
            self.boundaries.push_back(at);
        }
    }

    /// Chars from the latest boundary inside the window ending at `pos` to its end.
    fn anchor_at(&self, pos: u64) -> u32 {
        let first = (pos + 1).saturating_sub(self.window as u64);
        // `boundaries` is sorted: the latest one at or before `pos`. While text streams in
        // that is the newest (boundaries are marked before the chars after them); only a
        // rebuild indexes positions older than some boundaries, and searches.
        let latest = match self.boundaries.back() {
            Some(&b) if b <= pos => Some(b),
            _ => {
                let i = self.boundaries.partition_point(|&b| b <= pos);
                i.checked_sub(1).map(|i| self.boundaries[i])
            }
        };
        match latest {
            Some(b) if b > first => (pos + 1 - b) as u32,
            _ => 0,
        }
    }

    /// Feeds one normalized char.
    #[inline]
    pub fn push(&mut self, c: char) -> Option<Hit> {
        if !self.built {
            self.rebuild();
        }
        // Evict first, so the buffers never outgrow `tail` (no doubling past it).
        while self.ring.len() >= self.tail {
            self.evict();
        }
        let pos = self.ring.end();
        self.ring.push(c);
        self.index(pos, c, true)
    }

    #[inline]
    fn index(&mut self, pos: u64, c: char, detect: bool) -> Option<Hit> {
        let w = self.window as u64;
        let start = self.ring.start();
        let Some(h) = self.roll.roll(&self.ring, pos, c) else {
            self.windows.push(0, false, start);
            return None;
        };
        // Windows are live while their first char is kept.
        let prev = self.windows.push(h, false, start + w - 1)?;
        // Seen before: count it with the earlier ones. Where a boundary fell in a window is
        // asked only now (the boundaries that matter for a kept window are still kept).
        let anchor = self.anchor_at(pos);
        let seen = if self.windows.payload(prev) {
            let e = self.seen.entry(h).or_insert(Seen { count: 0, anchor });
            e.count += 1;
            if e.anchor != anchor {
                e.anchor = MIXED;
            }
            *e
        } else {
            let e = Seen {
                count: 2,
                anchor: if self.anchor_at(prev) == anchor {
                    anchor
                } else {
                    MIXED
                },
            };
            self.seen.insert(h, e);
            self.windows.set_payload(prev, true);
            e
        };
        self.windows.set_payload(pos, true);
        let occurrences = seen.count as usize;
        let boundary_only = seen.anchor != 0 && seen.anchor != MIXED;
        if !detect || occurrences < self.count || boundary_only {
            return None;
        }
        // Confirm against the previous occurrence (guards against a hash collision).
        let now = self.ring.slice(pos + 1 - w, pos + 1);
        if self.ring.slice(prev + 1 - w, prev + 1) != now {
            return None;
        }
        Some(Hit {
            kind: HitKind::Block,
            span: crate::engine::verdict::clip(&now, 200),
            size: self.window,
            count: occurrences,
        })
    }

    fn evict(&mut self) {
        // The window starting at the evicted char ends `window - 1` chars later.
        let w = self.window as u64;
        let end = self.ring.start() + w - 1;
        if let Some(h) = self.windows.hash_at(end).filter(|h| *h != 0) {
            if self.windows.payload(end) {
                if let Some(e) = self.seen.get_mut(&h) {
                    e.count -= 1;
                    if e.count == 0 {
                        self.seen.remove(&h);
                    }
                }
            }
        }
        self.windows.pop_front();
        self.ring.pop_front();
        while self
            .boundaries
            .front()
            .is_some_and(|&b| b + (self.window as u64) < self.ring.start())
        {
            self.boundaries.pop_front();
        }
    }

    pub fn reset(&mut self) {
        self.ring.clear();
        self.windows.restart_at(self.ring.start());
        self.seen.clear();
        self.boundaries.clear();
        self.roll.reset();
    }

    /// Makes room in the tables for `chars` more chars (capped at the tail).
    pub fn reserve(&mut self, chars: usize) {
        let want = (self.ring.len() + chars).min(self.tail);
        self.ring.reserve(want);
        if self.built {
            self.windows.reserve(want);
        }
    }

    pub fn rebuild(&mut self) {
        self.roll = Rolling::new(self.window);
        self.windows.restart_at(self.ring.start());
        self.windows.reserve(self.ring.len());
        self.seen.clear();
        for pos in self.ring.start()..self.ring.end() {
            self.index(pos, self.ring.get(pos), false);
        }
        self.built = true;
    }

    /// Frees the derived tables between responses; `ring` stays.
    pub fn compact(&mut self) {
        self.windows.free();
        self.seen = HashMap64::default();
        self.built = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + self.windows.heap_bytes()
            + self.seen.capacity() * 9
            + self.boundaries.capacity() * 8
    }
}
