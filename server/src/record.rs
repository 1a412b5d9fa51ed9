//! What the server writes into the log (FORMAT.md §13): four event kinds in
//! the server's reserved range, all with the `ignorable` frame flag so that
//! session-layer tools skip them.
//!
//! Every payload starts with a 16-byte header:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | record version, 1 |
//! | 1 | flags (data: bit 0 = continues the previous data event's request) |
//! | 2..8 | zero |
//! | 8..16 | u64 LE: stream bytes before this event (the offset's byte part) |
//!
//! followed by the raw stream bytes (data) or a JSON object (the others).

use serde::{Deserialize, Serialize};

/// Frame kind of a stream's creation record (config as JSON).
pub const KIND_CREATE: u16 = 0x0100;
/// Frame kind of stream bytes (one JSON message, or a slice of a byte body).
pub const KIND_DATA: u16 = 0x0101;
/// Frame kind of a state change logged with an append (producer, Stream-Seq, close).
pub const KIND_STATE: u16 = 0x0102;
/// Frame kind of a deletion tombstone (delete or expiry).
pub const KIND_DELETE: u16 = 0x0103;
/// The engine's `ignorable` frame flag, set on every server event.
pub const FLAG_IGNORABLE: u16 = turnstone::frame::FLAG_IGNORABLE;

/// Length of the common payload header.
pub const HEADER_BYTES: usize = 16;
/// The largest JSON message: one message is one event, whose payload is
/// this record's header and the message.
pub const JSON_MESSAGE_BYTES_MAX: usize = turnstone::frame::PAYLOAD_BYTES_MAX - HEADER_BYTES;
/// Record version written in byte 0.
pub const RECORD_VERSION: u8 = 1;
/// Data flag: this event continues the request of the previous data event.
pub const DATA_CONTINUES: u8 = 1;

/// Prefix of the engine session names the server owns (`ds/` + 16 digits).
pub const SESSION_PREFIX: &str = "ds/";

/// Engine session name of incarnation `n`.
pub fn session_name(n: u64) -> String {
    format!("{SESSION_PREFIX}{n:016}")
}

/// The incarnation number of a server session name.
pub fn parse_session_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(SESSION_PREFIX)?;
    if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Build a payload: header then body.
pub fn encode(flags: u8, bytes_before: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.push(RECORD_VERSION);
    out.push(flags);
    out.extend_from_slice(&[0u8; 6]);
    out.extend_from_slice(&bytes_before.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A decoded payload header and its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub flags: u8,
    pub bytes_before: u64,
    pub body: &'a [u8],
}

/// Decode a payload; `None` when it is too short or of another version.
pub fn decode(payload: &[u8]) -> Option<Decoded<'_>> {
    if payload.len() < HEADER_BYTES || payload[0] != RECORD_VERSION {
        return None;
    }
    Some(Decoded {
        flags: payload[1],
        bytes_before: u64::from_le_bytes(payload[8..16].try_into().ok()?),
        body: &payload[HEADER_BYTES..],
    })
}

/// Whether `kind` is one of the server's event kinds.
pub fn is_server_kind(kind: u16) -> bool {
    (KIND_CREATE..=KIND_DELETE).contains(&kind)
}

/// Body of a `KIND_CREATE` record: the stream's configuration as requested
/// (compared on an idempotent PUT) and as resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRecord {
    /// The stream's URL path.
    pub path: String,
    /// Normalised content type.
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Absolute expiry, milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// `Stream-Expires-At` as the client sent it (returned on HEAD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Created closed (`Stream-Closed: true` on the PUT).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkRecord>,
    /// Wall-clock creation time, ms since the epoch (informational).
    pub created_ms: u64,
}

/// Where a fork came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRecord {
    /// Source stream path and engine session.
    pub source_path: String,
    pub source_session: String,
    /// `Stream-Fork-Offset` as requested (None: the source's tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// `Stream-Fork-Sub-Offset` (0 when absent).
    #[serde(default)]
    pub sub_offset: u64,
}

/// Body of a `KIND_STATE` record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// Producer state after this append: id, epoch, highest accepted seq.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<ProducerRecord>,
    /// Last accepted `Stream-Seq`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_seq: Option<String>,
    /// The stream is closed by this append.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
}

/// One producer's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRecord {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Body of a `KIND_DELETE` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRecord {
    /// `soft`: hidden (410) while forks still read through it; `hard`: gone.
    pub mode: DeleteMode,
    /// `delete` or `expired`.
    pub reason: String,
    pub at_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteMode {
    Soft,
    Hard,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let p = encode(DATA_CONTINUES, 1234, b"abc");
        assert_eq!(p.len(), HEADER_BYTES + 3);
        let d = decode(&p).unwrap();
        assert_eq!(d.flags, DATA_CONTINUES);
        assert_eq!(d.bytes_before, 1234);
        assert_eq!(d.body, b"abc");
        assert!(decode(&p[..10]).is_none());
    }

    #[test]
    fn session_names() {
        assert_eq!(session_name(7), "ds/0000000000000007");
        assert_eq!(parse_session_name("ds/0000000000000007"), Some(7));
        assert_eq!(parse_session_name("ds/7"), None);
        assert_eq!(parse_session_name("sess-1"), None);
    }
}
