//! Bounded windows addressed by absolute position (the detectors' tails, and their per-char
//! tables), in power-of-two buffers read with a mask.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The values at absolute positions `start..end`, each at its position masked by the
/// buffer's size (a power of two). The buffer grows by doubling while the window is full,
/// so a short text keeps a small one; evicting first bounds it.
#[derive(Debug, Clone, Default)]
pub struct PosRing<T> {
    start: u64,
    len: usize,
    buf: Vec<T>,
}

impl<T: Copy + Default> PosRing<T> {
    /// Absolute position of the first value kept.
    #[inline]
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Absolute position one past the last value.
    #[inline]
    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn slot(&self, pos: u64) -> usize {
        (pos as usize) & (self.buf.len() - 1)
    }

    /// The value at `pos`, which must be kept (`start <= pos < end`).
    #[inline]
    pub fn get(&self, pos: u64) -> T {
        debug_assert!(pos >= self.start && pos < self.end());
        self.buf[self.slot(pos)]
    }

    /// Replaces the value at `pos`, which must be kept.
    #[inline]
    pub fn set(&mut self, pos: u64, value: T) {
        debug_assert!(pos >= self.start && pos < self.end());
        let i = self.slot(pos);
        self.buf[i] = value;
    }

    #[cfg(test)]
    pub fn at(&self, pos: u64) -> Option<T> {
        (pos >= self.start && pos < self.end()).then(|| self.get(pos))
    }

    #[inline]
    pub fn push(&mut self, value: T) {
        if self.len == self.buf.len() {
            self.grow_to((self.len * 2).max(16));
        }
        let i = self.slot(self.end());
        self.buf[i] = value;
        self.len += 1;
    }

    #[inline]
    pub fn pop_front(&mut self) {
        self.drop_front(1);
    }

    /// Drops the `n` oldest values (all of them if fewer are kept).
    #[inline]
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.start += n as u64;
        self.len -= n;
    }

    /// Drops every value; the next one pushed is at `end`.
    pub fn clear(&mut self) {
        self.start = self.end();
        self.len = 0;
    }

    /// Empties the window and starts it at `start`, keeping the buffer.
    pub fn restart_at(&mut self, start: u64) {
        self.start = start;
        self.len = 0;
    }

    /// Room for `total` values without growing again (rounded up to a power of two).
    pub fn reserve(&mut self, total: usize) {
        if total > self.buf.len() {
            self.grow_to(total.next_power_of_two());
        }
    }

    /// The buffer's size in values (a power of two, or 0).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The kept values in order, as the two runs of the buffer they occupy.
    fn runs(&self) -> (&[T], &[T]) {
        if self.len == 0 {
            return (&[], &[]);
        }
        let first = self.slot(self.start);
        let head = (self.buf.len() - first).min(self.len);
        (&self.buf[first..first + head], &self.buf[..self.len - head])
    }

    /// Moves the kept values into a buffer of `cap` (a power of two), each at its masked
    /// slot, copied run by run; each slot is written once.
    fn grow_to(&mut self, cap: usize) {
        let (a, b) = self.runs();
        let kept = || a.iter().chain(b).copied();
        let first = (self.start as usize) & (cap - 1);
        // The kept window is shorter than `cap`: it wraps at most once in the new buffer.
        let wrapped = self.len.saturating_sub(cap - first);
        let mut buf = Vec::with_capacity(cap);
        buf.extend(kept().skip(self.len - wrapped));
        buf.resize(first, T::default());
        buf.extend(kept().take(self.len - wrapped));
        buf.resize(cap, T::default());
        self.buf = buf;
    }

    pub fn heap_bytes(&self) -> usize {
        self.buf.capacity() * std::mem::size_of::<T>()
    }
}

/// The kept chars of a detector's tail.
pub type CharRing = PosRing<char>;

impl CharRing {
    /// The chars in `[from, to)` as a string (clipped to what is kept).
    pub fn slice(&self, from: u64, to: u64) -> String {
        (from.max(self.start)..to.min(self.end()))
            .map(|p| self.get(p))
            .collect()
    }
}

/// On the wire a tail is its first position and its chars as one string.
#[derive(Serialize, Deserialize)]
#[serde(rename = "CharRing")]
struct WireRing<S> {
    start: u64,
    chars: S,
}

impl Serialize for CharRing {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireRing {
            start: self.start,
            chars: self.slice(self.start, self.end()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for CharRing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = WireRing::<String>::deserialize(d)?;
        let mut ring = CharRing {
            start: wire.start,
            ..CharRing::default()
        };
        // Sized by chars, not bytes: CJK text would otherwise get three times the tail.
        ring.reserve(wire.chars.chars().count());
        for c in wire.chars.chars() {
            ring.push(c);
        }
        Ok(ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_keeps_absolute_positions_through_growth_and_eviction() {
        let mut r = CharRing::default();
        for (i, c) in "abcdefghijklmnopqrstuvwxyz".chars().enumerate() {
            r.push(c);
            if i >= 20 {
                r.pop_front();
            }
        }
        assert_eq!((r.start(), r.end()), (6, 26));
        assert_eq!(r.at(5), None);
        assert_eq!(r.at(6), Some('g'));
        assert_eq!(r.slice(0, 9), "ghi");
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"{"start":6,"chars":"ghijklmnopqrstuvwxyz"}"#);
        let back: CharRing = serde_json::from_str(&json).unwrap();
        assert_eq!(back.slice(0, 100), r.slice(0, 100));
        assert_eq!(back.start(), 6);
    }
}
