//! Content-defined anchors (winnowing): of every `w` consecutive k-grams of a tail, the one
//! with the smallest hash (the newest on a tie). Which k-gram a window picks depends on its
//! chars alone, so two copies of a string of at least `k + w - 1` chars hold an anchor at
//! the same offset: the detectors look up anchors, ~2 in `w + 1` positions, not every one.

use super::chains::HashChains;

/// Picks the anchors of a tail as its chars come (derived state: rebuilt from the tail).
///
/// The k-gram hash is polynomial over the chars' gear values (every char of the k-gram in
/// all 64 bits, so k-grams that differ only in their oldest char do not collide; a gear
/// hash shifted per char kept 4 bits of it, and such k-grams crowded the walk of a run's
/// k-gram). The last `k` chars are kept here to take the oldest out. The smallest of each window of `w`
/// is found by blocks of `w` (van Herk / Gil-Werman): the window ending in this block is
/// a suffix of the previous block, whose minima were computed when it ended, and the
/// block's prefix, whose minimum is kept as it grows.
#[derive(Debug, Clone)]
pub struct Winnow {
    k: usize,
    w: usize,
    /// `BASE^k`, to take out the char leaving the k-gram.
    pow: u64,
    hash: u64,
    /// Chars hashed since the last reset (the k-gram is whole after `k`), and the last 32
    /// of them at their count masked (k is at most 32).
    chars: usize,
    recent: [char; 32],
    /// This block's hashes; the previous block's suffix minima (hash, position).
    block: Vec<u64>,
    suffix: Vec<(u64, u64)>,
    /// Index of the next hash in `block`, and the minimum of the ones before it.
    at: usize,
    prefix: (u64, u64),
    /// A whole block was seen since the last reset.
    whole: bool,
    /// The last anchor given out, + 1 (0 = none).
    last: u64,
    /// The hash of a k-gram of one char is that char's gear times this.
    run: u64,
}

/// Random values for ASCII chars (splitmix64), the gear of the hash.
const GEAR: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut x = 0x243F_6A88_85A3_08D3u64;
    let mut i = 0;
    while i < 128 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        t[i] = z ^ (z >> 31);
        i += 1;
    }
    t
};

#[inline]
fn gear(c: char) -> u64 {
    match GEAR.get(c as usize) {
        Some(g) => *g,
        None => super::mix(c),
    }
}

impl Winnow {
    pub fn new(k: usize, w: usize) -> Self {
        let (k, w) = (k.max(1), w.max(1));
        let k = k.min(32);
        Winnow {
            k,
            w,
            pow: (0..k).fold(1u64, |p, _| p.wrapping_mul(super::BASE)),
            hash: 0,
            chars: 0,
            recent: ['\0'; 32],
            block: vec![0; w],
            suffix: vec![(0, 0); w],
            at: 0,
            prefix: (u64::MAX, 0),
            whole: false,
            last: 0,
            run: (0..k).fold(0u64, |m, _| m.wrapping_mul(super::BASE).wrapping_add(1)),
        }
    }

    /// Adds the char `c` at `pos`; an anchor (its position and k-gram hash) the first time
    /// a window picks it. An anchor comes at most `w - 1` chars after its k-gram ends, and
    /// each comes once.
    #[inline(always)]
    pub fn push(&mut self, pos: u64, c: char) -> Option<(u64, u64)> {
        let g = gear(c);
        let mut hash = self.hash.wrapping_mul(super::BASE).wrapping_add(g);
        if self.chars >= self.k {
            let out = self.recent[(self.chars - self.k) & 31];
            hash = hash.wrapping_sub(gear(out).wrapping_mul(self.pow));
        }
        self.hash = hash;
        self.recent[self.chars & 31] = c;
        self.chars += 1;
        if self.chars < self.k {
            return None;
        }
        // A k-gram of one char repeated ranks after every other: a run of them would
        // otherwise give an anchor at each of its positions, and the earlier anchors of
        // that k-gram would be crowded by its own run. It is the k-gram's own property, so
        // copies still pick the same anchors.
        let run = hash == g.wrapping_mul(self.run);
        let h = (hash >> 1) | (u64::from(run) << 63) | 1;
        let i = self.at;
        let mut prefix = self.prefix;
        if h <= prefix.0 {
            prefix = (h, pos);
        }
        self.block[i] = h;
        let (hash, at) = if i + 1 < self.w {
            self.at = i + 1;
            self.prefix = prefix;
            if !self.whole {
                return None;
            }
            let s = self.suffix[i + 1];
            if s.0 < prefix.0 {
                s
            } else {
                prefix
            }
        } else {
            self.end_block(pos);
            prefix
        };
        if at + 1 == self.last {
            return None;
        }
        self.last = at + 1;
        Some((at, hash))
    }

