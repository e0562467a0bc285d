//! No view shows a utilisation above 100 %. A link cannot carry more than its capacity, so a step's achieved
//! rate above it is a sampling artefact: the burst's edges fall between samples (20 Hz), its active time is
//! undercounted and bytes ÷ active time overshoots. Views show such a figure at the capacity and mark it
//! `capped` — the bytes moved are exact either way — instead of "136 %".

/// A step's achieved rate and utilisation as views show them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shown {
    /// Bytes/s, at most the capacity.
    pub achieved_bytes_per_second: Option<f64>,
    /// 0..=1.
    pub utilization: Option<f64>,
    /// The measured figure was above the capacity (a sampling artefact) and is shown at the capacity.
    pub capped: bool,
}

/// `achieved` bytes/s and `utilization` (achieved ÷ `capacity`) held to the capacity: unchanged when within
/// it; at the capacity (utilisation 1) and `capped` when above. Without a capacity nothing can be judged and the
/// figures pass unchanged.
pub fn within_capacity(
    achieved: Option<f64>,
    capacity: Option<f64>,
    utilization: Option<f64>,
) -> Shown {
    let over = match (achieved, capacity) {
        (Some(a), Some(c)) if c > 0.0 => a > c,
        _ => utilization.is_some_and(|u| u > 1.0),
    };
    if !over {
        return Shown {
            achieved_bytes_per_second: achieved,
            utilization,
            capped: false,
        };
    }
    Shown {
        achieved_bytes_per_second: match capacity {
            Some(c) if c > 0.0 => Some(c),
            _ => achieved,
        },
        utilization: Some(1.0),
        capped: true,
    }
}

/// A utilisation ratio held to 1; `true` when it was above.
pub fn ratio_within(utilization: f64) -> (f64, bool) {
    if utilization > 1.0 {
        (1.0, true)
    } else {
        (utilization, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_over_capacity_is_shown_at_capacity_and_marked() {
        // node-03's eth0 of the demo: 17.03 GB/s "achieved" on a 12.5 GB/s link.
        let s = within_capacity(Some(17.03e9), Some(12.5e9), Some(17.03 / 12.5));
        assert_eq!(s.achieved_bytes_per_second, Some(12.5e9));
        assert_eq!(s.utilization, Some(1.0));
        assert!(s.capped);
        let within = within_capacity(Some(5e9), Some(12.5e9), Some(0.4));
        assert_eq!(
            within,
            Shown {
                achieved_bytes_per_second: Some(5e9),
                utilization: Some(0.4),
                capped: false
            }
        );
        // No capacity: nothing to judge.
        assert!(!within_capacity(Some(5e9), None, None).capped);
        assert_eq!(
            within_capacity(None, Some(1e9), None).achieved_bytes_per_second,
            None
        );
        assert_eq!(ratio_within(1.36), (1.0, true));
        assert_eq!(ratio_within(0.5), (0.5, false));
    }
}
