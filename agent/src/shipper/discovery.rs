//! The collector setting's entries and the set of shards they stand for: a URL names one shard; a
//! `dns+http://NAME:PORT` or `dns+https://NAME:PORT` entry names every address `NAME` resolves to (each A and
//! AAAA record one shard, as a Kubernetes headless Service answers with one record per ready pod).
//!
//! Contract:
//! - A resolved shard's URL is `SCHEME://ADDRESS:PORT` (`[v6]` in brackets); the set is sorted and without
//!   repeats, so every agent that gets the same answer computes the same rendezvous order ([`super::shard`]).
//!   The rendezvous weight is over that URL: a shard that comes back under a new address (a restarted pod)
//!   is a new shard to the hash, and takes over about 1/n of every other shard's keys.
//! - TLS (`dns+https://`): a resolved shard's certificate is verified against the configured
//!   `tls.server_name`, else against `NAME` itself, since an address record says nothing of the pod's own
//!   name. The collector's certificate must name the headless Service (`NAME`); the chart's does.
//! - A `dns+` entry needs an explicit port and no path.
//!
//! Pure: no I/O. [`super::resolve`] asks the resolver and publishes the set.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// The prefix that makes an entry a DNS name to resolve.
pub const DNS_PREFIX: &str = "dns+";

/// Why an entry of the collector setting is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{entry:?}: a dns+ entry is dns+http://NAME:PORT or dns+https://NAME:PORT ({why})")]
    BadDnsEntry { entry: String, why: &'static str },
}

/// One entry of the collector setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One shard at this URL.
    Url(String),
    /// Every address `host` resolves to, on `port`.
    Dns {
        /// `http` or `https`.
        scheme: &'static str,
        host: String,
        port: u16,
    },
}

/// The shards in use: their URLs (sorted) and, for resolved `https` ones, the TLS name to verify.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardSet {
    pub urls: Vec<String>,
    /// URL → name its certificate is verified against (resolved `dns+https` shards only).
    pub server_names: BTreeMap<String, String>,
}

/// `url` without its `dns+` prefix (for the checks on scheme and host that apply to both kinds).
pub fn strip_dns(url: &str) -> &str {
    url.strip_prefix(DNS_PREFIX).unwrap_or(url)
}

/// The entries of the setting, as [`super::shard::parse_list`] splits it.
pub fn parse_targets(entries: &[String]) -> Result<Vec<Target>, DiscoveryError> {
    entries.iter().map(|e| parse_target(e)).collect()
}

fn parse_target(entry: &str) -> Result<Target, DiscoveryError> {
    let Some(url) = entry.strip_prefix(DNS_PREFIX) else {
        return Ok(Target::Url(entry.to_string()));
    };
    let bad = |why| DiscoveryError::BadDnsEntry {
        entry: entry.to_string(),
        why,
    };
    let (scheme, rest) = match url.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        _ => return Err(bad("the scheme after dns+ is http or https")),
    };
    if rest.contains(['/', '?', '#', '@']) {
        return Err(bad("no path, query or user"));
    }
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(bad("the port is required"));
    };
    let port: u16 = port.parse().map_err(|_| bad("the port is 1 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if port == 0 || host.is_empty() {
        return Err(bad("a name and a port 1 to 65535"));
    }
    Ok(Target::Dns {
        scheme,
        host: host.to_string(),
        port,
    })
}

/// Whether any entry is a name to resolve.
pub fn has_dns(targets: &[Target]) -> bool {
    targets.iter().any(|t| matches!(t, Target::Dns { .. }))
}

/// The set from the URL entries and the addresses each `dns+` entry resolved to (`answers[i]` for
/// `targets[i]`, ignored for URL entries). `tls_server_name`: the configured `tls.server_name`.
pub fn shard_set(
    targets: &[Target],
    answers: &[Vec<IpAddr>],
    tls_server_name: Option<&str>,
) -> ShardSet {
    let mut set = ShardSet::default();
    for (i, t) in targets.iter().enumerate() {
        match t {
            Target::Url(u) => set.urls.push(u.clone()),
            Target::Dns { scheme, host, port } => {
                for ip in answers.get(i).into_iter().flatten() {
                    let url = format!("{scheme}://{}", SocketAddr::new(*ip, *port));
                    if *scheme == "https" {
                        let name = tls_server_name.unwrap_or(host);
                        set.server_names.insert(url.clone(), name.to_string());
                    }
                    set.urls.push(url);
                }
            }
        }
    }
    set.urls.sort();
    set.urls.dedup();
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_parse_and_bad_dns_entries_say_why() {
        let t = parse_targets(&[
            "http://a:1".into(),
            "dns+https://commwatch-collector-headless.ns.svc:7070".into(),
            "dns+http://[fd00::1]:9".into(),
        ])
        .unwrap();
        assert_eq!(t[0], Target::Url("http://a:1".into()));
        assert_eq!(
            t[1],
            Target::Dns {
                scheme: "https",
                host: "commwatch-collector-headless.ns.svc".into(),
                port: 7070
            }
        );
        assert!(matches!(&t[2], Target::Dns { host, port: 9, .. } if host == "fd00::1"));
        assert!(has_dns(&t) && !has_dns(&t[..1]));
        for bad in [
            "dns+ftp://a:1",
            "dns+http://a",
            "dns+http://a:0",
            "dns+http://a:99999",
            "dns+http://a:1/path",
            "dns+http://u@a:1",
            "dns+http://:1",
            "dns+a:1",
        ] {
            let e = parse_targets(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("dns+http://NAME:PORT"), "{e}");
        }
        assert_eq!(strip_dns("dns+https://x:1"), "https://x:1");
        assert_eq!(strip_dns("https://x:1"), "https://x:1");
    }

    #[test]
    fn the_set_is_sorted_and_the_same_whatever_order_the_records_came_in() {
        let t =
            parse_targets(&["dns+https://svc.ns.svc:7070".into(), "https://b:1".into()]).unwrap();
        let a = shard_set(
            &t,
            &[
                vec![
                    ip("10.0.0.9"),
                    ip("10.0.0.10"),
                    ip("fd00::2"),
                    ip("10.0.0.9"),
                ],
                vec![],
            ],
            None,
        );
        let b = shard_set(
            &t,
            &[vec![ip("fd00::2"), ip("10.0.0.10"), ip("10.0.0.9")], vec![]],
            None,
        );
        assert_eq!(a, b);
        assert_eq!(
            a.urls,
            [
                "https://10.0.0.10:7070",
                "https://10.0.0.9:7070",
                "https://[fd00::2]:7070",
                "https://b:1"
            ]
        );
        assert_eq!(a.server_names["https://[fd00::2]:7070"], "svc.ns.svc");
        assert!(!a.server_names.contains_key("https://b:1"));
        let named = shard_set(
            &t,
            &[vec![ip("10.0.0.9")], vec![]],
            Some("collector.example"),
        );
        assert_eq!(
            named.server_names["https://10.0.0.9:7070"],
            "collector.example"
        );
        // Plain text: no TLS names.
        let plain = parse_targets(&["dns+http://svc:7070".into()]).unwrap();
        assert!(shard_set(&plain, &[vec![ip("10.0.0.9")]], None)
            .server_names
            .is_empty());
    }
}
