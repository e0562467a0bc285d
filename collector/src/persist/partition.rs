//! Batches by receive time: one table per span, `batches_<first unix second>_<end unix second>`, holding the
//! batches received in `[first, end)`. The prune drops a table whole once its end is past retention: SQLite
//! frees its pages without writing them again, where deleting rows rewrote every page they were on (with 64 KiB
//! pages, as much WAL as the batches themselves). A table's rows are in commit order (its rowids).

use std::time::Duration;

use rusqlite::Connection;

/// Prefix of a partition's table name.
const PREFIX: &str = "batches_";
/// Fewest and most seconds a partition spans.
const MIN_SPAN_S: i64 = 1;
const MAX_SPAN_S: i64 = 3_600;

/// One partition: the batches received in `[start_s, end_s)`, unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Partition {
    pub start_s: i64,
    pub end_s: i64,
}

/// Seconds a partition spans under `retention`: an eighth of it (so that what is kept past retention until its
/// partition is dropped is at most an eighth more), within one second and one hour.
pub(crate) fn span_s(retention: Duration) -> i64 {
    let eighth = i64::try_from(retention.as_secs() / 8).unwrap_or(MAX_SPAN_S);
    eighth.clamp(MIN_SPAN_S, MAX_SPAN_S)
}

impl Partition {
    /// The partition of a batch received at `received_unix_ns`, partitions spanning `span_s` seconds.
    pub fn of(received_unix_ns: i64, span_s: i64) -> Partition {
        let span_s = span_s.max(1);
        let start_s = received_unix_ns
            .div_euclid(1_000_000_000)
            .div_euclid(span_s)
            * span_s;
        Partition {
            start_s,
            end_s: start_s.saturating_add(span_s),
        }
    }

    /// Its table's name (digits only after the prefix, so it needs no quoting).
    pub fn table(&self) -> String {
        format!("{PREFIX}{}_{}", self.start_s, self.end_s)
    }

    /// The partition a table name stands for; `None` for any other name.
    pub fn parse(name: &str) -> Option<Partition> {
        let (start, end) = name.strip_prefix(PREFIX)?.split_once('_')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(start) || !digits(end) {
            return None;
        }
        let p = Partition {
            start_s: start.parse().ok()?,
            end_s: end.parse().ok()?,
        };
        (p.start_s < p.end_s).then_some(p)
    }

    /// Whether every batch it holds was received before `cutoff_unix_ns`.
    pub fn before(&self, cutoff_unix_ns: i64) -> bool {
        self.end_s.saturating_mul(1_000_000_000) <= cutoff_unix_ns
    }

    /// SQL creating its table when missing.
    pub fn create_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {}(node TEXT NOT NULL, instance_id INTEGER NOT NULL, seq INTEGER NOT NULL,
               received_unix_ns INTEGER NOT NULL, payload BLOB NOT NULL)",
            self.table()
        )
    }
}

/// The database's partitions, oldest first.
pub(crate) fn list(conn: &Connection) -> rusqlite::Result<Vec<Partition>> {
    let mut st =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'batches\\_%' ESCAPE '\\'")?;
    let names = st.query_map([], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for n in names {
        out.extend(Partition::parse(&n?));
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_falls_in_the_span_of_its_receive_second() {
        let p = Partition::of(1_800_000_037_500_000_000, 10);
        assert_eq!(
            p,
            Partition {
                start_s: 1_800_000_030,
                end_s: 1_800_000_040
            }
        );
        assert_eq!(p.table(), "batches_1800000030_1800000040");
        assert_eq!(Partition::parse(&p.table()), Some(p));
        assert!(p.before(1_800_000_040_000_000_000));
        assert!(!p.before(1_800_000_039_999_999_999));
    }

    #[test]
    fn only_partition_names_parse() {
        for name in [
            "batches",
            "batches_",
            "batches_1",
            "batches_1_",
            "batches_2_1",
            "batches_1_2x",
            "batches_-1_2",
            "batches_received",
            "seqs",
        ] {
            assert_eq!(Partition::parse(name), None, "{name}");
        }
    }

    #[test]
    fn spans_are_an_eighth_of_retention_within_bounds() {
        assert_eq!(span_s(Duration::from_secs(300)), 37);
        assert_eq!(span_s(Duration::from_secs(1)), 1);
        assert_eq!(span_s(Duration::from_secs(7 * 86_400)), 3_600);
    }
}
