//! Bare link figures from commwatch's own active probes ([`crate::probes`]) as the rules read them: per pair
//! of nodes, the lower of the two directions' bandwidth that a probe measured with nothing else on the link
//! (agents decline a probe while their fabric is busy).
//!
//! A figure is *usable* — a rule may rest a verdict or a severity on it — only when the probe succeeded and
//! is at most [`PROBE_MAX_AGE_S`] old. A declined or failed probe, or an older one, is only mentioned (the
//! evidence says why it was not used). For a node, the pair considered is one with a peer in the node's job
//! (any peer when the job is unknown or has no other node); of several usable ones the lowest figure is
//! taken, so that "the job gets less than the bare link" is never claimed against the best link only.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::probes::ProbeRecord;

/// Age past which a probe's figure is not used (1 hour, seconds): links are re-trained, re-cabled or
/// re-configured, and a figure from before says nothing certain about the link today.
pub const PROBE_MAX_AGE_S: f64 = 3600.0;

/// One probed pair's latest result, as the rules read it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeBaseline {
    /// The prober (`from → to`).
    pub from: String,
    pub to: String,
    /// `tcp` or `rdma`.
    pub transport: String,
    /// When the probe ran, Unix seconds.
    pub at_unix_s: f64,
    /// `ok`, `declined` or `failed` (as `GET /api/v1/probes` says).
    pub outcome: String,
    /// The lower of both directions' bandwidth, bytes/s; `None` without figures.
    pub bytes_per_second: Option<f64>,
}

impl ProbeBaseline {
    /// From the prober's record.
    pub fn from_record(r: &ProbeRecord) -> ProbeBaseline {
        let bw = [r.tx_bytes_per_second, r.rx_bytes_per_second]
            .into_iter()
            .flatten()
            .filter(|v| v.is_finite() && *v > 0.0)
            .reduce(f64::min);
        ProbeBaseline {
            from: r.from.clone(),
            to: r.to.clone(),
            transport: r.transport.as_str().to_string(),
            at_unix_s: r.at_unix_s,
            outcome: r.outcome.to_string(),
            bytes_per_second: bw.filter(|_| r.outcome == "ok"),
        }
    }

    /// The other end of the pair from `node`'s side, when `node` is one end.
    pub fn peer_of(&self, node: &str) -> Option<&str> {
        if self.from == node {
            Some(&self.to)
        } else if self.to == node {
            Some(&self.from)
        } else {
            None
        }
    }

    /// Why the figure may not be used at `now_unix_s` (`None`: usable).
    pub fn unusable(&self, now_unix_s: f64) -> Option<&'static str> {
        match (self.outcome.as_str(), self.bytes_per_second) {
            ("declined", _) => Some("declined"),
            ("ok", Some(_)) if now_unix_s - self.at_unix_s > PROBE_MAX_AGE_S => Some("stale"),
            ("ok", Some(_)) => None,
            _ => Some("failed"),
        }
    }

    /// `node-a -> node-b at 2026-12-01T20:00:00Z`.
    pub fn describe(&self) -> String {
        let at = std::time::UNIX_EPOCH
            + std::time::Duration::from_secs_f64(self.at_unix_s.clamp(0.0, 1e11));
        format!(
            "{} -> {} at {}",
            self.from,
            self.to,
            humantime::format_rfc3339_seconds(at)
        )
    }
}

/// The probes of each node (positions in the evaluation's probe list, both ends of each pair), built once per
/// evaluation on first use so that a rule reading every node does not scan every probe per node. A clone
/// starts empty (it is rebuilt from the clone's own list) and the index never makes two inputs differ.
#[derive(Debug, Default)]
pub struct ProbeIndex(std::sync::OnceLock<BTreeMap<String, Vec<usize>>>);

impl Clone for ProbeIndex {
    fn clone(&self) -> Self {
        ProbeIndex::default()
    }
}

impl PartialEq for ProbeIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl ProbeIndex {
    /// The probes of `node` in `probes` (the list the index is built from on first call; every later call must
    /// pass the same list, as [`crate::analysis::input::AnalysisInput::link_probe`] does).
    pub fn of<'a>(&self, probes: &'a [ProbeBaseline], node: &str) -> Vec<&'a ProbeBaseline> {
        let index = self.0.get_or_init(|| {
            let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
            for (i, p) in probes.iter().enumerate() {
                m.entry(p.from.clone()).or_default().push(i);
                if p.to != p.from {
                    m.entry(p.to.clone()).or_default().push(i);
                }
            }
            m
        });
        index
            .get(node)
            .map(|v| v.iter().filter_map(|i| probes.get(*i)).collect())
            .unwrap_or_default()
    }
}

/// The probe a rule reads for `node`: among the pairs of `node` with a peer in `peers` (any peer when `peers`
/// is empty), the usable one with the lowest figure; when none is usable, the newest of them with the reason
/// it is not.
pub fn for_node<'a>(
    probes: &'a [ProbeBaseline],
    node: &str,
    peers: &[&str],
    now_unix_s: f64,
) -> Option<(&'a ProbeBaseline, Option<&'static str>)> {
    pick(probes.iter().collect(), node, peers, now_unix_s)
}

