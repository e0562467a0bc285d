//! The `qdisc` source: each read interface's root queueing discipline (its transmit queue), from the kernel's
//! traffic-control statistics over rtnetlink (`RTM_GETQDISC` dump, the data `tc -s qdisc` and node_exporter's
//! `qdisc` collector read), in the agent's own network namespace.
//!
//! Which interfaces: those the `netdev` source reads ([`netdev::select`] with the same [`NetdevOptions`]), each
//! on its netdev link (`(class, <if>, <if>)`), so its series carry the interface and its role as the link's.
//! The interface's index comes from an `RTM_GETLINK` dump at discovery (names as the namespace has them).
//! Only with the real sysfs (`/sys`): a copied or simulated tree's interfaces are not this namespace's, and
//! reading the host's queues under their names would be wrong: there the source finds nothing (absent
//! hardware, a debug line).
//!
//! Series per interface (the root qdisc's figures; `mq` and other multi-queue roots report the sum of their
//! queues, as the kernel does):
//! - slow-tier counters: `qdisc_bytes_total` (64-bit), `qdisc_packets_total`, `qdisc_drops_total`,
//!   `qdisc_overlimits_total` (times the qdisc held a packet back because it was over its rate: a shaper
//!   throttled), `qdisc_requeues_total` (32-bit: the kernel's own widths);
//! - slow-tier gauges: `qdisc_backlog_bytes`, `qdisc_backlog_packets` (the queue's length now: a rule reads
//!   their mean over its window, which a reading a second estimates as well as twenty, at a twentieth of the
//!   netlink dumps), `qdisc_rate_limit_bytes_per_second`: the rate a `tbf` root shapes to, or the sum of the
//!   ceilings of an `htb` root's top-level classes (an `RTM_GETTCLASS` dump of that interface, only where the
//!   root is `htb`), 0 when the root qdisc sets no rate (any other kind).
//!
//! A shaped or slow link paces a whole ring: every node's bytes per step look alike, and only the node whose
//! queue holds the data back shows it here (the `transmit_queue_backlog` rule compares nodes). When netlink
//! cannot be opened (a sandbox without it) the source says so once ([`Source::unavailable`]) and reads
//! nothing; the other sources are not affected.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption, TcStats2};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::fsroot::FsRoot;
use super::netdev::{self, NetdevOptions, Selection};
use super::sysfs::parse_u64;
use super::{
    Inventory, LinkClass, LinkKey, ReadReport, SeriesKind, SeriesSpec, Source, SourceError, Tier,
    Value,
};

/// The series of one interface, in the order [`QdiscStats::values`] gives them: (metric, kind, tier).
pub const SERIES: [(&str, SeriesKind, Tier); 8] = [
    ("qdisc_bytes_total", SeriesKind::COUNTER64, Tier::Slow),
    ("qdisc_packets_total", SeriesKind::COUNTER32, Tier::Slow),
    ("qdisc_drops_total", SeriesKind::COUNTER32, Tier::Slow),
    ("qdisc_overlimits_total", SeriesKind::COUNTER32, Tier::Slow),
    ("qdisc_requeues_total", SeriesKind::COUNTER32, Tier::Slow),
    ("qdisc_backlog_bytes", SeriesKind::Gauge, Tier::Slow),
    ("qdisc_backlog_packets", SeriesKind::Gauge, Tier::Slow),
    (
        "qdisc_rate_limit_bytes_per_second",
        SeriesKind::Gauge,
        Tier::Slow,
    ),
];

mod rates;

pub use rates::{htb_limit, tbf_rate};

/// Errors of the qdisc source: what failed and why, never a message's content.
#[derive(Debug, thiserror::Error)]
pub enum QdiscError {
    #[error("rtnetlink socket: {0}")]
    Socket(std::io::Error),
    #[error("rtnetlink {request} dump: {error}")]
    Io {
        request: &'static str,
        error: std::io::Error,
    },
    #[error("rtnetlink {request} dump: cannot decode a message ({reason})")]
    Decode {
        request: &'static str,
        reason: String,
    },
    #[error("rtnetlink {request} dump: the kernel answered error {code}")]
    Kernel { request: &'static str, code: i32 },
    #[error("qdisc of interface index {ifindex} ({kind}): {reason}")]
    Stats {
        ifindex: u32,
        kind: String,
        reason: &'static str,
    },
}

impl From<QdiscError> for SourceError {
    fn from(e: QdiscError) -> Self {
        SourceError::Other(e.to_string())
    }
}

/// One interface's root qdisc, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QdiscStats {
    /// The qdisc's kind (`tbf`, `fq_codel`, `mq`, `noqueue`, ...).
    pub kind: String,
    pub bytes: u64,
    pub packets: u32,
    pub drops: u32,
    pub overlimits: u32,
    pub requeues: u32,
    /// Bytes queued now.
    pub backlog_bytes: u32,
    /// Packets queued now (the kernel's `qlen`).
    pub backlog_packets: u32,
    /// The rate a `tbf` root shapes to, or an `htb` root's classes let through at most ([`htb_limit`]: set by
    /// the source from a class dump), bytes/s; `None` for other kinds.
    pub rate_limit_bytes_per_second: Option<u64>,
}

