//! Active probes the collector schedules: on request (`POST /api/v1/probes`, `export/probes.rs`) and, when
//! `[probes] matrix_period` is set, a sampled matrix of node pairs (rack-aware like Pingmesh: pairs inside each
//! rack and one pair between each two racks, rotated round by round). The collector does not probe itself: it
//! asks node A's agent to relay a probe to node B's agent (`commwatch_probe::relay`), so the figure is the bare
//! A↔B link. Agents decline while their fabric is busy, so only idle pairs get measured. Results are kept as the
//! bare baseline of each pair, at most `max_pairs` pairs (the oldest go first).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commwatch_probe::{Params, ProbeError, TransportKind};
use serde::{Deserialize, Serialize};

/// `[probes]` in the collector's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbesConfig {
    /// The agents' probe token (the same file as their `[probe] token_file`).
    pub token_file: Option<PathBuf>,
    /// Each node's agent probe address (`node = "HOST:PORT"`, its `[probe] listen`); nodes not listed are
    /// never probed.
    pub addresses: BTreeMap<String, String>,
    /// Each node's rack, when known: the matrix then pairs nodes inside racks and across racks.
    pub racks: BTreeMap<String, String>,
    pub transport: TransportKind,
    /// Whole probe per pair.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// Bytes per message.
    pub size: u64,
    /// Period of the sampled matrix; `None`: off.
    #[serde(with = "humantime_serde")]
    pub matrix_period: Option<Duration>,
    /// Pairs probed per matrix round.
    pub matrix_pairs: usize,
    /// Pairs kept (and exported in `/metrics`) at most.
    pub max_pairs: usize,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        ProbesConfig {
            token_file: None,
            addresses: BTreeMap::new(),
            racks: BTreeMap::new(),
            transport: TransportKind::Tcp,
            duration: Duration::from_secs(5),
            size: 1024 * 1024,
            matrix_period: None,
            matrix_pairs: 8,
            max_pairs: 256,
        }
    }
}

/// Nodes whose advertised probe address is kept at most (the collector's `limits.max_nodes` default).
pub const MAX_ADVERTS: usize = 10_000;

/// Largest `[probes] max_pairs` accepted: each pair kept is a handful of `/metrics` series and a scan per
/// evaluation, so the bound keeps both small (4096 pairs: 64 nodes probed all-to-all).
pub const MAX_PAIRS_BOUND: usize = 4096;

impl ProbesConfig {
    /// Checks the bounds of `[probes]`; the error is the key (its dotted TOML path) and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let bad = |field: &'static str, reason: String| Err((field, reason));
        if !(1..=MAX_PAIRS_BOUND).contains(&self.max_pairs) {
            return bad(
                "probes.max_pairs",
                format!("must be 1 to {MAX_PAIRS_BOUND}"),
            );
        }
        if !(1..=MAX_PAIRS_BOUND).contains(&self.matrix_pairs) {
            return bad(
                "probes.matrix_pairs",
                format!("must be 1 to {MAX_PAIRS_BOUND}"),
            );
        }
        Ok(())
    }
}

/// Longest advertised probe address accepted (a 253-byte host name, a colon and a port).
pub const MAX_ADVERT_LEN: usize = 261;

/// Where the collector reaches a node's probe server, from the agent's `ProbeAdvert` (pure): an `IP:PORT`
/// with a routable IP as advertised; a wildcard IP (`0.0.0.0`, `::`) stands for the stream's peer IP
/// (`peer`) with the advertised port; a `HOST:PORT` with a host name is kept as written. Refused: a loopback
/// host (no other node reaches it), port 0, a wildcard without a peer, anything unparsable.
pub fn advertised_address(
    advertised: &str,
    peer: Option<std::net::IpAddr>,
) -> Result<String, &'static str> {
    use std::net::SocketAddr;
    if advertised.is_empty() || advertised.len() > MAX_ADVERT_LEN {
        return Err("empty or longer than 261 bytes");
    }
    if let Ok(a) = advertised.parse::<SocketAddr>() {
        if a.port() == 0 {
            return Err("port 0");
        }
        if a.ip().is_loopback() {
            return Err("loopback host: other nodes cannot reach it");
        }
        if a.ip().is_unspecified() {
            let ip = peer.ok_or("wildcard host and no peer address for the stream")?;
            return Ok(SocketAddr::new(ip, a.port()).to_string());
        }
        return Ok(a.to_string());
    }
    let (host, port) = advertised.rsplit_once(':').ok_or("not HOST:PORT")?;
    let port: u16 = port.parse().map_err(|_| "not HOST:PORT")?;
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !host_ok || port == 0 {
        return Err("not HOST:PORT");
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Err("loopback host: other nodes cannot reach it");
    }
    Ok(advertised.to_string())
}

