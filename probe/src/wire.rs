//! The probe protocol on the control connection, as pure encoding and decoding (the I/O is in `conn.rs`).
//!
//! Every frame is a 5-byte header, `kind` (one byte) and `len` (u32, big endian), then `len` bytes:
//! - `CONTROL` (1): one [`Message`] as JSON, at most [`MAX_CONTROL_BYTES`];
//! - `DATA` (2): bulk bytes of a bandwidth phase, at most [`MAX_DATA_BYTES`]; their content is ignored;
//! - `END` (3): no payload; the sender's bandwidth phase or the client's ping run is over;
//! - `PING` (4) / `PONG` (5): a latency probe and its echo, at most [`MAX_PING_BYTES`].
//!
//! A session: the client sends `Hello`; the server answers `Accept` or `Refuse` (and closes). Then the client
//! asks for phases one at a time (`Phase`): `upload` (client sends DATA for the span, then END; the server
//! answers `Measured`), `download` (the server sends DATA then END; the client measures), `latency` (PING/PONG
//! until the client sends END), and ends with `Done`. RDMA sessions use the same messages, with the queue pair's
//! addresses in `Hello`/`Accept` and the bulk moved by the adapter instead of DATA frames.

use serde::{Deserialize, Serialize};

/// The protocol version in `Hello`; a server refuses another one (`version`).
pub const PROTOCOL_VERSION: u32 = 1;
/// Length of a frame header in bytes.
pub const HEADER_BYTES: usize = 5;
/// Largest control message (JSON) in bytes.
pub const MAX_CONTROL_BYTES: u32 = 64 * 1024;
/// Largest DATA frame in bytes (the largest `--size` a client may ask for).
pub const MAX_DATA_BYTES: u32 = 64 * 1024 * 1024;
/// Largest PING/PONG payload in bytes.
pub const MAX_PING_BYTES: u32 = 64 * 1024;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Control,
    Data,
    End,
    Ping,
    Pong,
}

impl FrameKind {
    fn code(self) -> u8 {
        match self {
            FrameKind::Control => 1,
            FrameKind::Data => 2,
            FrameKind::End => 3,
            FrameKind::Ping => 4,
            FrameKind::Pong => 5,
        }
    }

    fn limit(self) -> u32 {
        match self {
            FrameKind::Control => MAX_CONTROL_BYTES,
            FrameKind::Data => MAX_DATA_BYTES,
            FrameKind::End => 0,
            FrameKind::Ping | FrameKind::Pong => MAX_PING_BYTES,
        }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    /// Payload length in bytes.
    pub len: u32,
}

/// A frame the protocol does not allow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("{kind:?} frame of {len} bytes is over its limit of {limit} bytes")]
    TooLong {
        kind: FrameKind,
        len: u32,
        limit: u32,
    },
    #[error("malformed control message: {0}")]
    BadMessage(String),
}

/// Encodes a header.
pub fn encode_header(kind: FrameKind, len: u32) -> [u8; HEADER_BYTES] {
    let l = len.to_be_bytes();
    [kind.code(), l[0], l[1], l[2], l[3]]
}

/// Decodes a header, refusing an unknown kind or a length over the kind's limit.
pub fn decode_header(b: [u8; HEADER_BYTES]) -> Result<Header, WireError> {
    let kind = match b[0] {
        1 => FrameKind::Control,
        2 => FrameKind::Data,
        3 => FrameKind::End,
        4 => FrameKind::Ping,
        5 => FrameKind::Pong,
        k => return Err(WireError::UnknownKind(k)),
    };
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
    let limit = kind.limit();
    if len > limit {
        return Err(WireError::TooLong { kind, len, limit });
    }
    Ok(Header { kind, len })
}

/// The data path a session measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// Bulk and pings on the TCP control connection itself.
    #[default]
    Tcp,
    /// RDMA verbs: RC queue pairs, RDMA WRITE for bulk, SEND ping-pong for latency.
    Rdma,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        }
    }
}

