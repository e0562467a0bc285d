//! Bare links from a running collector: `GET {URL}/api/v1/probes` gives the latest active probe of each pair of
//! nodes (commwatch's own, run by the agents with nothing else on the link), which step 1 of the report shows
//! beside the nccl-tests baselines: "the bare link gives X".
//!
//! A probe's figure is used only when the probe succeeded and is at most [`PROBE_MAX_AGE_S`] old (the
//! collector's `link_underutilized` rule uses the same age); a declined, failed or older probe is listed with
//! the reason it is not used. Bandwidths in GB/s (1e9 bytes/s) as the rest of the report, latencies in µs.

use serde::{Deserialize, Serialize};

use super::client::{Client, ClientError};

/// Age past which a probe's figure is not used (1 hour, seconds).
pub const PROBE_MAX_AGE_S: f64 = 3600.0;
/// Probes read from one answer at most (the collector keeps at most `[probes] max_pairs`, 256 by default).
pub const MAX_PROBES: usize = 4096;

/// One probed pair as the report shows it (JSON key `bare_links.links`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BareLink {
    /// The prober (`from -> to`).
    pub from: String,
    pub to: String,
    /// `tcp` or `rdma`.
    pub transport: String,
    pub at_unix_s: f64,
    /// Seconds between the probe and the fetch.
    pub age_s: f64,
    /// `ok`, `declined` or `failed`, as the collector says.
    pub outcome: String,
    /// Why the probe was not `ok`, as the collector says.
    pub error: Option<String>,
    /// The lower of both directions, GB/s; null unless `ok`.
    pub bare_gbps: Option<f64>,
    pub tx_gbps: Option<f64>,
    pub rx_gbps: Option<f64>,
    pub latency_p50_us: Option<f64>,
    pub latency_p99_us: Option<f64>,
    /// Why the figure is not used: `declined`, `failed`, `stale`; null when it is.
    pub unused: Option<&'static str>,
}

/// Step 1's bare links (JSON key `bare_links`): the probes read, or why none could be.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BareLinks {
    /// Usable figures first, lowest first; then the probes not used.
    pub links: Vec<BareLink>,
    /// Why `/api/v1/probes` could not be read (null when it was).
    pub warning: Option<String>,
}

impl BareLinks {
    /// From a fetch's outcome.
    pub fn from_fetch(fetched: &Result<Vec<BareLink>, String>) -> BareLinks {
        match fetched {
            Ok(links) => BareLinks {
                links: links.clone(),
                warning: None,
            },
            Err(e) => BareLinks {
                links: Vec::new(),
                warning: Some(e.clone()),
            },
        }
    }
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    probes: Vec<Record>,
}

#[derive(Deserialize)]
struct Record {
    from: String,
    to: String,
    #[serde(default)]
    transport: String,
    at_unix_s: f64,
    outcome: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    tx_bytes_per_second: Option<f64>,
    #[serde(default)]
    rx_bytes_per_second: Option<f64>,
    #[serde(default)]
    latency_p50_seconds: Option<f64>,
    #[serde(default)]
    latency_p99_seconds: Option<f64>,
}

/// `s`, with control characters escaped (names from the network reach the terminal).
fn clean(s: String) -> String {
    if s.chars().any(char::is_control) {
        s.escape_debug().to_string()
    } else {
        s
    }
}

/// A finite, positive figure scaled by `k`.
fn scaled(v: Option<f64>, k: f64) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x > 0.0).map(|x| x * k)
}