/// Probe addresses the agents advertised, per node (the latest wins), at most `max` nodes: a new node past
/// the bound is not kept (counted in `dropped`). `[probes] addresses` takes precedence over these.
#[derive(Debug, Default)]
pub struct ProbeAdverts {
    nodes: Mutex<BTreeMap<String, String>>,
    max: usize,
    /// Adverts refused (bad address) or not kept (bound).
    pub dropped: AtomicU64,
}

impl ProbeAdverts {
    pub fn new(max: usize) -> ProbeAdverts {
        ProbeAdverts {
            max: max.max(1),
            ..ProbeAdverts::default()
        }
    }

    /// Keeps `node`'s advertised address (see [`advertised_address`]); the error says why it was refused.
    pub fn record(
        &self,
        node: &str,
        advertised: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<String, &'static str> {
        let kept = advertised_address(advertised, peer).and_then(|a| {
            let Ok(mut m) = self.nodes.lock() else {
                return Err("lock poisoned");
            };
            if !m.contains_key(node) && m.len() >= self.max {
                return Err("too many nodes advertised");
            }
            m.insert(node.to_string(), a.clone());
            Ok(a)
        });
        if kept.is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    pub fn get(&self, node: &str) -> Option<String> {
        self.nodes.lock().ok()?.get(node).cloned()
    }
}

/// Pairs one request may schedule at most.
pub const MAX_PAIRS_PER_REQUEST: usize = 64;

/// One probed pair's latest result (`GET /api/v1/probes`). Bandwidth in bytes/s, latency in seconds (round
/// trip of one 8-byte message).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRecord {
    /// The prober (`tx`: from → to).
    pub from: String,
    pub to: String,
    pub transport: TransportKind,
    pub at_unix_s: f64,
    /// `ok`, `declined` (busy, rate, token…: see `error`) or `failed`.
    pub outcome: &'static str,
    pub error: Option<String>,
    pub tx_bytes_per_second: Option<f64>,
    pub rx_bytes_per_second: Option<f64>,
    pub latency_p50_seconds: Option<f64>,
    pub latency_p99_seconds: Option<f64>,
    pub latency_max_seconds: Option<f64>,
}

/// The latest record of each pair, bounded.
#[derive(Debug, Default)]
pub struct ProbeBook {
    pairs: Mutex<BTreeMap<(String, String), ProbeRecord>>,
    max_pairs: usize,
    /// Probes run, by outcome: ok, declined, failed.
    pub counts: [AtomicU64; 3],
}

impl ProbeBook {
    pub fn new(max_pairs: usize) -> ProbeBook {
        ProbeBook {
            max_pairs: max_pairs.max(1),
            ..ProbeBook::default()
        }
    }

    /// Keeps `r` as its pair's latest; a new pair past the cap replaces the stalest one. A failed probe does
    /// not overwrite the figures of an earlier good one: it is kept only where nothing better is.
    pub fn record(&self, r: ProbeRecord) {
        let i = match r.outcome {
            "ok" => 0,
            "declined" => 1,
            _ => 2,
        };
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let Ok(mut m) = self.pairs.lock() else { return };
        let key = (r.from.clone(), r.to.clone());
        if r.outcome != "ok" && m.get(&key).is_some_and(|old| old.outcome == "ok") {
            return;
        }
        if !m.contains_key(&key) && m.len() >= self.max_pairs {
            let stalest = m
                .iter()
                .min_by(|a, b| a.1.at_unix_s.total_cmp(&b.1.at_unix_s))
                .map(|(k, _)| k.clone());
            if let Some(k) = stalest {
                m.remove(&k);
            }
        }
        m.insert(key, r);
    }

