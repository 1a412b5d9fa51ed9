//! The messages between a store's host and its clients, and their framing
//! (docs/MULTIPROCESS.md, "The wire"): `u32` little-endian length, then a
//! bincode message.

use std::io::{Read, Write};

use bincode::{Decode, Encode};

use crate::error::Error;

/// The protocol version a hello carries.
pub(crate) const VERSION: u32 = 1;

/// The largest frame either side accepts (a group of events may be 64 MiB).
pub(crate) const FRAME_MAX: usize = 80 << 20;

/// A request from a client; `id` comes back on the answer.
#[derive(Debug, Encode, Decode)]
pub(crate) struct Request {
    pub id: u64,
    pub op: Op,
}

/// One event on the wire.
#[derive(Debug, Clone, Encode, Decode)]
pub(crate) struct WireEvent {
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub payload: Vec<u8>,
}

#[derive(Debug, Encode, Decode)]
pub(crate) enum Op {
    Hello {
        version: u32,
        pid: u32,
    },
    CreateSession {
        session: String,
    },
    Fork {
        parent: String,
        upto: u64,
        child: String,
    },
    Append {
        session: String,
        events: Vec<(u16, u16, Vec<u8>)>,
        /// Pipelined: the session holds this many events (the client holds
        /// its claim and knows), and no answer comes unless the append
        /// fails; a failure is kept and answers the session's next
        /// [`Op::Sync`] on this connection, and later pipelined appends to
        /// it are not applied until then.
        expect_len: Option<u64>,
    },
    /// Make `session` durable, then say its durable length.
    Sync {
        session: String,
    },
    DurableLen {
        session: String,
    },
    AppendedLen {
        session: String,
    },
    Parent {
        session: String,
    },
    Sessions,
    Listing,
    ReadRange {
        session: String,
        start: u64,
        end: u64,
    },
    Claim {
        session: String,
    },
    Release {
        session: String,
        claim: u64,
    },
    /// Push `session`'s durable events from `from` on, as frames answering
    /// this request's id, until [`Op::Unfollow`] or the connection ends.
    Follow {
        session: String,
        from: u64,
    },
    Unfollow {
        follow: u64,
    },
    MarkDeleted {
        session: String,
    },
    /// Full-text search in the host's index (`session`: one session and
    /// what it inherits; none: every session).
    Search {
        query: String,
        limit: u64,
        session: Option<String>,
    },
}

/// An answer (or a pushed batch of a follow) to the request `id`.
#[derive(Debug, Encode, Decode)]
pub(crate) struct Response {
    pub id: u64,
    pub reply: Reply,
}

#[derive(Debug, Encode, Decode)]
pub(crate) enum Reply {
    Hello {
        version: u32,
        store_id: [u8; 16],
    },
    Unit,
    Seq(u64),
    Len(Option<u64>),
    Parent(Option<(String, u64)>),
    Names(Vec<String>),
    Listing(Vec<WireListing>),
    Events(Vec<WireEvent>),
    Claim {
        id: u64,
        took_over: bool,
    },
    /// Search hits: session, seq, snippet.
    Hits(Vec<(String, u64, String)>),
    /// The follow ended (the host's store closed, or a read failed).
    FollowEnd(WireError),
    Err(WireError),
}

/// One session of a listing: name, durable length, `(parent, fork seq)`.
pub(crate) type WireListing = (String, u64, Option<(String, u64)>);

/// An [`Error`] on the wire: its kind, its message, and the fields the
/// variants a client acts on carry.
#[derive(Debug, Clone, Encode, Decode)]
pub(crate) struct WireError {
    pub kind: String,
    pub message: String,
    pub session: String,
    pub detail: String,
    pub a: u64,
    pub b: u64,
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        let mut w = WireError {
            kind: e.kind().to_string(),
            message: e.to_string(),
            session: String::new(),
            detail: String::new(),
            a: 0,
            b: 0,
        };
        match e {
            Error::UnknownSession(s) | Error::SessionExists(s) => w.session = s.clone(),
            Error::SessionDeleted { session, seq } => {
                w.session = session.clone();
                w.a = *seq;
            }
            Error::SessionExpired { session } => w.session = session.clone(),
            Error::SeqOutOfRange { session, seq, len } => {
                w.session = session.clone();
                w.a = *seq;
                w.b = *len;
            }
            Error::SessionLive { session, since_ms } => {
                w.session = session.clone();
                w.a = *since_ms;
            }
            Error::Fenced { session, detail }
            | Error::BadEvent {
                session, detail, ..
            } => {
                w.session = session.clone();
                w.detail = detail.clone();
            }
            Error::InvalidArgument(d) | Error::Refused(d) => w.detail = d.clone(),
            Error::Poisoned { detail, .. } | Error::WriteFailed { detail } => {
                w.detail = detail.clone()
            }
            _ => {}
        }
        w
    }
}

