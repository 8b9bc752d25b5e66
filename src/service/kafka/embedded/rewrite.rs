//! The embedded broker's front door, its pure part: rewrites the two responses of
//! librdkafka's mock cluster that name brokers (Metadata, FindCoordinator) so clients see
//! the front's fixed address, and a controller that exists. Bytes in, bytes out; no IO.
//!
//! Why: the mock (librdkafka 2.3) listens on a random port, and its Metadata responses
//! give `ControllerId` 0 while its brokers are numbered from 1. librdkafka's clients never
//! ask for the controller; kafkajs sends an idempotent producer's `InitProducerId` to it
//! and fails with `KafkaJSBrokerNotFound: Broker 0 not found in the cached metadata`.

/// The API keys rewritten (Kafka protocol).
pub const METADATA: i16 = 3;
pub const FIND_COORDINATOR: i16 = 10;

/// What the front advertises for the one broker behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// The rewritten response body (without its size prefix), or None when it is left as it
/// is: another API, a version the mock does not write, or a body that does not parse.
pub fn rewrite(api_key: i16, version: i16, body: &[u8], adv: &Advertised) -> Option<Vec<u8>> {
    match api_key {
        METADATA => metadata(version, body, adv),
        FIND_COORDINATOR => find_coordinator(version, body, adv),
        _ => None,
    }
}

/// Metadata v0-9 (flexible from 9): the brokers' host and port become the front's, and a
/// controller id naming no listed broker becomes the front's broker.
fn metadata(version: i16, body: &[u8], adv: &Advertised) -> Option<Vec<u8>> {
    if !(0..=12).contains(&version) {
        return None;
    }
    let flex = version >= 9;
    let mut r = Reader { buf: body, pos: 0 };
    r.skip(4)?; // correlation id
    if flex {
        r.tags()?;
    }
    if version >= 3 {
        r.skip(4)?; // throttle time
    }
    let brokers = r.array_len(flex)?;
    let mut out = body[..r.pos].to_vec();
    let mut ids = Vec::new();
    for _ in 0..brokers {
        let node_id = r.i32()?;
        let host = r.string(flex)?;
        let port = r.i32()?;
        let from = r.pos;
        if version >= 1 {
            r.string(flex)?; // rack
        }
        if flex {
            r.tags()?;
        }
        ids.push(node_id);
        out.extend_from_slice(&node_id.to_be_bytes());
        if node_id == adv.node_id {
            put_string(&mut out, adv.host.as_bytes(), flex);
            out.extend_from_slice(&adv.port.to_be_bytes());
        } else {
            put_string(&mut out, host, flex);
            out.extend_from_slice(&port.to_be_bytes());
        }
        out.extend_from_slice(&body[from..r.pos]);
    }
    if version >= 2 {
        let from = r.pos;
        r.string(flex)?; // cluster id
        out.extend_from_slice(&body[from..r.pos]);
    }
    if version >= 1 {
        let controller = r.i32()?;
        let controller = match ids.contains(&controller) {
            true => controller,
            false => adv.node_id,
        };
        out.extend_from_slice(&controller.to_be_bytes());
    }
    out.extend_from_slice(&body[r.pos..]);
    Some(out)
}

/// FindCoordinator v0-3 (flexible from 3; v4's list of coordinators the mock does not
/// write): the coordinator's host and port become the front's.
fn find_coordinator(version: i16, body: &[u8], adv: &Advertised) -> Option<Vec<u8>> {
    if !(0..=3).contains(&version) {
        return None;
    }
    let flex = version >= 3;
    let mut r = Reader { buf: body, pos: 0 };
    r.skip(4)?;
    if flex {
        r.tags()?;
    }
    if version >= 1 {
        r.skip(4)?; // throttle time
    }
    r.skip(2)?; // error code
    if version >= 1 {
        r.string(flex)?; // error message
    }
    let node_at = r.pos;
    let node_id = r.i32()?;
    r.string(flex)?;
    r.i32()?;
    if node_id != adv.node_id {
        return None;
    }
    let mut out = body[..node_at].to_vec();
    out.extend_from_slice(&node_id.to_be_bytes());
    put_string(&mut out, adv.host.as_bytes(), flex);
    out.extend_from_slice(&adv.port.to_be_bytes());
    out.extend_from_slice(&body[r.pos..]);
    Some(out)
}

