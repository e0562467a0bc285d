//! A step's edges placed on each node's own samples, pure.
//!
//! An inferred step edge is where a step's communication ends. A job's edges come from one node (its
//! reference, see the engine), on that node's sample times; every other node has samples of its own, up to a
//! sampling interval away, and its communication may end a little earlier or later (a shaped link still
//! drains what the library handed the kernel after the rank returned). Counting a node's bytes by
//! interpolating its counters at the reference's time splits the burst's tail between two steps (a tenth of a
//! step's bytes, measured on the real-traffic bed); and edges on whole samples make every step a whole number
//! of intervals (a 435 ms step reads 400 or 450 ms at 20 Hz).
//!
//! So each node places an edge where its own traffic says the communication ended:
//! - **Where bytes are counted** (`count_ns`): the node's own burst end nearest the edge, within a tolerance
//!   ([`tolerance_ns`]) — a sample that closes a burst and is followed by a quiet interval, as inference's
//!   candidate edges are. A step's bytes are then exact counter differences on the node's own samples, with
//!   every byte of the burst in the step it belongs to.
//! - **When the step ends** (`at_ns`): inside the burst's last interval, at the share of the interval its bytes
//!   fill at the burst's own rate (the median rate of the busy intervals before it): `t₋₁ + Δt × (r − low) ÷
//!   (R − low)`, clamped to the interval. Between that moment and `count_ns` the node is quiet by that estimate,
//!   so the counter there is the counter at `count_ns`. That holds only where the last interval's bytes can be
//!   the burst's end (`burst_ends_in`): the node is quiet after `count_ns` too (the interval that follows at
//!   most the tail level, [`super::inferred::TAIL_LEVEL`]) — traffic that goes on after the burst (a slow link
//!   still draining, a storage stream on the same NIC) fills the last interval as well, and its bytes there move
//!   on after the estimate; and a tail interval (counted with the burst though below the busy level) follows a
//!   burst that ran through its start, not one that ended in the interval before. Elsewhere the edge is shown at
//!   `count_ns`, where its bytes are counted: a step never claims to end before bytes it counts (a checkpoint's
//!   1 GB/s on the management NIC that carries the job's traffic put 2.2–2.8 % of a step's bytes in the wrong
//!   step by the shown edges).
//!
//! No own burst end within the tolerance (a node whose communication fills the step, or one idle in it): the
//! edge stays where it was, and its bytes are interpolated there.

use super::inferred::{busy, candidates, interval_rates, InferenceTracker, Levels, TAIL_LEVEL};

/// Share of the step duration within which a node's own burst end stands for the job's edge.
pub const TOLERANCE_SHARE: f64 = 0.15;
/// Most the tolerance may reach, as a share of the step duration (a short step's sampling intervals are a
/// large share of it).
pub const TOLERANCE_MAX_SHARE: f64 = 0.3;
/// Least tolerance, in sampling intervals: a neighbour's sample is up to one interval away.
pub const TOLERANCE_MIN_INTERVALS: f64 = 1.2;
/// Busy intervals before the last one whose median rate is the burst's rate.
pub const BURST_RATE_INTERVALS: usize = 5;

/// An edge on one node's own samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnEdge {
    /// When the step's communication ended on the node (ns since the Unix epoch): what the step shows.
    pub at_ns: i64,
    /// The node's sample at which its bytes are counted (ns since the Unix epoch).
    pub count_ns: i64,
}

impl OwnEdge {
    /// An edge left where it was: shown and counted at `t`.
    pub fn at(t: i64) -> OwnEdge {
        OwnEdge {
            at_ns: t,
            count_ns: t,
        }
    }
}

/// How far (ns) from an edge a node's own burst end may be, for a step of `step_ns` on samples every
/// `interval_ns`: [`TOLERANCE_SHARE`] of the step, at least [`TOLERANCE_MIN_INTERVALS`] intervals, at most
/// [`TOLERANCE_MAX_SHARE`] of the step.
pub fn tolerance_ns(step_ns: i64, interval_ns: i64) -> i64 {
    let share = (TOLERANCE_SHARE * step_ns as f64) as i64;
    let least = (TOLERANCE_MIN_INTERVALS * interval_ns as f64) as i64;
    let most = (TOLERANCE_MAX_SHARE * step_ns as f64) as i64;
    share.max(least).min(most)
}