    pub fn list(&self) -> Vec<ProbeRecord> {
        self.pairs
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The bare bandwidth measured between two nodes (either direction of either probe), bytes/s.
    pub fn bare_between(&self, a: &str, b: &str) -> Option<f64> {
        let m = self.pairs.lock().ok()?;
        [(a, b), (b, a)]
            .iter()
            .filter_map(|(x, y)| m.get(&(x.to_string(), y.to_string())))
            .filter(|r| r.outcome == "ok")
            .flat_map(|r| [r.tx_bytes_per_second, r.rx_bytes_per_second])
            .flatten()
            .reduce(f64::min)
    }
}

/// Every unordered pair of `nodes` (sorted, deduplicated), at most `cap`.
pub fn all_pairs(nodes: &[String], cap: usize) -> Vec<(String, String)> {
    let mut n: Vec<&String> = nodes.iter().collect();
    n.sort();
    n.dedup();
    let mut out = Vec::new();
    for (i, a) in n.iter().enumerate() {
        for b in &n[i + 1..] {
            if out.len() == cap {
                return out;
            }
            out.push(((*a).clone(), (*b).clone()));
        }
    }
    out
}

/// A Pingmesh-like sample of `count` pairs for round `round` (pure): every pair inside each rack and one pair
/// between each two racks (its members rotating with the round), the whole list rotated by the round so that
/// successive rounds cover it all. Nodes without a rack share one.
pub fn matrix_sample(
    nodes: &[String],
    racks: &BTreeMap<String, String>,
    count: usize,
    round: u64,
) -> Vec<(String, String)> {
    let mut by_rack: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for n in nodes {
        by_rack
            .entry(racks.get(n).map_or("", String::as_str))
            .or_default()
            .push(n.clone());
    }
    let mut pool = Vec::new();
    for members in by_rack.values() {
        pool.extend(all_pairs(members, usize::MAX));
    }
    let groups: Vec<&Vec<String>> = by_rack.values().collect();
    for (i, a) in groups.iter().enumerate() {
        for b in &groups[i + 1..] {
            let x = &a[(round as usize) % a.len()];
            let y = &b[(round as usize / a.len().max(1)) % b.len()];
            pool.push((x.clone().min(y.clone()), x.clone().max(y.clone())));
        }
    }
    if pool.is_empty() {
        return pool;
    }
    let start = (round as usize * count) % pool.len();
    pool.rotate_left(start);
    pool.truncate(count.min(pool.len()));
    pool
}

/// Runs probes between pairs of nodes through their agents, one at a time.
pub struct Prober {
    pub config: ProbesConfig,
    token: Option<String>,
    pub book: Arc<ProbeBook>,
    /// The agents' advertised probe addresses (the ingest streams fill it).
    pub adverts: Arc<ProbeAdverts>,
    running: AtomicBool,
}

impl Prober {
    pub fn new(config: ProbesConfig, token: Option<String>) -> Arc<Prober> {
        Arc::new(Prober {
            book: Arc::new(ProbeBook::new(config.max_pairs)),
            adverts: Arc::new(ProbeAdverts::new(MAX_ADVERTS)),
            config,
            token,
            running: AtomicBool::new(false),
        })
    }

    /// Where `node`'s probe server is reached: `[probes] addresses` first, else what its agent advertised.
    pub fn address_of(&self, node: &str) -> Option<String> {
        self.config
            .addresses
            .get(node)
            .cloned()
            .or_else(|| self.adverts.get(node))
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Starts probing `pairs` in the background; `false` when a run is already going.
    pub fn start(self: &Arc<Self>, pairs: Vec<(String, String)>, params: Params) -> bool {
        if self.running.swap(true, Ordering::AcqRel) {
            return false;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            me.run(&pairs, &params).await;
            me.running.store(false, Ordering::Release);
        });
        true
    }

    /// The parameters of `[probes]`.
    pub fn params(&self) -> Params {
        Params {
            transport: self.config.transport,
            size: self.config.size,
            duration: self.config.duration,
        }
    }

    async fn run(&self, pairs: &[(String, String)], params: &Params) {
        for (a, b) in pairs {
            let r = self.probe_pair(a, b, params).await;
            self.book.record(r);
        }
    }

