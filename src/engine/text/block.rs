//! Long-range block repeats: any `window`-char run of the normalized text (punctuation and
//! whitespace removed) seen `count` times within the kept tail (seed 003's block rule).
//! Windows may span model responses (a loop split across responses is still one loop), but
//! a window seen only where it straddles a response boundary at the same offset every time
//! is the same closing and opening phrases of consecutive responses, not a passage
//! recomputed, and does not count (ours).
//!
//! Found through anchors (`anchors`): every copy of a window holds one at the same offset,
//! so two anchors of one k-gram propose an alignment, followed char by char as a run; a
//! window ending here was seen `back` chars ago once that run reaches the window.

use super::anchors::{shape_for, Anchors, Winnow};
use super::ring::CharRing;
use super::{Hit, HitKind};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Earlier anchors of the same k-gram looked at per anchor.
const CHAIN_STEPS: usize = 64;
/// The k-gram is this share of the window (100 chars: k = 25, a window of 76 k-grams).
const K_SHARE: usize = 4;
/// Alignments watched at once (each is a run of chars equal to the ones `back` before).
const MAX_COPIES: usize = 64;

/// An alignment under watch: the last `run` chars each equal the char `back` before them,
/// so the window ending here was also seen ending `back` chars ago once `run >= window`.
#[derive(Debug, Clone, Copy)]
struct Copy {
    back: u64,
    run: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockRepeat {
    window: usize,
    count: usize,
    tail: usize,
    /// Normalized chars kept.
    ring: CharRing,
    /// Ring positions where a response started (the first char after a boundary).
    #[serde(default)]
    boundaries: VecDeque<u64>,
    /// Derived by `rebuild`: the anchors, what picks them, the alignments watched.
    #[serde(skip)]
    winnow: Winnow,
    #[serde(skip)]
    anchors: Anchors,
    #[serde(skip)]
    copies: Vec<Copy>,
    /// False while the derived tables are dropped: the next char rebuilds them first.
    #[serde(skip)]
    built: bool,
}

impl BlockRepeat {
    pub fn new(window: usize, count: usize, tail: usize) -> Self {
        let (k, w) = shape_for(window, K_SHARE);
        BlockRepeat {
            window,
            count,
            tail,
            ring: CharRing::default(),
            boundaries: VecDeque::new(),
            winnow: Winnow::new(k, w),
            anchors: Anchors::default(),
            copies: Vec::new(),
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
        self.step(c, true)
    }

    #[inline(always)]
    fn step(&mut self, c: char, detect: bool) -> Option<Hit> {
        // Evict first, so the buffer never outgrows `tail` (no doubling past it).
        while self.ring.len() >= self.tail {
            self.evict();
        }
        let pos = self.ring.end();
        self.ring.push(c);
        self.follow(pos, c, detect)
    }

    /// Moves the alignments and the anchors on to the kept char `c` at `pos`.
    #[inline(always)]
    fn follow(&mut self, pos: u64, c: char, detect: bool) -> Option<Hit> {
        if !self.copies.is_empty() {
            let ring = &self.ring;
            self.copies.retain_mut(|cp| {
                cp.run += 1;
                pos >= ring.start() + cp.back && ring.get(pos - cp.back) == c
            });
        }
        if let Some((at, hash)) = self.winnow.push(pos, c) {
            self.discover(pos, at, hash);
        }
        if self.copies.is_empty() || !detect {
            return None;
        }
        self.check(pos)
    }

    /// A new anchor at `at`: each earlier anchor of the same k-gram proposes an alignment,
    /// watched if the chars up to `pos` agree with it for at least a k-gram.
    #[inline(never)]
    fn discover(&mut self, pos: u64, at: u64, hash: u64) {
        let k = shape_for(self.window, K_SHARE).0 as u64;
        let window = self.window as u64;
        let (ring, copies) = (&self.ring, &mut self.copies);
        self.anchors
            .add(at, hash, ring.start(), CHAIN_STEPS, |other| {
                let back = at.abs_diff(other);
                if copies.len() >= MAX_COPIES || copies.iter().any(|cp| cp.back == back) {
                    return;
                }
                // Both chars compared must be kept: the older one is `back` before.
                let Some(room) = (pos + 1).checked_sub(ring.start() + back) else {
                    return;
                };
                let limit = room.min(window);
                let mut run = 0;
                while run < limit && ring.get(pos - run) == ring.get(pos - run - back) {
                    run += 1;
                }
                if run >= k {
                    copies.push(Copy { back, run });
                }
            });
    }

    /// The window ending at `pos` seen `count` times in the kept tail (an earlier copy
    /// counts while its first char is kept), unless only across a boundary.
    fn check(&self, pos: u64) -> Option<Hit> {
        let w = self.window as u64;
        let start = self.ring.start();
        let full = |cp: &&Copy| cp.run >= w && pos + 1 >= start + cp.back + w;
        let occurrences = 1 + self.copies.iter().filter(full).count();
        if occurrences < self.count {
            return None;
        }
        let here = self.anchor_at(pos);
        if here != 0
            && self
                .copies
                .iter()
                .filter(full)
                .all(|cp| self.anchor_at(pos - cp.back) == here)
        {
            return None;
        }
        let now = self.ring.slice(pos + 1 - w, pos + 1);
        Some(Hit {
            kind: HitKind::Block,
            span: crate::engine::verdict::clip(&now, 200),
            size: self.window,
            count: occurrences,
        })
    }

    fn evict(&mut self) {
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
        self.boundaries.clear();
        self.winnow.reset();
        self.anchors.clear();
        self.copies.clear();
    }

    /// Makes room in the tail for `chars` more chars (capped at it).
    pub fn reserve(&mut self, chars: usize) {
        let want = (self.ring.len() + chars).min(self.tail);
        self.ring.reserve(want);
        if self.built {
            // About 2 anchors in every w + 1 chars.
            self.anchors
                .reserve(2 * want / (shape_for(self.window, K_SHARE).1 + 1));
        }
    }

    /// Derives the anchors and the watched alignments again by feeding the kept chars once
    /// more (a hit on the way was reported when they first came).
    pub fn rebuild(&mut self) {
        let (k, w) = shape_for(self.window, K_SHARE);
        self.winnow = Winnow::new(k, w);
        self.anchors.clear();
        self.anchors.reserve(2 * self.ring.len() / (w + 1));
        self.copies.clear();
        // Each char sees only the kept chars before it, as when it came.
        for pos in self.ring.start()..self.ring.end() {
            let _ = self.follow(pos, self.ring.get(pos), false);
        }
        self.built = true;
    }

    /// Frees the derived tables between responses; `ring` stays.
    pub fn compact(&mut self) {
        self.anchors.free();
        self.winnow = Winnow::default();
        self.copies = Vec::new();
        self.built = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + self.anchors.heap_bytes()
            + self.winnow.heap_bytes()
            + self.copies.capacity() * 16
            + self.boundaries.capacity() * 8
    }
}
