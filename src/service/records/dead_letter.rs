//! Dead letters: what the guard writes for a record it cannot judge. Every part is bounded
//! (key, each header, the error text, the payload) so the whole record fits the topic's
//! limit; when even that cannot be written, a minimal one (reason and source, nothing of
//! the record) is. Pure: builds records, never sends them, so it is unit- and
//! property-tested without a broker.

use crate::engine::event::{quote, DecodeError, Event};

/// Longest key copied; a longer one keeps its head (session ids are at most 256 chars).
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest header name and value copied from the source record.
pub const MAX_HEADER_NAME_BYTES: usize = 256;
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
/// The source record's headers are copied up to this many bytes in all (a quarter of the
/// limit when that is less); the rest are dropped (counted in `loopguard-headers-dropped`).
pub const MAX_COPIED_HEADERS_BYTES: usize = 16 * 1024;
/// Longest error text (`loopguard-error`).
pub const MAX_ERROR_BYTES: usize = 512;
/// A payload above this is cut to its head even when the record would fit: the original
/// stays at its source offset, and a near-limit dead letter would crowd the transaction.
pub const CUT_PAYLOAD_ABOVE: usize = 900_000;
/// The head kept of a cut payload (less when the limit leaves less room).
pub const CUT_PAYLOAD_TO: usize = 64 * 1024;
/// Room left for the record batch header, the record's own framing and varints.
pub const RECORD_OVERHEAD: usize = 512;
/// Per-header framing (name and value lengths as varints).
const HEADER_OVERHEAD: usize = 12;
/// Smallest dead-letter limit the configuration accepts: a minimal dead letter always fits.
pub use crate::config::MIN_DLQ_LIMIT as MIN_LIMIT;

/// Why a record is not judged: a `DecodeError` reason (or `empty_payload`), or
/// `retry_limit` for a record given up after `max_record_retries` retries.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub reason: &'static str,
    pub detail: String,
}

/// The one way the service reads a consumed record: keyless and empty records are
/// rejected before any decoding; a rejected record is dead-lettered, never judged. The
/// restore re-run reads records through it too, so it skips exactly what was skipped.
pub fn read_event(key: Option<&[u8]>, payload: Option<&[u8]>) -> Result<Event, Rejected> {
    let rejected = |e: DecodeError| Rejected {
        reason: e.reason(),
        detail: e.to_string(),
    };
    if key.is_none() {
        return Err(rejected(DecodeError::MissingKey));
    }
    match payload {
        None => Err(Rejected {
            reason: "empty_payload",
            detail: "event has no value".into(),
        }),
        Some(bytes) => Event::decode_keyed(bytes, key).map_err(rejected),
    }
}

/// The dead-letter reason of an event, read from a tenant's own events topic, whose
/// `tenant` field names another tenant.
pub const TENANT_MISMATCH: &str = "tenant_mismatch";

/// As `read_event`, for a record of `tenant`'s own events topic (`None`: the shared events
/// topic, where the event's own `tenant` stands): the tenant is the writer's, so an event
/// naming another is rejected, and one naming none gets the writer's. The restore re-run
/// reads through it too, so a re-run skips and stamps exactly as the first run did.
pub fn read_event_of(
    tenant: Option<&str>,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
) -> Result<Event, Rejected> {
    let mut event = read_event(key, payload)?;
    if let Some(writer) = tenant {
        written_by(&mut event, writer).map_err(|detail| Rejected {
            reason: TENANT_MISMATCH,
            detail,
        })?;
    }
    Ok(event)
}

/// Makes `event` tenant `writer`'s, as read from that tenant's own events topic: one that
/// names no tenant gets `writer`; one naming another is refused (the reason's detail).
/// The service and `loopguard replay --tenant` read through it alike.
pub fn written_by(event: &mut Event, writer: &str) -> Result<(), String> {
    match event.meta.tenant.as_deref() {
        Some(named) if named != writer => Err(format!(
            "the event names tenant `{named}` but was written to tenant `{writer}`'s events topic: a tenant is who writes, never what the event says"
        )),
        Some(_) => Ok(()),
        None => {
            event.meta.tenant = Some(writer.to_string());
            Ok(())
        }
    }
}

/// Where the dead record was read.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

