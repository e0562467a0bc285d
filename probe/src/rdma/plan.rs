//! What the verbs transport does, as pure logic tested without hardware: the queue pair's states, checking and
//! encoding the peer's address, the window of RDMA WRITEs in flight and the ping-pong's bookkeeping. `verbs.rs`
//! performs it.

use crate::wire::QpInfo;

/// Largest value of a 24-bit field (queue pair number, packet sequence number).
pub const MAX_24: u32 = 0x00ff_ffff;
/// RDMA WRITEs in flight at most (perftest's default tx depth is 128); fewer on a slower path
/// ([`crate::pace::window`]).
pub const WINDOW: u32 = 128;
/// Receives kept posted for the ping-pong.
pub const RECV_DEPTH: u32 = 16;
/// Payload of a SEND that ends the ping-pong (a sequence number no run reaches).
pub const PING_END: u64 = u64::MAX;
/// Inline data asked of the queue pair, bytes: perftest's default for RC SENDs in its latency tests. A ping's
/// payload is then copied into the work request when it is posted (`IBV_SEND_INLINE`), not fetched from the
/// registered buffer by the device.
pub const PING_INLINE: u32 = 236;
/// Work request ids, so one completion queue serves every kind.
pub const WR_WRITE: u64 = 1;
pub const WR_SEND: u64 = 2;
pub const WR_RECV: u64 = 3;

/// The states a reliable-connected queue pair goes through before it may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    /// Bound to a port, may post receives.
    Init,
    /// Ready to receive: knows the peer's queue pair, PSN and address.
    Rtr,
    /// Ready to send.
    Rts,
}

impl QpState {
    /// The next state on the way to `Rts`; `None` at `Rts`.
    pub fn next(self) -> Option<QpState> {
        match self {
            QpState::Reset => Some(QpState::Init),
            QpState::Init => Some(QpState::Rtr),
            QpState::Rtr => Some(QpState::Rts),
            QpState::Rts => None,
        }
    }

    /// Whether the transition `self → to` is the one the verbs allow (no skipping).
    pub fn may_become(self, to: QpState) -> bool {
        self.next() == Some(to)
    }
}

/// A GID as the hex text of `QpInfo.gid` (32 lowercase digits).
pub fn gid_to_hex(gid: &[u8; 16]) -> String {
    gid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses `QpInfo.gid`.
pub fn gid_from_hex(s: &str) -> Result<[u8; 16], String> {
    if s.len() != 32 || !s.is_ascii() {
        return Err(format!("gid {s:?} is not 32 hex digits"));
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("gid {s:?} is not 32 hex digits"))?;
    }
    Ok(out)
}

/// A packet sequence number from any seed (24 bits).
pub fn psn(seed: u64) -> u32 {
    (seed ^ (seed >> 24) ^ (seed >> 48)) as u32 & MAX_24
}

/// Checks the peer's address before the queue pair is pointed at it; `size` is what will be written.
pub fn check_peer(peer: &QpInfo, size: u64) -> Result<[u8; 16], String> {
    if peer.qpn == 0 || peer.qpn > MAX_24 {
        return Err(format!(
            "peer queue pair number {} is not a 24-bit value",
            peer.qpn
        ));
    }
    if peer.psn > MAX_24 {
        return Err(format!("peer PSN {} is not a 24-bit value", peer.psn));
    }
    if peer.len < size {
        return Err(format!(
            "peer buffer of {} bytes is smaller than the {size}-byte messages",
            peer.len
        ));
    }
    if peer.addr == 0 {
        return Err("peer buffer address is 0".into());
    }
    let gid = gid_from_hex(&peer.gid)?;
    if peer.lid == 0 && gid == [0; 16] {
        return Err("peer has neither a LID nor a GID".into());
    }
    Ok(gid)
}

/// Whether packets to the peer need a global route header: RoCE ports have no LID.
pub fn needs_grh(peer: &QpInfo) -> bool {
    peer.lid == 0
}

/// The window of RDMA WRITEs: at most a limit in flight (from [`crate::pace::window`], never above [`WINDOW`]),
/// every one signalled, bytes counted at completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    pub posted: u64,
    pub completed: u64,
    /// Bytes per WRITE.
    pub size: u64,
}

impl Window {
    pub fn new(size: u64) -> Window {
        Window {
            size,
            ..Window::default()
        }
    }
    pub fn in_flight(&self) -> u64 {
        self.posted - self.completed
    }
    /// How many more WRITEs may be posted now with at most `limit` in flight.
    pub fn room(&self, limit: u64) -> u64 {
        limit.saturating_sub(self.in_flight())
    }
    pub fn on_posted(&mut self, n: u64) {
        self.posted += n;
    }
    /// `n` completions arrived; more than are in flight is a protocol error.
    pub fn on_completed(&mut self, n: u64) -> Result<(), String> {
        if n > self.in_flight() {
            return Err(format!(
                "{n} completions with {} writes in flight",
                self.in_flight()
            ));
        }
        self.completed += n;
        Ok(())
    }
    /// Bytes the peer has for certain (completed WRITEs).
    pub fn bytes(&self) -> u64 {
        self.completed * self.size
    }
}

/// One ping's progress: its SEND's completion and the peer's answer, in either order. Every ping and pong
/// SEND asks for a completion and a ping is done with both, as in perftest's `ib_send_lat` (its send queue
/// depth of 1 caps its completion moderation at one: it waits for each SEND's completion before the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ping {
    pub sent: bool,
    pub answered: bool,
}

