//! The store's samples, gathered from the snapshots per family in the order `Registry::gather` gives them,
//! with their label values borrowed from the snapshots: each node's and each link's labels are escaped once
//! into a shared prefix string, the rest (`state`, `counter`, the agent's labels) written from the snapshot
//! at [`Sample::write`].

use std::collections::HashSet;

use super::families::{family_index, Ix, FAMILIES};
use super::nvlink::link_labels;
use super::writer::{push_header, push_label, push_value, Pieces};
use crate::export::names;
use crate::store::{LinkSnapshot, NodeSnapshot, SeriesSnapshot, StoreMemory};

/// One sample of a store family. Its labels, in order: `node` and the link's ([`link_labels`]), written once per node or link into [`Samples::prefixes`]; then
/// `state` (link up), `counter` (the series' agent name) and the series' own labels, borrowed from the
/// snapshot.
#[derive(Clone, Copy)]
struct Sample<'a> {
    /// `Samples::prefixes[prefix..prefix + prefix_len]`: `{node="…"` and the link's labels, escaped.
    prefix: usize,
    prefix_len: u32,
    /// Number of labels (`gather` orders by it first).
    count: u32,
    /// The `node` label's value (with `count > 0`).
    node: &'a str,
    /// Rank of the link among the node's links by label values (0 for node-level samples).
    rank: u32,
    /// The link of a link sample.
    link: Option<&'a LinkSnapshot>,
    /// The `state` label's link (link up).
    state: Option<&'a LinkSnapshot>,
    series: Option<&'a SeriesSnapshot>,
    /// The `counter` label, from `series`.
    counter: bool,
    /// Whether `series` has labels of its own: [`Sample::write`] reads the series' key (memory the gather
    /// touched long before) only for a `counter` label or these.
    labelled: bool,
    value: f64,
}