    async fn probe_pair(&self, a: &str, b: &str, params: &Params) -> ProbeRecord {
        let mut rec = ProbeRecord {
            from: a.to_string(),
            to: b.to_string(),
            transport: params.transport,
            at_unix_s: commwatch_model::clock::unix_now_ns() as f64 / 1e9,
            outcome: "failed",
            error: None,
            tx_bytes_per_second: None,
            rx_bytes_per_second: None,
            latency_p50_seconds: None,
            latency_p99_seconds: None,
            latency_max_seconds: None,
        };
        let (Some(via), Some(to)) = (self.address_of(a), self.address_of(b)) else {
            rec.error =
                Some("no probe address configured or advertised for one of the nodes".into());
            return rec;
        };
        match commwatch_probe::relay(&via, &to, self.token.as_deref(), params).await {
            Ok(r) => {
                rec.outcome = "ok";
                rec.tx_bytes_per_second = Some(r.tx_bytes_per_second);
                rec.rx_bytes_per_second = Some(r.rx_bytes_per_second);
                rec.latency_p50_seconds = Some(r.latency_p50_seconds);
                rec.latency_p99_seconds = Some(r.latency_p99_seconds);
                rec.latency_max_seconds = Some(r.latency_max_seconds);
            }
            Err(e) => {
                if let ProbeError::Refused { .. } = e {
                    rec.outcome = "declined";
                }
                if let ProbeError::Relay { detail, .. } = &e {
                    if detail.contains("declined the probe") {
                        rec.outcome = "declined";
                    }
                }
                rec.error = Some(e.to_string());
            }
        }
        rec
    }

