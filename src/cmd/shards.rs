//! Several collectors (shards) for `status` and `findings`: the connection flags with a repeatable
//! `--collector`, one client per shard, and the merge of their answers.
//!
//! Merge rules: nodes by name (a node that moved between shards is counted once, with its newest
//! `last_seen_unix_s`); jobs and findings listed from every shard, each tagged with the `collector` that answered
//! it when there are several; the clock is the latest shard's.
//!
//! Every shard is asked at once ([`ask_all`]), under one overall deadline (`--timeout`): shards that hang
//! cost the command that deadline once, not once each, and each is reported on its own.

use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use clap::Args;
use commwatch_diagnose::collector::Client;

use crate::api::Node;
use crate::client::{connect, connect_via, ConnectArgs};
use crate::outcome::CliError;

/// The connection flags, `--collector` repeatable (shards).
#[derive(Args, Debug)]
pub struct ShardArgs {
    /// The collector's HTTP address: http://HOST:PORT, or https://HOST:PORT[/PREFIX] through a TLS proxy;
    /// else $COMMWATCH_COLLECTOR, else the collector's default listener on this host.
    /// Several collectors (shards): repeat the flag or separate the URLs by commas; their answers are merged.
    /// dns+http://NAME:PORT (or dns+https://) stands for every address NAME resolves to, one shard each (a
    /// headless Service); TLS checks the certificate against NAME.
    #[arg(
        long,
        value_name = "URL",
        env = "COMMWATCH_COLLECTOR",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:9470"
    )]
    pub collector: Vec<String>,
    /// File holding the collector's API token (its --api-token-file), sent as `authorization: Bearer`.
    #[arg(long, value_name = "FILE", env = "COMMWATCH_API_TOKEN_FILE")]
    pub api_token_file: Option<PathBuf>,
    /// PEM CA certificate(s) that signed the collector's (or its proxy's) certificate, trusted besides the
    /// system's roots; with an https:// URL only.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Give up on a request after this long, its answer's body included, e.g. 10s. With several collectors,
    /// all are asked at once and a shard that has not answered everything within this is reported late.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
}

impl ShardArgs {
    /// The shards' URLs: trimmed, empty items and repeats dropped, in the order given.
    pub fn urls(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for u in &self.collector {
            let u = u.trim();
            if !u.is_empty() && !out.iter().any(|o| o == u) {
                out.push(u.to_string());
            }
        }
        out
    }

    /// One client per shard; a bad flag (token file, CA file, URL) is a usage error.
    pub fn clients(&self) -> Result<Vec<Client>, CliError> {
        let urls = self.urls();
        if urls.is_empty() {
            return Err(CliError::Usage("--collector: no URL given".into()));
        }
        if let Some(bare) = urls
            .iter()
            .find(|u| !u.starts_with("dns+") && !u.contains("://"))
        {
            return Err(CliError::Usage(format!(
                "--collector {bare}: not a URL (no scheme); did you mean http://{bare}?"
            )));
        }
        let mut clients = Vec::new();
        for url in urls {
            let Some(named) = url.strip_prefix("dns+") else {
                clients.push(connect(&self.connect_args(url))?);
                continue;
            };
            for addr in resolve_shards(named)? {
                clients.push(connect_via(
                    &self.connect_args(named.to_string()),
                    Some(addr),
                )?);
            }
        }
        Ok(clients)
    }

    fn connect_args(&self, collector: String) -> ConnectArgs {
        ConnectArgs {
            collector,
            api_token_file: self.api_token_file.clone(),
            tls_ca: self.tls_ca.clone(),
            timeout: self.timeout,
        }
    }
}

/// Every address the host of `url` (`http(s)://NAME:PORT[/PREFIX]`, the `dns+` taken off) resolves to, with the
/// URL's port, sorted and each once: the shards behind one name, in the order every agent sees them.
fn resolve_shards(url: &str) -> Result<Vec<std::net::SocketAddr>, CliError> {
    use std::net::ToSocketAddrs;
    let usage = |why: &str| CliError::Usage(format!("--collector dns+{url}: {why}"));
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| usage("the scheme after dns+ must be http or https"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = authority
        .rsplit_once(':')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty() && !p.contains(']'))
        .ok_or_else(|| usage("a port is needed (the collectors' HTTP port)"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| usage(&format!("bad port {port:?}")))?;
    let mut addrs: Vec<std::net::SocketAddr> = (host.trim_matches(['[', ']']), port)
        .to_socket_addrs()
        .map_err(|e| {
            CliError::Other(anyhow::anyhow!(
                "cannot resolve {host} (--collector dns+{url}): {e}"
            ))
        })?
        .collect();
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(CliError::Other(anyhow::anyhow!(
            "{host} (--collector dns+{url}) resolves to no address"
        )));
    }
    Ok(addrs)
}