impl QdiscStats {
    /// The values of [`SERIES`], in its order.
    pub fn values(&self) -> [Value; 8] {
        [
            Value::Counter(self.bytes),
            Value::Counter(u64::from(self.packets)),
            Value::Counter(u64::from(self.drops)),
            Value::Counter(u64::from(self.overlimits)),
            Value::Counter(u64::from(self.requeues)),
            Value::Gauge(f64::from(self.backlog_bytes)),
            Value::Gauge(f64::from(self.backlog_packets)),
            Value::Gauge(self.rate_limit_bytes_per_second.unwrap_or(0) as f64),
        ]
    }
}

/// Interface names to indices, from an `RTM_GETLINK` dump's messages (those without a name are skipped).
pub fn interface_indices(links: &[LinkMessage]) -> BTreeMap<String, u32> {
    links
        .iter()
        .filter_map(|l| {
            l.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) => Some((n.clone(), l.header.index)),
                _ => None,
            })
        })
        .collect()
}

/// The root qdisc of `msg`'s interface, or `None` when `msg` is not a root qdisc (a child of a classful
/// qdisc, an ingress or clsact qdisc). Statistics from `TCA_STATS2` (basic and queue) where the kernel sends
/// them, else from the older `TCA_STATS`; an error when it sends neither.
pub fn root_qdisc(msg: &TcMessage) -> Option<Result<(u32, QdiscStats), QdiscError>> {
    if msg.header.parent != TcHandle::ROOT {
        return None;
    }
    let ifindex = u32::try_from(msg.header.index).unwrap_or(0);
    let mut s = QdiscStats::default();
    let (mut basic, mut queue, mut compat) = (false, false, None);
    let mut options: &[TcOption] = &[];
    for a in &msg.attributes {
        match a {
            TcAttribute::Kind(k) => s.kind = k.clone(),
            TcAttribute::Options(o) => options = o,
            TcAttribute::Stats(c) => compat = Some(*c),
            TcAttribute::Stats2(v) => {
                for st in v {
                    match st {
                        TcStats2::Basic(b) => {
                            (s.bytes, s.packets, basic) = (b.bytes, b.packets, true);
                        }
                        TcStats2::Queue(q) => {
                            s.backlog_packets = q.qlen;
                            s.backlog_bytes = q.backlog;
                            s.drops = q.drops;
                            s.requeues = q.requeues;
                            s.overlimits = q.overlimits;
                            queue = true;
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if !(basic && queue) {
        let Some(c) = compat else {
            return Some(Err(QdiscError::Stats {
                ifindex,
                kind: s.kind,
                reason: "no statistics (neither TCA_STATS2 nor TCA_STATS)",
            }));
        };
        if !basic {
            (s.bytes, s.packets) = (c.bytes, c.packets);
        }
        if !queue {
            (s.backlog_packets, s.backlog_bytes) = (c.qlen, c.backlog);
            (s.drops, s.overlimits) = (c.drops, c.overlimits);
        }
    }
    if s.kind == "tbf" {
        s.rate_limit_bytes_per_second = tbf_rate(options);
    }
    Some(Ok((ifindex, s)))
}

/// Every interface's root qdisc in a `RTM_GETQDISC` dump, by interface index, and the messages that could
/// not be read (each error names the interface index and the qdisc's kind).
pub fn root_qdiscs(msgs: &[TcMessage]) -> (BTreeMap<u32, QdiscStats>, Vec<QdiscError>) {
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    for m in msgs {
        match root_qdisc(m) {
            Some(Ok((i, s))) => {
                out.insert(i, s);
            }
            Some(Err(e)) => errors.push(e),
            None => {}
        }
    }
    (out, errors)
}

/// Where the source's netlink messages come from: the kernel ([`NetlinkBackend`]) or a test's.
pub trait QdiscBackend: Send {
    /// Every interface of the network namespace (`RTM_GETLINK` dump).
    fn links(&mut self) -> Result<Vec<LinkMessage>, QdiscError>;
    /// Every qdisc of the network namespace (`RTM_GETQDISC` dump).
    fn qdiscs(&mut self) -> Result<Vec<TcMessage>, QdiscError>;
    /// Every traffic class of interface `ifindex` (`RTM_GETTCLASS` dump; the kernel dumps one interface's).
    fn classes(&mut self, ifindex: u32) -> Result<Vec<TcMessage>, QdiscError>;
}

/// Largest datagram read at once: the kernel sends a dump in datagrams of at most 32 KiB.
const RECV_BUFFER: usize = 64 * 1024;
/// How long a dump's answer is waited for before the read fails (the kernel answers at once).
const RECV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The kernel's rtnetlink, over one socket opened at construction.
pub struct NetlinkBackend {
    socket: Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

impl NetlinkBackend {
    /// Opens and connects an rtnetlink socket (with a receive timeout, so a read never hangs).
    pub fn open() -> Result<NetlinkBackend, QdiscError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(QdiscError::Socket)?;
        socket.bind_auto().map_err(QdiscError::Socket)?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(QdiscError::Socket)?;
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(socket.as_raw_fd()) };
        rustix::net::sockopt::set_socket_timeout(
            fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(RECV_TIMEOUT),
        )
        .map_err(|e| QdiscError::Socket(e.into()))?;
        Ok(NetlinkBackend {
            socket,
            sequence: 0,
            buffer: Vec::with_capacity(RECV_BUFFER),
        })
    }

    /// Sends a dump request and collects its answers until `NLMSG_DONE`.
    fn dump(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, QdiscError> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_DUMP | NLM_F_REQUEST;
        header.sequence_number = self.sequence;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(message));
        req.finalize();
        let mut bytes = vec![0u8; req.buffer_len()];
        req.serialize(&mut bytes);
        let io = |error| QdiscError::Io { request, error };
        self.socket.send(&bytes, 0).map_err(io)?;
        let mut out = Vec::new();
        loop {
            self.buffer.clear();
            let n = self.socket.recv(&mut self.buffer, 0).map_err(io)?;
            if n > self.buffer.len() {
                return Err(QdiscError::Decode {
                    request,
                    reason: format!("a datagram of {n} bytes is over {RECV_BUFFER}"),
                });
            }
            if decode_datagram(request, self.sequence, &self.buffer, &mut out)? {
                return Ok(out);
            }
        }
    }
}

/// Decodes one datagram's messages of dump `sequence` into `out`; `true` at `NLMSG_DONE`. Messages of
/// another sequence (a late answer to an earlier, failed dump) are skipped.
fn decode_datagram(
    request: &'static str,
    sequence: u32,
    mut bytes: &[u8],
    out: &mut Vec<RouteNetlinkMessage>,
) -> Result<bool, QdiscError> {
    while !bytes.is_empty() {
        let msg: NetlinkMessage<RouteNetlinkMessage> =
            NetlinkMessage::deserialize(bytes).map_err(|e| QdiscError::Decode {
                request,
                reason: e.to_string(),
            })?;
        let len = msg.header.length as usize;
        if len == 0 || len > bytes.len() {
            return Err(QdiscError::Decode {
                request,
                reason: format!("message length {len} of {} bytes left", bytes.len()),
            });
        }
        // Messages are 4-byte aligned in the datagram.
        bytes = bytes.get((len + 3) & !3..).unwrap_or(&[]);
        if msg.header.sequence_number != sequence {
            continue;
        }
        match msg.payload {
            NetlinkPayload::Done(_) => return Ok(true),
            NetlinkPayload::Error(e) => {
                if let Some(code) = e.code {
                    return Err(QdiscError::Kernel {
                        request,
                        code: code.get(),
                    });
                }
            }
            NetlinkPayload::InnerMessage(m) => out.push(m),
            _ => {}
        }
    }
    Ok(false)
}

impl QdiscBackend for NetlinkBackend {
    fn links(&mut self) -> Result<Vec<LinkMessage>, QdiscError> {
        let msgs = self.dump(
            "RTM_GETLINK",
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
        )?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    fn qdiscs(&mut self) -> Result<Vec<TcMessage>, QdiscError> {
        let msgs = self.dump(
            "RTM_GETQDISC",
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
        )?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(t) => Some(t),
                _ => None,
            })
            .collect())
    }

    fn classes(&mut self, ifindex: u32) -> Result<Vec<TcMessage>, QdiscError> {
        let mut req = TcMessage::default();
        req.header.index = i32::try_from(ifindex).unwrap_or(0);
        let msgs = self.dump("RTM_GETTCLASS", RouteNetlinkMessage::GetTrafficClass(req))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewTrafficClass(t) => Some(t),
                _ => None,
            })
            .collect())
    }
}

