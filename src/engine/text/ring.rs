//! A bounded char window addressed by absolute position, the shared tail of the detectors.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CharRing {
    /// Absolute position of the first char kept.
    pub start: u64,
    #[serde(with = "chars_as_string")]
    pub chars: VecDeque<char>,
}

impl CharRing {
    /// Absolute position one past the last char.
    #[inline]
    pub fn end(&self) -> u64 {
        self.start + self.chars.len() as u64
    }

    #[inline]
    pub fn at(&self, pos: u64) -> Option<char> {
        pos.checked_sub(self.start)
            .and_then(|i| self.chars.get(i as usize).copied())
    }

    #[inline]
    pub fn push(&mut self, c: char) {
        self.chars.push_back(c);
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<char> {
        let c = self.chars.pop_front()?;
        self.start += 1;
        Some(c)
    }

    /// The chars in `[from, to)` as a string (clipped to what is kept).
    pub fn slice(&self, from: u64, to: u64) -> String {
        (from.max(self.start)..to.min(self.end()))
            .filter_map(|p| self.at(p))
            .collect()
    }

    pub fn clear(&mut self) {
        self.start = self.end();
        self.chars.clear();
    }

    pub fn heap_bytes(&self) -> usize {
        self.chars.capacity() * 4
    }
}

/// A polynomial rolling hash over the last `width` chars of a ring (derived state).
#[derive(Debug, Clone, Default)]
pub struct Rolling {
    hash: u64,
    pow: u64,
    width: u64,
}

impl Rolling {
    pub fn new(width: usize) -> Self {
        Rolling {
            hash: 0,
            pow: super::base_pow(width),
            width: width as u64,
        }
    }

    /// Adds the char at `pos` (the newest in `ring`); the hash of the `width` chars ending
    /// there once the ring holds that many, never 0.
    #[inline]
    pub fn roll(&mut self, ring: &CharRing, pos: u64) -> Option<u64> {
        let c = ring.at(pos).unwrap_or('\0');
        self.hash = self
            .hash
            .wrapping_mul(super::BASE)
            .wrapping_add(super::mix(c));
        if pos >= ring.start + self.width {
            let out = ring.at(pos - self.width).unwrap_or('\0');
            self.hash = self
                .hash
                .wrapping_sub(super::mix(out).wrapping_mul(self.pow));
        }
        (pos + 1 >= ring.start + self.width).then_some(self.hash | 1)
    }

    pub fn reset(&mut self) {
        self.hash = 0;
    }
}

mod chars_as_string {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::VecDeque;

    pub fn serialize<S: Serializer>(v: &VecDeque<char>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&v.iter().collect::<String>())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<char>, D::Error> {
        Ok(String::deserialize(d)?.chars().collect())
    }
}
