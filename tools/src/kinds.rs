//! Event kind names and payload decoding shared by the inspecting commands.

use std::collections::BTreeSet;

use turnstone::frame::KIND_SESSION_DEFINE;
use turnstone::session::CoreKind;
use turnstone::session::{
    internals::{Envelope, KIND_CODE_PLUGIN},
    SESSION_FORMAT_VERSION,
};

/// Name shown for the engine's `session-define` frames.
pub const DEFINE: &str = "session/define";

/// A frame's kind name and, when the payload is a session envelope, the
/// envelope. Plugin frames are named by the kind in their envelope; kind codes
/// nobody knows are `unknown/<code>` (FORMAT.md §10).
pub fn decode(code: u16, payload: &[u8]) -> (String, Option<Envelope>) {
    if code == KIND_SESSION_DEFINE {
        return (DEFINE.to_string(), None);
    }
    // `v: 1` holds blob references (FORMAT.md §10): shown as they are.
    let env = serde_json::from_slice::<Envelope>(payload)
        .ok()
        .filter(|e| {
            e.v == SESSION_FORMAT_VERSION
                || e.v == turnstone::session::internals::ENVELOPE_VERSION_BLOBS
        });
    let name = if code == KIND_CODE_PLUGIN {
        match env.as_ref().and_then(|e| e.kind.clone()) {
            Some(k) => k,
            None => format!("unknown/{code}"),
        }
    } else {
        match CoreKind::from_code(code) {
            Some(k) => k.name().to_string(),
            None => format!("unknown/{code}"),
        }
    };
    (name, env)
}

/// Display name of a kind code (plugin frames: see [`decode`]).
pub fn kind_name(code: u16) -> String {
    if code == KIND_SESSION_DEFINE {
        return DEFINE.to_string();
    }
    match CoreKind::from_code(code) {
        Some(k) => k.name().to_string(),
        None => format!("unknown/{code}"),
    }
}

/// `--kind k1,k2`: kind names (core, plugin, `session/define`) or codes.
#[derive(Debug, Clone, Default)]
pub struct KindFilter {
    names: BTreeSet<String>,
    codes: BTreeSet<u16>,
}

impl KindFilter {
    pub fn parse(spec: &str) -> Result<KindFilter, String> {
        let mut f = KindFilter::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Ok(code) = part.parse::<u16>() {
                f.codes.insert(code);
            } else if part == DEFINE || CoreKind::from_name(part).is_some() || part.contains('/') {
                f.names.insert(part.to_string());
            } else {
                let core: Vec<&str> = CoreKind::ALL.iter().map(|k| k.name()).collect();
                return Err(format!(
                    "unknown kind {part:?}: use a kind code, {DEFINE}, a core kind ({}) or a plugin kind name (which contains a '/')",
                    core.join(", ")
                ));
            }
        }
        if f.names.is_empty() && f.codes.is_empty() {
            return Err("--kind needs at least one kind".into());
        }
        Ok(f)
    }

    pub fn matches(&self, code: u16, name: &str) -> bool {
        self.codes.contains(&code) || self.names.contains(name)
    }

    /// Whether `session/define` frames were asked for.
    pub fn wants_define(&self) -> bool {
        self.matches(KIND_SESSION_DEFINE, DEFINE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_filters() {
        for k in CoreKind::ALL {
            assert_eq!(kind_name(k.code()), k.name());
        }
        assert_eq!(kind_name(0), DEFINE);
        assert_eq!(kind_name(999), "unknown/999");
        let p = turnstone::session::internals::encode_plugin("todo/update", &serde_json::json!({}));
        assert_eq!(decode(KIND_CODE_PLUGIN, &p).0, "todo/update");
        assert_eq!(decode(KIND_CODE_PLUGIN, b"junk").0, "unknown/65535");
        let f = KindFilter::parse("tool/call, 9,todo/update").unwrap();
        assert!(f.matches(8, "tool/call"));
        assert!(f.matches(9, "tool/result"));
        assert!(f.matches(KIND_CODE_PLUGIN, "todo/update"));
        assert!(!f.matches(1, "turn/start"));
        assert!(!f.wants_define());
        assert!(KindFilter::parse("toolcall").is_err());
        assert!(KindFilter::parse(",").is_err());
    }
}
