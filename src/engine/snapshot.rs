//! The encoding of one session's state for checkpoints and hand-overs, and for the idle
//! sessions an engine keeps frozen: a leading format byte, then the state. Bytes in,
//! bytes out: no IO.
//!
//! Formats, by their first byte:
//! - `{`: JSON (serde_json), what every version before issue 19 wrote; still read.
//! - `FORMAT_BINARY`: postcard, the fields in declaration order, integers as varints.
//! - `FORMAT_BINARY_LZ4`: the same, then an LZ4 block with its length first (larger
//!   states: the text tails).
//! - `FORMAT_BINARY_DEFLATE`: the same, then raw deflate, its length first: a long state
//!   frozen and idle for long (kept for a long time, where bytes matter more than the time
//!   to pack it once). In memory only: its checkpoint is re-packed as LZ4
//!   (`for_hand_over`), so every build since issue 19 reads every record.
//!
//! postcard is not self-describing: the state types must serialize every field every time
//! (no `skip_serializing_if`, `flatten` or `untagged`), and a build whose state types have
//! other fields cannot read the record. The byte after the format is the layout of the
//! state types (`LAYOUT`): a record of another layout is refused (its session starts
//! afresh on this instance), never misread (docs/decisions.md (ca)).

use super::rules::SessionState;

/// Postcard, uncompressed.
pub const FORMAT_BINARY: u8 = 1;
/// Postcard, then an LZ4 block (its uncompressed length first).
pub const FORMAT_BINARY_LZ4: u8 = 2;
/// Postcard, then raw deflate, its length first (`deflated`: long states long idle).
pub const FORMAT_BINARY_DEFLATE: u8 = 3;
/// The first byte of a JSON state (an object).
const FORMAT_JSON: u8 = b'{';

/// The state types' layout, written after the format byte: bump it with any change to the
/// fields of a serialized state type (`tests/state_encoding.rs` pins the encoding of a
/// known state, so a change cannot pass unnoticed). A record of another layout is refused.
pub const LAYOUT: u8 = 4;
/// The layout before issue 44: layout 4 without the last field of `SessionState`'s last
/// field (`LoopSpend::judged`, the verdicts already judged), read as having none.
const LAYOUT_WITHOUT_JUDGED: u8 = 3;
/// The layout before issue 32: layout 3 without the last two fields of `SessionState`'s
/// last field (`LoopSpend::steers`, `LoopSpend::verdicts`), read as having none.
const LAYOUT_WITHOUT_STEERS: u8 = 2;

/// States of at least this many postcard bytes are compressed (smaller ones gain little).
/// LZ4 rather than deflate: over the fleet's states deflate (level 1) saved another 6 %
/// but took 6x the time (docs/decisions.md (ca)).
const COMPRESS_FROM: usize = 384;
/// A frozen state of at least this many postcard bytes is deflated once long idle:
/// deflate's entropy coding keeps text that LZ4 cannot (a 20 KB response in Chinese and
/// English: 12.3 KB as LZ4, 7.5 KB deflated), at ~1 ms a state (docs/decisions.md (ce)).
const DEFLATE_FROM: usize = 4096;
/// deflate's level for frozen states (miniz: 1 fastest, 9 smallest).
const DEFLATE_LEVEL: u8 = 6;
/// Largest state a record may decompress to (a bound against a corrupt or hostile record;
/// the engine's own bounds keep a session under ~0.3 MB).
const MAX_INFLATED: usize = 8 * 1024 * 1024;

/// Why a state record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("empty state record")]
    Empty,
    #[error("unknown state format byte {0}")]
    UnknownFormat(u8),
    #[error("state of layout {found}, this build reads layout {LAYOUT}")]
    Layout { found: u8 },
    #[error("state JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("state binary: {0}")]
    Binary(String),
    #[error("state decompression: {0}")]
    Decompress(String),
}

/// The state in the current binary format.
pub fn encode(state: &SessionState) -> Vec<u8> {
    let out = postcard_with_header(state);
    let body = &out[2..];
    if body.len() < COMPRESS_FROM {
        return out;
    }
    lz4(body)
}

/// A frozen state long idle, deflated: an LZ4 record of at least `DEFLATE_FROM` postcard
/// bytes re-packed; None for any other record (short ones, or deflated already).
pub fn deflated(frozen: &[u8]) -> Option<Vec<u8>> {
    let (&[format, layout], body) = frozen.split_first_chunk::<2>()?;
    if format != FORMAT_BINARY_LZ4 || layout != LAYOUT {
        return None;
    }
    let (size, _) = lz4_flex::block::uncompressed_size(body).ok()?;
    if size < DEFLATE_FROM {
        return None;
    }
    let body = lz4_flex::block::decompress_size_prepended(body).ok()?;
    let packed = miniz_oxide::deflate::compress_to_vec(&body, DEFLATE_LEVEL);
    let mut out = Vec::with_capacity(6 + packed.len());
    out.extend_from_slice(&[FORMAT_BINARY_DEFLATE, LAYOUT]);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&packed);
    Some(out)
}

