//! The fleet workload, seeded and identical for every store.
//!
//! Each session runs turns of 24 events: `user/message` (~300 B), 20
//! `assistant/chunk` (~80 B), `assistant/message` (~1 KB), `tool/call`, a
//! durability wait, `tool/result` (~4 KB, 5% of them 64 KB), a durability
//! wait. Everything about event `seq` of session `s` (kind, size, bytes) is a
//! pure function of `(seed, s, seq)`, so a store's contents can be checked
//! after the run without keeping a copy, and every store sees the same events.
//!
//! Each session starts at a seeded position inside its first turn, so the
//! sessions a thread interleaves are not in lockstep (otherwise every agent of
//! a thread would reach its durability wait in the same round).

use std::sync::Arc;

/// Events per turn.
pub const TURN_LEN: u64 = 24;
/// Chunks per assistant message.
pub const CHUNKS: u64 = 20;
/// Bytes of text the payloads are cut from.
const CORPUS_BYTES: usize = 256 * 1024;
/// The large tool result.
pub const BIG_RESULT: usize = 64 * 1024;

/// The event kinds of the workload (frame kind codes are the session layer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    UserMessage,
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
}

impl Kind {
    /// Kind code, as the session layer numbers it (`CoreKind::code`).
    pub fn code(self) -> u16 {
        use turnstone::session::CoreKind as C;
        match self {
            Kind::UserMessage => C::UserMessage.code(),
            Kind::AssistantChunk => C::AssistantChunk.code(),
            Kind::AssistantMessage => C::AssistantMessage.code(),
            Kind::ToolCall => C::ToolCall.code(),
            Kind::ToolResult => C::ToolResult.code(),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::UserMessage => "user/message",
            Kind::AssistantChunk => "assistant/chunk",
            Kind::AssistantMessage => "assistant/message",
            Kind::ToolCall => "tool/call",
            Kind::ToolResult => "tool/result",
        }
    }
    pub fn from_code(code: u16) -> Option<Kind> {
        [
            Kind::UserMessage,
            Kind::AssistantChunk,
            Kind::AssistantMessage,
            Kind::ToolCall,
            Kind::ToolResult,
        ]
        .into_iter()
        .find(|k| k.code() == code)
    }
    pub fn from_name(name: &str) -> Option<Kind> {
        [
            Kind::UserMessage,
            Kind::AssistantChunk,
            Kind::AssistantMessage,
            Kind::ToolCall,
            Kind::ToolResult,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// splitmix64: a tiny, good 64-bit mixer.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The workload of one run: `sessions` sessions under one seed.
#[derive(Debug, Clone)]
pub struct Workload {
    seed: u64,
    /// ASCII only, so any byte range of it is a `str` (no validation per slice).
    corpus: Arc<String>,
    names: Vec<String>,
    offsets: Vec<u64>,
}

impl Workload {
    pub fn new(seed: u64, sessions: usize) -> Workload {
        let mut corpus = Vec::with_capacity(CORPUS_BYTES);
        let alphabet = b"abcdefghijklmnopqrstuvwxyz     ,.eeetaoin";
        let mut x = mix(seed ^ 0xC0FFEE);
        while corpus.len() < CORPUS_BYTES {
            x = mix(x);
            for b in x.to_le_bytes() {
                corpus.push(alphabet[b as usize % alphabet.len()]);
            }
        }
        let names = (0..sessions as u64)
            .map(|s| {
                let a = mix(seed ^ (s << 20) ^ 0xA11CE);
                let b = mix(a);
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xFFFF,
                    a & 0xFFF,
                    (b >> 48) | 0x8000,
                    b & 0xFFFF_FFFF_FFFF
                )
            })
            .collect();
        let offsets = (0..sessions as u64)
            .map(|s| mix(seed ^ (s << 24) ^ 0x0FF5E7) % TURN_LEN)
            .collect();
        Workload {
            seed,
            corpus: Arc::new(String::from_utf8(corpus).expect("the alphabet is ASCII")),
            names,
            offsets,
        }
    }

    pub fn sessions(&self) -> usize {
        self.names.len()
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The session's id as harnesses write it (a UUID).
    pub fn name(&self, s: u32) -> &str {
        &self.names[s as usize]
    }
    /// Position of event `seq` inside its turn (0 = `user/message`).
    pub fn position(&self, s: u32, seq: u64) -> u64 {
        (self.offsets[s as usize] + seq) % TURN_LEN
    }
    pub fn kind(&self, s: u32, seq: u64) -> Kind {
        kind_at(self.position(s, seq))
    }
    /// Whether the agent waits for durability right after event `seq`.
    pub fn waits_after(&self, s: u32, seq: u64) -> bool {
        self.position(s, seq) >= TURN_LEN - 2
    }
    fn rand(&self, s: u32, seq: u64) -> u64 {
        mix(self.seed ^ mix(((s as u64) << 40) ^ seq))
    }
    /// Payload size of event `seq` of session `s`.
    pub fn payload_len(&self, s: u32, seq: u64) -> usize {
        let r = self.rand(s, seq);
        let jitter = |lo: usize, span: usize| lo + (r % (span as u64 + 1)) as usize;
        match self.kind(s, seq) {
            Kind::UserMessage => jitter(200, 200),
            Kind::AssistantChunk => jitter(60, 40),
            Kind::AssistantMessage => jitter(800, 400),
            Kind::ToolCall => jitter(150, 100),
            Kind::ToolResult => {
                if (r >> 40) % 100 < 5 {
                    BIG_RESULT
                } else {
                    jitter(3000, 2000)
                }
            }
        }
    }
    /// Write the payload of event `seq` of session `s` into `out` (cleared
    /// first). ASCII text, safe inside a JSON string without escaping.
    pub fn payload_into(&self, s: u32, seq: u64, out: &mut Vec<u8>) {
        out.clear();
        let len = self.payload_len(s, seq);
        let r = self.rand(s, seq);
        use std::io::Write;
        let _ = write!(out, "{s}:{seq}:");
        let room = len.saturating_sub(out.len());
        let off = ((r >> 8) as usize) % (self.corpus.len() - BIG_RESULT);
        out.extend_from_slice(&self.corpus.as_bytes()[off..off + room]);
        out.truncate(len);
    }
    pub fn payload(&self, s: u32, seq: u64) -> Vec<u8> {
        let mut v = Vec::new();
        self.payload_into(s, seq, &mut v);
        v
    }
    /// Text of `len` bytes from the corpus (for typed session events).
    pub fn text(&self, r: u64, len: usize) -> &str {
        let off = (r as usize) % (self.corpus.len() - BIG_RESULT);
        &self.corpus[off..off + len.min(BIG_RESULT)]
    }
}

/// Kind at position `p` of a turn.
pub fn kind_at(p: u64) -> Kind {
    match p {
        0 => Kind::UserMessage,
        p if p <= CHUNKS => Kind::AssistantChunk,
        21 => Kind::AssistantMessage,
        22 => Kind::ToolCall,
        _ => Kind::ToolResult,
    }
}

/// Average payload bytes per turn and events per durability wait (for the
/// README's description of the shape).
pub fn shape_summary() -> (f64, f64) {
    let small_result = 4000.0;
    let result = 0.95 * small_result + 0.05 * BIG_RESULT as f64;
    let per_turn = 300.0 + CHUNKS as f64 * 80.0 + 1000.0 + 200.0 + result;
    (per_turn, TURN_LEN as f64 / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_shaped() {
        let w = Workload::new(7, 16);
        let w2 = Workload::new(7, 16);
        let mut big = 0;
        let mut results = 0;
        for s in 0..16 {
            assert_eq!(w.name(s), w2.name(s));
            for seq in 0..2400 {
                let p = w.payload(s, seq);
                assert_eq!(p, w2.payload(s, seq));
                assert_eq!(p.len(), w.payload_len(s, seq));
                assert!(p.iter().all(|b| b.is_ascii() && *b != b'"' && *b != b'\\'));
                if w.kind(s, seq) == Kind::ToolResult {
                    results += 1;
                    if p.len() == BIG_RESULT {
                        big += 1;
                    }
                }
            }
        }
        let share = big as f64 / results as f64;
        assert!((0.02..0.09).contains(&share), "big share {share}");
        // Two waits per turn, after the tool call and after the tool result.
        let waits = (0..TURN_LEN).filter(|&q| w.waits_after(0, q)).count();
        assert_eq!(waits, 2);
        for k in [
            Kind::UserMessage,
            Kind::AssistantChunk,
            Kind::AssistantMessage,
            Kind::ToolCall,
            Kind::ToolResult,
        ] {
            assert_eq!(Kind::from_code(k.code()), Some(k));
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
    }
}
