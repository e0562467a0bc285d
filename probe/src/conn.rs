//! Frame I/O on the control connection (the encoding is `wire.rs`'s).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::ProbeError;
use crate::wire::{self, FrameKind, Header, Message, HEADER_BYTES};

/// How long a peer may stay silent beyond what the phase itself lasts.
pub const GRACE: Duration = Duration::from_secs(10);

/// The control connection: frames in and out, every wait bounded.
pub struct Conn {
    stream: TcpStream,
    scratch: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        // Pings are single small frames: never hold them back.
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            scratch: Vec::new(),
        }
    }

    pub fn peer(&self) -> String {
        self.stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into())
    }

    pub async fn send_message(&mut self, m: &Message) -> Result<(), ProbeError> {
        self.stream.write_all(&wire::encode_message(m)).await?;
        Ok(())
    }

    /// Sends one frame with `payload`.
    pub async fn send_frame(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), ProbeError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| ProbeError::Protocol("frame over 4 GiB".into()))?;
        if payload.len() <= 4096 {
            // One write for a small frame, so a ping is one segment.
            let mut buf = Vec::with_capacity(HEADER_BYTES + payload.len());
            buf.extend_from_slice(&wire::encode_header(kind, len));
            buf.extend_from_slice(payload);
            self.stream.write_all(&buf).await?;
        } else {
            self.stream
                .write_all(&wire::encode_header(kind, len))
                .await?;
            self.stream.write_all(payload).await?;
        }
        Ok(())
    }

    /// Reads the next header within `within`.
    pub async fn recv_header(&mut self, within: Duration) -> Result<Header, ProbeError> {
        let mut h = [0u8; HEADER_BYTES];
        match tokio::time::timeout(within, self.stream.read_exact(&mut h)).await {
            Err(_) => Err(ProbeError::Timeout(within)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(
                ProbeError::Protocol("the peer closed the connection".into()),
            ),
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(_)) => Ok(wire::decode_header(h)?),
        }
    }

    /// Reads a payload of `len` bytes into the connection's scratch buffer and returns it.
    pub async fn recv_payload(&mut self, len: u32) -> Result<&[u8], ProbeError> {
        self.scratch.resize(len as usize, 0);
        self.stream.read_exact(&mut self.scratch).await?;
        Ok(&self.scratch)
    }

    /// Reads the next frame, which must be a control message: its header within `within`, then its payload
    /// within `within` again (a message sent half is not waited for beyond that).
    pub async fn recv_message(&mut self, within: Duration) -> Result<Message, ProbeError> {
        let h = self.recv_header(within).await?;
        if h.kind != FrameKind::Control {
            return Err(ProbeError::Protocol(format!(
                "expected a control message, got a {:?} frame",
                h.kind
            )));
        }
        let body = tokio::time::timeout(within, self.recv_payload(h.len))
            .await
            .map_err(|_| ProbeError::Timeout(within))??;
        Ok(wire::decode_message(body)?)
    }
}
