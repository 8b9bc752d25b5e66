//! Incremental repetition detectors over streamed text. Each char is seen once, in order,
//! so the same text gives the same hits whatever its chunking. Pure: no IO, no clock.

mod block;
mod ring;
mod tandem;
mod variant;

pub use block::BlockRepeat;
pub use tandem::Tandem;
pub use variant::VariantRepeat;

use serde::{Deserialize, Serialize};

/// Which detector found a repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HitKind {
    Tandem,
    Variant,
    Block,
}

/// One detected repetition with its facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub kind: HitKind,
    /// The repeated span (up to 200 chars).
    pub span: String,
    /// Period in chars (tandem), or occurrences (variant, block).
    pub size: usize,
    pub count: usize,
}

/// Chars that carry meaning: punctuation, symbols and whitespace are stripped.
#[inline]
pub fn is_body(c: char) -> bool {
    c.is_alphanumeric()
}

/// Multiplier of the polynomial rolling hashes (odd, well mixed).
pub(crate) const BASE: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline]
pub(crate) fn mix(c: char) -> u64 {
    (c as u64 ^ 0xA5A5_5A5A).wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1
}

/// `BASE^n` (wrapping), to remove the char leaving a rolling window.
pub(crate) fn base_pow(n: usize) -> u64 {
    (0..n).fold(1u64, |acc, _| acc.wrapping_mul(BASE))
}

/// Hasher for keys that are already hashes: one multiply and shift to spread the bits.
#[derive(Default, Clone, Copy)]
pub struct PreHashed(u64);

impl std::hash::Hasher for PreHashed {
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type HashMap64<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<PreHashed>>;

/// The reasoning stream of one request: tight repeats, variant repeats, long-range blocks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReasoningText {
    pub tandem: Tandem,
    pub variant: VariantRepeat,
    pub block: BlockRepeat,
}

/// Sizes for the reasoning stream.
#[derive(Debug, Clone, Copy)]
pub struct ReasoningShape {
    pub span_min: usize,
    pub body_min: usize,
    pub variant_count: usize,
    pub variant_min_chars: usize,
    pub block_window: usize,
    pub block_count: usize,
    pub tail: usize,
}

impl ReasoningText {
    pub fn new(s: ReasoningShape) -> Self {
        ReasoningText {
            tandem: Tandem::new(s.span_min, s.body_min, s.tail),
            variant: VariantRepeat::new(s.variant_count, s.variant_min_chars),
            block: BlockRepeat::new(s.block_window, s.block_count, s.tail),
        }
    }

    /// Feeds text; every hit resets the stream, so a hit needs fresh evidence after it.
    /// `enabled` = [tandem, variant, block].
    pub fn push_str(&mut self, text: &str, enabled: [bool; 3], hits: &mut Vec<Hit>) {
        for c in text.chars() {
            let hit = {
                let t = self.tandem.push(c);
                let v = self.variant.push(c);
                let b = if is_body(c) { self.block.push(c) } else { None };
                [t, v, b]
                    .into_iter()
                    .zip(enabled)
                    .find_map(|(h, on)| if on { h } else { None })
            };
            if let Some(hit) = hit {
                hits.push(hit);
                self.reset();
            }
        }
    }

    pub fn reset(&mut self) {
        self.tandem.reset();
        self.variant.reset();
        self.block.reset();
    }

    /// Rebuilds lookup tables after deserialization.
    pub fn rebuild(&mut self) {
        self.tandem.rebuild();
        self.block.rebuild();
    }

    /// Frees the lookup tables until more text comes (they are rebuilt from the kept text).
    pub fn compact(&mut self) {
        self.tandem.compact();
        self.block.compact();
    }

    pub fn heap_bytes(&self) -> usize {
        self.tandem.heap_bytes() + self.block.heap_bytes() + self.variant.heap_bytes()
    }
}

/// The visible-content stream of one request: long tight repeats only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentText {
    pub tandem: Tandem,
}

impl ContentText {
    pub fn new(span_min: usize, body_min: usize, tail: usize) -> Self {
        ContentText {
            tandem: Tandem::new(span_min, body_min, tail),
        }
    }

    pub fn push_str(&mut self, text: &str, hits: &mut Vec<Hit>) {
        for c in text.chars() {
            if let Some(hit) = self.tandem.push(c) {
                hits.push(hit);
                self.tandem.reset();
            }
        }
    }

    pub fn rebuild(&mut self) {
        self.tandem.rebuild();
    }

    pub fn compact(&mut self) {
        self.tandem.compact();
    }

    pub fn heap_bytes(&self) -> usize {
        self.tandem.heap_bytes()
    }
}

#[cfg(test)]
mod tests;
