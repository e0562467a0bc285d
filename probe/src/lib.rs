//! Active probes: the bare bandwidth of a link both ways and its small-message latency, between this host and
//! a probe server (`commwatch probe serve`, or an agent with probes enabled), over TCP or RDMA verbs.
//!
//! Module map, each using only those before it:
//! - [`wire`]: the frames and control messages (pure), [`params`]: parameters, limits, accept or refuse (pure),
//!   [`pace`]: the window and waits of a bulk phase from its measured rate (pure), [`stats`]: bandwidth and
//!   quantiles (pure), [`error`], [`busy`]: the [`BusyCheck`] a server asks, [`auth`]: wrong tokens throttled
//!   per address (pure);
//! - [`conn`]: frame I/O on the control connection, [`transport`]: the [`Transport`] trait and TCP, [`rdma`]:
//!   the verbs transport (cargo feature `rdma`) and its pure plan;
//! - [`session`]: the phases on either side, [`result`]: the figures, [`client`] and [`server`]
//!   (which relays a probe with the client: a collector asks agent A to probe agent B).

pub mod auth;
pub mod busy;
pub mod client;
pub mod conn;
pub mod error;
pub mod pace;
pub mod params;
pub mod rdma;
pub mod result;
pub mod server;
pub mod session;
pub mod stats;
pub mod transport;
pub mod wire;

pub use busy::{BusyCheck, NeverBusy};
pub use client::{relay, run, ClientOptions};
pub use error::ProbeError;
pub use params::{Limits, Params};
pub use result::ProbeResult;
pub use server::{Server, ServerConfig, ServerMetrics};
pub use transport::Transport;
pub use wire::{Refusal, TransportKind};
