//! What the shipper says about its collector shards on the agent's `/metrics` ([`ShardMetrics`]): which
//! collector the open stream goes to, how many shards it knows, and how often (and why) its stream moved to
//! another one. The DNS lookups are counted where they happen ([`super::resolve`]).
//!
//! Contract:
//! - `commwatch_agent_collector_info{collector}` is 1 for the collector of the open stream and has no series
//!   while none is open; it never has two. The label is [`collector_label`] of the URL: as configured (or as
//!   resolved from a `dns+` name), never with credentials.
//! - A move is a stream opened on another collector than the previous stream's; it is counted once, when that
//!   stream is open (so it and the info series switch together), under the reason the agent left the
//!   previous collector. Trying the next shard while none answers, and coming back to the previous one, are
//!   no move.

use super::Shipper;
use crate::telemetry::{MoveReason, ShardMetrics};

/// `url` as a label value: everything up to its last `@` (a user and password) dropped, and everything
/// from its first `?` or `#` (a query or fragment, which may hold a token). The exposition escapes the rest.
pub fn collector_label(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    // Dropping at the last `@` before cutting the query: a password holding `?`, `#` or `/` is dropped too.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    match scheme {
        Some(scheme) => format!("{scheme}://{rest}"),
        None => rest.to_string(),
    }
}

impl Shipper {
    fn shard_metrics(&self) -> &ShardMetrics {
        &self.metrics.shards
    }

    /// The collector in use changed from `before` (a URL) for `reason`: kept as why the agent left the
    /// collector of its last stream, until a stream opens (or the agent is back on that collector).
    pub(super) fn note_retarget(&mut self, before: &str, reason: MoveReason) {
        let now = self.target();
        let Some(streamed) = self.streamed.as_deref() else {
            // No stream yet: nothing to move from.
            return;
        };
        if now == before {
            return;
        }
        if now == streamed {
            self.move_reason = None;
        } else if before == streamed || self.move_reason.is_none() {
            self.move_reason = Some(reason);
        }
    }

    /// A stream is open to the collector in use: the info series names it, and a move is counted when the
    /// previous stream went to another collector.
    pub(super) fn stream_opened(&mut self) {
        let now = self.target().to_string();
        let reason = self.move_reason.take();
        let m = self.shard_metrics();
        m.set_collector(&collector_label(&now));
        match (self.streamed.as_deref(), reason) {
            (Some(prev), Some(reason)) if prev != now => {
                m.moves.with_label_values(&[reason.as_str()]).inc();
            }
            (Some(prev), None) if prev != now => {
                // Every change of the collector in use notes its reason: this is a bug, not counted as a guess.
                tracing::warn!(from = %collector_label(prev), to = %collector_label(&now),
                    "collector changed without a recorded reason; move not counted");
            }
            _ => {}
        }
        self.streamed = Some(now);
    }

    /// The stream ended: no info series until the next one opens.
    pub(super) fn stream_closed(&self) {
        self.shard_metrics().clear_collector();
    }

    /// The shards known now, after a new list or set.
    pub(super) fn count_shards(&self) {
        self.shard_metrics().shards.set(self.urls.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_never_hold_credentials_queries_or_fragments() {
        for (url, want) in [
            ("http://10.0.0.9:7070", "http://10.0.0.9:7070"),
            ("https://[fd00::2]:7070", "https://[fd00::2]:7070"),
            (
                "https://user:secret@collector:7070",
                "https://collector:7070",
            ),
            (
                "https://u:p?a#b/c@collector:7070/x",
                "https://collector:7070/x",
            ),
            (
                "http://collector:7070/?token=secret",
                "http://collector:7070/",
            ),
            ("http://collector:7070#secret", "http://collector:7070"),
            ("user:secret@collector:7070", "collector:7070"),
            ("", ""),
        ] {
            assert_eq!(collector_label(url), want, "{url}");
        }
    }
}
