//! Protocol header names and strict parsers for their values.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
pub const STREAM_CURSOR: &str = "stream-cursor";
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
pub const STREAM_CLOSED: &str = "stream-closed";
pub const STREAM_SEQ: &str = "stream-seq";
pub const STREAM_TTL: &str = "stream-ttl";
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
pub const STREAM_FORKED_FROM: &str = "stream-forked-from";
/// `unknown` on a 500 answer to a write: see [`crate::stream::Fail::Unknown`].
pub const STREAM_OUTCOME: &str = "stream-outcome";
pub const STREAM_FORK_OFFSET: &str = "stream-fork-offset";
pub const STREAM_FORK_SUB_OFFSET: &str = "stream-fork-sub-offset";
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";

/// Headers a browser may read (CORS `Access-Control-Expose-Headers`).
pub const EXPOSED: &str = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, \
Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, \
Producer-Expected-Seq, Producer-Received-Seq, Stream-Outcome, Retry-After, ETag, Location, \
Content-Type";
/// Headers a browser may send (CORS `Access-Control-Allow-Headers`).
pub const ALLOWED: &str = "Authorization, Content-Type, If-None-Match, Stream-Seq, Stream-TTL, \
Stream-Expires-At, Stream-Closed, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, \
Producer-Id, Producer-Epoch, Producer-Seq";

/// The largest integer JavaScript represents exactly (producer epoch/seq bound).
pub const JS_SAFE_MAX: u64 = (1 << 53) - 1;

/// Default content type of a stream created without one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Normalise a content type: lower case, no spaces around `;` and `=`.
/// `None` when it is not a plausible `type/subtype[; params]`.
pub fn normalize_content_type(raw: &str) -> Option<String> {
    let mut parts = raw.split(';');
    let essence = parts.next()?.trim().to_ascii_lowercase();
    let (ty, sub) = essence.split_once('/')?;
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    if !token(ty) || !token(sub) {
        return None;
    }
    let mut out = essence;
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let (k, v) = match p.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_string()),
            None => return None,
        };
        if !token(&k) || v.is_empty() || v.bytes().any(|b| b.is_ascii_control()) {
            return None;
        }
        let v = if k == "charset" {
            v.to_ascii_lowercase()
        } else {
            v
        };
        out.push_str("; ");
        out.push_str(&k);
        out.push('=');
        out.push_str(&v);
    }
    Some(out)
}

/// The media type without parameters (`application/json`).
pub fn essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// JSON mode: message boundaries kept, reads return arrays.
pub fn is_json(content_type: &str) -> bool {
    essence(content_type) == "application/json"
}

/// SSE sends the bytes as text (otherwise base64).
pub fn is_text(content_type: &str) -> bool {
    let e = essence(content_type);
    e.starts_with("text/") || e == "application/json"
}

/// A non-negative decimal integer without sign, leading zeros, point or
/// exponent (`0`, `3600`; not `+1`, `01`, `1.0`, `1e3`).
pub fn parse_strict_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if b.len() > 1 && b[0] == b'0' {
        return None;
    }
    s.parse().ok()
}

/// An RFC 3339 timestamp as milliseconds since the epoch.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s.trim(), &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Format milliseconds since the epoch as RFC 3339 (UTC).
pub fn format_rfc3339_ms(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// `Stream-Closed` is set: the value `true` (case-insensitive).
pub fn is_true(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            normalize_content_type("TEXT/Plain").as_deref(),
            Some("text/plain")
        );
        assert_eq!(
            normalize_content_type("application/json;charset=UTF-8").as_deref(),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(normalize_content_type("nonsense"), None);
        assert_eq!(normalize_content_type(""), None);
        assert!(is_json("application/json; charset=utf-8"));
        assert!(!is_json("application/jsonx"));
        assert!(is_text("text/csv"));
        assert!(!is_text("application/octet-stream"));
    }

    #[test]
    fn strict_uints() {
        assert_eq!(parse_strict_uint("0"), Some(0));
        assert_eq!(parse_strict_uint("3600"), Some(3600));
        for bad in ["", "+1", "01", "1.5", "1e3", "-1", "abc", " 1"] {
            assert_eq!(parse_strict_uint(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timestamps() {
        let z = parse_rfc3339_ms("2030-01-01T00:00:00.000Z").unwrap();
        let o = parse_rfc3339_ms("2030-01-01T01:00:00+01:00").unwrap();
        assert_eq!(z, o);
        assert!(parse_rfc3339_ms("not-a-timestamp").is_none());
        assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(z)), Some(z));
    }
}