impl<'a> Sample<'a> {
    /// A sample without labels.
    fn bare(value: f64) -> Sample<'a> {
        Sample {
            prefix: 0,
            prefix_len: 0,
            count: 0,
            node: "",
            rank: 0,
            link: None,
            state: None,
            series: None,
            counter: false,
            labelled: false,
            value,
        }
    }

    /// Label values after `node` and the link's, in exposition order.
    fn tail(self) -> impl Iterator<Item = &'a str> {
        let state = self.state.map(|l| l.link.state.as_str());
        let counter = self
            .series
            .filter(|_| self.counter)
            .map(|s| s.key.metric.as_str());
        let extra = self
            .series
            .into_iter()
            .flat_map(|s| s.key.labels.iter().map(|(_, v)| v.as_str()));
        state.into_iter().chain(counter).chain(extra)
    }

    /// `Registry::gather`'s order for two samples of one node (or of nodes of one name): label count, then
    /// label values pair by pair (names are not compared). The node is the same; two links with as many link
    /// labels are in the order of their ranks unless their labels are equal, and the tail's values are then
    /// compared at the same positions. Links with different numbers of labels (a GPU's folded NVLinks next to
    /// a link's, as an agent could send) compare their whole value lists.
    fn same_node_cmp(&self, other: &Sample<'_>) -> std::cmp::Ordering {
        self.count
            .cmp(&other.count)
            .then_with(|| match (self.link, other.link) {
                (Some(a), Some(b)) if link_labels(&a.link).len() != link_labels(&b.link).len() => {
                    let (la, lb) = (link_labels(&a.link), link_labels(&b.link));
                    la.values()
                        .chain(self.tail())
                        .cmp(lb.values().chain(other.tail()))
                }
                _ => self
                    .rank
                    .cmp(&other.rank)
                    .then_with(|| self.tail().cmp(other.tail())),
            })
    }

    /// Appends the sample's labels to `out`, in the order [`Sample::write`] writes them, unescaped: `node`, the
    /// link's, `state`, `counter`, the series' own.
    fn labels(&self, out: &mut Vec<(&'a str, &'a str)>) {
        if self.count == 0 {
            return;
        }
        out.push(("node", self.node));
        if let Some(l) = self.link {
            out.extend_from_slice(link_labels(&l.link).pairs());
        }
        if let Some(l) = self.state {
            out.push(("state", l.link.state.as_str()));
        }
        if let Some(s) = self.series {
            if self.counter {
                out.push(("counter", s.key.metric.as_str()));
            }
            out.extend(s.key.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
    }

    /// Writes the sample's line: `name`, its labels (the prefix from `prefixes`, then the tail), its value.
    fn write(&self, name: &str, prefixes: &str, out: &mut String) {
        out.push_str(name);
        if self.count > 0 {
            let end = self.prefix + self.prefix_len as usize;
            out.push_str(prefixes.get(self.prefix..end).unwrap_or_default());
            if let Some(l) = self.state {
                push_label(out, ',', "state", &l.link.state);
            }
            if let Some(s) = self.series.filter(|_| self.counter || self.labelled) {
                if self.counter {
                    push_label(out, ',', "counter", &s.key.metric);
                }
                for (k, v) in &s.key.labels {
                    push_label(out, ',', k, v);
                }
            }
            out.push('}');
        }
        out.push(' ');
        push_value(out, self.value);
        out.push('\n');
    }
}

/// The link's label values after `node`, in exposition order, compared pair by pair.
fn link_values_cmp(a: &LinkSnapshot, b: &LinkSnapshot) -> std::cmp::Ordering {
    link_labels(&a.link)
        .values()
        .cmp(link_labels(&b.link).values())
}

fn label_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Agent labels of a series.
type Labels<'a> = &'a [(String, String)];

/// The memory a gather's samples are built in, handed from one gather to the next ([`Samples::collect`],
/// [`Samples::into_buffers`]): empty vectors and an empty string that keep their room. At 2,000 demo nodes the
/// samples fill about 50 MB; allocated afresh per scrape, that is fresh memory the kernel zeroes page by page
/// (the allocator returns a freed buffer's pages long before the next scrape, 15 s later), and each doubling
/// of a vector copies what it held.
#[derive(Default)]
pub(super) struct SampleBuffers {
    /// Per family (of [`FAMILIES`]), empty.
    fams: Vec<Vec<Sample<'static>>>,
    /// [`Samples::prefixes`], empty.
    prefixes: String,
    /// Where a family is reordered by label count (`sort_by_count`), empty.
    spare: Vec<Sample<'static>>,
}

impl SampleBuffers {
    /// Bytes these buffers hold (their room, not what they would hold in use).
    pub(super) fn bytes(&self) -> usize {
        let samples: usize =
            self.fams.iter().map(Vec::capacity).sum::<usize>() + self.spare.capacity();
        samples * std::mem::size_of::<Sample<'static>>() + self.prefixes.capacity()
    }
}

/// `v` emptied, its room kept, for samples of another lifetime: an in-place collect of no items, which keeps the
/// allocation (same size and alignment).
// `filter` would keep the samples' lifetime; the mapping to `None` is what changes it.
#[allow(clippy::unnecessary_filter_map)]
fn emptied<'b>(mut v: Vec<Sample<'_>>) -> Vec<Sample<'b>> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// `v` emptied for the next gather; its room cut back to the samples it held and a sixteenth more when it had
/// over twice that and 4,096 samples more (a fleet that shrank).
fn kept<'b>(mut v: Vec<Sample<'_>>) -> Vec<Sample<'b>> {
    let len = v.len();
    if v.capacity() > 2 * len + 4096 {
        v.shrink_to(len + len / 16);
    }
    emptied(v)
}

