//! Hex dumps for `dump --raw`: annotated headers and bytes, xxd style.

use std::fmt::Write as _;

use turnstone::frame::{SegmentHeader, BATCH_HEADER_BYTES, FRAME_HEADER_BYTES};

/// `bytes` as lines of 16, each with its file offset (`base` is the offset
/// of `bytes[0]`) and the printable characters.
pub fn hexdump(bytes: &[u8], base: u64, indent: &str) -> String {
    let mut out = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{indent}{:08x}:", base + (i * 16) as u64);
        for (j, b) in line.iter().enumerate() {
            if j % 2 == 0 {
                out.push(' ');
            }
            let _ = write!(out, "{b:02x}");
        }
        // Pad a short last line so the text column lines up.
        for j in line.len()..16 {
            if j % 2 == 0 {
                out.push(' ');
            }
            out.push_str("  ");
        }
        out.push_str("  ");
        out.extend(line.iter().map(|b| {
            if b.is_ascii_graphic() || *b == b' ' {
                *b as char
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    out
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The segment header's fields, as stored (whether or not it decodes).
pub fn segment_header(raw: &[u8], decoded: Option<&SegmentHeader>) -> String {
    let mut out = String::new();
    let magic: String = raw
        .iter()
        .take(8)
        .map(|b| {
            if b.is_ascii_graphic() {
                *b as char
            } else {
                '.'
            }
        })
        .collect();
    let _ = writeln!(
        out,
        "   segment header: magic {magic:?} version {} header_bytes {} segment {} {} first_batch_seq {} prev_segment_end {} {} crc {}{}",
        u32_at(raw, 8).map_or("?".into(), |v| v.to_string()),
        u32_at(raw, 12).map_or("?".into(), |v| v.to_string()),
        u32_at(raw, 32).map_or("?".into(), |v| v.to_string()),
        // Bytes 36..40: 0 in an ordinary segment, the compacted range's
        // last id otherwise (FORMAT.md §14.3); 52..60: an ordinary
        // segment's flags (§2), a compacted one's next_batch_seq.
        u32_at(raw, 36).map_or("last_segment ?".into(), |v| format!("last_segment {v}")),
        u64_at(raw, 40).map_or("?".into(), |v| v.to_string()),
        u32_at(raw, 48).map_or("?".into(), |v| v.to_string()),
        match (u32_at(raw, 36), u64_at(raw, 52)) {
            (Some(0), Some(f)) => format!("segment_flags {f:#x}"),
            (Some(_), Some(n)) => format!("next_batch_seq {n}"),
            _ => "segment_flags ?".into(),
        },
        u32_at(raw, 60).map_or("?".into(), |v| format!("{v:#010x}")),
        if decoded.is_some() { "" } else { " (does not decode)" }
    );
    out.push_str(&hexdump(raw, 0, "   "));
    out
}

/// A batch header's fields and bytes.
pub fn batch_header(raw: &[u8], offset: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "   batch header @{offset}: body_len {} batch_seq {} frame_count {} body_crc {} flags {} header_crc {}",
        u32_at(raw, 4).unwrap_or(0),
        u64_at(raw, 8).unwrap_or(0),
        u32_at(raw, 16).unwrap_or(0),
        u32_at(raw, 20).map_or("?".into(), |v| format!("{v:#010x}")),
        u32_at(raw, 24).unwrap_or(0),
        u32_at(raw, 28).map_or("?".into(), |v| format!("{v:#010x}")),
    );
    out.push_str(&hexdump(
        &raw[..raw.len().min(BATCH_HEADER_BYTES)],
        offset,
        "   ",
    ));
    out
}

/// A frame's header fields, then its header and payload bytes.
pub fn frame(raw: &[u8], offset: u64) -> String {
    let mut out = String::new();
    if raw.len() >= FRAME_HEADER_BYTES {
        let _ = writeln!(
            out,
            "   frame header: frame_len {} crc {:#010x} session {} kind {} flags {} seq {}",
            u32_at(raw, 0).unwrap_or(0),
            u32_at(raw, 4).unwrap_or(0),
            u32_at(raw, 8).unwrap_or(0),
            u16::from_le_bytes([raw[12], raw[13]]),
            u16::from_le_bytes([raw[14], raw[15]]),
            u64_at(raw, 16).unwrap_or(0),
        );
    }
    out.push_str(&hexdump(raw, offset, "   "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexdump_lines() {
        let d = hexdump(b"TSTNSEG\0\x01\x00\x00\x00\x40\x00\x00\x00ab", 0x10, "");
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "00000010: 5453 544e 5345 4700 0100 0000 4000 0000  TSTNSEG.....@..."
        );
        assert!(lines[1].starts_with("00000020: 6162 "));
        assert!(lines[1].ends_with("  ab"));
    }
}