/// Reads the body of `/api/v1/probes` (`{"running": bool, "probes": [...]}`) as of `now_unix_s`, usable
/// figures first, lowest first. At most [`MAX_PROBES`] are kept.
pub fn parse_probes(body: &str, url: &str, now_unix_s: f64) -> Result<Vec<BareLink>, ClientError> {
    let doc: Doc = serde_json::from_str(body).map_err(|e| ClientError::BadBody {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    let mut links: Vec<BareLink> = doc
        .probes
        .into_iter()
        .take(MAX_PROBES)
        .map(|r| {
            let ok = r.outcome == "ok";
            let tx = scaled(r.tx_bytes_per_second, 1e-9).filter(|_| ok);
            let rx = scaled(r.rx_bytes_per_second, 1e-9).filter(|_| ok);
            let bare = [tx, rx].into_iter().flatten().reduce(f64::min);
            let age_s = now_unix_s - r.at_unix_s;
            let unused = match (r.outcome.as_str(), bare) {
                ("declined", _) => Some("declined"),
                ("ok", Some(_)) if age_s > PROBE_MAX_AGE_S => Some("stale"),
                ("ok", Some(_)) => None,
                _ => Some("failed"),
            };
            BareLink {
                from: clean(r.from),
                to: clean(r.to),
                transport: clean(r.transport),
                at_unix_s: r.at_unix_s,
                age_s,
                outcome: r.outcome,
                error: r.error.map(clean),
                bare_gbps: bare,
                tx_gbps: tx,
                rx_gbps: rx,
                latency_p50_us: scaled(r.latency_p50_seconds, 1e6).filter(|_| ok),
                latency_p99_us: scaled(r.latency_p99_seconds, 1e6).filter(|_| ok),
                unused,
            }
        })
        .collect();
    links.sort_by(|a, b| {
        (a.unused.is_some(), a.bare_gbps.unwrap_or(f64::INFINITY))
            .partial_cmp(&(b.unused.is_some(), b.bare_gbps.unwrap_or(f64::INFINITY)))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    Ok(links)
}

/// Fetches and reads `/api/v1/probes` through `client`, as of now.
pub fn fetch_probes_with(client: &Client) -> Result<Vec<BareLink>, ClientError> {
    let body = client.get("/api/v1/probes", &[])?.body;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    parse_probes(&body, &client.url("/api/v1/probes"), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"running": false, "probes": [
        {"from": "node-a", "to": "node-b", "transport": "tcp", "at_unix_s": 9940.0, "outcome": "ok", "error": null,
         "tx_bytes_per_second": 12.5e9, "rx_bytes_per_second": 11e9, "latency_p50_seconds": 1.2e-5,
         "latency_p99_seconds": 3e-5, "latency_max_seconds": 4e-5},
        {"from": "node-a", "to": "node-c", "transport": "tcp", "at_unix_s": 9990.0, "outcome": "declined",
         "error": "busy", "tx_bytes_per_second": null, "rx_bytes_per_second": null},
        {"from": "node-b", "to": "node-c", "transport": "rdma", "at_unix_s": 1.0, "outcome": "ok",
         "tx_bytes_per_second": 20e9, "rx_bytes_per_second": 21e9}]}"#;

    #[test]
    fn usable_figures_come_first_and_the_rest_say_why_not() {
        let l = parse_probes(BODY, "u", 10_000.0).unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!((l[0].from.as_str(), l[0].to.as_str()), ("node-a", "node-b"));
        assert_eq!(l[0].bare_gbps, Some(11.0));
        assert_eq!(l[0].unused, None);
        assert_eq!(l[0].age_s, 60.0);
        assert!((l[0].latency_p50_us.unwrap() - 12.0).abs() < 1e-9);
        assert_eq!(l[1].unused, Some("stale"));
        assert_eq!(l[1].bare_gbps, Some(20.0));
        assert_eq!(l[2].unused, Some("declined"));
        assert_eq!(l[2].bare_gbps, None);
        assert_eq!(l[2].error.as_deref(), Some("busy"));
    }

    #[test]
    fn a_body_that_is_not_the_probes_document_is_an_error() {
        assert!(matches!(
            parse_probes("<html>", "u", 0.0),
            Err(ClientError::BadBody { .. })
        ));
        assert_eq!(parse_probes("{}", "u", 0.0).unwrap(), vec![]);
    }
}
