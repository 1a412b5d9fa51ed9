//! Offsets and cursors.
//!
//! An offset is `SSSSSSSSSSSSSSSS_BBBBBBBBBBBBBBBB`: the engine seq of the next
//! event and the number of stream bytes before it, each as 16 decimal
//! digits. Both only grow along a stream, so the strings sort in stream
//! order; `0000000000000000_0000000000000000` is the start of every stream.
//! The byte part is checked against the log on use, so each position has
//! exactly one valid offset.

use rand::Rng;

/// A position in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Offset {
    /// Engine seq of the next event.
    pub seq: u64,
    /// Stream bytes before it.
    pub bytes: u64,
}

/// The largest value a 16-digit field holds.
const FIELD_MAX: u64 = 9_999_999_999_999_999;

impl Offset {
    pub const ZERO: Offset = Offset { seq: 0, bytes: 0 };

    pub fn new(seq: u64, bytes: u64) -> Self {
        Offset { seq, bytes }
    }

    /// The offset token.
    pub fn token(&self) -> String {
        format!(
            "{:016}_{:016}",
            self.seq.min(FIELD_MAX),
            self.bytes.min(FIELD_MAX)
        )
    }
}

/// What a client asked for with `offset=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// `-1` or absent: the start of the stream.
    Start,
    /// `now`: the current tail.
    Now,
    At(Offset),
}

/// Parse an offset token. Anything but the exact form (or a sentinel) is
/// refused: a malformed offset is a 400, never a guess.
pub fn parse(token: &str) -> Option<Requested> {
    match token {
        "-1" => return Some(Requested::Start),
        "now" => return Some(Requested::Now),
        _ => {}
    }
    parse_exact(token).map(Requested::At)
}

/// Parse a real offset (no sentinels).
pub fn parse_exact(token: &str) -> Option<Offset> {
    let b = token.as_bytes();
    if b.len() != 33 || b[16] != b'_' {
        return None;
    }
    let digits = |s: &[u8]| -> Option<u64> {
        if !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    Some(Offset {
        seq: digits(&b[..16])?,
        bytes: digits(&b[17..])?,
    })
}

/// Cursor intervals (protocol §8.1): 20-second intervals counted from
/// 2024-10-09T00:00:00Z.
const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
const CURSOR_INTERVAL_SECS: u64 = 20;

/// The cursor for a live response: the current interval, or (when the client
/// echoed a cursor at or past it) a strictly larger one with 1-3600 s of
/// random jitter, so cursors never repeat and CDN keys keep moving.
pub fn cursor(now_secs: u64, client: Option<&str>) -> String {
    let current = now_secs.saturating_sub(CURSOR_EPOCH_SECS) / CURSOR_INTERVAL_SECS;
    let client = client.and_then(|c| {
        if c.is_empty() || c.len() > 20 || !c.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            c.parse::<u64>().ok()
        }
    });
    match client {
        Some(c) if c >= current => {
            let jitter_secs = rand::thread_rng().gen_range(1..=3600u64);
            let step = jitter_secs.div_ceil(CURSOR_INTERVAL_SECS).max(1);
            c.saturating_add(step).to_string()
        }
        _ => current.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_sort_and_roundtrip() {
        let a = Offset::new(3, 10);
        let b = Offset::new(12, 9);
        assert!(a.token() < b.token());
        assert_eq!(parse_exact(&a.token()), Some(a));
        assert_eq!(Offset::ZERO.token(), "0000000000000000_0000000000000000");
    }

    #[test]
    fn sentinels_and_garbage() {
        assert_eq!(parse("-1"), Some(Requested::Start));
        assert_eq!(parse("now"), Some(Requested::Now));
        for bad in [
            "",
            "0,1",
            "0 1",
            "../x",
            "abc",
            "0000000000000000-0000000000000000",
            "000000000000000a_0000000000000000",
            "0000000000000000_0000000000000000/..",
            "-2",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cursors_move_forward() {
        let now = CURSOR_EPOCH_SECS + 20 * 1000 + 5;
        assert_eq!(cursor(now, None), "1000");
        assert_eq!(cursor(now, Some("junk")), "1000");
        assert_eq!(cursor(now, Some("999")), "1000");
        for _ in 0..50 {
            let c: u64 = cursor(now, Some("1000")).parse().unwrap();
            assert!(c > 1000 && c <= 1000 + 180);
        }
    }
}
