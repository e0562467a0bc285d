//! What kind of series a source produces and how often it is read.

use serde::{Deserialize, Serialize};

/// How often a series is read. On the wire: the protocol's `Tier` enum (fast = 1, slow = 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Data byte counters: read every fast tick (default 20 Hz).
    Fast,
    /// Errors, state, rate, utilisation: read every slow tick (default 1 Hz).
    Slow,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Fast, Tier::Slow];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Slow => "slow",
        }
    }

    /// Position in per-tier arrays (`[T; 2]`): fast 0, slow 1.
    pub fn index(self) -> usize {
        match self {
            Tier::Fast => 0,
            Tier::Slow => 1,
        }
    }
}

/// Kind of a series' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesKind {
    /// Monotonic unsigned counter; saturates at `max_value` (all ones of its width) or resets.
    Counter { max_value: u64 },
    /// Instantaneous value.
    Gauge,
}

impl SeriesKind {
    /// A 64-bit counter (saturates at `u64::MAX`).
    pub const COUNTER64: SeriesKind = SeriesKind::Counter {
        max_value: u64::MAX,
    };
    /// A 32-bit PMA counter (saturates at `u32::MAX`).
    pub const COUNTER32: SeriesKind = SeriesKind::Counter {
        max_value: u32::MAX as u64,
    };

    pub fn is_counter(self) -> bool {
        matches!(self, SeriesKind::Counter { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_names_and_indexes() {
        assert_eq!(Tier::ALL.map(Tier::as_str), ["fast", "slow"]);
        assert_eq!(Tier::ALL.map(Tier::index), [0, 1]);
        assert_eq!(serde_json::to_string(&Tier::Slow).unwrap(), r#""slow""#);
    }

    #[test]
    fn kinds_serialize_as_before() {
        assert_eq!(
            serde_json::to_string(&SeriesKind::COUNTER32).unwrap(),
            r#"{"counter":{"max_value":4294967295}}"#
        );
        assert_eq!(
            serde_json::to_string(&SeriesKind::Gauge).unwrap(),
            r#""gauge""#
        );
        assert!(SeriesKind::COUNTER64.is_counter() && !SeriesKind::Gauge.is_counter());
    }
}