/// One interface the source reads: its index and the first of its series in the inventory.
#[derive(Debug, Clone, PartialEq)]
struct Watched {
    ifindex: u32,
    first_series: usize,
}

/// Reads the root qdisc of every interface the `netdev` source reads.
pub struct QdiscSource {
    sysfs_root: FsRoot,
    options: NetdevOptions,
    /// `None` until first needed; `Some(Err)` when netlink could not be opened (said once).
    backend: Option<Result<Box<dyn QdiscBackend>, String>>,
    /// Whether the sysfs root is this namespace's own (`/sys`) or the backend was injected.
    live: bool,
    inventory: Inventory,
    watched: Vec<Watched>,
    absent_logged: bool,
}

impl QdiscSource {
    /// A source for the interfaces under `<sysfs_root>/class/net` that `options` selects, reading the kernel's
    /// rtnetlink; it reads nothing unless `sysfs_root` is `/sys` (see the module documentation).
    pub fn new(sysfs_root: PathBuf, options: NetdevOptions) -> Self {
        let live = sysfs_root == Path::new("/sys");
        QdiscSource {
            sysfs_root: FsRoot::new(sysfs_root),
            options,
            backend: None,
            live,
            inventory: Inventory::default(),
            watched: Vec::new(),
            absent_logged: false,
        }
    }