/// A dead letter ready to send: key and payload borrow the source record.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter<'a> {
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl DeadLetter<'_> {
    /// An upper bound of the record's size on the wire, batch framing included.
    pub fn size(&self) -> usize {
        RECORD_OVERHEAD
            + self.key.map_or(0, <[u8]>::len)
            + self.payload.map_or(0, <[u8]>::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len() + HEADER_OVERHEAD)
                .sum::<usize>()
    }

    fn header(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.headers.push((name.to_string(), value.into()));
    }

    /// The source record's key, bytes and headers (all cut to their bounds), with the
    /// error headers; the payload is cut until the record fits `limit`.
    pub fn new<'a>(
        source: Source<'_>,
        key: Option<&'a [u8]>,
        payload: Option<&'a [u8]>,
        headers: &[(&str, Option<&[u8]>)],
        rejected: &Rejected,
        limit: usize,
    ) -> DeadLetter<'a> {
        let mut d = DeadLetter::minimal(source, rejected);
        d.key = key.map(|k| &k[..k.len().min(MAX_KEY_BYTES)]);
        if let Some(k) = key.filter(|k| k.len() > MAX_KEY_BYTES) {
            d.header("loopguard-key-truncated", k.len().to_string());
        }
        let mut copied = Vec::new();
        let (mut used, mut dropped) = (0, 0usize);
        let budget = MAX_COPIED_HEADERS_BYTES.min(limit / 4);
        for (name, value) in headers {
            let name = cut_str(name, MAX_HEADER_NAME_BYTES);
            let value = value.map(|v| &v[..v.len().min(MAX_HEADER_VALUE_BYTES)]);
            let size = name.len() + value.map_or(0, <[u8]>::len) + HEADER_OVERHEAD;
            if used + size > budget {
                dropped += 1;
                continue;
            }
            used += size;
            copied.push((name.to_string(), value.unwrap_or_default().to_vec()));
        }
        // The source's headers first, as they came; then ours.
        copied.append(&mut d.headers);
        d.headers = copied;
        if dropped > 0 {
            d.header("loopguard-headers-dropped", dropped.to_string());
        }
        if let Some(p) = payload {
            // Room for the payload once a truncation header is accounted for.
            let room = limit.saturating_sub(d.size() + 64);
            if p.len() <= room.min(CUT_PAYLOAD_ABOVE) {
                d.payload = Some(p);
            } else {
                d.header("loopguard-payload-truncated", p.len().to_string());
                d.payload = Some(&p[..p.len().min(CUT_PAYLOAD_TO).min(room)]);
            }
        }
        if d.size() > limit {
            // Only a limit below `MIN_LIMIT` gets here (the configuration refuses one).
            return DeadLetter::minimal(source, rejected);
        }
        d
    }

    /// Reason, error text and source only: nothing of the record. Written when a full dead
    /// letter cannot be, and for records given up after repeated failures.
    pub fn minimal<'a>(source: Source<'_>, rejected: &Rejected) -> DeadLetter<'a> {
        let mut d = DeadLetter {
            key: None,
            payload: None,
            headers: Vec::with_capacity(8),
        };
        d.header("loopguard-error-reason", rejected.reason);
        d.header(
            "loopguard-error",
            cut_str(&quote(&rejected.detail), MAX_ERROR_BYTES),
        );
        d.header(
            "loopguard-source-topic",
            cut_str(source.topic, MAX_HEADER_VALUE_BYTES),
        );
        d.header("loopguard-source-partition", source.partition.to_string());
        d.header("loopguard-source-offset", source.offset.to_string());
        d
    }

    /// As `minimal`, marked as such (the full dead letter could not be written).
    pub fn minimal_marked<'a>(source: Source<'_>, rejected: &Rejected) -> DeadLetter<'a> {
        let mut d = DeadLetter::minimal(source, rejected);
        d.header("loopguard-minimal", "1");
        d
    }
}

