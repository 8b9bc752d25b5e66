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
