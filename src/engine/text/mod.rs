//! Incremental repetition detectors over streamed text. Each char is seen once, in order,
//! so the same text gives the same hits whatever its chunking. Pure: no IO, no clock.

mod anchors;
mod block;
mod chains;
mod fence;
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

/// What a response boundary looks like to the tight-repeat and sentence detectors.
const BOUNDARY: char = '\n';

/// The reasoning stream of one request: tight repeats, variant repeats, long-range blocks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReasoningText {
    pub tandem: Tandem,
    pub variant: VariantRepeat,
    pub block: BlockRepeat,
    /// A response ended since the last char: the next text starts after a boundary.
    #[serde(default)]
    pending_boundary: bool,
    /// Fenced code quoted in the reasoning: the block detector does not see it.
    #[serde(default)]
    fences: fence::Fences,
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
            pending_boundary: false,
            fences: fence::Fences::default(),
        }
    }

    /// A model response ended: its text and the next one's are not one passage.
    pub fn boundary(&mut self) {
        self.pending_boundary = true;
    }

    /// Feeds text; every hit resets the stream, so a hit needs fresh evidence after it.
    /// `enabled` = [tandem, variant, block].
    pub fn push_str(&mut self, text: &str, enabled: [bool; 3], hits: &mut Vec<Hit>) {
        // Room for the whole chunk at once (capped at the tail): tables that grew by
        // doubling were rehashed ~10 times on their way to the tail's size.
        self.tandem.reserve(text.len());
        self.block.reserve(text.len());
        if self.pending_boundary && !text.is_empty() {
            self.pending_boundary = false;
            self.block.mark_boundary();
            let _ = self.fences.push(BOUNDARY);
            let t = self.tandem.push(BOUNDARY);
            let v = self.variant.push(BOUNDARY);
            let hit = [t, v]
                .into_iter()
                .zip(enabled)
                .find_map(|(h, on)| if on { h } else { None });
            if let Some(hit) = hit {
                hits.push(hit);
                self.reset();
            }
        }
        for c in text.chars() {
            let t = self.tandem.push(c);
            let v = self.variant.push(c);
            let prose = self.fences.push(c).prose;
            let b = if prose && is_body(c) {
                self.block.push(c)
            } else {
                None
            };
            if t.is_none() && v.is_none() && b.is_none() {
                continue;
            }
            let hit = [t, v, b]
                .into_iter()
                .zip(enabled)
                .find_map(|(h, on)| if on { h } else { None });
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
        self.tandem.heap_bytes()
            + self.block.heap_bytes()
            + self.variant.heap_bytes()
            + self.fences.heap_bytes()
    }
}

/// The visible-content stream of one request: long tight repeats of prose; inside fenced
/// code blocks only a whole block written again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentText {
    pub tandem: Tandem,
    #[serde(default)]
    fences: fence::Fences,
    #[serde(default)]
    pending_boundary: bool,
}

impl ContentText {
    pub fn new(span_min: usize, body_min: usize, tail: usize) -> Self {
        ContentText {
            tandem: Tandem::new(span_min, body_min, tail),
            fences: fence::Fences::default(),
            pending_boundary: false,
        }
    }

    /// A model response ended.
    pub fn boundary(&mut self) {
        self.pending_boundary = true;
    }

    pub fn push_str(&mut self, text: &str, hits: &mut Vec<Hit>) {
        self.tandem.reserve(text.len());
        if self.pending_boundary && !text.is_empty() {
            self.pending_boundary = false;
            let step = self.fences.push(BOUNDARY);
            let hit = step.hit.or_else(|| self.tandem.push(BOUNDARY));
            if let Some(hit) = hit {
                hits.push(hit);
                self.tandem.reset();
            }
        }
        for c in text.chars() {
            let step = self.fences.push(c);
            let hit = match step.hit {
                Some(hit) => Some(hit),
                None if step.prose => self.tandem.push(c),
                None => None,
            };
            if let Some(hit) = hit {
                hits.push(hit);
                self.tandem.reset();
            }
        }
    }

    pub fn rebuild(&mut self) {
        self.tandem.rebuild();
    }

    /// Forgets the text so far: what comes next is not compared with it.
    pub fn reset(&mut self) {
        self.tandem.reset();
    }

    pub fn compact(&mut self) {
        self.tandem.compact();
    }

    pub fn heap_bytes(&self) -> usize {
        self.tandem.heap_bytes() + self.fences.heap_bytes()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod exact_tests;