    /// The sampled matrix, every `matrix_period`, over the nodes `nodes()` names that have an address, until
    /// `shutdown` flips. Does nothing when the matrix is off.
    pub async fn run_matrix(
        self: Arc<Self>,
        nodes: impl Fn() -> Vec<String> + Send + 'static,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let Some(period) = self.config.matrix_period else {
            return;
        };
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for round in 0u64.. {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => {}
            }
            let live: Vec<String> = nodes()
                .into_iter()
                .filter(|n| self.address_of(n).is_some())
                .collect();
            let pairs = matrix_sample(&live, &self.config.racks, self.config.matrix_pairs, round);
            if !pairs.is_empty() && !self.is_running() {
                self.start(pairs, self.params());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn rec(from: &str, to: &str, at: f64, outcome: &'static str, tx: f64) -> ProbeRecord {
        ProbeRecord {
            from: from.into(),
            to: to.into(),
            transport: TransportKind::Tcp,
            at_unix_s: at,
            outcome,
            error: None,
            tx_bytes_per_second: Some(tx),
            rx_bytes_per_second: Some(tx * 2.0),
            latency_p50_seconds: None,
            latency_p99_seconds: None,
            latency_max_seconds: None,
        }
    }

    #[test]
    fn pairs_are_unordered_and_capped() {
        let p = all_pairs(&names(&["c", "a", "b", "a"]), 10);
        assert_eq!(
            p,
            vec![
                ("a".into(), "b".into()),
                ("a".into(), "c".into()),
                ("b".into(), "c".into())
            ]
        );
        assert_eq!(all_pairs(&names(&["a", "b", "c"]), 1).len(), 1);
    }

    #[test]
    fn the_matrix_pairs_inside_racks_and_across_them_and_rotates() {
        let nodes = names(&["a1", "a2", "b1", "b2"]);
        let racks: BTreeMap<String, String> = [("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B")]
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect();
        let all = matrix_sample(&nodes, &racks, 10, 0);
        assert_eq!(all.len(), 3, "{all:?}");
        assert!(all.contains(&("a1".into(), "a2".into())));
        assert!(all.contains(&("b1".into(), "b2".into())));
        assert!(all.contains(&("a1".into(), "b1".into())));
        let r1 = matrix_sample(&nodes, &racks, 10, 1);
        assert!(r1.contains(&("a2".into(), "b1".into())), "{r1:?}");
        let one: Vec<_> = (0..3)
            .map(|r| matrix_sample(&nodes, &racks, 1, r)[0].clone())
            .collect();
        assert_eq!(one.len(), 3);
        assert_ne!(one[0], one[1]);
        assert!(matrix_sample(&names(&["solo"]), &BTreeMap::new(), 4, 0).is_empty());
    }

    #[test]
    fn the_advertised_address_is_routable_or_the_streams_peer() {
        let peer: Option<std::net::IpAddr> = Some("10.0.0.7".parse().unwrap());
        assert_eq!(
            advertised_address("10.1.2.3:7400", peer),
            Ok("10.1.2.3:7400".into())
        );
        assert_eq!(
            advertised_address("0.0.0.0:7400", peer),
            Ok("10.0.0.7:7400".into())
        );
        assert_eq!(
            advertised_address("[::]:7400", peer),
            Ok("10.0.0.7:7400".into())
        );
        let v6: Option<std::net::IpAddr> = Some("fd00::7".parse().unwrap());
        assert_eq!(
            advertised_address("0.0.0.0:7400", v6),
            Ok("[fd00::7]:7400".into())
        );
        assert_eq!(
            advertised_address("node-3.ib:7400", peer),
            Ok("node-3.ib:7400".into())
        );
        assert!(advertised_address("0.0.0.0:7400", None).is_err());
        for bad in [
            "127.0.0.1:7400",
            "[::1]:7400",
            "localhost:7400",
            "10.1.2.3:0",
            "",
            "x",
            "a b:1",
            "h:99999",
        ] {
            assert!(advertised_address(bad, peer).is_err(), "{bad}");
        }
        assert!(advertised_address(&"a".repeat(300), peer).is_err());
    }

    #[test]
    fn the_config_wins_over_the_advert_and_adverts_are_bounded() {
        let mut config = ProbesConfig::default();
        config.addresses.insert("a".into(), "10.0.0.1:1".into());
        let p = Prober::new(config, None);
        let peer = Some("10.9.9.9".parse().unwrap());
        p.adverts.record("a", "10.0.0.2:2", peer).unwrap();
        p.adverts.record("b", "0.0.0.0:3", peer).unwrap();
        assert_eq!(p.address_of("a").as_deref(), Some("10.0.0.1:1"));
        assert_eq!(p.address_of("b").as_deref(), Some("10.9.9.9:3"));
        assert_eq!(p.address_of("c"), None);
        assert!(p.adverts.record("c", "127.0.0.1:4", peer).is_err());
        let small = ProbeAdverts::new(1);
        small.record("a", "10.0.0.2:2", peer).unwrap();
        small.record("a", "10.0.0.3:2", peer).unwrap();
        assert!(small.record("b", "10.0.0.4:2", peer).is_err());
        assert_eq!(small.get("a").as_deref(), Some("10.0.0.3:2"));
        assert_eq!(small.dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn max_pairs_is_bounded_by_the_validation() {
        let mut c = ProbesConfig::default();
        assert!(c.validate().is_ok());
        for bad in [0, MAX_PAIRS_BOUND + 1, usize::MAX] {
            c.max_pairs = bad;
            let (field, why) = c.validate().unwrap_err();
            assert_eq!(field, "probes.max_pairs", "{why}");
        }
        c.max_pairs = MAX_PAIRS_BOUND;
        assert!(c.validate().is_ok());
        c.matrix_pairs = 0;
        assert_eq!(c.validate().unwrap_err().0, "probes.matrix_pairs");
    }

    #[test]
    fn the_book_is_bounded_and_keeps_good_figures() {
        let book = ProbeBook::new(2);
        book.record(rec("a", "b", 1.0, "ok", 10.0));
        book.record(rec("a", "c", 2.0, "ok", 20.0));
        book.record(rec("a", "b", 3.0, "declined", 0.0));
        assert_eq!(book.bare_between("b", "a"), Some(10.0));
        book.record(rec("b", "c", 4.0, "ok", 30.0));
        let pairs: Vec<_> = book.list().into_iter().map(|r| (r.from, r.to)).collect();
        assert_eq!(
            pairs,
            vec![("a".into(), "c".into()), ("b".into(), "c".into())]
        );
        assert_eq!(book.counts[1].load(Ordering::Relaxed), 1);
        assert_eq!(book.bare_between("a", "b"), None);
    }
}
