//! `[remote_write]`: where and how the collector sends its derived series with the Prometheus remote-write
//! protocol 1.0 (the sender is [`crate::remote_write`]). Off unless `url` is set (`--remote-write-url`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// The longest `flush_timeout`: the lifecycle gives each task 5 s after the stop signal.
pub const MAX_FLUSH_TIMEOUT: Duration = Duration::from_secs(4);

/// Remote write to one receiver (Prometheus with `--web.enable-remote-write-receiver`, VictoriaMetrics, Mimir,
/// Thanos Receive).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// The receiver's write endpoint, `http://` or `https://` (e.g. `http://prometheus:9090/api/v1/write`);
    /// `None`: nothing is sent.
    pub url: Option<String>,
    /// How often the families of `/metrics` are gathered and queued, 1s..=1h.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Time one request may take (connect, send, answer), 1s..=5m.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// PEM CA bundle the receiver's certificate must chain to (in addition to the system's roots).
    pub ca_file: Option<PathBuf>,
    /// File holding a bearer token sent as `Authorization: Bearer …`.
    pub bearer_token_file: Option<PathBuf>,
    /// Basic authentication: the user name (with `basic_auth_password_file`).
    pub basic_auth_user: Option<String>,
    /// Basic authentication: the file holding the password.
    pub basic_auth_password_file: Option<PathBuf>,
    /// Metric name prefixes to send; empty: every family of `/metrics`.
    pub include: Vec<String>,
    /// Metric name prefixes never sent (applied after `include`).
    pub exclude: Vec<String>,
    /// Labels added to every series unless it has one of that name (e.g. `shard = "0"`: several collectors
    /// writing to one store need one that tells them apart).
    pub external_labels: BTreeMap<String, String>,
    /// Most samples in one request, 100..=100,000.
    pub max_samples_per_request: usize,
    /// Most samples waiting to be sent; beyond it the oldest request is dropped (counted), 1,000..=100,000,000.
    pub queue_max_samples: usize,
    /// First wait before retrying a request that failed with 5xx, 429 or a network error; it doubles up to
    /// `max_backoff`.
    #[serde(with = "humantime_serde")]
    pub min_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// How long a request is retried before it is given up (counted as failed), 1s..=1 day.
    #[serde(with = "humantime_serde")]
    pub retry_for: Duration,
    /// At stop: how long the queue may still be sent, at most [`MAX_FLUSH_TIMEOUT`]; what is left is dropped.
    #[serde(with = "humantime_serde")]
    pub flush_timeout: Duration,
}

impl Default for RemoteWriteConfig {
    fn default() -> Self {
        RemoteWriteConfig {
            url: None,
            interval: Duration::from_secs(15),
            timeout: Duration::from_secs(10),
            ca_file: None,
            bearer_token_file: None,
            basic_auth_user: None,
            basic_auth_password_file: None,
            include: Vec::new(),
            exclude: Vec::new(),
            external_labels: BTreeMap::new(),
            // Prometheus's own sender sends up to 2,000; receivers take far more, fewer requests cost less.
            max_samples_per_request: 5_000,
            // Several intervals of a large fleet (~400 series per node by default).
            queue_max_samples: 2_000_000,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            retry_for: Duration::from_secs(300),
            flush_timeout: Duration::from_secs(3),
        }
    }
}

