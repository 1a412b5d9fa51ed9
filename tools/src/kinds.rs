//! Event kinds of the agent workload and their codes in the log.

/// Kinds of events a fleet agent appends. The `u16` is the frame's kind code
/// (0 is the engine's `session-define`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum EventKind {
    TurnStart = 1,
    TurnEnd = 2,
    StepStart = 3,
    StepEnd = 4,
    UserMessage = 5,
    AssistantChunk = 6,
    AssistantMessage = 7,
    ToolCall = 8,
    ToolResult = 9,
    RequestHeader = 10,
    RequestContext = 11,
    SessionEndSeed = 12,
    CompactionStart = 13,
    CompactionSummary = 14,
    CompactionEnd = 15,
    CompactionPrune = 16,
}

const ALL: [EventKind; 16] = [
    EventKind::TurnStart,
    EventKind::TurnEnd,
    EventKind::StepStart,
    EventKind::StepEnd,
    EventKind::UserMessage,
    EventKind::AssistantChunk,
    EventKind::AssistantMessage,
    EventKind::ToolCall,
    EventKind::ToolResult,
    EventKind::RequestHeader,
    EventKind::RequestContext,
    EventKind::SessionEndSeed,
    EventKind::CompactionStart,
    EventKind::CompactionSummary,
    EventKind::CompactionEnd,
    EventKind::CompactionPrune,
];

impl EventKind {
    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn from_code(code: u16) -> Option<EventKind> {
        ALL.iter().copied().find(|k| k.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            EventKind::TurnStart => "turn/start",
            EventKind::TurnEnd => "turn/end",
            EventKind::StepStart => "step/start",
            EventKind::StepEnd => "step/end",
            EventKind::UserMessage => "user/message",
            EventKind::AssistantChunk => "assistant/chunk",
            EventKind::AssistantMessage => "assistant/message",
            EventKind::ToolCall => "tool/call",
            EventKind::ToolResult => "tool/result",
            EventKind::RequestHeader => "request/header",
            EventKind::RequestContext => "request/context",
            EventKind::SessionEndSeed => "session/end-seed",
            EventKind::CompactionStart => "compaction/start",
            EventKind::CompactionSummary => "compaction/summary",
            EventKind::CompactionEnd => "compaction/end",
            EventKind::CompactionPrune => "compaction/prune",
        }
    }
}

/// Display name of any kind code found in a log.
pub fn kind_name(code: u16) -> String {
    if code == turnstone::frame::KIND_SESSION_DEFINE {
        return "session/define".to_string();
    }
    match EventKind::from_code(code) {
        Some(k) => k.name().to_string(),
        None => format!("kind/{code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_roundtrip() {
        for k in ALL {
            assert_eq!(EventKind::from_code(k.code()), Some(k));
            assert_eq!(kind_name(k.code()), k.name());
        }
        assert_eq!(kind_name(0), "session/define");
        assert_eq!(kind_name(999), "kind/999");
    }
}