impl WireError {
    /// The error in this process: the variants a caller matches on come
    /// back as themselves, the rest as a `backend` error carrying the
    /// host's message.
    pub(crate) fn into_error(self) -> Error {
        let WireError {
            kind,
            message,
            session,
            detail,
            a,
            b,
        } = self;
        match kind.as_str() {
            "unknown_session" => Error::UnknownSession(session),
            "session_exists" => Error::SessionExists(session),
            "session_deleted" => Error::SessionDeleted { session, seq: a },
            "session_expired" => Error::SessionExpired { session },
            "seq_out_of_range" => Error::SeqOutOfRange {
                session,
                seq: a,
                len: b,
            },
            "session_live" => Error::SessionLive {
                session,
                since_ms: a,
            },
            "fenced" => Error::Fenced { session, detail },
            "invalid_argument" => Error::InvalidArgument(detail),
            "refused" => Error::Refused(detail),
            "closed" => Error::Closed,
            "read_only" => Error::ReadOnly,
            "host_lost" => Error::HostLost { detail },
            _ => Error::Backend {
                backend: "host",
                op: kind,
                detail: message,
            },
        }
    }
}

/// Send all of `buf` on `stream` (a blocking socket, with its write
/// timeout), never raising SIGPIPE in a process that does not ignore it.
pub(crate) fn send_all(
    stream: &std::os::unix::net::UnixStream,
    mut buf: &[u8],
) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    while !buf.is_empty() {
        match sock.send_with_flags(buf, libc::MSG_NOSIGNAL) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Send what `stream` takes of `buf` now without waiting: the bytes sent
/// (fewer than `buf.len()` when the peer's buffer is full).
pub(crate) fn send_now(
    stream: &std::os::unix::net::UnixStream,
    buf: &[u8],
) -> std::io::Result<usize> {
    let sock = socket2::SockRef::from(stream);
    let mut off = 0;
    while off < buf.len() {
        match sock.send_with_flags(&buf[off..], libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<FRAME_MAX>()
}

/// Write one message as a frame.
pub(crate) fn write_frame<W: Write, T: Encode>(w: &mut W, msg: &T) -> std::io::Result<()> {
    let body = bincode::encode_to_vec(msg, config())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    if body.len() > FRAME_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a message of {} bytes is over {FRAME_MAX}", body.len()),
        ));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)
}

/// Read one frame and decode it: `Ok(None)` at a clean end of the stream
/// (between frames); an error for a torn frame, one over the limit, or one
/// that does not decode as a whole `T`.
pub(crate) fn read_frame<R: Read, T: Decode<()>>(r: &mut R) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > FRAME_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over {FRAME_MAX}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let (msg, used) = bincode::decode_from_slice::<T, _>(&body, config())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    if used != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} bytes after the message", len - used),
        ));
    }
    Ok(Some(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_garbage_is_an_error() {
        let mut buf = Vec::new();
        let req = Request {
            id: 7,
            op: Op::Append {
                session: "s".into(),
                events: vec![(3, 0, b"abc".to_vec())],
                expect_len: None,
            },
        };
        write_frame(&mut buf, &req).unwrap();
        let back: Request = read_frame(&mut &buf[..]).unwrap().unwrap();
        assert_eq!(back.id, 7);
        assert!(matches!(back.op, Op::Append { ref events, .. } if events[0].2 == b"abc"));
        // A clean end between frames.
        assert!(read_frame::<_, Request>(&mut &[][..]).unwrap().is_none());
        // Torn, oversized, garbage.
        assert!(read_frame::<_, Request>(&mut &buf[..buf.len() - 1]).is_err());
        let big = ((FRAME_MAX + 1) as u32).to_le_bytes();
        assert!(read_frame::<_, Request>(&mut &big[..]).is_err());
        let garbage = [4u8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(read_frame::<_, Request>(&mut &garbage[..]).is_err());
    }

    #[test]
    fn errors_a_caller_matches_on_cross_the_wire_as_themselves() {
        for e in [
            Error::SessionLive {
                session: "a".into(),
                since_ms: 5,
            },
            Error::SeqOutOfRange {
                session: "a".into(),
                seq: 9,
                len: 3,
            },
            Error::UnknownSession("x".into()),
            Error::SessionExists("x".into()),
            Error::Refused("no".into()),
        ] {
            let back = WireError::from(&e).into_error();
            assert_eq!(back.to_string(), e.to_string());
            assert_eq!(back.kind(), e.kind());
        }
    }
}