/// Why a server declines a probe (`Refuse.reason`; JSON and text say it in these words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The token is missing or wrong.
    Token,
    /// The size or the duration is over the server's limits.
    Limits,
    /// The node's fabric is busy (a training job is using it); probing would compete with it.
    Busy,
    /// Another probe is running, or the last one was too recent.
    Rate,
    /// The server does not offer the transport asked for.
    Transport,
    /// The client speaks another protocol version.
    Version,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Token => "token",
            Refusal::Limits => "limits",
            Refusal::Busy => "busy",
            Refusal::Rate => "rate",
            Refusal::Transport => "transport",
            Refusal::Version => "version",
        }
    }
}

/// The address of one end's RDMA queue pair and buffer, exchanged over the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInfo {
    /// Local identifier of the port (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// The port's GID (16 bytes, hex); RoCE routes by it.
    pub gid: String,
    /// Address of the registered buffer the peer may RDMA WRITE into.
    pub addr: u64,
    /// Remote key of that buffer.
    pub rkey: u32,
    /// Length of that buffer in bytes.
    pub len: u64,
}

/// A bandwidth or latency phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    /// Client → server bulk.
    Upload,
    /// Server → client bulk.
    Download,
    /// Ping-pong of small messages.
    Latency,
}

/// A control message (JSON in a CONTROL frame).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Hello {
        version: u32,
        token: String,
        transport: TransportKind,
        /// Bytes per DATA frame or RDMA WRITE.
        size_bytes: u64,
        /// The whole session's duration in milliseconds (bulk both ways and latency).
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qp: Option<QpInfo>,
        /// Relay: instead of being probed, the server probes this `HOST:PORT` with these parameters and
        /// answers `Relayed` (a collector asking agent A to probe agent B).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay_to: Option<String>,
    },
    /// A relayed probe's result, or why it failed.
    Relayed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Accept {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qp: Option<QpInfo>,
    },
    Refuse {
        reason: Refusal,
        detail: String,
    },
    Phase {
        phase: PhaseKind,
        /// How long the sender sends, in milliseconds.
        span_ms: u64,
    },
    /// What the receiving side of a bulk phase counted.
    Measured {
        bytes: u64,
        seconds: f64,
    },
    Done,
}

/// Encodes a control message as a complete CONTROL frame.
pub fn encode_message(m: &Message) -> Vec<u8> {
    let body = serde_json::to_vec(m).unwrap_or_default();
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&encode_header(FrameKind::Control, len));
    out.extend_from_slice(&body);
    out
}

/// Decodes a CONTROL frame's payload.
pub fn decode_message(body: &[u8]) -> Result<Message, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::BadMessage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_limits_hold() {
        let h = encode_header(FrameKind::Data, 1 << 20);
        assert_eq!(h, [2, 0, 0x10, 0, 0]);
        assert_eq!(
            decode_header(h).unwrap(),
            Header {
                kind: FrameKind::Data,
                len: 1 << 20
            }
        );
        assert_eq!(
            decode_header([9, 0, 0, 0, 0]),
            Err(WireError::UnknownKind(9))
        );
        let e =
            decode_header(encode_header(FrameKind::Control, MAX_CONTROL_BYTES + 1)).unwrap_err();
        assert!(matches!(e, WireError::TooLong { len: 65537, .. }), "{e}");
        assert!(decode_header(encode_header(FrameKind::End, 1)).is_err());
    }

    #[test]
    fn messages_round_trip_as_json() {
        let m = Message::Hello {
            version: 1,
            token: "t\"ok".into(),
            transport: TransportKind::Rdma,
            size_bytes: 65536,
            duration_ms: 5000,
            qp: Some(QpInfo {
                lid: 3,
                qpn: 0x1234,
                psn: 7,
                gid: "fe80".into(),
                addr: 1 << 40,
                rkey: 9,
                len: 4096,
            }),
            relay_to: None,
        };
        let f = encode_message(&m);
        assert_eq!(f[0], 1);
        assert_eq!(decode_message(&f[HEADER_BYTES..]).unwrap(), m);
        let r = encode_message(&Message::Refuse {
            reason: Refusal::Busy,
            detail: "x".into(),
        });
        let text = std::str::from_utf8(&r[HEADER_BYTES..]).unwrap();
        assert_eq!(text, r#"{"type":"refuse","reason":"busy","detail":"x"}"#);
        assert!(decode_message(b"{\"type\":\"nope\"}").is_err());
    }
}