/// The edge `e` of a step of `step_ns` placed on the node's own samples held by `tracker` ([`own_edge`]),
/// `None` where its traffic has no burst end near it or the samples do not reach past it yet.
pub fn place(tracker: &InferenceTracker, e: i64, step_ns: i64) -> Option<OwnEdge> {
    let levels = tracker.levels()?;
    let tol = tolerance_ns(step_ns, levels.interval_ns);
    // The burst before and the quiet after a candidate within `tol`.
    let margin = tol + 2 * levels.interval_ns;
    let pts = tracker.points_between(e - margin, e + margin)?;
    own_edge(&pts, levels, e, tol)
}

/// How long after an edge (ns) a node's samples must reach before [`place`] can place it for a step of
/// `step_ns`; `None` before its levels are known.
pub fn placing_margin_ns(tracker: &InferenceTracker, step_ns: i64) -> Option<i64> {
    let l = tracker.levels()?;
    Some(tolerance_ns(step_ns, l.interval_ns) + 3 * l.interval_ns)
}

/// The edge `e` placed on the node's cumulative traffic `pts` (`(timestamp_ns, bytes)`, oldest first, around
/// `e`) at the node's quiet and highest rates `levels`: its own burst end within `tol_ns`, `None` when there is
/// none (see the module docs).
pub fn own_edge(pts: &[(i64, f64)], levels: Levels, e: i64, tol_ns: i64) -> Option<OwnEdge> {
    if pts.len() < 3 {
        return None;
    }
    let (rates, _) = interval_rates(pts);
    let c = candidates(pts, &rates, levels.low, levels.high)
        .into_iter()
        .filter(|c| c.quiet >= 1 && (c.t - e).abs() <= tol_ns)
        .min_by_key(|c| (c.t - e).abs())?;
    let k = pts.iter().position(|p| p.0 == c.t)?;
    if k == 0 {
        return None;
    }
    // `rates[k - 1]` is the interval ending at the candidate: the burst's last bytes, where they are its.
    let (last, burst) = (
        rates[k - 1],
        burst_rate(&rates[..k - 1], levels).max(rates[k - 1]),
    );
    if !rates
        .get(..=k)
        .is_some_and(|r| burst_ends_in(r, levels, burst))
    {
        return Some(OwnEdge::at(c.t));
    }
    let share = if burst > levels.low {
        ((last - levels.low) / (burst - levels.low)).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let (t0, t1) = (pts[k - 1].0, pts[k].0);
    Some(OwnEdge {
        at_ns: t0 + ((t1 - t0) as f64 * share).round() as i64,
        count_ns: c.t,
    })
}

/// The burst's rate before its last interval: the median of the newest [`BURST_RATE_INTERVALS`] busy intervals
/// that end `before` (0 when the interval before the last is not busy).
fn burst_rate(before: &[f64], levels: Levels) -> f64 {
    let active = busy(before, levels.low, levels.high);
    let mut run: Vec<f64> = before
        .iter()
        .zip(&active)
        .rev()
        .take_while(|(_, b)| **b)
        .take(BURST_RATE_INTERVALS)
        .map(|(r, _)| *r)
        .collect();
    run.sort_by(f64::total_cmp);
    run.get(run.len() / 2).copied().unwrap_or(0.0)
}

/// Whether the bytes of the last interval of `rates` but one (the interval ending at a candidate edge; the last
/// is the one after it) can be the end of a burst at `burst` bytes/s: the node is quiet after it (at most the
/// tail level, [`TAIL_LEVEL`]: traffic going on there, a slow link still draining or a storage stream, also
/// filled the interval before), and where that interval is the burst's tail (below the busy level), the busy
/// interval before it and the tail hold at least one interval's worth of the burst's bytes (else the burst
/// ended inside the busy interval and the tail's bytes are another flow's).
fn burst_ends_in(rates: &[f64], levels: Levels, burst: f64) -> bool {
    let Levels { low, high, .. } = levels;
    let [.., before, last, after] = rates else {
        return false;
    };
    if *after > low + TAIL_LEVEL * (high - low) {
        return false;
    }
    let tail = !busy(&[*last], low, high)[0];
    !tail || (before - low) + (last - low) >= burst - low
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// Cumulative traffic sampled every 50 ms from 0 to `until_ms`: `rate` bytes/s while `on(t_ms)`.
    fn traffic(until_ms: i64, rate: f64, on: impl Fn(f64) -> bool) -> Vec<(i64, f64)> {
        let mut acc = 0.0;
        let mut out = vec![(0, 0.0)];
        for k in 1..=(until_ms / 50) {
            // 1 ms resolution inside each interval.
            for m in 0..50 {
                let t = (k * 50 - 50 + m) as f64;
                if on(t) {
                    acc += rate / 1000.0;
                }
            }
            out.push((k * 50 * MS, acc));
        }
        out
    }

    fn levels(high: f64) -> Levels {
        Levels {
            low: 0.0,
            high,
            interval_ns: 50 * MS,
        }
    }

    #[test]
    fn an_edge_moves_to_the_nodes_own_burst_end_and_inside_its_last_interval() {
        // Bursts 270–418 ms of each 435 ms step: the third burst ends at 1288 ms (in 1250–1300).
        let on = |t: f64| (t % 435.0) >= 270.0 && (t % 435.0) < 418.0;
        let pts = traffic(2000, 500e6, on);
        // The reference's edge one sample early (1250): this node's burst end is the sample at 1300.
        let e = own_edge(&pts, levels(500e6), 1250 * MS, 60 * MS).unwrap();
        assert_eq!(e.count_ns, 1300 * MS);
        assert!((e.at_ns - 1288 * MS).abs() <= 2 * MS, "{}", e.at_ns / MS);
        // Counted there, the burst's bytes are whole: nothing moves between the two.
        let at = |t: i64| pts.iter().find(|p| p.0 == t).unwrap().1;
        assert_eq!(at(1300 * MS), at(1350 * MS));
    }

    #[test]
    fn no_burst_end_within_the_tolerance_leaves_the_edge() {
        let on = |t: f64| (t % 435.0) >= 270.0 && (t % 435.0) < 418.0;
        let pts = traffic(2000, 500e6, on);
        assert_eq!(own_edge(&pts, levels(500e6), 1100 * MS, 60 * MS), None);
        // Communication filling the step: no quiet, no own edge.
        let pts = traffic(2000, 500e6, |_| true);
        assert_eq!(own_edge(&pts, levels(500e6), 1000 * MS, 60 * MS), None);
    }

    #[test]
    fn a_burst_ending_on_a_sample_ends_there() {
        // Bursts 300–400 ms of each 500 ms: they end on samples.
        let on = |t: f64| (t % 500.0) >= 300.0 && (t % 500.0) < 400.0;
        let pts = traffic(2000, 400e6, on);
        let e = own_edge(&pts, levels(400e6), 900 * MS, 60 * MS).unwrap();
        assert_eq!(e, OwnEdge::at(900 * MS));
    }

    /// Cumulative traffic of two flows sampled every 50 ms from 0 to `until_ms`, and the bytes they moved
    /// between two times (1 ms resolution): the burst at `rate` while `on(t_ms)`, and `other` bytes/s at each ms.
    fn two_flows(
        until_ms: i64,
        (rate, on): (f64, impl Fn(f64) -> bool),
        other: impl Fn(f64) -> f64,
    ) -> (Vec<(i64, f64)>, impl Fn(i64, i64) -> f64) {
        let per_ms: Vec<f64> = (0..until_ms)
            .map(|m| {
                let t = m as f64;
                (if on(t) { rate } else { 0.0 } + other(t)) / 1000.0
            })
            .collect();
        let mut acc = vec![0.0];
        for b in &per_ms {
            acc.push(acc[acc.len() - 1] + b);
        }
        let pts = (0..=until_ms / 50)
            .map(|k| (k * 50 * MS, acc[(k * 50) as usize]))
            .collect();
        let moved = move |from_ns: i64, to_ns: i64| {
            let ms = |t: i64| ((t as f64 / MS as f64).round() as usize).min(acc.len() - 1);
            acc[ms(to_ns)] - acc[ms(from_ns)]
        };
        (pts, moved)
    }

    #[test]
    fn a_slow_link_trailing_the_burst_is_not_shown_after_the_edge() {
        // The fast links burst at 500 MB/s to 1288 ms; a slow link carries 15 MB/s from the burst's start to
        // 1420 ms (above the tail level, below the busy one). Its traffic fills the interval after the burst
        // and goes on: the edge is shown where the bytes are counted, not inside that interval (before: at
        // 1301 ms, with the slow link's 0.7 MB after it counted in the step).
        shown_where_counted((1140.0, 1420.0, 15e6), 515e6);
    }

    /// A burst of 500 MB/s in 270–418 ms of every 435 ms (the third ends at 1288 ms) and another flow of
    /// `rate` bytes/s over `[from, to)` ms: the edge near 1300 ms is counted at 1350 ms and shown there, with
    /// no byte between the shown and the counted edge.
    fn shown_where_counted((from, to, rate): (f64, f64, f64), high: f64) {
        let on = |t: f64| (t % 435.0) >= 270.0 && (t % 435.0) < 418.0;
        let other = move |t: f64| if (from..to).contains(&t) { rate } else { 0.0 };
        let (pts, moved) = two_flows(2000, (500e6, on), other);
        let e = own_edge(&pts, levels(high), 1300 * MS, 60 * MS).unwrap();
        assert_eq!(e.count_ns, 1350 * MS);
        assert_eq!(
            moved(e.at_ns, e.count_ns),
            0.0,
            "shown at {} ms",
            e.at_ns / MS
        );
    }

    #[test]
    fn a_stream_ending_after_the_burst_is_not_taken_for_its_tail() {
        // The burst ends at 1288 ms (inside 1250–1300); a storage stream of 20 MB/s (below the busy level) goes
        // on to 1340 ms, so the interval 1300–1350 carries 16 MB/s (above the tail level) and the edge is counted
        // at 1350. Those bytes are not the burst's: the busy interval before them is not full. Shown before:
        // 1301 ms, with 0.76 MB of the stream after it counted in the step.
        shown_where_counted((1000.0, 1340.0, 20e6), 520e6);
    }

    #[test]
    fn a_burst_s_own_tail_is_still_shown_inside_its_interval() {
        // Bursts 100–302 ms of each 500 ms: the third ends 2 ms after the sample at 1300 (its tail, 20 MB/s over
        // 1300–1350, below the busy level), quiet after: the edge is shown where the burst ended.
        let on = |t: f64| (t % 500.0) >= 100.0 && (t % 500.0) < 302.0;
        let (pts, moved) = two_flows(2000, (500e6, on), |_| 0.0);
        let e = own_edge(&pts, levels(500e6), 1300 * MS, 60 * MS).unwrap();
        assert_eq!(e.count_ns, 1350 * MS);
        assert!((e.at_ns - 1302 * MS).abs() <= MS, "{}", e.at_ns / MS);
        assert_eq!(moved(e.at_ns, e.count_ns), 0.0);
    }

    #[test]
    fn tolerance_is_a_share_of_the_step_within_bounds() {
        assert_eq!(tolerance_ns(1000 * MS, 50 * MS), 150 * MS);
        assert_eq!(tolerance_ns(300 * MS, 50 * MS), 60 * MS);
        assert_eq!(tolerance_ns(150 * MS, 50 * MS), 45 * MS);
    }
}