/// True for a record in the encoding this build writes (binary or LZ4, this layout): a
/// frozen session may keep it as it is.
pub fn is_current(bytes: &[u8]) -> bool {
    matches!(
        bytes.split_first_chunk::<2>(),
        Some((&[FORMAT_BINARY | FORMAT_BINARY_LZ4, LAYOUT], _))
    )
}

/// A frozen state's bytes in the hand-over encoding: as they are, unless deflated (then
/// its postcard re-packed as LZ4, the bytes `encode` writes for the state).
pub fn for_hand_over(frozen: &[u8]) -> Vec<u8> {
    match frozen.split_first_chunk::<2>() {
        Some((&[FORMAT_BINARY_DEFLATE, LAYOUT], body)) => {
            lz4(&inflate(body).expect("a state this build deflated inflates again"))
        }
        _ => frozen.to_vec(),
    }
}

/// The format and layout bytes, then the postcard of `state`.
fn postcard_with_header(state: &SessionState) -> Vec<u8> {
    // In a buffer sized for a short session at once (not grown by doubling from empty).
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(&[FORMAT_BINARY, LAYOUT]);
    postcard::to_extend(state, out).expect("a session state always serializes")
}

/// `body` (postcard) as an LZ4 record.
fn lz4(body: &[u8]) -> Vec<u8> {
    // The LZ4 block straight after the header and the uncompressed length.
    let mut packed = vec![0u8; 6 + lz4_flex::block::get_maximum_output_size(body.len())];
    packed[..2].copy_from_slice(&[FORMAT_BINARY_LZ4, LAYOUT]);
    packed[2..6].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let n = lz4_flex::block::compress_into(body, &mut packed[6..])
        .expect("the output has room for the worst case");
    packed.truncate(6 + n);
    packed
}

/// The state as JSON, the format before issue 19 (for comparisons and old fixtures).
pub fn encode_json(state: &SessionState) -> Vec<u8> {
    serde_json::to_vec(state).expect("a session state always serializes")
}

/// Reads a state in any format this build knows.
pub fn decode(bytes: &[u8]) -> Result<SessionState, StateError> {
    let (&format, rest) = bytes.split_first().ok_or(StateError::Empty)?;
    match format {
        FORMAT_JSON => Ok(serde_json::from_slice(bytes)?),
        FORMAT_BINARY | FORMAT_BINARY_LZ4 | FORMAT_BINARY_DEFLATE => {
            let (&layout, body) = rest.split_first().ok_or(StateError::Empty)?;
            // The empty lists an older layout lacks at the end (each its length, a varint 0).
            let missing: &[u8] = match layout {
                LAYOUT => &[],
                LAYOUT_WITHOUT_JUDGED => &[0],
                LAYOUT_WITHOUT_STEERS => &[0, 0, 0],
                _ => return Err(StateError::Layout { found: layout }),
            };
            let mut body = match format {
                FORMAT_BINARY => std::borrow::Cow::Borrowed(body),
                FORMAT_BINARY_DEFLATE => std::borrow::Cow::Owned(inflate(body)?),
                _ => std::borrow::Cow::Owned(unlz4(body)?),
            };
            if !missing.is_empty() {
                body.to_mut().extend_from_slice(missing);
            }
            from_postcard(&body)
        }
        other => Err(StateError::UnknownFormat(other)),
    }
}

/// An LZ4 block with its length first.
fn unlz4(body: &[u8]) -> Result<Vec<u8>, StateError> {
    let (size, _) = lz4_flex::block::uncompressed_size(body)
        .map_err(|e| StateError::Decompress(e.to_string()))?;
    if size > MAX_INFLATED {
        return Err(StateError::Decompress(format!("{size} bytes uncompressed")));
    }
    lz4_flex::block::decompress_size_prepended(body)
        .map_err(|e| StateError::Decompress(e.to_string()))
}

/// A deflated body: its length (4 bytes, little-endian), then raw deflate.
fn inflate(body: &[u8]) -> Result<Vec<u8>, StateError> {
    let (size, packed) = body
        .split_first_chunk::<4>()
        .ok_or_else(|| StateError::Decompress("no length".into()))?;
    let size = u32::from_le_bytes(*size) as usize;
    if size > MAX_INFLATED {
        return Err(StateError::Decompress(format!("{size} bytes uncompressed")));
    }
    let body = miniz_oxide::inflate::decompress_to_vec_with_limit(packed, size)
        .map_err(|e| StateError::Decompress(format!("deflate: {e}")))?;
    if body.len() != size {
        return Err(StateError::Decompress(format!(
            "{} bytes inflated, {size} announced",
            body.len()
        )));
    }
    Ok(body)
}

fn from_postcard(body: &[u8]) -> Result<SessionState, StateError> {
    let (state, rest) = postcard::take_from_bytes::<SessionState>(body)
        .map_err(|e| StateError::Binary(e.to_string()))?;
    if !rest.is_empty() {
        return Err(StateError::Binary(format!(
            "{} bytes after the state",
            rest.len()
        )));
    }
    Ok(state)
}
