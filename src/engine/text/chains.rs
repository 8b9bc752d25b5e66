//! Which earlier entry of a sequence (the anchors of a text tail, in the order they come)
//! had the same hash: a per-entry link to it, found through a table of buckets that chain
//! their entries newest first. Nothing is ever removed: an entry that left reads as none,
//! so eviction is free.

use super::ring::PosRing;

/// One position: its hash (0 = none), the distance back to the previous position with the
/// same hash and to the previous position in the same bucket (0 = none), and what the
/// detector keeps beside it.
#[derive(Debug, Clone, Copy, Default)]
struct Link<P> {
    hash: u64,
    same: u32,
    next: u32,
    payload: P,
}

#[derive(Debug, Clone, Default)]
pub struct HashChains<P> {
    links: PosRing<Link<P>>,
    /// Bucket -> the newest position in it, + 1 (0 = none); one to two per link.
    heads: Vec<u64>,
}

impl<P: Copy + Default> HashChains<P> {
    /// Empties the index; the next position pushed is `start`.
    pub fn restart_at(&mut self, start: u64) {
        self.links.restart_at(start);
    }

    /// The oldest position kept.
    #[inline]
    pub fn start(&self) -> u64 {
        self.links.start()
    }

    /// One past the newest position.
    #[inline]
    pub fn end(&self) -> u64 {
        self.links.end()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.links.len()
    }

    #[inline]
    fn bucket(&self, hash: u64) -> usize {
        let bits = self.heads.len().trailing_zeros();
        (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    /// Appends position `end()` with `hash` (0: none there) and returns the previous
    /// position with the same hash at or after `live_from`, if any.
    #[inline]
    pub fn push(&mut self, hash: u64, payload: P, live_from: u64) -> Option<u64> {
        if self.links.len() == self.links.capacity() {
            self.grow();
        }
        let pos = self.links.end();
        let mut link = Link {
            hash,
            same: 0,
            next: 0,
            payload,
        };
        if hash == 0 {
            self.links.push(link);
            return None;
        }
        let b = self.bucket(hash);
        let oldest = self.links.start();
        let head = self.heads[b];
        let mut prev = None;
        if head > oldest {
            link.next = (pos + 1 - head) as u32;
            let mut q = head - 1;
            loop {
                let l = self.links.get(q);
                if l.hash == hash {
                    link.same = (pos - q) as u32;
                    prev = Some(q).filter(|&q| q >= live_from);
                    break;
                }
                match q.checked_sub(u64::from(l.next)) {
                    Some(n) if l.next != 0 && n >= oldest => q = n,
                    _ => break,
                }
            }
        }
        self.heads[b] = pos + 1;
        self.links.push(link);
        prev
    }

    /// The previous position with the same hash as `pos` (kept or not: callers check).
    #[inline]
    pub fn same_before(&self, pos: u64) -> Option<u64> {
        let same = self.links.get(pos).same;
        (same != 0).then(|| pos - u64::from(same))
    }

    #[inline]
    pub fn payload(&self, pos: u64) -> P {
        self.links.get(pos).payload
    }

    #[inline]
    pub fn pop_front(&mut self) {
        self.links.pop_front();
    }

    /// Room for `total` positions without growing on the way.
    pub fn reserve(&mut self, total: usize) {
        if total > self.links.capacity() {
            self.links.reserve(total);
            self.rechain_if_loaded();
        }
    }

    /// Frees the tables (the next push starts them again).
    pub fn free(&mut self) {
        *self = HashChains::default();
    }

    fn grow(&mut self) {
        self.links.reserve((self.links.capacity() * 2).max(16));
        self.rechain_if_loaded();
    }

    /// Buckets stay valid while the links grow (links hold distances, not slots); they are
    /// sized again only once there are more positions than buckets.
    fn rechain_if_loaded(&mut self) {
        if self.heads.len() < self.links.capacity() {
            self.rechain();
        }
    }

    /// Sizes the bucket table to the links and chains every kept position again (the
    /// same-hash links stay: they are distances between kept positions).
    fn rechain(&mut self) {
        self.heads = vec![0; self.links.capacity() * 2];
        for pos in self.links.start()..self.links.end() {
            let mut l = self.links.get(pos);
            if l.hash == 0 {
                continue;
            }
            let b = self.bucket(l.hash);
            let head = self.heads[b];
            l.next = if head > self.links.start() {
                (pos + 1 - head) as u32
            } else {
                0
            };
            self.links.set(pos, l);
            self.heads[b] = pos + 1;
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.links.heap_bytes() + self.heads.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_newest_earlier_position_with_the_same_hash_within_the_tail() {
        let mut c = HashChains::<()>::default();
        let hashes = [5u64, 7, 5, 0, 9, 7, 5];
        let mut found = Vec::new();
        for h in hashes {
            found.push(c.push(h, (), 0));
        }
        assert_eq!(found, [None, None, Some(0), None, None, Some(1), Some(2)]);
        assert_eq!(c.same_before(6), Some(2));
        c.pop_front();
        c.pop_front();
        c.pop_front();
        // Positions 0..3 left the tail: 7 at 1 is gone, so the 7 at 5 is the first kept.
        assert_eq!(c.push(7, (), 3), Some(5));
        assert_eq!(c.push(5, (), 3), Some(6));
        // Live from 10 on: the 5 at 9 is kept but not live.
        assert_eq!(c.push(5, (), 8), Some(8));
        assert_eq!(c.push(5, (), 10), None);
    }

    #[test]
    fn growth_keeps_every_link() {
        let mut c = HashChains::<u32>::default();
        for i in 0..1000u64 {
            let prev = c.push(i % 37 + 1, i as u32, 0);
            assert_eq!(prev, i.checked_sub(37));
        }
        assert_eq!(c.payload(999), 999);
    }
}
