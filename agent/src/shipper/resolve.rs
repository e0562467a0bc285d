//! Shard discovery by DNS: a task that resolves the collector setting's `dns+` names ([`discovery`]) every
//! `collector_refresh`, and at once (at most once a second) when the shipper says a collector could not be
//! reached, and publishes the set of shards when it changes.
//!
//! Contract:
//! - The resolver is behind [`Resolve`]: the system's ([`SystemResolver`]: `getaddrinfo` through tokio, so
//!   `/etc/hosts` and the pod's search domains apply) or recorded answers in tests.
//! - A name whose lookup fails, times out ([`LOOKUP_TIMEOUT`]) or answers no address keeps its previous
//!   addresses (said in the log): a DNS outage or a moment with no ready pod never leaves the agent with
//!   nowhere to ship. A set is published only when it is not empty and differs from the last one.
//! - Until the first set, the names are retried every second ([`FIRST_RETRY`]).
//! - Every lookup is counted by result (`commwatch_agent_discovery_resolves_total{result}`: `ok`, `empty`,
//!   `error`, `timeout`); a round in which every name answered an address sets
//!   `commwatch_agent_discovery_last_success_unix_seconds`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::discovery::{self, ShardSet, Target};
use crate::telemetry::{ResolveResult, ShardMetrics};

/// How long one name's lookup may take before it counts as failed.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between two lookups of the names, however often the shipper asks.
pub const MIN_GAP: Duration = Duration::from_secs(1);
/// How often the names are tried while no set is known yet.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Resolves a host name to its addresses (every A and AAAA record).
pub trait Resolve: Send + Sync + 'static {
    fn lookup(&self, host: String, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The system's resolver (`getaddrinfo` on tokio's blocking pool).
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup(&self, host: String, port: u16) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// The shipper's end of discovery: the published set, and the way to ask for a lookup now.
pub struct Discovery {
    pub sets: watch::Receiver<ShardSet>,
    pub nudge: Arc<Notify>,
}

/// Starts the task; it ends at `shutdown` or when the shipper drops its [`Discovery`].
pub fn spawn(
    targets: Vec<Target>,
    resolver: Arc<dyn Resolve>,
    refresh: Duration,
    tls_server_name: Option<String>,
    metrics: ShardMetrics,
    shutdown: watch::Receiver<bool>,
) -> Discovery {
    let (tx, sets) = watch::channel(ShardSet::default());
    let nudge = Arc::new(Notify::new());
    let answers = vec![Vec::new(); targets.len()];
    let task = Refresher {
        targets,
        resolver,
        tls_server_name,
        answers,
        tx,
        metrics,
    };
    tokio::spawn(task.run(refresh, nudge.clone(), shutdown));
    Discovery { sets, nudge }
}

/// Waits for the next published set; never resolves without discovery (or once its task ended).
pub async fn next_set(discovery: &mut Option<Discovery>) -> ShardSet {
    if let Some(d) = discovery {
        if d.sets.changed().await.is_ok() {
            return d.sets.borrow_and_update().clone();
        }
        *discovery = None;
    }
    std::future::pending().await
}

struct Refresher {
    targets: Vec<Target>,
    resolver: Arc<dyn Resolve>,
    tls_server_name: Option<String>,
    /// The last non-empty answer per target.
    answers: Vec<Vec<IpAddr>>,
    tx: watch::Sender<ShardSet>,
    /// The lookups counted, the last full success.
    metrics: ShardMetrics,
}

impl Refresher {
    async fn run(
        mut self,
        refresh: Duration,
        nudge: Arc<Notify>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        while !*shutdown.borrow() && !self.tx.is_closed() {
            let looked_up = Instant::now();
            self.resolve_all().await;
            let wait = if self.tx.borrow().urls.is_empty() {
                FIRST_RETRY.min(refresh)
            } else {
                refresh
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => continue,
                _ = nudge.notified() => {}
                _ = shutdown.changed() => return,
                _ = self.tx.closed() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep_until(looked_up + MIN_GAP) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Looks every name up; publishes the set when it changed.
    async fn resolve_all(&mut self) {
        let mut all_ok = true;
        for (i, t) in self.targets.iter().enumerate() {
            let Target::Dns { host, port, .. } = t else {
                continue;
            };
            let lookup = self.resolver.lookup(host.clone(), *port);
            let result = match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
                Ok(Ok(addrs)) if !addrs.is_empty() => {
                    self.answers[i] = addrs;
                    ResolveResult::Ok
                }
                Ok(Ok(_)) => {
                    tracing::warn!(
                        host,
                        "collector shards: the name has no address; keeping the last"
                    );
                    ResolveResult::Empty
                }
                Ok(Err(e)) => {
                    tracing::warn!(host, error = %e, "collector shards: lookup failed; keeping the last");
                    ResolveResult::Error
                }
                Err(_) => {
                    tracing::warn!(host, timeout = ?LOOKUP_TIMEOUT,
                        "collector shards: lookup timed out; keeping the last");
                    ResolveResult::Timeout
                }
            };
            all_ok &= result == ResolveResult::Ok;
            self.metrics
                .resolves
                .with_label_values(&[result.as_str()])
                .inc();
        }
        if all_ok {
            self.metrics
                .discovery_last_success
                .set(commwatch_model::clock::unix_now_s());
        }
        let set = discovery::shard_set(
            &self.targets,
            &self.answers,
            self.tls_server_name.as_deref(),
        );
        if set.urls.is_empty() {
            return;
        }
        self.tx.send_if_modified(|current| {
            if *current == set {
                return false;
            }
            tracing::info!(shards = ?set.urls, "collector shards resolved");
            *current = set;
            true
        });
    }
}
