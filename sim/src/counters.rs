//! The counter files the simulator writes: their sysfs names and PMA widths.

/// A file under `class/infiniband/<hca>/ports/1/counters/`.
///
/// Widths are the InfiniBand PMA widths: the data and packet counters come from
/// PortCountersExtended (64 bit), the error counters from PortCounters, which *saturate* at
/// all-ones instead of wrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortCounter {
    /// Octets transmitted ÷ 4 (64 bit).
    PortXmitData,
    /// Octets received ÷ 4 (64 bit).
    PortRcvData,
    /// Packets transmitted, unicast + multicast (64 bit).
    PortXmitPackets,
    /// Packets received, unicast + multicast (64 bit).
    PortRcvPackets,
    /// Unicast packets transmitted (64 bit).
    UnicastXmitPackets,
    /// Unicast packets received (64 bit).
    UnicastRcvPackets,
    /// Multicast packets transmitted (64 bit).
    MulticastXmitPackets,
    /// Multicast packets received (64 bit).
    MulticastRcvPackets,
    /// Minor link errors (16 bit).
    SymbolError,
    /// Successful link retrainings (8 bit).
    LinkErrorRecovery,
    /// Times the link went down (8 bit).
    LinkDowned,
    /// Received packets with errors (16 bit).
    PortRcvErrors,
    /// Received packets marked with EBP (16 bit).
    PortRcvRemotePhysicalErrors,
    /// Packets discarded because they could not be forwarded (16 bit).
    PortRcvSwitchRelayErrors,
    /// Outbound packets discarded (16 bit).
    PortXmitDiscards,
    /// Outbound packets not sent for constraint reasons (8 bit).
    PortXmitConstraintErrors,
    /// Inbound packets discarded for constraint reasons (8 bit).
    PortRcvConstraintErrors,
    /// Local physical errors beyond the threshold (4 bit).
    LocalLinkIntegrityErrors,
    /// Buffer overruns beyond the threshold (4 bit).
    ExcessiveBufferOverrunErrors,
    /// Dropped VL15 (subnet management) packets (16 bit).
    Vl15Dropped,
    /// Ticks during which the port had data to send but no credits (32 bit).
    PortXmitWait,
}

impl PortCounter {
    /// All port counters, in the order the simulator lays them out.
    pub const ALL: [PortCounter; 21] = [
        PortCounter::PortXmitData,
        PortCounter::PortRcvData,
        PortCounter::PortXmitPackets,
        PortCounter::PortRcvPackets,
        PortCounter::UnicastXmitPackets,
        PortCounter::UnicastRcvPackets,
        PortCounter::MulticastXmitPackets,
        PortCounter::MulticastRcvPackets,
        PortCounter::SymbolError,
        PortCounter::LinkErrorRecovery,
        PortCounter::LinkDowned,
        PortCounter::PortRcvErrors,
        PortCounter::PortRcvRemotePhysicalErrors,
        PortCounter::PortRcvSwitchRelayErrors,
        PortCounter::PortXmitDiscards,
        PortCounter::PortXmitConstraintErrors,
        PortCounter::PortRcvConstraintErrors,
        PortCounter::LocalLinkIntegrityErrors,
        PortCounter::ExcessiveBufferOverrunErrors,
        PortCounter::Vl15Dropped,
        PortCounter::PortXmitWait,
    ];

    /// The file name under `ports/1/counters/`.
    pub fn file_name(self) -> &'static str {
        match self {
            PortCounter::PortXmitData => "port_xmit_data",
            PortCounter::PortRcvData => "port_rcv_data",
            PortCounter::PortXmitPackets => "port_xmit_packets",
            PortCounter::PortRcvPackets => "port_rcv_packets",
            PortCounter::UnicastXmitPackets => "unicast_xmit_packets",
            PortCounter::UnicastRcvPackets => "unicast_rcv_packets",
            PortCounter::MulticastXmitPackets => "multicast_xmit_packets",
            PortCounter::MulticastRcvPackets => "multicast_rcv_packets",
            PortCounter::SymbolError => "symbol_error",
            PortCounter::LinkErrorRecovery => "link_error_recovery",
            PortCounter::LinkDowned => "link_downed",
            PortCounter::PortRcvErrors => "port_rcv_errors",
            PortCounter::PortRcvRemotePhysicalErrors => "port_rcv_remote_physical_errors",
            PortCounter::PortRcvSwitchRelayErrors => "port_rcv_switch_relay_errors",
            PortCounter::PortXmitDiscards => "port_xmit_discards",
            PortCounter::PortXmitConstraintErrors => "port_xmit_constraint_errors",
            PortCounter::PortRcvConstraintErrors => "port_rcv_constraint_errors",
            PortCounter::LocalLinkIntegrityErrors => "local_link_integrity_errors",
            PortCounter::ExcessiveBufferOverrunErrors => "excessive_buffer_overrun_errors",
            PortCounter::Vl15Dropped => "VL15_dropped",
            PortCounter::PortXmitWait => "port_xmit_wait",
        }
    }

    /// The counter's width in bits; it saturates at `2^width − 1`.
    pub fn width_bits(self) -> u32 {
        match self {
            PortCounter::PortXmitData
            | PortCounter::PortRcvData
            | PortCounter::PortXmitPackets
            | PortCounter::PortRcvPackets
            | PortCounter::UnicastXmitPackets
            | PortCounter::UnicastRcvPackets
            | PortCounter::MulticastXmitPackets
            | PortCounter::MulticastRcvPackets => 64,
            PortCounter::PortXmitWait => 32,
            PortCounter::SymbolError
            | PortCounter::PortRcvErrors
            | PortCounter::PortRcvRemotePhysicalErrors
            | PortCounter::PortRcvSwitchRelayErrors
            | PortCounter::PortXmitDiscards
            | PortCounter::Vl15Dropped => 16,
            PortCounter::LinkErrorRecovery
            | PortCounter::LinkDowned
            | PortCounter::PortXmitConstraintErrors
            | PortCounter::PortRcvConstraintErrors => 8,
            PortCounter::LocalLinkIntegrityErrors | PortCounter::ExcessiveBufferOverrunErrors => 4,
        }
    }

    /// The value the counter saturates at: all ones in its width.
    pub fn max_value(self) -> u64 {
        saturation_limit(self.width_bits())
    }
}