/// Asks every shard at once, each on a thread of its own, and waits for their answers until `within` has
/// passed: one overall deadline however many shards hang. Each shard's answer in the clients' order, or `None`
/// for a shard that had not answered by then (its thread is left to end with its own request's timeout; the
/// command does not wait for it).
pub fn ask_all<T, F>(clients: &[Client], within: Duration, ask: F) -> Vec<Option<T>>
where
    T: Send + 'static,
    F: Fn(&Client) -> T + Send + Sync + 'static,
{
    let deadline = Instant::now() + within;
    let ask = Arc::new(ask);
    let (tx, rx) = mpsc::channel();
    for (i, client) in clients.iter().enumerate() {
        let (tx, ask, client) = (tx.clone(), ask.clone(), client.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("shard-{i}"))
            .spawn(move || {
                let _ = tx.send((i, ask(&client)));
            });
        if let Err(e) = spawned {
            tracing::warn!(shard = i, error = %e, "cannot start a thread to ask a shard");
        }
    }
    drop(tx);
    let mut answers: Vec<Option<T>> = clients.iter().map(|_| None).collect();
    let mut left = clients.len();
    while left > 0 {
        let Some(wait) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(wait) {
            Ok((i, answer)) => {
                answers[i] = Some(answer);
                left -= 1;
            }
            Err(_) => break,
        }
    }
    answers
}

/// The error of a shard that gave no whole answer within the overall deadline.
pub fn late(client: &Client, timeout: Duration) -> commwatch_diagnose::collector::ClientError {
    commwatch_diagnose::collector::ClientError::Timeout {
        url: client.name().to_string(),
        timeout,
    }
}

/// Nodes of every shard, each name once with its newest `last_seen_unix_s` (and what the shard that heard
/// it last says it is blind to), sorted by name.
pub fn merge_nodes(shards: impl IntoIterator<Item = Vec<Node>>) -> Vec<Node> {
    let mut by_name: std::collections::BTreeMap<String, Node> = Default::default();
    for n in shards.into_iter().flatten() {
        match by_name.get(&n.name) {
            Some(seen)
                if n.last_seen_unix_s.unwrap_or(f64::MIN)
                    <= seen.last_seen_unix_s.unwrap_or(f64::MIN) => {}
            _ => {
                by_name.insert(n.name.clone(), n);
            }
        }
    }
    by_name.into_values().collect()
}

/// Adds `"collector": url` to a finding (or any JSON object) as the API returned it.
pub fn tag(mut raw: serde_json::Value, url: &str) -> serde_json::Value {
    if let Some(o) = raw.as_object_mut() {
        o.insert("collector".into(), url.into());
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ShardArgs,
    }

    #[test]
    fn collectors_repeat_or_comma_separate() {
        let w = Wrap::try_parse_from([
            "x",
            "--collector",
            "http://a:9470,http://b:9470",
            "--collector",
            " http://c:9470",
            "--collector",
            "http://a:9470",
        ])
        .unwrap();
        assert_eq!(
            w.args.urls(),
            ["http://a:9470", "http://b:9470", "http://c:9470"]
        );
        assert_eq!(w.args.clients().unwrap().len(), 3);
        let empty = Wrap::try_parse_from(["x", "--collector", ","]).unwrap();
        assert!(matches!(empty.args.clients(), Err(CliError::Usage(_))));
    }

    #[test]
    fn a_dns_name_stands_for_each_of_its_addresses() {
        let w = Wrap::try_parse_from([
            "x",
            "--collector",
            "dns+http://localhost:9470/p,http://b:9470",
        ])
        .unwrap();
        let clients = w.args.clients().unwrap();
        let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
        // localhost: 127.0.0.1 and, where configured, [::1]; sorted (IPv4 first), then the plain URL.
        assert_eq!(names[0], "http://127.0.0.1:9470/p", "{names:?}");
        assert_eq!(names.last(), Some(&"http://b:9470"), "{names:?}");
        assert!(names[..names.len() - 1]
            .iter()
            .all(|n| *n == "http://127.0.0.1:9470/p" || *n == "http://[::1]:9470/p"));
        assert!(clients[..clients.len() - 1]
            .iter()
            .all(|c| c.base_url() == "http://localhost:9470/p"));
        for (bad, says) in [
            ("dns+http://localhost/", "a port is needed"),
            ("dns+ftp://localhost:1", "must be http or https"),
            ("dns+localhost:1", "must be http or https"),
        ] {
            let w = Wrap::try_parse_from(["x", "--collector", bad]).unwrap();
            match w.args.clients() {
                Err(CliError::Usage(m)) => assert!(m.contains(says), "{bad}: {m}"),
                other => panic!("{bad}: {:?}", other.map(|c| c.len())),
            }
        }
        let w =
            Wrap::try_parse_from(["x", "--collector", "dns+http://shards.invalid:9470"]).unwrap();
        assert!(matches!(w.args.clients(), Err(CliError::Other(_))));
    }

    #[test]
    fn a_node_on_two_shards_counts_once_with_its_newest_message() {
        let n = |name: &str, t: Option<f64>| Node {
            name: name.into(),
            last_seen_unix_s: t,
            blind: Vec::new(),
        };
        let merged = merge_nodes([
            vec![n("b", Some(10.0)), n("a", None)],
            vec![n("a", Some(5.0)), n("b", Some(3.0)), n("c", Some(1.0))],
        ]);
        let got: Vec<(&str, Option<f64>)> = merged
            .iter()
            .map(|n| (n.name.as_str(), n.last_seen_unix_s))
            .collect();
        assert_eq!(got, [("a", Some(5.0)), ("b", Some(10.0)), ("c", Some(1.0))]);
        assert_eq!(
            tag(serde_json::json!({"id": "x"}), "http://a")["collector"],
            "http://a"
        );
    }
}