impl RemoteWriteConfig {
    /// Checks every field; the error names the first bad one (`remote_write.…`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad(field: &'static str, reason: impl Into<String>) -> Result<(), ConfigError> {
            Err(ConfigError::Invalid {
                field,
                reason: reason.into(),
            })
        }
        if let Some(url) = &self.url {
            if let Err(reason) = check_url(url) {
                return bad("remote_write.url", reason);
            }
        }
        let within = |d: Duration, lo: Duration, hi: Duration| (lo..=hi).contains(&d);
        let s = Duration::from_secs;
        if !within(self.interval, s(1), s(3600)) {
            return bad("remote_write.interval", "must be 1s to 1h");
        }
        if !within(self.timeout, s(1), s(300)) {
            return bad("remote_write.timeout", "must be 1s to 5m");
        }
        if !(100..=100_000).contains(&self.max_samples_per_request) {
            return bad(
                "remote_write.max_samples_per_request",
                "must be 100 to 100000",
            );
        }
        if !(1_000..=100_000_000).contains(&self.queue_max_samples) {
            return bad(
                "remote_write.queue_max_samples",
                "must be 1000 to 100000000",
            );
        }
        if !within(self.min_backoff, Duration::from_millis(10), s(60)) {
            return bad("remote_write.min_backoff", "must be 10ms to 1m");
        }
        if !within(self.max_backoff, self.min_backoff, s(600)) {
            return bad("remote_write.max_backoff", "must be min_backoff to 10m");
        }
        if !within(self.retry_for, s(1), s(86_400)) {
            return bad("remote_write.retry_for", "must be 1s to 1 day");
        }
        if self.flush_timeout > MAX_FLUSH_TIMEOUT {
            return bad("remote_write.flush_timeout", "must be at most 4s");
        }
        self.validate_auth_and_labels()
    }

    fn validate_auth_and_labels(&self) -> Result<(), ConfigError> {
        let bad = |field: &'static str, reason: String| Err(ConfigError::Invalid { field, reason });
        let basic = self.basic_auth_user.is_some() || self.basic_auth_password_file.is_some();
        if self.basic_auth_user.is_some() != self.basic_auth_password_file.is_some() {
            return bad(
                "remote_write.basic_auth_user",
                "basic_auth_user and basic_auth_password_file go together".into(),
            );
        }
        if basic && self.bearer_token_file.is_some() {
            return bad(
                "remote_write.bearer_token_file",
                "use either a bearer token or basic authentication, not both".into(),
            );
        }
        for (name, value) in &self.external_labels {
            if !is_label_name(name) || name.starts_with("__") {
                return bad(
                    "remote_write.external_labels",
                    format!("{name:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)"),
                );
            }
            if value.is_empty() {
                return bad(
                    "remote_write.external_labels",
                    format!("{name:?} has an empty value"),
                );
            }
        }
        if let Some(p) = self
            .include
            .iter()
            .chain(&self.exclude)
            .find(|p| p.is_empty())
        {
            return bad(
                "remote_write.include",
                format!("{p:?}: an empty prefix (include or exclude) matches everything; leave the list empty"),
            );
        }
        Ok(())
    }
}

/// `Ok` for an absolute `http(s)://host…` URL without user information (credentials go in the files).
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?}: the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?}: no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "{url:?}: credentials in the URL are refused; use basic_auth_user and basic_auth_password_file"
        ));
    }
    Ok(())
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use crate::config::{CollectorConfig, ConfigError};
    use std::time::Duration;

    #[test]
    fn off_by_default_and_parses_from_toml() {
        let c = CollectorConfig::default();
        assert_eq!(c.remote_write.url, None);
        c.remote_write.validate().unwrap();
        let c = CollectorConfig::from_toml_str(
            r#"
            [remote_write]
            url = "https://vm.example:8428/api/v1/write"
            interval = "5s"
            bearer_token_file = "/etc/commwatch/rw-token"
            include = ["commwatch_"]
            exclude = ["commwatch_link_transmit_bytes_total"]
            external_labels = { shard = "0" }
            "#,
        )
        .unwrap();
        let rw = &c.remote_write;
        assert_eq!(
            rw.url.as_deref(),
            Some("https://vm.example:8428/api/v1/write")
        );
        assert_eq!(rw.interval, Duration::from_secs(5));
        assert_eq!(rw.include, ["commwatch_"]);
        assert_eq!(rw.external_labels["shard"], "0");
        assert_eq!(rw.max_samples_per_request, 5_000);
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            ("url = \"ftp://x/\"", "remote_write.url"),
            ("url = \"not a url\"", "remote_write.url"),
            ("url = \"http://u:p@x/\"", "remote_write.url"),
            ("interval = \"10ms\"", "remote_write.interval"),
            ("timeout = \"1h\"", "remote_write.timeout"),
            ("max_samples_per_request = 1", "remote_write.max_samples_per_request"),
            ("queue_max_samples = 10", "remote_write.queue_max_samples"),
            ("min_backoff = \"1ms\"", "remote_write.min_backoff"),
            ("min_backoff = \"2s\"\nmax_backoff = \"1s\"", "remote_write.max_backoff"),
            ("retry_for = \"0s\"", "remote_write.retry_for"),
            ("flush_timeout = \"10s\"", "remote_write.flush_timeout"),
            ("basic_auth_user = \"u\"", "remote_write.basic_auth_user"),
            (
                "basic_auth_user = \"u\"\nbasic_auth_password_file = \"p\"\nbearer_token_file = \"t\"",
                "remote_write.bearer_token_file",
            ),
            ("external_labels = { \"a-b\" = \"x\" }", "remote_write.external_labels"),
            ("external_labels = { __x = \"x\" }", "remote_write.external_labels"),
            ("external_labels = { a = \"\" }", "remote_write.external_labels"),
            ("exclude = [\"\"]", "remote_write.include"),
        ];
        for (text, field) in cases {
            let err =
                CollectorConfig::from_toml_str(&format!("[remote_write]\n{text}\n")).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: f, .. } if *f == field),
                "{text}: {err}"
            );
        }
    }
}
