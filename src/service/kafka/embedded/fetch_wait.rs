//! The embedded broker's front door, its request rewrite: every Fetch request's wait for
//! data (`MaxWaitMs`) is cut to `SHORT_WAIT_MS`. Bytes in place; no IO.
//!
//! Why: librdkafka's mock cluster does not long-poll. A fetch that finds nothing is
//! answered empty after the client's whole wait, even when a record arrives a millisecond
//! later (its Fetch handler says so), while a real broker answers as soon as the record is
//! written. The clients' verdict readers wait 500-1,000 ms (a long poll costs nothing on a
//! real broker), so on the demo every answer came that late: a healthy call took 500 ms and
//! the TypeScript example was never blocked within its 1 s deadline. With the wait cut, an
//! idle reader asks again every few milliseconds, in process and on loopback, and a record
//! is read within about that of its write, as a real broker's long poll gives.

/// Fetch's API key (Kafka protocol).
pub const FETCH: i16 = 1;

/// The longest a fetch waits at the mock for data (ms).
pub const SHORT_WAIT_MS: i32 = 2;

/// Cuts the wait of a Fetch request frame (the request without its size prefix) to
/// `SHORT_WAIT_MS`; true when it did. Any other request, a shorter wait, or a frame that
/// does not parse is left as it is.
pub fn shorten(frame: &mut [u8]) -> bool {
    match wait_at(frame) {
        Some(at) => {
            let wait = i32::from_be_bytes(frame[at..at + 4].try_into().expect("4 bytes"));
            if wait <= SHORT_WAIT_MS {
                return false;
            }
            frame[at..at + 4].copy_from_slice(&SHORT_WAIT_MS.to_be_bytes());
            true
        }
        None => false,
    }
}

/// Where `MaxWaitMs` starts in a Fetch request: after the header (key, version,
/// correlation id, client id; tagged fields from v12, whose header is flexible) and, up to
/// v14, `ReplicaId`.
fn wait_at(frame: &[u8]) -> Option<usize> {
    let key = i16::from_be_bytes(frame.get(0..2)?.try_into().ok()?);
    let version = i16::from_be_bytes(frame.get(2..4)?.try_into().ok()?);
    if key != FETCH || !(0..=16).contains(&version) {
        return None;
    }
    let client_id = i16::from_be_bytes(frame.get(8..10)?.try_into().ok()?);
    let mut at = 10 + usize::try_from(client_id.max(0)).ok()?;
    if version >= 12 {
        at = skip_tags(frame, at)?;
    }
    if version <= 14 {
        at += 4;
    }
    frame.get(at..at + 4).map(|_| at)
}

/// Past a tagged-field section that starts at `at`.
fn skip_tags(frame: &[u8], mut at: usize) -> Option<usize> {
    let (count, n) = uvarint(frame.get(at..)?)?;
    at += n;
    for _ in 0..count {
        let (_, n) = uvarint(frame.get(at..)?)?;
        at += n;
        let (size, n) = uvarint(frame.get(at..)?)?;
        at = at
            .checked_add(n)?
            .checked_add(usize::try_from(size).ok()?)?;
    }
    Some(at)
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Fetch request's first bytes: header, then `ReplicaId` up to v14, the wait, more.
    fn fetch(version: i16, client_id: Option<&str>, wait: i32) -> Vec<u8> {
        let mut b = FETCH.to_be_bytes().to_vec();
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&42i32.to_be_bytes());
        match client_id {
            Some(id) => {
                b.extend_from_slice(&(id.len() as i16).to_be_bytes());
                b.extend_from_slice(id.as_bytes());
            }
            None => b.extend_from_slice(&(-1i16).to_be_bytes()),
        }
        if version >= 12 {
            b.push(0);
        }
        if version <= 14 {
            b.extend_from_slice(&(-1i32).to_be_bytes());
        }
        b.extend_from_slice(&wait.to_be_bytes());
        b.extend_from_slice(b"REST");
        b
    }

    #[test]
    fn a_long_wait_is_cut_and_nothing_else_moves() {
        for version in [0, 4, 7, 11, 12, 15] {
            for id in [Some("rdkafka"), Some(""), None] {
                let mut got = fetch(version, id, 500);
                assert!(shorten(&mut got), "v{version} {id:?}");
                assert_eq!(got, fetch(version, id, SHORT_WAIT_MS), "v{version} {id:?}");
            }
        }
    }

    #[test]
    fn a_short_wait_other_requests_and_cut_frames_are_left_alone() {
        let mut short = fetch(11, Some("x"), 0);
        assert!(!shorten(&mut short));
        assert_eq!(short, fetch(11, Some("x"), 0));
        let mut produce = fetch(7, Some("x"), 500);
        produce[1] = 0;
        assert!(!shorten(&mut produce));
        let full = fetch(11, Some("rdkafka"), 500);
        for cut in 0..full.len() - b"REST".len() {
            let mut part = full[..cut].to_vec();
            assert!(!shorten(&mut part), "{cut}");
            assert_eq!(part, full[..cut]);
        }
    }
}