    /// The block ending at `pos` is whole: its suffix minima (the newest on a tie) serve
    /// the windows ending in the next one.
    fn end_block(&mut self, pos: u64) {
        let w = self.w;
        let mut min = (u64::MAX, 0);
        for j in (0..w).rev() {
            let h = self.block[j];
            if h < min.0 {
                min = (h, pos - (w - 1 - j) as u64);
            }
            self.suffix[j] = min;
        }
        self.whole = true;
        self.at = 0;
        self.prefix = (u64::MAX, 0);
    }

    /// The tail was emptied: the next k-gram starts a window afresh.
    pub fn reset(&mut self) {
        self.hash = 0;
        self.chars = 0;
        self.at = 0;
        self.prefix = (u64::MAX, 0);
        self.whole = false;
    }

    pub fn heap_bytes(&self) -> usize {
        self.block.capacity() * 8 + self.suffix.capacity() * 16
    }
}

impl Default for Winnow {
    fn default() -> Self {
        Winnow::new(1, 1)
    }
}

/// The anchors of a tail, each with its char position, chained to the earlier anchors with
/// the same k-gram hash.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    chains: HashChains<u64>,
}

impl Anchors {
    /// Adds the anchor at `at` and calls `pair` with the position of each earlier kept
    /// anchor of the same hash (newest first, up to `steps`), at or after `kept_from`.
    #[inline]
    pub fn add(
        &mut self,
        at: u64,
        hash: u64,
        kept_from: u64,
        steps: usize,
        mut pair: impl FnMut(u64),
    ) {
        // Anchors come in the order windows pick them, which is position order give or
        // take a window: drop the ones that left the tail from the front.
        while self.chains.len() > 0 && self.chains.payload(self.chains.start()) < kept_from {
            self.chains.pop_front();
        }
        let first = self.chains.start();
        let mut q = self.chains.push(hash, at, first);
        for _ in 0..steps {
            let Some(o) = q.filter(|&o| o >= first) else {
                break;
            };
            let other = self.chains.payload(o);
            if other >= kept_from && other != at {
                pair(other);
            }
            q = self.chains.same_before(o);
        }
    }

    /// Room for `total` anchors without growing on the way.
    pub fn reserve(&mut self, total: usize) {
        self.chains.reserve(total);
    }

    pub fn clear(&mut self) {
        let end = self.chains.end();
        self.chains.restart_at(end);
    }

    pub fn free(&mut self) {
        self.chains.free();
    }

    pub fn heap_bytes(&self) -> usize {
        self.chains.heap_bytes()
    }
}

/// The k-gram width and window for finding every repeat of at least `len` chars: any two
/// copies hold `len - k + 1` k-grams, a whole window of `w` of them.
pub fn shape_for(len: usize, k_share: usize) -> (usize, usize) {
    let k = (len / k_share).clamp(1, 32);
    (k, len + 1 - k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchors(text: &str, k: usize, w: usize) -> Vec<u64> {
        let mut win = Winnow::new(k, w);
        let mut out = Vec::new();
        for (pos, c) in text.chars().enumerate() {
            if let Some((at, _)) = win.push(pos as u64, c) {
                out.push(at);
            }
        }
        out
    }

    #[test]
    fn copies_of_a_long_enough_string_hold_anchors_at_the_same_offsets() {
        let s = "the quick brown fox jumps over the lazy dog and runs";
        let (k, w) = (4, 10);
        let text = format!("{s} -- something else between -- {s}");
        let all = anchors(&text, k, w);
        let second = s.chars().count() as u64 + " -- something else between -- ".len() as u64;
        // The anchors every window around which lies inside a copy, as offsets into it.
        let inside = |from: u64| -> Vec<u64> {
            all.iter()
                .filter(|&&a| {
                    a >= from + (k + w - 2) as u64 && a + (w as u64) <= from + s.len() as u64
                })
                .map(|a| a - from)
                .collect()
        };
        let (one, two) = (inside(0), inside(second));
        assert!(!one.is_empty());
        assert_eq!(one, two);
        // About two anchors in every w + 1 k-grams, never more than one per position.
        assert!(all.len() < text.len() / 3, "{}", all.len());
        assert!(all.windows(2).all(|p| p[0] != p[1]));
    }
}