/// `s` cut to at most `max` bytes on a char boundary.
fn cut_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Source<'static> = Source {
        topic: "agent-events",
        partition: 3,
        offset: 42,
    };

    fn rejected(detail: &str) -> Rejected {
        Rejected {
            reason: "wrong_type",
            detail: detail.into(),
        }
    }

    #[test]
    fn on_a_tenant_topic_the_writer_is_the_tenant() {
        let event = |tenant: &str| {
            format!(
                r#"{{"v":1,"event_id":"e1","session_id":"s1","ts":1,"type":"compaction"{tenant}}}"#
            )
        };
        let named = event(r#","tenant":"acme""#);
        let forged = read_event_of(Some("beta"), Some(b"s1"), Some(named.as_bytes())).unwrap_err();
        assert_eq!(forged.reason, TENANT_MISMATCH);
        assert!(
            forged.detail.contains("`acme`") && forged.detail.contains("`beta`"),
            "{}",
            forged.detail
        );
        let own = read_event_of(Some("acme"), Some(b"s1"), Some(named.as_bytes())).unwrap();
        assert_eq!(own.meta.tenant.as_deref(), Some("acme"));
        let unnamed = event("");
        let stamped = read_event_of(Some("beta"), Some(b"s1"), Some(unnamed.as_bytes())).unwrap();
        assert_eq!(stamped.meta.tenant.as_deref(), Some("beta"));
        // The shared topic keeps what the event says.
        let shared = read_event_of(None, Some(b"s1"), Some(named.as_bytes())).unwrap();
        assert_eq!(shared.meta.tenant.as_deref(), Some("acme"));
        assert!(read_event_of(None, Some(b"s1"), Some(unnamed.as_bytes()))
            .unwrap()
            .meta
            .tenant
            .is_none());
    }

    fn header<'a>(d: &'a DeadLetter<'_>, name: &str) -> Option<&'a [u8]> {
        d.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    #[test]
    fn a_small_record_is_copied_whole_with_its_headers() {
        let r = rejected("bad");
        let d = DeadLetter::new(
            SRC,
            Some(b"s1"),
            Some(b"{}"),
            &[("trace", Some(b"abc"))],
            &r,
            1_000_000,
        );
        assert_eq!(d.key, Some(&b"s1"[..]));
        assert_eq!(d.payload, Some(&b"{}"[..]));
        assert_eq!(d.headers[0], ("trace".to_string(), b"abc".to_vec()));
        assert_eq!(
            header(&d, "loopguard-error-reason"),
            Some(&b"wrong_type"[..])
        );
        assert_eq!(header(&d, "loopguard-source-offset"), Some(&b"42"[..]));
        assert!(header(&d, "loopguard-payload-truncated").is_none());
    }

    #[test]
    fn a_huge_key_error_and_headers_are_cut_and_the_payload_fits() {
        let key = vec![b'k'; 400_000];
        let payload = vec![b'p'; 600_000];
        let value = vec![b'v'; 5000];
        let headers: Vec<(&str, Option<&[u8]>)> =
            (0..100).map(|_| ("h", Some(value.as_slice()))).collect();
        let r = rejected(&"x".repeat(600_000));
        for limit in [MIN_LIMIT, 100_000, 1_000_000] {
            let d = DeadLetter::new(SRC, Some(&key), Some(&payload), &headers, &r, limit);
            assert!(d.size() <= limit, "{} > {limit}", d.size());
            assert!(d.key.unwrap().len() <= MAX_KEY_BYTES);
            assert!(header(&d, "loopguard-error").unwrap().len() <= MAX_ERROR_BYTES);
            assert_eq!(header(&d, "loopguard-source-partition"), Some(&b"3"[..]));
        }
        let d = DeadLetter::new(SRC, Some(&key), Some(&payload), &headers, &r, 1_000_000);
        assert_eq!(header(&d, "loopguard-key-truncated"), Some(&b"400000"[..]));
        assert!(header(&d, "loopguard-headers-dropped").is_some());
        assert_eq!(d.payload.unwrap().len(), 600_000, "fits whole");
    }

    #[test]
    fn a_payload_near_the_limit_keeps_its_head() {
        let payload = vec![b'x'; 950_000];
        let d = DeadLetter::new(
            SRC,
            Some(b"s"),
            Some(&payload),
            &[],
            &rejected("x"),
            1_000_000,
        );
        assert_eq!(d.payload.unwrap().len(), CUT_PAYLOAD_TO);
        assert_eq!(
            header(&d, "loopguard-payload-truncated"),
            Some(&b"950000"[..])
        );
    }

    #[test]
    fn a_minimal_dead_letter_holds_nothing_of_the_record() {
        let d = DeadLetter::minimal_marked(SRC, &rejected(&"y".repeat(10_000)));
        assert_eq!((d.key, d.payload), (None, None));
        assert!(d.size() < MIN_LIMIT);
        assert_eq!(header(&d, "loopguard-minimal"), Some(&b"1"[..]));
    }

    #[test]
    fn records_without_a_key_or_value_are_rejected_before_decoding() {
        let event = br#"{"v":1,"event_id":"e","session_id":"s","ts":5,"type":"compaction"}"#;
        assert_eq!(
            read_event(None, Some(event)).unwrap_err().reason,
            "missing_key"
        );
        assert_eq!(read_event(None, None).unwrap_err().reason, "missing_key");
        assert_eq!(
            read_event(Some(b"s"), None).unwrap_err().reason,
            "empty_payload"
        );
        assert!(read_event(Some(b"s"), Some(event)).is_ok());
    }

    #[test]
    fn the_limit_never_exceeds_what_the_producer_accepts() {
        use crate::config::{dlq_limit as limit, PRODUCER_DEFAULT_MAX_BYTES};
        assert_eq!(limit(2_000_000, None), PRODUCER_DEFAULT_MAX_BYTES);
        assert_eq!(limit(2_000_000, Some(1_500_000)), 1_500_000);
        assert_eq!(limit(100_000, Some(1_500_000)), 100_000);
    }
}
