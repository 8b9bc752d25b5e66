//! Variant repeats: the same sentence, punctuation and spacing aside, `count` times in a
//! row ("继续分析！继续分析？继续分析。", seed 003).

use super::{is_body, mix, Hit, HitKind, BASE};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantRepeat {
    count: usize,
    min_chars: usize,
    /// The sentence being read: hash and length of its body, its raw text (clipped).
    hash: u64,
    len: usize,
    raw: String,
    /// The last finished sentence and how many times in a row it came.
    last: u64,
    streak: usize,
}

const RAW_KEEP: usize = 200;

#[inline]
fn ends_sentence(c: char) -> bool {
    matches!(
        c,
        '.' | '!' | '?' | ';' | '\n' | '。' | '！' | '？' | '；' | '…'
    )
}

impl VariantRepeat {
    pub fn new(count: usize, min_chars: usize) -> Self {
        VariantRepeat {
            count,
            min_chars,
            hash: 0,
            len: 0,
            raw: String::new(),
            last: 0,
            streak: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, c: char) -> Option<Hit> {
        if ends_sentence(c) {
            return self.end_sentence();
        }
        if is_body(c) {
            self.hash = self.hash.wrapping_mul(BASE).wrapping_add(mix(c));
            self.len += 1;
        }
        if self.len > 0 && self.raw.len() < RAW_KEEP {
            if self.raw.capacity() == 0 {
                // Sized once for its bound (RAW_KEEP bytes and one more char), not by
                // doubling as longer sentences come.
                self.raw.reserve_exact(RAW_KEEP + 4);
            }
            self.raw.push(c);
        }
        None
    }

    fn end_sentence(&mut self) -> Option<Hit> {
        if self.len == 0 {
            return None;
        }
        let hash = self.hash | 1;
        if self.len < self.min_chars {
            self.streak = 0;
            self.last = 0;
        } else if hash == self.last {
            self.streak += 1;
        } else {
            self.last = hash;
            self.streak = 1;
        }
        let hit = (self.streak >= self.count).then(|| Hit {
            kind: HitKind::Variant,
            span: crate::engine::verdict::clip(self.raw.trim(), 200),
            size: self.len,
            count: self.streak,
        });
        self.hash = 0;
        self.len = 0;
        self.raw.clear();
        hit
    }

    pub fn reset(&mut self) {
        *self = VariantRepeat::new(self.count, self.min_chars);
    }

    pub fn heap_bytes(&self) -> usize {
        self.raw.capacity()
    }
}
