//! One probe session on each side, driving the phases over any [`Transport`] (the order is in `wire.rs`).

use std::time::Duration;

use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::params::Params;
use crate::transport::{Measure, Transport};
use crate::wire::{Message, PhaseKind, PROTOCOL_VERSION};

/// What the client measured: bulk each way and the round trips.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Client → server.
    pub upload: Measure,
    /// Server → client.
    pub download: Measure,
    pub rtts: Vec<Duration>,
}

fn measured(m: Message) -> Result<Option<Measure>, ProbeError> {
    match m {
        Message::Measured { bytes, seconds } if seconds > 0.0 => {
            Ok(Some(Measure { bytes, seconds }))
        }
        Message::Measured { .. } => Ok(None),
        other => Err(ProbeError::Protocol(format!(
            "expected `measured`, got {other:?}"
        ))),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The client's side: hello, the three phases, done. `target` names the peer in errors.
pub async fn client<T: Transport>(
    conn: &mut Conn,
    t: &mut T,
    target: &str,
    token: &str,
    p: &Params,
) -> Result<Outcome, ProbeError> {
    conn.send_message(&Message::Hello {
        version: PROTOCOL_VERSION,
        token: token.to_string(),
        transport: t.kind(),
        size_bytes: p.size,
        duration_ms: millis(p.duration),
        qp: t.local_qp(),
        relay_to: None,
    })
    .await?;
    match conn.recv_message(GRACE).await? {
        Message::Accept { qp } => t.connect(qp.as_ref())?,
        Message::Refuse { reason, detail } => {
            return Err(ProbeError::Refused {
                target: target.to_string(),
                reason,
                detail,
            })
        }
        other => return Err(ProbeError::Protocol(format!("unexpected answer {other:?}"))),
    }
    let spans = p.spans();
    let size = usize::try_from(p.size).unwrap_or(usize::MAX);
    let phase = |phase, span| Message::Phase {
        phase,
        span_ms: millis(span),
    };

    conn.send_message(&phase(PhaseKind::Upload, spans.upload))
        .await?;
    let own = t.send_bulk(conn, spans.upload, size).await?;
    let theirs = measured(conn.recv_message(GRACE).await?)?;
    let upload = own.or(theirs).unwrap_or_default();

    conn.send_message(&phase(PhaseKind::Download, spans.download))
        .await?;
    let own = t.recv_bulk(conn, spans.download).await?;
    let theirs = measured(conn.recv_message(spans.download + GRACE).await?)?;
    let download = own.or(theirs).unwrap_or_default();

    conn.send_message(&phase(PhaseKind::Latency, spans.latency))
        .await?;
    let rtts = t.pings(conn, spans.latency).await?;
    conn.send_message(&Message::Done).await?;
    Ok(Outcome {
        upload,
        download,
        rtts,
    })
}

/// The server's side after it accepted: serves phases until `done`. No phase lasts longer than `max_span`.
pub async fn server<T: Transport>(
    conn: &mut Conn,
    t: &mut T,
    size: usize,
    max_span: Duration,
) -> Result<(), ProbeError> {
    loop {
        let (phase, span) = match conn.recv_message(max_span + GRACE).await? {
            Message::Phase { phase, span_ms } => {
                (phase, Duration::from_millis(span_ms).min(max_span))
            }
            Message::Done => return Ok(()),
            other => return Err(ProbeError::Protocol(format!("unexpected {other:?}"))),
        };
        let m = match phase {
            PhaseKind::Upload => t.recv_bulk(conn, span).await?,
            PhaseKind::Download => t.send_bulk(conn, span, size).await?,
            PhaseKind::Latency => {
                t.pongs(conn, span).await?;
                continue;
            }
        };
        let m = m.unwrap_or_default();
        conn.send_message(&Message::Measured {
            bytes: m.bytes,
            seconds: m.seconds,
        })
        .await?;
    }
}
