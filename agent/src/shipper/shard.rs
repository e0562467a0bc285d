//! Which collector (shard) an agent ships to: rendezvous (highest random weight) hashing of a key — the
//! agent's job id, or its node name when it runs no job — over the configured collector URLs.
//!
//! Contract:
//! - Every agent computes the same order for the same key and the same set of URLs, whatever order the URLs
//!   were given in: all ranks of a job land on the same collector.
//! - The weight of `(key, url)` is a fixed 64-bit hash (FNV-1a over the key, a separator byte and the URL,
//!   finished with the splitmix64 mixer); it does not change across versions, processes or machines.
//! - Adding a shard moves only the keys whose new shard is the added one (about 1/(n+1) of them); removing
//!   one moves only the keys that were on it.
//!
//! Pure: no I/O. The shipper ([`super`]) keeps the order and walks it when a collector is down.

/// The key a node's shard is chosen by: the smallest id among its jobs that span nodes (an id of the form
/// `pid-<pid>` is a lone process, known to this node only), else the node name.
pub fn shard_key<'a>(node: &'a str, job_ids: impl IntoIterator<Item = &'a str>) -> &'a str {
    job_ids
        .into_iter()
        .filter(|id| !id.is_empty() && !id.starts_with("pid-"))
        .min()
        .unwrap_or(node)
}

/// Splits a collector setting into its URLs: comma-separated, trimmed, a trailing `/` removed, empty items
/// and repeats dropped (first occurrence kept).
pub fn parse_list(setting: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for url in setting.split(',') {
        let url = url.trim().trim_end_matches('/');
        if !url.is_empty() && !out.iter().any(|u| u == url) {
            out.push(url.to_string());
        }
    }
    out
}

/// The weight of `url` for `key`; the highest weight wins.
pub fn weight(key: &str, url: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    // 0xff never occurs in UTF-8, so ("ab", "c") and ("a", "bc") hash apart.
    for b in key.bytes().chain([0xff]).chain(url.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    splitmix64(h)
}

/// The splitmix64 finalizer: spreads FNV's weak low bits over the whole word.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Indices into `urls`, the preferred collector for `key` first, then the next to fall back to, and so on
/// (weights descending; equal weights ordered by URL so the order never depends on the input's order).
pub fn order(key: &str, urls: &[String]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..urls.len()).collect();
    idx.sort_by(|&a, &b| {
        weight(key, &urls[b])
            .cmp(&weight(key, &urls[a]))
            .then_with(|| urls[a].cmp(&urls[b]))
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("http://commwatch-collector-{i}.commwatch-collector:7070"))
            .collect()
    }

    fn first(key: &str, urls: &[String]) -> String {
        urls[order(key, urls)[0]].clone()
    }

    #[test]
    fn the_order_is_stable_and_does_not_depend_on_the_input_order() {
        let u = urls(4);
        let mut rev = u.clone();
        rev.reverse();
        for key in ["job-1", "slurm-88121", "node-a", ""] {
            let a: Vec<&String> = order(key, &u).into_iter().map(|i| &u[i]).collect();
            let b: Vec<&String> = order(key, &rev).into_iter().map(|i| &rev[i]).collect();
            assert_eq!(a, b, "key {key:?}");
            assert_eq!(order(key, &u), order(key, &u));
            let mut sorted = order(key, &u);
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2, 3], "every shard once");
        }
        // The weights are fixed: a change here moves every job of every fleet on upgrade.
        assert_eq!(
            weight("job-1", "http://a:7070"),
            weight("job-1", "http://a:7070")
        );
        assert_ne!(weight("ab", "c"), weight("a", "bc"));
        assert_eq!(order("x", &[]), Vec::<usize>::new());
    }

    /// Spread of 10,000 job ids over 2, 4 and 8 shards: every shard within 10% of the mean.
    #[test]
    fn ten_thousand_job_ids_spread_about_uniformly() {
        for n in [2usize, 4, 8] {
            let u = urls(n);
            let mut counts = vec![0usize; n];
            for j in 0..10_000 {
                counts[order(&format!("{}", 880_000 + j), &u)[0]] += 1;
            }
            let mean = 10_000.0 / n as f64;
            let worst = counts
                .iter()
                .map(|&c| (c as f64 - mean).abs() / mean)
                .fold(0.0, f64::max);
            eprintln!(
                "{n} shards: {counts:?}, worst deviation {:.1}%",
                worst * 100.0
            );
            assert!(worst < 0.10, "{n} shards: {counts:?}");
        }
    }

    /// Adding a fifth shard moves only keys onto the new shard, about a fifth of them.
    #[test]
    fn adding_a_shard_moves_only_keys_to_it() {
        let four = urls(4);
        let five = urls(5);
        let mut moved = 0;
        for j in 0..10_000 {
            let key = format!("job-{j}");
            let (before, after) = (first(&key, &four), first(&key, &five));
            if before != after {
                assert_eq!(after, five[4], "{key} moved between old shards");
                moved += 1;
            }
        }
        eprintln!("adding a 5th shard moved {moved} of 10000 keys");
        assert!((1_600..2_400).contains(&moved), "moved {moved}");
        // Removing it moves them back, and only them.
        for j in 0..10_000 {
            let key = format!("job-{j}");
            if first(&key, &five) != five[4] {
                assert_eq!(first(&key, &five), first(&key, &four));
            }
        }
    }

    #[test]
    fn the_fallback_is_the_order_without_the_failed_shard() {
        let u = urls(3);
        for j in 0..200 {
            let key = format!("j{j}");
            let full = order(&key, &u);
            let without: Vec<String> = u.iter().filter(|x| **x != u[full[0]]).cloned().collect();
            assert_eq!(u[full[1]], without[order(&key, &without)[0]]);
        }
    }

    #[test]
    fn key_and_list_parsing() {
        assert_eq!(shard_key("n1", []), "n1");
        assert_eq!(shard_key("n1", ["pid-42"]), "n1");
        assert_eq!(shard_key("n1", ["pid-42", "b", "a"]), "a");
        assert_eq!(shard_key("n1", [""]), "n1");
        assert_eq!(
            parse_list(" http://a:1/, http://b:2,,http://a:1 "),
            vec!["http://a:1".to_string(), "http://b:2".to_string()]
        );
        assert!(parse_list(" , ").is_empty());
    }
}