impl Ping {
    /// Takes a completion by work request id; `Err` for one that does not belong to a ping.
    pub fn on_completion(&mut self, wr_id: u64) -> Result<(), String> {
        match wr_id {
            WR_SEND if !self.sent => self.sent = true,
            WR_RECV if !self.answered => self.answered = true,
            other => return Err(format!("unexpected completion {other} in a ping")),
        }
        Ok(())
    }
    pub fn done(&self) -> bool {
        self.sent && self.answered
    }
}

/// Round trips from the tick counter's reading before each ping's SEND and one after the last answer, as
/// perftest derives them (`tposted[i + 1] - tposted[i]`: the repost of the receive and the bookkeeping between
/// pings count, as in its loop), converted at `seconds_per_tick`. A reading below its predecessor (a counter
/// that went back) gives a zero round trip, never a wrapped one.
pub fn round_trips(stamps: &[u64], seconds_per_tick: f64) -> Vec<std::time::Duration> {
    stamps
        .windows(2)
        .map(|w| {
            let ticks = w[1].saturating_sub(w[0]);
            std::time::Duration::from_secs_f64(ticks as f64 * seconds_per_tick)
        })
        .collect()
}

/// Seconds per tick of a counter that advanced `ticks` while a clock advanced `seconds`; `None` when it did
/// not advance (no conversion can be made).
pub fn seconds_per_tick(ticks: u64, seconds: f64) -> Option<f64> {
    (ticks > 0 && seconds > 0.0).then(|| seconds / ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> QpInfo {
        QpInfo {
            lid: 0,
            qpn: 17,
            psn: 0x123456,
            gid: "fe800000000000000000000000000001".into(),
            addr: 0x7f00_0000_1000,
            rkey: 5,
            len: 1 << 20,
        }
    }

    #[test]
    fn queue_pair_states_go_in_order() {
        let mut s = QpState::Reset;
        let mut seen = vec![s];
        while let Some(n) = s.next() {
            assert!(s.may_become(n));
            s = n;
            seen.push(s);
        }
        assert_eq!(
            seen,
            [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts]
        );
        assert!(!QpState::Init.may_become(QpState::Rts));
        assert!(!QpState::Rts.may_become(QpState::Reset));
    }

    #[test]
    fn gids_round_trip_and_bad_ones_are_named() {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 1;
        let hex = gid_to_hex(&g);
        assert_eq!(hex, "fe800000000000000000000000000001");
        assert_eq!(gid_from_hex(&hex).unwrap(), g);
        assert!(gid_from_hex("fe80").is_err());
        assert!(gid_from_hex(&"zz".repeat(16)).is_err());
        assert!(gid_from_hex(&"é".repeat(16)).is_err());
    }

    #[test]
    fn peers_are_checked_before_use() {
        assert!(check_peer(&peer(), 1 << 20).is_ok());
        assert!(needs_grh(&peer()));
        let small = check_peer(&peer(), (1 << 20) + 1).unwrap_err();
        assert!(small.contains("smaller"), "{small}");
        let q = QpInfo {
            qpn: 1 << 24,
            ..peer()
        };
        assert!(check_peer(&q, 1).is_err());
        let q = QpInfo { qpn: 0, ..peer() };
        assert!(check_peer(&q, 1).is_err());
        let q = QpInfo { addr: 0, ..peer() };
        assert!(check_peer(&q, 1).is_err());
        let q = QpInfo {
            gid: "0".repeat(32),
            ..peer()
        };
        assert!(check_peer(&q, 1).unwrap_err().contains("neither"));
        let ib = QpInfo {
            lid: 7,
            gid: "0".repeat(32),
            ..peer()
        };
        assert!(check_peer(&ib, 1).is_ok());
        assert!(!needs_grh(&ib));
        assert!(psn(u64::MAX) <= MAX_24);
    }

    #[test]
    fn the_window_bounds_writes_in_flight_and_counts_completed_bytes() {
        let mut w = Window::new(4096);
        let limit = u64::from(WINDOW);
        assert_eq!(w.room(limit), 128);
        w.on_posted(128);
        assert_eq!(w.room(limit), 0);
        w.on_completed(100).unwrap();
        assert_eq!(w.in_flight(), 28);
        assert_eq!(w.room(limit), 100);
        // A smaller limit (a slower path) leaves no room until enough complete.
        assert_eq!(w.room(3), 0);
        assert_eq!(w.bytes(), 409_600);
        assert!(w.on_completed(29).is_err());
        w.on_completed(28).unwrap();
        assert_eq!(w.bytes(), 128 * 4096);
    }

    #[test]
    fn round_trips_are_the_gaps_between_stamps() {
        // 2.5 ns a tick: gaps of 16 000 and 24 000 ticks are 40 and 60 us.
        let rtts = round_trips(&[1_000, 17_000, 41_000], 2.5e-9);
        assert_eq!(
            rtts,
            [
                std::time::Duration::from_micros(40),
                std::time::Duration::from_micros(60)
            ]
        );
        assert!(round_trips(&[5], 1e-9).is_empty());
        assert!(round_trips(&[], 1e-9).is_empty());
        // A counter that went back gives a zero round trip.
        assert_eq!(round_trips(&[10, 5], 1.0), [std::time::Duration::ZERO]);
        assert_eq!(seconds_per_tick(400, 1e-6), Some(2.5e-9));
        assert_eq!(seconds_per_tick(0, 1.0), None);
        assert_eq!(seconds_per_tick(10, 0.0), None);
    }

    #[test]
    fn a_ping_needs_its_send_and_its_answer() {
        let mut p = Ping::default();
        p.on_completion(WR_RECV).unwrap();
        assert!(!p.done());
        p.on_completion(WR_SEND).unwrap();
        assert!(p.done());
        assert!(p.on_completion(WR_SEND).is_err());
        assert!(Ping::default().on_completion(WR_WRITE).is_err());
    }
}
