//! `probe run`: connects to a probe server (from a chosen local address, so the probe takes the fabric
//! interface) and measures.

use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpSocket;

use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::params::Params;
use crate::result::ProbeResult;
use crate::session;
use crate::transport::Tcp;
use crate::wire::{Message, TransportKind, PROTOCOL_VERSION};

/// What `probe run` needs.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// `HOST:PORT` of the probe server.
    pub target: String,
    /// Local address to connect from (the fabric interface's); `None` lets routing choose.
    pub bind: Option<IpAddr>,
    pub token: Option<String>,
    pub params: Params,
    /// RDMA device (`--device`); `None`: the first one found.
    pub device: Option<String>,
}

async fn connect(target: &str, bind: Option<IpAddr>) -> Result<Conn, ProbeError> {
    let err = |error| ProbeError::Connect {
        target: target.to_string(),
        error,
    };
    let addr: SocketAddr = tokio::net::lookup_host(target)
        .await
        .map_err(err)?
        .next()
        .ok_or_else(|| err(std::io::Error::other("the name resolves to no address")))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    if let Some(ip) = bind {
        let local = SocketAddr::new(ip, 0);
        socket.bind(local).map_err(|error| ProbeError::Bind {
            addr: local.to_string(),
            error,
        })?;
    }
    match tokio::time::timeout(GRACE, socket.connect(addr)).await {
        Ok(Ok(s)) => Ok(Conn::new(s)),
        Ok(Err(e)) => Err(err(e)),
        Err(_) => Err(err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer",
        ))),
    }
}

/// Asks the probe server `via` to probe `to` with `params` (its own token and address), and returns what it
/// measured (`tx`: `via` → `to`).
pub async fn relay(
    via: &str,
    to: &str,
    token: Option<&str>,
    params: &Params,
) -> Result<ProbeResult, ProbeError> {
    let mut conn = connect(via, None).await?;
    conn.send_message(&Message::Hello {
        version: PROTOCOL_VERSION,
        token: token.unwrap_or("").to_string(),
        transport: params.transport,
        size_bytes: params.size,
        duration_ms: u64::try_from(params.duration.as_millis()).unwrap_or(u64::MAX),
        qp: None,
        relay_to: Some(to.to_string()),
    })
    .await?;
    let relay_err = |detail: String| ProbeError::Relay {
        via: via.to_string(),
        to: to.to_string(),
        detail,
    };
    match conn.recv_message(params.duration + GRACE * 3).await? {
        Message::Relayed {
            result: Some(r), ..
        } => serde_json::from_value(r).map_err(|e| relay_err(format!("malformed result: {e}"))),
        Message::Relayed { error, .. } => Err(relay_err(error.unwrap_or_default())),
        Message::Refuse { reason, detail } => Err(ProbeError::Refused {
            target: via.to_string(),
            reason,
            detail,
        }),
        other => Err(relay_err(format!("unexpected answer {other:?}"))),
    }
}

/// Runs one probe against `opts.target`.
pub async fn run(opts: &ClientOptions) -> Result<ProbeResult, ProbeError> {
    let p = &opts.params;
    let token = opts.token.as_deref().unwrap_or("");
    let size = usize::try_from(p.size).unwrap_or(usize::MAX);
    let outcome = match p.transport {
        TransportKind::Tcp => {
            let mut conn = connect(&opts.target, opts.bind).await?;
            session::client(&mut conn, &mut Tcp, &opts.target, token, p).await?
        }
        TransportKind::Rdma => {
            // The device first: "no RDMA device" is the answer whatever the network says.
            let mut t = crate::rdma::open(opts.device.as_deref(), size)?;
            let mut conn = connect(&opts.target, opts.bind).await?;
            session::client(&mut conn, &mut t, &opts.target, token, p).await?
        }
    };
    Ok(ProbeResult::new(
        &opts.target,
        p.transport,
        p.size,
        &outcome,
    ))
}
