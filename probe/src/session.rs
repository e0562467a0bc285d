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

/// The server's side after it accepted: serves phases until `done`. The phases' spans add up to at most
/// `budget` (the probe's duration): a client that asks for more phases, or longer ones, than its `hello` said
/// gets what is left of the budget, then an error — a probe asked for 5 s never sends for longer.
pub async fn server<T: Transport>(
    conn: &mut Conn,
    t: &mut T,
    size: usize,
    budget: Duration,
) -> Result<(), ProbeError> {
    let mut left = budget;
    loop {
        let (phase, span) = match conn.recv_message(left + GRACE).await? {
            Message::Phase { phase, span_ms } => {
                let span = phase_span(&mut left, span_ms).ok_or_else(|| {
                    ProbeError::Protocol(format!(
                        "a phase asked beyond the probe's duration of {:.3} s",
                        budget.as_secs_f64()
                    ))
                })?;
                (phase, span)
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

/// The span a phase asked for as `span_ms` gets out of what is `left` of the budget (taken from it); `None`
/// once the budget is spent.
pub fn phase_span(left: &mut Duration, span_ms: u64) -> Option<Duration> {
    if left.is_zero() {
        return None;
    }
    let span = Duration::from_millis(span_ms).min(*left);
    *left -= span;
    Some(span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_share_the_duration_and_no_more() {
        let params = crate::params::Params::default();
        let spans = params.spans();
        let mut left = params.duration;
        for s in [spans.upload, spans.download, spans.latency] {
            assert_eq!(phase_span(&mut left, millis(s)), Some(s));
        }
        assert_eq!(phase_span(&mut left, 1000), None);
        // Asking long phases over and over gets the budget once.
        let mut left = Duration::from_secs(5);
        assert_eq!(phase_span(&mut left, 30_000), Some(Duration::from_secs(5)));
        assert_eq!(phase_span(&mut left, 30_000), None);
        let mut left = Duration::from_secs(5);
        for _ in 0..4 {
            assert!(phase_span(&mut left, 1000).is_some());
        }
        assert_eq!(phase_span(&mut left, 2000), Some(Duration::from_secs(1)));
        assert_eq!(phase_span(&mut left, 2000), None);
    }
}