/// A string (compact when `flex`), nullable strings included.
fn put_string(out: &mut Vec<u8>, s: &[u8], flex: bool) {
    if flex {
        put_uvarint(out, s.len() as u64 + 1);
    } else {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    }
    out.extend_from_slice(s);
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Some(s)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.take(1)?.first()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// An array's length: compact (length + 1) when `flex`; a null array is empty.
    fn array_len(&mut self, flex: bool) -> Option<usize> {
        match flex {
            true => Some(self.uvarint()?.saturating_sub(1) as usize),
            false => Some(self.i32()?.max(0) as usize),
        }
    }

    /// A string's bytes (empty when null).
    fn string(&mut self, flex: bool) -> Option<&'a [u8]> {
        let len = match flex {
            true => self.uvarint()?.checked_sub(1),
            false => u64::try_from(self.i16()?).ok(),
        };
        match len {
            Some(n) => self.take(usize::try_from(n).ok()?),
            None => Some(&[]),
        }
    }

    /// Tagged fields: skipped.
    fn tags(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(usize::try_from(size).ok()?)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adv() -> Advertised {
        Advertised {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9192,
        }
    }

    /// A Metadata response as the mock writes it: one broker, then `topics` (kept as is).
    fn mock_metadata(version: i16, controller: i32, port: i32) -> Vec<u8> {
        let flex = version >= 9;
        let mut b = 7i32.to_be_bytes().to_vec(); // correlation id
        if flex {
            b.push(0);
        }
        if version >= 3 {
            b.extend_from_slice(&0i32.to_be_bytes());
        }
        match flex {
            true => put_uvarint(&mut b, 2),
            false => b.extend_from_slice(&1i32.to_be_bytes()),
        }
        b.extend_from_slice(&1i32.to_be_bytes());
        put_string(&mut b, b"127.0.0.1", flex);
        b.extend_from_slice(&port.to_be_bytes());
        if version >= 1 {
            match flex {
                true => b.push(0),
                false => b.extend_from_slice(&(-1i16).to_be_bytes()),
            }
        }
        if flex {
            b.push(0);
        }
        if version >= 2 {
            put_string(&mut b, b"mockCluster1a2b", flex);
        }
        if version >= 1 {
            b.extend_from_slice(&controller.to_be_bytes());
        }
        b.extend_from_slice(b"TOPICS");
        b
    }

    #[test]
    fn metadata_gets_the_fronts_address_and_a_controller_that_exists() {
        for version in 0..=9 {
            let got = rewrite(METADATA, version, &mock_metadata(version, 0, 41234), &adv());
            let controller = if version >= 1 { 1 } else { 0 };
            assert_eq!(
                got,
                Some(mock_metadata(version, controller, 9192)),
                "v{version}"
            );
        }
    }

    #[test]
    fn a_controller_that_exists_is_kept() {
        let got = rewrite(METADATA, 9, &mock_metadata(9, 1, 41234), &adv());
        assert_eq!(got, Some(mock_metadata(9, 1, 9192)));
    }

    #[test]
    fn find_coordinator_gets_the_fronts_address() {
        for version in 0..=3 {
            let flex = version >= 3;
            let reply = |host: &[u8], port: i32| {
                let mut b = 9i32.to_be_bytes().to_vec();
                if flex {
                    b.push(0);
                }
                if version >= 1 {
                    b.extend_from_slice(&0i32.to_be_bytes());
                }
                b.extend_from_slice(&0i16.to_be_bytes());
                if version >= 1 {
                    match flex {
                        true => b.push(0),
                        false => b.extend_from_slice(&(-1i16).to_be_bytes()),
                    }
                }
                b.extend_from_slice(&1i32.to_be_bytes());
                put_string(&mut b, host, flex);
                b.extend_from_slice(&port.to_be_bytes());
                if flex {
                    b.push(0);
                }
                b
            };
            let got = rewrite(
                FIND_COORDINATOR,
                version,
                &reply(b"localhost", 41234),
                &adv(),
            );
            assert_eq!(got, Some(reply(b"127.0.0.1", 9192)), "v{version}");
        }
    }

    #[test]
    fn other_apis_and_cut_bodies_pass_unchanged() {
        assert_eq!(rewrite(0, 7, b"anything", &adv()), None);
        let full = mock_metadata(9, 0, 41234);
        for cut in 0..full.len() - b"TOPICS".len() {
            assert_eq!(rewrite(METADATA, 9, &full[..cut], &adv()), None, "{cut}");
        }
    }
}