    /// A source on `backend` instead of the kernel (tests), for the interfaces of the tree at `sysfs_root`.
    pub fn with_backend(
        sysfs_root: PathBuf,
        options: NetdevOptions,
        backend: Box<dyn QdiscBackend>,
    ) -> Self {
        let mut s = QdiscSource::new(sysfs_root, options);
        s.backend = Some(Ok(backend));
        s.live = true;
        s
    }

    fn backend(&mut self) -> Option<&mut Box<dyn QdiscBackend>> {
        let b = self.backend.get_or_insert_with(|| {
            NetlinkBackend::open()
                .map(|b| Box::new(b) as Box<dyn QdiscBackend>)
                .map_err(|e| {
                    // Said once: the result is kept, and the source reads nothing from then on.
                    tracing::warn!(error = %e, "qdisc source: no transmit queue is read");
                    e.to_string()
                })
        });
        b.as_mut().ok()
    }

    /// The interfaces `netdev` reads, with their link keys.
    fn read_interfaces(&self) -> Result<Vec<(String, LinkKey)>, SourceError> {
        let mut out = Vec::new();
        for (name, sel) in netdev::select(&self.sysfs_root, &self.options)? {
            if sel != Selection::Read {
                continue;
            }
            let dir = self.sysfs_root.join("class/net").join(&name);
            let ipoib = self
                .sysfs_root
                .read_trimmed(&dir.join("type"))
                .and_then(|t| parse_u64(&t).ok())
                == Some(netdev::ARPHRD_INFINIBAND);
            let class = if ipoib {
                LinkClass::Infiniband
            } else {
                LinkClass::Ethernet
            };
            let key = LinkKey::interface(class, &name);
            out.push((name, key));
        }
        Ok(out)
    }
}

impl Source for QdiscSource {
    fn name(&self) -> &'static str {
        "qdisc"
    }

    fn discover(&mut self) -> Result<bool, SourceError> {
        if !self.live {
            if !self.absent_logged {
                tracing::debug!(
                    "qdisc source: the sysfs root is not /sys, so its interfaces are not this network \
                     namespace's; no queue is read"
                );
                self.absent_logged = true;
            }
            return Ok(false);
        }
        let interfaces = self.read_interfaces()?;
        let Some(backend) = self.backend() else {
            return Ok(false);
        };
        let indices = interface_indices(&backend.links()?);
        let mut watched = Vec::new();
        let mut changed = false;
        for (name, key) in interfaces {
            let Some(&ifindex) = indices.get(&name) else {
                continue;
            };
            let first = series_of(&mut self.inventory.series, &key, &mut changed);
            watched.push(Watched {
                ifindex,
                first_series: first,
            });
        }
        self.watched = watched;
        Ok(changed)
    }

    fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    fn unavailable(&self) -> Option<String> {
        match &self.backend {
            Some(Err(e)) => Some(format!("cannot read the transmit queues: {e}")),
            _ => None,
        }
    }

    fn sample(&mut self, tier: Tier, sink: &mut dyn FnMut(usize, Value)) -> ReadReport {
        let mut report = ReadReport::default();
        // No dump on a tier without a series of ours (the fast one): nothing to read there.
        if self.watched.is_empty() || !SERIES.iter().any(|s| s.2 == tier) {
            return report;
        }
        let interfaces: Vec<u32> = self.watched.iter().map(|w| w.ifindex).collect();
        let Some(backend) = self.backend() else {
            return report;
        };
        let msgs = match backend.qdiscs() {
            Ok(m) => m,
            Err(e) => {
                report.fail(e.into());
                return report;
            }
        };
        let (mut roots, errors) = root_qdiscs(&msgs);
        for ifindex in interfaces {
            if let Some(s) = roots.get_mut(&ifindex).filter(|s| s.kind == "htb") {
                // The rate is its classes': one more dump, for shaped interfaces only.
                match backend.classes(ifindex) {
                    Ok(classes) => s.rate_limit_bytes_per_second = htb_limit(&classes),
                    Err(e) => report.fail(e.into()),
                }
            }
        }
        for w in &self.watched {
            match roots.get(&w.ifindex) {
                Some(s) => {
                    for (i, v) in s.values().into_iter().enumerate() {
                        if SERIES[i].2 == tier {
                            sink(w.first_series + i, v);
                            report.read += 1;
                        }
                    }
                }
                // No statistics: a failure; no qdisc at all: the interface went away since discovery, and
                // its series stop until the next one.
                None => {
                    if let Some(e) = errors.iter().find(
                        |e| matches!(e, QdiscError::Stats { ifindex, .. } if *ifindex == w.ifindex),
                    ) {
                        report.fail(SourceError::Other(e.to_string()));
                    }
                }
            }
        }
        report
    }
}

