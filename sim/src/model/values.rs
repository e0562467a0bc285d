//! The value of every file the simulator keeps current, as a function of time: port counters, hw counters,
//! netdev statistics, and (for the `flapping` port) the link state files.

use std::time::Duration;

use crate::counters::{saturating_events, HwCounter, NetStat, PortCounter};
use crate::model::flap;
use crate::model::node::HcaModel;
use crate::model::{
    JobModel, Link, LINK_ERROR_RECOVERY_PERIOD_NS, MULTICAST_PERIOD_NS, PORT_RCV_ERRORS_PERIOD_NS,
    SYMBOL_ERROR_PERIOD_NS, XMIT_WAIT_TICKS_PER_SECOND,
};
use crate::SimError;

const NS_PER_S: u128 = 1_000_000_000;

fn xmit_wait_ticks(h: &HcaModel, t: Duration) -> u64 {
    let active = h.link.tx.burst_active_ns_at(t);
    let v = active * u128::from(h.wait_ppm) * u128::from(XMIT_WAIT_TICKS_PER_SECOND)
        / (1_000_000 * NS_PER_S);
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl JobModel {
    /// The value of `ports/1/counters/<counter>` of `mlx5_<hca>` on `node` at `t`.
    pub fn port_counter(
        &self,
        node: usize,
        hca: usize,
        counter: PortCounter,
        t: Duration,
    ) -> Result<u64, SimError> {
        let h = self.hca(node, hca)?;
        let t_ns = t.as_nanos();
        let multicast = if h.multicast {
            (t_ns / u128::from(MULTICAST_PERIOD_NS)) as u64
        } else {
            0
        };
        let errs = |period: u64| {
            if h.errors {
                saturating_events(t_ns, u128::from(period), counter.width_bits())
            } else {
                0
            }
        };
        let [xd, rd, ux, ur, mx, mr] = h.base;
        let v = match counter {
            PortCounter::PortXmitData => xd.saturating_add(h.link.tx.bytes_at(t) / 4),
            PortCounter::PortRcvData => rd.saturating_add(h.link.rx.bytes_at(t) / 4),
            PortCounter::UnicastXmitPackets => ux.saturating_add(h.link.tx.packets_at(t)),
            PortCounter::UnicastRcvPackets => ur.saturating_add(h.link.rx.packets_at(t)),
            PortCounter::MulticastXmitPackets => mx.saturating_add(multicast),
            PortCounter::MulticastRcvPackets => mr.saturating_add(multicast),
            PortCounter::PortXmitPackets => ux
                .saturating_add(h.link.tx.packets_at(t))
                .saturating_add(mx)
                .saturating_add(multicast),
            PortCounter::PortRcvPackets => ur
                .saturating_add(h.link.rx.packets_at(t))
                .saturating_add(mr)
                .saturating_add(multicast),
            PortCounter::SymbolError => errs(SYMBOL_ERROR_PERIOD_NS),
            PortCounter::LinkErrorRecovery => errs(LINK_ERROR_RECOVERY_PERIOD_NS),
            PortCounter::PortRcvErrors => errs(PORT_RCV_ERRORS_PERIOD_NS),
            PortCounter::PortXmitWait => xmit_wait_ticks(h, t).min(counter.max_value()),
            PortCounter::LinkDowned => self.link_downs(node, hca, t)?.min(counter.max_value()),
            PortCounter::PortRcvRemotePhysicalErrors
            | PortCounter::PortRcvSwitchRelayErrors
            | PortCounter::PortXmitDiscards
            | PortCounter::PortXmitConstraintErrors
            | PortCounter::PortRcvConstraintErrors
            | PortCounter::LocalLinkIntegrityErrors
            | PortCounter::ExcessiveBufferOverrunErrors
            | PortCounter::Vl15Dropped => 0,
        };
        Ok(v)
    }

    /// The value of `ports/1/hw_counters/<counter>` of `mlx5_<hca>` on `node` at `t`.
    pub fn hw_counter(
        &self,
        node: usize,
        hca: usize,
        counter: HwCounter,
        t: Duration,
    ) -> Result<u64, SimError> {
        let h = self.hca(node, hca)?;
        Ok(match counter {
            HwCounter::NpCnpSent | HwCounter::RpCnpHandled | HwCounter::NpEcnMarkedRocePackets => {
                xmit_wait_ticks(h, t) / 4096
            }
            HwCounter::OutOfSequence => {
                if h.errors {
                    (t.as_nanos() / u128::from(PORT_RCV_ERRORS_PERIOD_NS)) as u64
                } else {
                    0
                }
            }
            HwCounter::RnrNakRetryErr => 0,
        })
    }

    /// The value of `class/net/<dev>/statistics/<stat>` of `node` at `t` (`link` is
    /// [`Link::Eth0`] or [`Link::Ipoib`]). Errors and drops keep their seeded initial values.
    pub fn net_stat(
        &self,
        node: usize,
        link: Link,
        stat: NetStat,
        t: Duration,
    ) -> Result<u64, SimError> {
        let d = self.netdev(node, link)?;
        let b = &d.base;
        Ok(match stat {
            NetStat::TxBytes => b[0].saturating_add(d.link.tx.bytes_at(t)),
            NetStat::RxBytes => b[1].saturating_add(d.link.rx.bytes_at(t)),
            NetStat::TxPackets => b[2].saturating_add(d.link.tx.packets_at(t)),
            NetStat::RxPackets => b[3].saturating_add(d.link.rx.packets_at(t)),
            NetStat::TxErrors => b[4],
            NetStat::RxErrors => b[5],
            NetStat::TxDropped => b[6],
            NetStat::RxDropped => b[7],
        })
    }

    /// Times `mlx5_<hca>` of `node` went down by `t` (unsaturated; the `link_downed` file saturates at 255).
    pub fn link_downs(&self, node: usize, hca: usize, t: Duration) -> Result<u64, SimError> {
        let h = self.hca(node, hca)?;
        Ok(if h.flapping {
            self.node_clock(node).flap_transitions_at(t.as_nanos())
        } else {
            0
        })
    }

    /// Whether `mlx5_<hca>` of `node` is up at `t` (only the `flapping` port ever goes down).
    pub fn port_is_up(&self, node: usize, hca: usize, t: Duration) -> Result<bool, SimError> {
        let h = self.hca(node, hca)?;
        if !h.flapping {
            return Ok(true);
        }
        let clock = self.node_clock(node);
        Ok(!clock.is_flapped(clock.step_at(t.as_nanos())))
    }

    /// `ports/1/state` of `mlx5_<hca>` on `node` at `t`: `4: ACTIVE` or `1: DOWN`.
    pub fn port_state(
        &self,
        node: usize,
        hca: usize,
        t: Duration,
    ) -> Result<&'static str, SimError> {
        Ok(if self.port_is_up(node, hca, t)? {
            flap::STATE_UP
        } else {
            flap::STATE_DOWN
        })
    }

    /// `ports/1/phys_state` of `mlx5_<hca>` on `node` at `t`: `5: LinkUp` or `2: Polling`.
    pub fn port_phys_state(
        &self,
        node: usize,
        hca: usize,
        t: Duration,
    ) -> Result<&'static str, SimError> {
        Ok(if self.port_is_up(node, hca, t)? {
            flap::PHYS_STATE_UP
        } else {
            flap::PHYS_STATE_DOWN
        })
    }

    /// `operstate` of netdev `link` of `node` at `t`: `up`, or `down` for the IPoIB netdev of a port
    /// that is down.
    pub fn netdev_operstate(
        &self,
        node: usize,
        link: Link,
        t: Duration,
    ) -> Result<&'static str, SimError> {
        Ok(if self.netdev_is_up(node, link, t)? {
            "up"
        } else {
            "down"
        })
    }

    /// `carrier` of netdev `link` of `node` at `t`: `1`, or `0` while it is down.
    pub fn netdev_carrier(
        &self,
        node: usize,
        link: Link,
        t: Duration,
    ) -> Result<&'static str, SimError> {
        Ok(if self.netdev_is_up(node, link, t)? {
            "1"
        } else {
            "0"
        })
    }

    fn netdev_is_up(&self, node: usize, link: Link, t: Duration) -> Result<bool, SimError> {
        self.netdev(node, link)?;
        match link {
            Link::Ipoib(g) => self.port_is_up(node, g, t),
            _ => Ok(true),
        }
    }
}