/// [`for_node`] over the probes of `node` already picked out (by a [`ProbeIndex`]).
pub fn pick<'a>(
    candidates: Vec<&'a ProbeBaseline>,
    node: &str,
    peers: &[&str],
    now_unix_s: f64,
) -> Option<(&'a ProbeBaseline, Option<&'static str>)> {
    let mine: Vec<&ProbeBaseline> = candidates
        .into_iter()
        .filter(|p| {
            p.peer_of(node)
                .is_some_and(|q| q != node && (peers.is_empty() || peers.contains(&q)))
        })
        .collect();
    let usable = mine
        .iter()
        .filter(|p| p.unusable(now_unix_s).is_none())
        .min_by(|a, b| {
            let bw = |p: &&&ProbeBaseline| p.bytes_per_second.unwrap_or(f64::INFINITY);
            bw(a).total_cmp(&bw(b))
        });
    if let Some(p) = usable {
        return Some((p, None));
    }
    mine.into_iter()
        .max_by(|a, b| a.at_unix_s.total_cmp(&b.at_unix_s))
        .map(|p| (p, p.unusable(now_unix_s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(from: &str, to: &str, at: f64, outcome: &str, bw: Option<f64>) -> ProbeBaseline {
        ProbeBaseline {
            from: from.into(),
            to: to.into(),
            transport: "tcp".into(),
            at_unix_s: at,
            outcome: outcome.into(),
            bytes_per_second: bw,
        }
    }

    #[test]
    fn the_lowest_fresh_figure_with_a_job_peer_is_used() {
        let now = 10_000.0;
        let all = vec![
            p("a", "b", now - 10.0, "ok", Some(20e9)),
            p("c", "a", now - 20.0, "ok", Some(10e9)),
            p("a", "x", now - 5.0, "ok", Some(1e9)),
            p("b", "c", now - 5.0, "ok", Some(1e9)),
        ];
        let (q, why) = for_node(&all, "a", &["b", "c"], now).unwrap();
        assert_eq!((q.from.as_str(), q.to.as_str(), why), ("c", "a", None));
        // Without a job, any peer.
        assert_eq!(for_node(&all, "a", &[], now).unwrap().0.to, "x");
        assert!(for_node(&all, "z", &[], now).is_none());
    }

    #[test]
    fn the_index_gives_each_node_its_own_pairs_and_the_same_choice() {
        let now = 10_000.0;
        let all = vec![
            p("a", "b", now - 10.0, "ok", Some(20e9)),
            p("c", "a", now - 20.0, "ok", Some(10e9)),
            p("b", "c", now - 5.0, "ok", Some(1e9)),
        ];
        let index = ProbeIndex::default();
        let of_a: Vec<(&str, &str)> = index
            .of(&all, "a")
            .iter()
            .map(|q| (q.from.as_str(), q.to.as_str()))
            .collect();
        assert_eq!(of_a, vec![("a", "b"), ("c", "a")]);
        assert!(index.of(&all, "z").is_empty());
        for node in ["a", "b", "c"] {
            assert_eq!(
                pick(index.of(&all, node), node, &[], now),
                for_node(&all, node, &[], now)
            );
        }
        assert!(index.clone().0.get().is_none());
    }

    #[test]
    fn declined_failed_and_stale_probes_are_never_usable() {
        let now = 100_000.0;
        let stale = p("a", "b", now - PROBE_MAX_AGE_S - 1.0, "ok", Some(20e9));
        assert_eq!(stale.unusable(now), Some("stale"));
        assert_eq!(
            p("a", "b", now, "declined", None).unusable(now),
            Some("declined")
        );
        assert_eq!(
            p("a", "b", now, "failed", None).unusable(now),
            Some("failed")
        );
        assert_eq!(p("a", "b", now, "ok", None).unusable(now), Some("failed"));
        let all = vec![stale.clone(), p("a", "c", now - 50.0, "declined", None)];
        let (q, why) = for_node(&all, "a", &[], now).unwrap();
        assert_eq!((q.to.as_str(), why), ("c", Some("declined")));
        let (_, why) = for_node(&[stale], "b", &["a"], now).unwrap();
        assert_eq!(why, Some("stale"));
    }

    #[test]
    fn a_record_gives_the_lower_direction_and_its_time_in_words() {
        let r = ProbeRecord {
            from: "node-a".into(),
            to: "node-b".into(),
            transport: commwatch_probe::TransportKind::Tcp,
            at_unix_s: 1_764_619_200.0,
            outcome: "ok",
            error: None,
            tx_bytes_per_second: Some(12e9),
            rx_bytes_per_second: Some(11e9),
            latency_p50_seconds: Some(1e-5),
            latency_p99_seconds: Some(2e-5),
            latency_max_seconds: Some(3e-5),
        };
        let b = ProbeBaseline::from_record(&r);
        assert_eq!(b.bytes_per_second, Some(11e9));
        assert_eq!(b.transport, "tcp");
        assert_eq!(b.describe(), "node-a -> node-b at 2025-12-01T20:00:00Z");
        let d = ProbeBaseline::from_record(&ProbeRecord {
            outcome: "declined",
            ..r
        });
        assert_eq!(d.bytes_per_second, None);
    }
}