/// A file under `class/infiniband/<hca>/ports/1/hw_counters/` (driver counters, 64 bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HwCounter {
    /// Congestion notification packets sent by the notification point.
    NpCnpSent,
    /// Congestion notification packets handled by the reaction point.
    RpCnpHandled,
    /// Packets received out of sequence (retransmissions after receive errors).
    OutOfSequence,
    /// Packets received with an ECN congestion mark.
    NpEcnMarkedRocePackets,
    /// Receiver-not-ready NAK retries exceeded.
    RnrNakRetryErr,
}

impl HwCounter {
    /// All simulated hw counters.
    pub const ALL: [HwCounter; 5] = [
        HwCounter::NpCnpSent,
        HwCounter::RpCnpHandled,
        HwCounter::OutOfSequence,
        HwCounter::NpEcnMarkedRocePackets,
        HwCounter::RnrNakRetryErr,
    ];

    /// The file name under `ports/1/hw_counters/`.
    pub fn file_name(self) -> &'static str {
        match self {
            HwCounter::NpCnpSent => "np_cnp_sent",
            HwCounter::RpCnpHandled => "rp_cnp_handled",
            HwCounter::OutOfSequence => "out_of_sequence",
            HwCounter::NpEcnMarkedRocePackets => "np_ecn_marked_roce_packets",
            HwCounter::RnrNakRetryErr => "rnr_nak_retry_err",
        }
    }
}

/// A file under `class/net/<if>/statistics/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetStat {
    /// Bytes transmitted (frames, as the kernel counts them).
    TxBytes,
    /// Bytes received.
    RxBytes,
    /// Packets transmitted.
    TxPackets,
    /// Packets received.
    RxPackets,
    /// Transmit errors.
    TxErrors,
    /// Receive errors.
    RxErrors,
    /// Packets dropped on transmit.
    TxDropped,
    /// Packets dropped on receive.
    RxDropped,
}

impl NetStat {
    /// All simulated netdev statistics.
    pub const ALL: [NetStat; 8] = [
        NetStat::TxBytes,
        NetStat::RxBytes,
        NetStat::TxPackets,
        NetStat::RxPackets,
        NetStat::TxErrors,
        NetStat::RxErrors,
        NetStat::TxDropped,
        NetStat::RxDropped,
    ];

    /// The file name under `statistics/`.
    pub fn file_name(self) -> &'static str {
        match self {
            NetStat::TxBytes => "tx_bytes",
            NetStat::RxBytes => "rx_bytes",
            NetStat::TxPackets => "tx_packets",
            NetStat::RxPackets => "rx_packets",
            NetStat::TxErrors => "tx_errors",
            NetStat::RxErrors => "rx_errors",
            NetStat::TxDropped => "tx_dropped",
            NetStat::RxDropped => "rx_dropped",
        }
    }
}

/// All ones in `width_bits` bits (`u64::MAX` for 64).
pub fn saturation_limit(width_bits: u32) -> u64 {
    if width_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << width_bits) - 1
    }
}

/// A count that rises by one every `period_ns` nanoseconds from 0 at t = 0 and saturates at
/// all ones in `width_bits` bits, as a PMA error counter does. `period_ns == 0` means "never".
pub fn saturating_events(t_ns: u128, period_ns: u128, width_bits: u32) -> u64 {
    if period_ns == 0 {
        return 0;
    }
    let n = t_ns / period_ns;
    n.min(u128::from(saturation_limit(width_bits))) as u64
}