/// Samples of every store family (by index in [`FAMILIES`]), the label prefixes they share, and the scratch
/// `add_group` reuses from one node to the next.
pub(super) struct Samples<'a> {
    fams: Vec<Vec<Sample<'a>>>,
    /// `{node="…"` and `{node="…",class="…",…` of every node and link, escaped, back to back.
    prefixes: String,
    /// Room for `sort_by_count`.
    spare: Vec<Sample<'a>>,
    /// (family, agent labels) already exported for a node.
    node_seen: HashSet<(usize, Labels<'a>)>,
    /// (family, counter label, agent labels) already exported for a link.
    link_seen: HashSet<(usize, &'a str, Labels<'a>)>,
    /// The group's links, sorted by label values, with their rank.
    links: Vec<(&'a LinkSnapshot, u32)>,
}

impl<'a> Samples<'a> {
    /// The samples of the store's families for `nodes` (and its size gauges with `memory`), each family's in
    /// `gather`'s order. `sizes[i]` (when given): about how many samples family `i` will have (the previous
    /// gather's [`Samples::sizes`]); each family's room is reserved once for that many and a sixteenth more,
    /// not doubled up to it as it fills (each doubling copied what it held into fresh memory). The samples are
    /// built in `buffers` (a previous gather's [`Samples::into_buffers`], or empty ones), whose room is kept.
    pub(super) fn collect(
        nodes: &'a [NodeSnapshot],
        memory: Option<&StoreMemory>,
        sizes: &[usize],
        buffers: SampleBuffers,
    ) -> Samples<'a> {
        let SampleBuffers {
            fams: kept_fams,
            mut prefixes,
            spare,
        } = buffers;
        let mut fams: Vec<Vec<Sample<'a>>> = kept_fams.into_iter().map(emptied).collect();
        fams.resize_with(FAMILIES.len(), Vec::new);
        for (f, &n) in fams.iter_mut().zip(sizes) {
            f.reserve_exact(n + n / 16);
        }
        prefixes.clear();
        let mut b = Samples {
            fams,
            prefixes,
            spare: emptied(spare),
            node_seen: HashSet::new(),
            link_seen: HashSet::new(),
            links: Vec::new(),
        };
        if let Some(ix) = Ix::new() {
            // Within a family, `gather` orders samples by label count, then label values; the first label is
            // `node`. So: nodes by name (a store's come sorted, each name once), each node's samples sorted, then
            // each family stably by label count.
            let mut order: Vec<&NodeSnapshot> = nodes.iter().collect();
            if !nodes.windows(2).all(|w| w[0].name < w[1].name) {
                order.sort_by(|x, y| x.name.cmp(&y.name));
            }
            let mut starts = vec![0usize; FAMILIES.len()];
            for group in order.chunk_by(|x, y| x.name == y.name) {
                for (s, f) in starts.iter_mut().zip(&b.fams) {
                    *s = f.len();
                }
                b.add_group(&ix, group);
                for (s, f) in starts.iter().zip(b.fams.iter_mut()) {
                    if let Some(part) = f.get_mut(*s..) {
                        part.sort_by(|x, y| x.same_node_cmp(y));
                    }
                }
            }
            for f in &mut b.fams {
                sort_by_count(f, &mut b.spare);
            }
        }
        if let Some(m) = memory {
            for (name, value) in [
                (names::COLLECTOR_NODES, m.nodes),
                (names::COLLECTOR_SERIES, m.series),
                (names::COLLECTOR_STORE_SAMPLES, m.samples),
                (names::COLLECTOR_STORE_BYTES, m.bytes),
                (names::COLLECTOR_STORE_SAMPLE_BYTES, m.sample_bytes),
            ] {
                if let Some(i) = family_index(name) {
                    b.fams[i].push(Sample::bare(value as f64));
                }
            }
        }
        b
    }

    /// The buffers these samples were built in, emptied, for the next gather ([`Samples::collect`]).
    pub(super) fn into_buffers(self) -> SampleBuffers {
        SampleBuffers {
            fams: self.fams.into_iter().map(kept).collect(),
            prefixes: self.prefixes,
            spare: kept(self.spare),
        }
    }

    /// How many samples each family (of [`FAMILIES`]) has.
    pub(super) fn sizes(&self) -> Vec<usize> {
        self.fams.iter().map(Vec::len).collect()
    }

    /// Whether family `i` (of [`FAMILIES`]) has samples.
    pub(super) fn has(&self, i: usize) -> bool {
        self.fams.get(i).is_some_and(|f| !f.is_empty())
    }

    /// Hands every sample of family `i` (of [`FAMILIES`]) to `f` in order: its labels ([`Sample::labels`], in a
    /// buffer reused from one sample to the next) and its value.
    pub(super) fn for_each(&self, i: usize, mut f: impl FnMut(&[(&'a str, &'a str)], f64)) {
        let mut labels = Vec::with_capacity(16);
        for s in self.fams.get(i).into_iter().flatten() {
            labels.clear();
            s.labels(&mut labels);
            f(&labels, s.value);
        }
    }

    /// Writes family `i` (of [`FAMILIES`]): its header, then its samples, handing the text on between lines
    /// ([`Pieces::mark`]). The sink's error, if it fails.
    pub(super) fn write(&self, i: usize, out: &mut Pieces<'_>) -> Result<(), prometheus::Error> {
        let f = &FAMILIES[i];
        push_header(out.text(), f);
        for s in &self.fams[i] {
            s.write(f.name, &self.prefixes, out.text());
            out.mark()?;
        }
        Ok(())
    }

    /// Appends the samples of `group` (nodes of one name; one node from a store), with the previous builder's
    /// rules: a node series, or a link counter, whose family and labels were already exported for the node or
    /// link is skipped (the first wins: two agent names mapping to one family and label set make no duplicate
    /// sample). Links are taken in label order (stable), so that each family's part comes nearly sorted.
    fn add_group(&mut self, ix: &Ix, group: &[&'a NodeSnapshot]) {
        let Some(&first) = group.first() else {
            return;
        };
        self.add_nodes(ix, group);
        self.sort_links(group);
        let links = std::mem::take(&mut self.links);
        for &(l, rank) in &links {
            self.add_link(ix, &first.name, l, rank);
        }
        self.links = links;
    }

    /// The node-level samples of `group`: node up, last seen, dropped batches, and its exported series.
    fn add_nodes(&mut self, ix: &Ix, group: &[&'a NodeSnapshot]) {
        let Some(first) = group.first() else {
            return;
        };
        let node_prefix = self.prefixes.len();
        push_label(&mut self.prefixes, '{', "node", &first.name);
        let node_prefix_len = label_count(self.prefixes.len() - node_prefix);
        let node_sample = |value: f64, series: Option<&'a SeriesSnapshot>| Sample {
            prefix: node_prefix,
            prefix_len: node_prefix_len,
            count: label_count(1 + series.map_or(0, |s| s.key.labels.len())),
            node: &first.name,
            series,
            labelled: series.is_some_and(|s| !s.key.labels.is_empty()),
            ..Sample::bare(value)
        };
        for n in group {
            self.fams[ix.node_up].push(node_sample(if n.connected { 1.0 } else { 0.0 }, None));
            self.fams[ix.last_seen].push(node_sample(n.last_seen_unix_ns as f64 / 1e9, None));
            self.fams[ix.dropped].push(node_sample(n.agent_dropped_batches_total as f64, None));
            self.node_seen.clear();
            for s in &n.series {
                let Some(fam) = ix.node_series(s) else {
                    continue;
                };
                if !self.node_seen.insert((fam, &s.key.labels)) {
                    continue;
                }
                self.fams[fam].push(node_sample(s.value, Some(s)));
            }
        }
    }

    /// `links`: the links of `group`, sorted by label values, each with its rank (equal labels, equal rank).
    fn sort_links(&mut self, group: &[&'a NodeSnapshot]) {
        self.links.clear();
        self.links
            .extend(group.iter().flat_map(|n| n.links.iter()).map(|l| (l, 0)));
        self.links.sort_by(|x, y| link_values_cmp(x.0, y.0));
        let mut rank = 0u32;
        for i in 1..self.links.len() {
            if link_values_cmp(self.links[i - 1].0, self.links[i].0).is_ne() {
                rank = rank.saturating_add(1);
            }
            self.links[i].1 = rank;
        }
    }

    /// The samples of link `l` of node `node`: byte counters and rates, capacity, link up, and its exported
    /// counters.
    fn add_link(&mut self, ix: &Ix, node: &'a str, l: &'a LinkSnapshot, rank: u32) {
        let prefix = self.prefixes.len();
        let count = push_link_labels(&mut self.prefixes, node, l);
        let sample = Sample {
            prefix,
            prefix_len: label_count(self.prefixes.len() - prefix),
            count,
            node,
            rank,
            link: Some(l),
            ..Sample::bare(0.0)
        };
        if let Some(v) = l.tx_bytes_total {
            self.fams[ix.tx_total].push(Sample {
                value: v as f64,
                ..sample
            });
        }
        if let Some(v) = l.rx_bytes_total {
            self.fams[ix.rx_total].push(Sample {
                value: v as f64,
                ..sample
            });
        }
        if let Some(value) = l.tx_bytes_per_second {
            self.fams[ix.tx_rate].push(Sample { value, ..sample });
        }
        if let Some(value) = l.rx_bytes_per_second {
            self.fams[ix.rx_rate].push(Sample { value, ..sample });
        }
        if let Some(value) = l.link.capacity_bytes_per_second {
            self.fams[ix.capacity].push(Sample { value, ..sample });
        }
        self.fams[ix.up].push(Sample {
            count: count + 1,
            state: Some(l),
            value: if l.link.is_up() { 1.0 } else { 0.0 },
            ..sample
        });
        self.link_seen.clear();
        for s in &l.series {
            let Some((fam, with_counter)) = ix.link_series(s) else {
                continue;
            };
            let counter = if with_counter {
                s.key.metric.as_str()
            } else {
                ""
            };
            if !self.link_seen.insert((fam, counter, &s.key.labels)) {
                continue;
            }
            self.fams[fam].push(Sample {
                count: label_count(count as usize + usize::from(with_counter) + s.key.labels.len()),
                series: Some(s),
                counter: with_counter,
                labelled: !s.key.labels.is_empty(),
                value: s.value,
                ..sample
            });
        }
    }
}

/// Orders `f` by label count, stably (`gather`'s order within a family, each node's part already in order).
/// A family's samples mostly have one count: then nothing moves. Else the samples are copied into `spare` and
/// back count by count (a few counts), so no room is allocated beyond the two kept ones.
fn sort_by_count<'a>(f: &mut Vec<Sample<'a>>, spare: &mut Vec<Sample<'a>>) {
    if f.is_sorted_by_key(|s| s.count) {
        return;
    }
    let mut counts: Vec<u32> = Vec::new();
    for s in f.iter() {
        if !counts.contains(&s.count) {
            counts.push(s.count);
        }
    }
    counts.sort_unstable();
    spare.clear();
    spare.extend_from_slice(f);
    f.clear();
    for c in counts {
        f.extend(spare.iter().filter(|s| s.count == c));
    }
    spare.clear();
}

/// Appends `{node="…"` and the link's labels ([`link_labels`]), escaped, to `out`; returns how many labels that
/// is.
fn push_link_labels(out: &mut String, node: &str, l: &LinkSnapshot) -> u32 {
    push_label(out, '{', "node", node);
    let labels = link_labels(&l.link);
    for (name, value) in labels.pairs() {
        push_label(out, ',', name, value);
    }
    label_count(1 + labels.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_vector_keeps_its_allocation() {
        let mut v: Vec<Sample<'static>> = Vec::with_capacity(1_000);
        v.push(Sample::bare(1.0));
        let at = v.as_ptr() as usize;
        let w: Vec<Sample<'_>> = emptied(v);
        assert_eq!((w.len(), w.capacity(), w.as_ptr() as usize), (0, 1_000, at));
        // Cut back only when over twice what it held and 4,096 more.
        let mut v: Vec<Sample<'static>> = Vec::with_capacity(10_000);
        v.extend((0..3_000).map(|i| Sample::bare(f64::from(i))));
        assert_eq!(kept(v).capacity(), 10_000);
        let mut v: Vec<Sample<'static>> = Vec::with_capacity(10_000);
        v.extend((0..1_000).map(|i| Sample::bare(f64::from(i))));
        assert!(kept(v).capacity() < 2_000);
    }

    #[test]
    fn sorting_by_count_is_stable_and_keeps_the_two_buffers() {
        let sample = |count: u32, value: f64| Sample {
            count,
            ..Sample::bare(value)
        };
        let mut f: Vec<Sample<'_>> = [(2, 0.0), (1, 1.0), (2, 2.0), (0, 3.0), (1, 4.0)]
            .iter()
            .map(|&(c, v)| sample(c, v))
            .collect();
        let mut spare = Vec::with_capacity(64);
        let rooms = [f.capacity(), spare.capacity()];
        sort_by_count(&mut f, &mut spare);
        let order: Vec<(u32, f64)> = f.iter().map(|s| (s.count, s.value)).collect();
        assert_eq!(order, [(0, 3.0), (1, 1.0), (1, 4.0), (2, 0.0), (2, 2.0)]);
        assert!(spare.is_empty());
        assert_eq!([f.capacity(), spare.capacity()], rooms);
    }
}