/// The index of `key`'s first series in `series`, adding the [`SERIES`] of `key` (in order) when they are not
/// there yet (and setting `changed`).
fn series_of(series: &mut Vec<SeriesSpec>, key: &LinkKey, changed: &mut bool) -> usize {
    let first = SeriesSpec::for_link(SERIES[0].0, SERIES[0].1, SERIES[0].2, key);
    if let Some(i) = series.iter().position(|s| *s == first) {
        return i;
    }
    let i = series.len();
    series.extend(
        SERIES
            .iter()
            .map(|&(metric, kind, tier)| SeriesSpec::for_link(metric, kind, tier, key)),
    );
    *changed = true;
    i
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use netlink_packet_core::{DefaultNla, NLMSG_DONE};
    use netlink_packet_route::tc::{TcStats, TcStatsBasic, TcStatsQueue};

    use super::rates::{TBF_RATE_OFFSET, TCA_TBF_PARMS, TCA_TBF_RATE64};

    use super::*;

    /// The attributes the kernel nests in a `tbf` qdisc's `TCA_OPTIONS` when it shapes to `rate` bytes/s:
    /// `TCA_TBF_PARMS` (a `tc_tbf_qopt`, 36 bytes), and `TCA_TBF_RATE64` when the rate does not fit 32 bits.
    /// The crate emits them inside `TCA_OPTIONS`; read back, they come as one undecoded attribute, as the
    /// kernel's do.
    fn tbf_options(rate: u64) -> Vec<TcOption> {
        let mut qopt = vec![0u8; 36];
        let r32 = u32::try_from(rate).unwrap_or(u32::MAX);
        qopt[TBF_RATE_OFFSET..TBF_RATE_OFFSET + 4].copy_from_slice(&r32.to_ne_bytes());
        let mut out = vec![TcOption::Other(DefaultNla::new(TCA_TBF_PARMS, qopt))];
        if rate > u64::from(u32::MAX) {
            out.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                rate.to_ne_bytes().to_vec(),
            )));
        }
        out
    }

    /// A root qdisc of interface `ifindex` with `TCA_STATS2` (basic and queue).
    fn qdisc(ifindex: i32, kind: &str, options: Vec<TcOption>, q: [u32; 5]) -> TcMessage {
        let mut m = TcMessage::default();
        m.header.index = ifindex;
        m.header.parent = TcHandle::ROOT;
        m.header.handle = TcHandle { major: 1, minor: 0 };
        let mut basic = TcStatsBasic::default();
        basic.bytes = 5_000_000_000;
        basic.packets = 70_000;
        let mut queue = TcStatsQueue::default();
        [
            queue.qlen,
            queue.backlog,
            queue.drops,
            queue.requeues,
            queue.overlimits,
        ] = q;
        m.attributes.push(TcAttribute::Kind(kind.to_string()));
        if !options.is_empty() {
            m.attributes.push(TcAttribute::Options(options));
        }
        m.attributes.push(TcAttribute::Stats2(vec![
            TcStats2::Basic(basic),
            TcStats2::Queue(queue),
        ]));
        m
    }

    /// One datagram of dump `sequence` holding `msgs` and, when `done`, `NLMSG_DONE`.
    fn datagram(sequence: u32, msgs: Vec<RouteNetlinkMessage>, done: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            let mut h = NetlinkHeader::default();
            h.sequence_number = sequence;
            let mut nl = NetlinkMessage::new(h, NetlinkPayload::from(m));
            nl.finalize();
            let mut b = vec![0u8; nl.buffer_len()];
            nl.serialize(&mut b);
            out.extend(b);
        }
        if done {
            // NLMSG_DONE: a header and a 4-byte status.
            let mut b = Vec::new();
            b.extend(20u32.to_ne_bytes());
            b.extend(NLMSG_DONE.to_ne_bytes());
            b.extend(0u16.to_ne_bytes());
            b.extend(sequence.to_ne_bytes());
            b.extend(0u32.to_ne_bytes());
            b.extend(0i32.to_ne_bytes());
            out.extend(b);
        }
        out
    }

    /// The kernel's answer as bytes, decoded back: what the crate reads of what we built.
    fn through_the_wire(msgs: Vec<TcMessage>) -> Vec<TcMessage> {
        let bytes = datagram(
            7,
            msgs.into_iter()
                .map(RouteNetlinkMessage::NewQueueDiscipline)
                .collect(),
            true,
        );
        let mut out = Vec::new();
        assert!(decode_datagram("RTM_GETQDISC", 7, &bytes, &mut out).unwrap());
        out.into_iter()
            .map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(t) => t,
                other => panic!("not a qdisc: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn reads_a_shaper_s_counters_backlog_and_rate() {
        let msgs = through_the_wire(vec![
            qdisc(3, "tbf", tbf_options(62_500_000), [12, 400_000, 2, 1, 3317]),
            qdisc(4, "fq_codel", vec![], [0, 0, 0, 0, 0]),
        ]);
        let (roots, errors) = root_qdiscs(&msgs);
        assert!(errors.is_empty(), "{errors:?}");
        let fab = &roots[&3];
        assert_eq!(
            *fab,
            QdiscStats {
                kind: "tbf".into(),
                bytes: 5_000_000_000,
                packets: 70_000,
                drops: 2,
                overlimits: 3317,
                requeues: 1,
                backlog_bytes: 400_000,
                backlog_packets: 12,
                rate_limit_bytes_per_second: Some(62_500_000),
            }
        );
        assert_eq!(
            fab.values(),
            [
                Value::Counter(5_000_000_000),
                Value::Counter(70_000),
                Value::Counter(2),
                Value::Counter(3317),
                Value::Counter(1),
                Value::Gauge(400_000.0),
                Value::Gauge(12.0),
                Value::Gauge(62_500_000.0),
            ]
        );
        assert_eq!(roots[&4].kind, "fq_codel");
        assert_eq!(roots[&4].rate_limit_bytes_per_second, None);
        assert_eq!(roots[&4].values()[7], Value::Gauge(0.0));
    }

    #[test]
    fn a_rate_of_4_gb_per_second_or_more_comes_from_rate64() {
        let msgs = through_the_wire(vec![qdisc(2, "tbf", tbf_options(12_500_000_000), [0; 5])]);
        assert_eq!(
            root_qdiscs(&msgs).0[&2].rate_limit_bytes_per_second,
            Some(12_500_000_000)
        );
    }

    #[test]
    fn children_and_ingress_qdiscs_are_not_roots() {
        let mut child = qdisc(3, "netem", vec![], [1; 5]);
        child.header.parent = TcHandle { major: 1, minor: 1 };
        let mut ingress = qdisc(3, "ingress", vec![], [1; 5]);
        ingress.header.parent = TcHandle::INGRESS;
        let root = qdisc(3, "tbf", tbf_options(250_000_000), [0, 0, 0, 0, 9]);
        let (roots, errors) = root_qdiscs(&through_the_wire(vec![child, root, ingress]));
        assert!(errors.is_empty());
        assert_eq!(roots.len(), 1);
        assert_eq!((roots[&3].kind.as_str(), roots[&3].overlimits), ("tbf", 9));
    }

    #[test]
    fn older_kernels_tca_stats_is_read_and_no_statistics_is_an_error_naming_the_interface() {
        let mut old = TcMessage::default();
        old.header.index = 5;
        old.header.parent = TcHandle::ROOT;
        let mut c = TcStats::default();
        (c.bytes, c.packets, c.drops, c.overlimits, c.qlen, c.backlog) = (10, 2, 3, 4, 5, 6);
        old.attributes = vec![
            TcAttribute::Kind("pfifo_fast".into()),
            TcAttribute::Stats(c),
        ];
        let mut bare = TcMessage::default();
        bare.header.index = 6;
        bare.header.parent = TcHandle::ROOT;
        bare.attributes = vec![TcAttribute::Kind("mq".into())];
        let (roots, errors) = root_qdiscs(&through_the_wire(vec![old, bare]));
        let s = &roots[&5];
        assert_eq!(
            (
                s.bytes,
                s.packets,
                s.drops,
                s.overlimits,
                s.backlog_packets,
                s.backlog_bytes
            ),
            (10, 2, 3, 4, 5, 6)
        );
        assert_eq!(errors.len(), 1);
        let e = errors[0].to_string();
        assert!(
            e.contains("index 6") && e.contains("mq") && e.contains("no statistics"),
            "{e}"
        );
    }

    #[test]
    fn a_datagram_is_read_to_its_end_and_bad_ones_say_why() {
        let mut out = Vec::new();
        // Another dump's late answer is skipped; no NLMSG_DONE: the dump goes on.
        let late = datagram(
            6,
            vec![RouteNetlinkMessage::NewQueueDiscipline(qdisc(
                1,
                "noqueue",
                vec![],
                [0; 5],
            ))],
            false,
        );
        assert!(!decode_datagram("RTM_GETQDISC", 7, &late, &mut out).unwrap());
        assert!(out.is_empty());
        let mut truncated = datagram(
            7,
            vec![RouteNetlinkMessage::NewQueueDiscipline(qdisc(
                1,
                "noqueue",
                vec![],
                [0; 5],
            ))],
            false,
        );
        truncated.truncate(truncated.len() - 8);
        let e = decode_datagram("RTM_GETQDISC", 7, &truncated, &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("RTM_GETQDISC") && e.contains("decode"), "{e}");
        assert!(decode_datagram("RTM_GETQDISC", 7, &[1, 2, 3], &mut out).is_err());
    }

    #[test]
    fn names_map_to_indices() {
        let mut l = LinkMessage::default();
        l.header.index = 3;
        l.attributes.push(LinkAttribute::IfName("fab0".into()));
        let mut nameless = LinkMessage::default();
        nameless.header.index = 4;
        let m = interface_indices(&[l, nameless]);
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            vec![("fab0".to_string(), 3)]
        );
    }

    /// Recorded answers instead of the kernel's; an interface without recorded classes fails its class dump.
    struct Recorded {
        links: Vec<LinkMessage>,
        qdiscs: Vec<TcMessage>,
        classes: BTreeMap<u32, Vec<TcMessage>>,
        class_dumps: Arc<AtomicUsize>,
    }

    impl QdiscBackend for Recorded {
        fn links(&mut self) -> Result<Vec<LinkMessage>, QdiscError> {
            Ok(self.links.clone())
        }
        fn qdiscs(&mut self) -> Result<Vec<TcMessage>, QdiscError> {
            Ok(self.qdiscs.clone())
        }
        fn classes(&mut self, ifindex: u32) -> Result<Vec<TcMessage>, QdiscError> {
            self.class_dumps.fetch_add(1, Ordering::Relaxed);
            self.classes
                .get(&ifindex)
                .cloned()
                .ok_or(QdiscError::Kernel {
                    request: "RTM_GETTCLASS",
                    code: -19,
                })
        }
    }

    /// An `htb` class `handle` under `parent` of interface `ifindex` whose ceiling is `ceil` bytes/s (its
    /// rate half that), as the kernel dumps it: `TCA_HTB_PARMS` (a 44-byte `tc_htb_opt`), and
    /// `TCA_HTB_CEIL64` when the ceiling does not fit 32 bits; read back through the wire.
    fn htb_class(ifindex: i32, parent: TcHandle, minor: u16, ceil: u64) -> TcMessage {
        use super::rates::{HTB_CEIL_OFFSET, TCA_HTB_CEIL64, TCA_HTB_PARMS};
        let mut opt = vec![0u8; 44];
        let c32 = u32::try_from(ceil).unwrap_or(u32::MAX);
        opt[TBF_RATE_OFFSET..TBF_RATE_OFFSET + 4].copy_from_slice(&(c32 / 2).to_ne_bytes());
        opt[HTB_CEIL_OFFSET..HTB_CEIL_OFFSET + 4].copy_from_slice(&c32.to_ne_bytes());
        let mut options = vec![TcOption::Other(DefaultNla::new(TCA_HTB_PARMS, opt))];
        if ceil > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(
                TCA_HTB_CEIL64,
                ceil.to_ne_bytes().to_vec(),
            )));
        }
        let mut m = TcMessage::default();
        m.header.index = ifindex;
        m.header.parent = parent;
        m.header.handle = TcHandle { major: 1, minor };
        m.attributes.push(TcAttribute::Kind("htb".into()));
        m.attributes.push(TcAttribute::Options(options));
        let bytes = datagram(9, vec![RouteNetlinkMessage::NewTrafficClass(m)], true);
        let mut out = Vec::new();
        assert!(decode_datagram("RTM_GETTCLASS", 9, &bytes, &mut out).unwrap());
        match out.pop() {
            Some(RouteNetlinkMessage::NewTrafficClass(t)) => t,
            other => panic!("not a class: {other:?}"),
        }
    }

    #[test]
    fn an_htb_root_s_limit_is_its_top_level_classes_ceilings() {
        let top = htb_class(2, TcHandle::ROOT, 1, 62_500_000);
        let wide = htb_class(2, TcHandle::ROOT, 2, 12_500_000_000);
        let child = htb_class(2, TcHandle { major: 1, minor: 1 }, 10, 1_000);
        assert_eq!(htb_limit(&[top.clone(), child.clone()]), Some(62_500_000));
        assert_eq!(htb_limit(&[top, wide, child.clone()]), Some(12_562_500_000));
        assert_eq!(htb_limit(&[child]), None, "no top-level class: no limit");
        let mut other = htb_class(2, TcHandle::ROOT, 3, 5);
        other.attributes[0] = TcAttribute::Kind("hfsc".into());
        assert_eq!(
            htb_limit(&[other]),
            None,
            "another kind's options are not htb's"
        );
    }

    #[test]
    fn an_htb_root_is_read_with_its_classes_and_a_failed_class_dump_is_counted() {
        let dir = tree(&["fab0", "mgmt0"]);
        let options = fab_and_mgmt();
        let dumps = Arc::new(AtomicUsize::new(0));
        let backend = Recorded {
            links: vec![link(2, "fab0"), link(3, "mgmt0")],
            qdiscs: through_the_wire(vec![
                qdisc(2, "htb", vec![], [3, 90_000, 0, 0, 1403]),
                qdisc(3, "htb", vec![], [0; 5]),
            ]),
            classes: BTreeMap::from([(2, vec![htb_class(2, TcHandle::ROOT, 1, 62_500_000)])]),
            class_dumps: dumps.clone(),
        };
        let mut src =
            QdiscSource::with_backend(dir.path().to_path_buf(), options, Box::new(backend));
        assert!(src.discover().unwrap());
        let mut slow = Vec::new();
        let r = src.sample(Tier::Slow, &mut |i, v| slow.push((i, v)));
        assert_eq!(
            dumps.load(Ordering::Relaxed),
            2,
            "one class dump per htb root"
        );
        // mgmt0's class dump failed: its queue is still read, its limit unknown (0), the failure counted.
        assert_eq!((r.read, r.failed), (16, 1));
        assert!(slow.contains(&(7, Value::Gauge(62_500_000.0))));
        assert!(slow.contains(&(15, Value::Gauge(0.0))));
        assert!(slow.contains(&(3, Value::Counter(1403))));
    }

    /// An `RTM_GETLINK` answer for interface `name` at index `i`.
    fn link(i: u32, name: &str) -> LinkMessage {
        let mut l = LinkMessage::default();
        l.header.index = i;
        l.attributes.push(LinkAttribute::IfName(name.into()));
        l
    }

    /// The options of a source reading `fab0` and `mgmt0`.
    fn fab_and_mgmt() -> NetdevOptions {
        NetdevOptions {
            include: vec!["fab0".into(), "mgmt0".into()],
            ..NetdevOptions::default()
        }
    }

    /// A sysfs tree with plain-directory interfaces `names`.
    fn tree(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for n in names {
            let d = dir.path().join("class/net").join(n);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("type"), "1\n").unwrap();
        }
        dir
    }

    #[test]
    fn samples_the_interfaces_netdev_reads_on_their_links_by_tier() {
        let dir = tree(&["fab0", "mgmt0", "ctl0"]);
        let options = fab_and_mgmt();
        let dumps = Arc::new(AtomicUsize::new(0));
        let backend = Recorded {
            links: vec![link(2, "fab0"), link(3, "mgmt0"), link(4, "ctl0")],
            qdiscs: through_the_wire(vec![
                qdisc(2, "tbf", tbf_options(62_500_000), [3, 90_000, 0, 0, 1403]),
                qdisc(4, "tbf", tbf_options(1), [0; 5]),
            ]),
            classes: BTreeMap::new(),
            class_dumps: dumps.clone(),
        };
        let mut src =
            QdiscSource::with_backend(dir.path().to_path_buf(), options, Box::new(backend));
        assert!(src.discover().unwrap());
        assert!(
            !src.discover().unwrap(),
            "a second discovery changes nothing"
        );
        let inv = src.inventory();
        assert!(inv.links.is_empty(), "the links are netdev's");
        assert_eq!(inv.series.len(), 16);
        let fab = LinkKey::interface(LinkClass::Ethernet, "fab0");
        assert!(inv.series[..8]
            .iter()
            .all(|s| s.link.as_ref() == Some(&fab)));
        assert_eq!(inv.series[3].metric, "qdisc_overlimits_total");
        // Nothing at the fast tier, and no dump asked for (a backend that failed would say so).
        let r = src.sample(Tier::Fast, &mut |_, _| panic!("no fast series"));
        assert_eq!((r.read, r.failed), (0, 0));
        let mut slow = Vec::new();
        let r = src.sample(Tier::Slow, &mut |i, v| slow.push((i, v)));
        // mgmt0 has no qdisc in the dump: nothing read, nothing failed.
        assert_eq!((r.read, r.failed), (8, 0));
        assert!(slow.contains(&(5, Value::Gauge(90_000.0))));
        assert!(slow.contains(&(6, Value::Gauge(3.0))));
        assert!(slow.contains(&(3, Value::Counter(1403))));
        assert!(slow.contains(&(7, Value::Gauge(62_500_000.0))));
        assert!(src.unavailable().is_none());
        assert_eq!(
            dumps.load(Ordering::Relaxed),
            0,
            "no class dump without an htb root"
        );
    }

    #[test]
    fn without_netlink_the_source_says_why_and_reads_nothing() {
        let dir = tree(&["fab0"]);
        let mut src = QdiscSource::new(dir.path().to_path_buf(), NetdevOptions::default());
        src.live = true;
        src.backend = Some(Err(
            "rtnetlink socket: Address family not supported by protocol".into(),
        ));
        assert!(!src.discover().unwrap());
        assert!(src.inventory().series.is_empty());
        assert_eq!(
            src.sample(Tier::Fast, &mut |_, _| panic!("no series")).read,
            0
        );
        assert_eq!(
            src.unavailable().as_deref(),
            Some("cannot read the transmit queues: rtnetlink socket: Address family not supported by protocol")
        );
    }

    #[test]
    fn a_copied_sysfs_tree_reads_no_queue() {
        let dir = tree(&["eth0"]);
        let mut src = QdiscSource::new(dir.path().to_path_buf(), NetdevOptions::default());
        assert!(!src.discover().unwrap());
        assert!(src.inventory().series.is_empty());
        assert_eq!(
            src.sample(Tier::Slow, &mut |_, _| panic!("no series")).read,
            0
        );
        assert!(src.unavailable().is_none(), "absent, not unavailable");
    }

    #[test]
    fn this_namespace_s_rtnetlink_answers_its_dumps() {
        let mut b = match NetlinkBackend::open() {
            Ok(b) => b,
            Err(e) => panic!("rtnetlink: {e}"),
        };
        let links = interface_indices(&b.links().unwrap());
        assert!(links.contains_key("lo"), "{links:?}");
        let (_, errors) = root_qdiscs(&b.qdiscs().unwrap());
        assert!(errors.is_empty(), "{errors:?}");
        // Twice on one socket: sequence numbers keep dumps apart.
        assert_eq!(interface_indices(&b.links().unwrap()), links);
        // A class dump of one interface: loopback has no classes, and the kernel says so without an error.
        assert_eq!(htb_limit(&b.classes(links["lo"]).unwrap()), None);
    }
}
