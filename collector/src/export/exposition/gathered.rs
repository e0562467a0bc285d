//! The exposition as typed data: one gather of every family `/metrics` shows — name, help, type, and per
//! sample its name, label pairs and `f64` value — in `/metrics` order. The text writer ([`Gathered::write_text`])
//! and remote write ([`Gathered::for_each_sample`]) both read it, so both carry the same families, names,
//! labels and values, and remote write never renders or parses text.
//!
//! Two sources, interleaved by family name: the health registry's families (`MetricFamily` from
//! `Registry::gather`: health, steps, findings, jobs; few series), and the store's ([`Samples`]: hundreds of
//! thousands of series, label values borrowed from the snapshot, never copied). A sample's labels are in the
//! order the text writes them, unescaped; a registry histogram's or summary's samples are named and labelled as
//! the text format spells them (`_bucket` with `le`, `quantile`, `_sum`, `_count`).

use prometheus::proto::{MetricFamily, MetricType};
use prometheus::TextEncoder;

use super::families::FAMILIES;
use super::samples::{SampleBuffers, Samples};
use super::writer::Pieces;
use crate::store::{NodeSnapshot, StoreMemory};

/// One sample as `/metrics` shows it: its metric name, its labels in the order written (unescaped, empty values
/// included), its value. No timestamp: a reader stamps a gather with one time.
#[derive(Debug, Clone, Copy)]
pub struct SampleRef<'s> {
    pub name: &'s str,
    pub labels: &'s [(&'s str, &'s str)],
    pub value: f64,
}

/// Where one family of a gather comes from.
#[derive(Clone, Copy)]
enum Part {
    /// Index in the registry's families.
    Registered(usize),
    /// Index in [`FAMILIES`].
    Store(usize),
}

/// One gather of the exposition: the registry's families and the store's samples for a snapshot, and the order
/// of the families (by name, as `/metrics` writes them). Borrows the snapshot and the registry's families.
pub struct Gathered<'a> {
    registered: &'a [MetricFamily],
    store: Samples<'a>,
    order: Vec<Part>,
}

/// One family of a [`Gathered`], in `/metrics` order.
#[derive(Clone, Copy)]
pub struct GatheredFamily<'g, 'a> {
    gathered: &'g Gathered<'a>,
    part: Part,
}

impl<'a> Gathered<'a> {
    /// The families of `registered` (as `Registry::gather` returns them: sorted by name) and the store's for
    /// `nodes` (and its size gauges with `memory`), interleaved by family name; each family's samples in
    /// `gather`'s order. Families without samples are left out.
    pub fn new(
        registered: &'a [MetricFamily],
        nodes: &'a [NodeSnapshot],
        memory: Option<&StoreMemory>,
    ) -> Gathered<'a> {
        Gathered::sized(registered, nodes, memory, &[], SampleBuffers::default())
    }

    /// [`Gathered::new`], built in `buffers` (a previous gather's [`Gathered::into_buffers`], or empty ones),
    /// with room for about as many samples per store family as `sizes` says (a previous gather's
    /// [`Gathered::sizes`]; empty: none reserved beyond the buffers' own).
    pub(super) fn sized(
        registered: &'a [MetricFamily],
        nodes: &'a [NodeSnapshot],
        memory: Option<&StoreMemory>,
        sizes: &[usize],
        buffers: SampleBuffers,
    ) -> Gathered<'a> {
        let store = Samples::collect(nodes, memory, sizes, buffers);
        let mut own: Vec<usize> = (0..FAMILIES.len()).filter(|&i| store.has(i)).collect();
        own.sort_by_key(|&i| FAMILIES[i].name);
        let mut order = Vec::with_capacity(own.len() + registered.len());
        let mut reg = registered.iter().enumerate().peekable();
        for i in own {
            while let Some((r, _)) = reg.next_if(|(_, mf)| mf.name() < FAMILIES[i].name) {
                order.push(Part::Registered(r));
            }
            order.push(Part::Store(i));
        }
        order.extend(reg.map(|(r, _)| Part::Registered(r)));
        Gathered {
            registered,
            store,
            order,
        }
    }

    /// How many samples each store family has (by index in [`FAMILIES`]), for [`Gathered::sized`].
    pub(super) fn sizes(&self) -> Vec<usize> {
        self.store.sizes()
    }

    /// The buffers the store's samples were built in, emptied with their room kept, for the next gather.
    pub(super) fn into_buffers(self) -> SampleBuffers {
        self.store.into_buffers()
    }

    /// The families, in `/metrics` order.
    pub fn families(&self) -> impl Iterator<Item = GatheredFamily<'_, 'a>> + '_ {
        self.order.iter().map(move |&part| GatheredFamily {
            gathered: self,
            part,
        })
    }

    /// Every sample whose name `keep` accepts (tested before the labels are gathered), in `/metrics` order.
    pub fn for_each_sample(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        f: &mut dyn FnMut(SampleRef<'_>),
    ) {
        for family in self.families() {
            family.for_each_sample(keep, f);
        }
    }

    /// The text format 0.0.4 of every family, appended to `out`: byte for byte what `Registry::gather` and
    /// `TextEncoder` would write with the store's families collected into the registry.
    pub fn write_text(&self, out: &mut String) -> Result<(), prometheus::Error> {
        self.write_pieces(&mut Pieces::whole(out, &mut |_| Ok(())))
    }

    /// [`Gathered::write_text`] in pieces: the text is appended to `out`'s buffer and handed on whenever it
    /// holds a piece's worth ([`Pieces`]); what remains at the end is left in the buffer (the caller's
    /// [`Pieces::flush`] ends the text). The sink's error, if it fails.
    pub fn write_pieces(&self, out: &mut Pieces<'_>) -> Result<(), prometheus::Error> {
        for family in self.families() {
            family.write_pieces(out)?;
        }
        Ok(())
    }
}

impl GatheredFamily<'_, '_> {
    pub fn name(&self) -> &str {
        match self.part {
            Part::Registered(r) => self.gathered.registered[r].name(),
            Part::Store(i) => FAMILIES[i].name,
        }
    }

    pub fn help(&self) -> &str {
        match self.part {
            Part::Registered(r) => self.gathered.registered[r].help(),
            Part::Store(i) => FAMILIES[i].help,
        }
    }

    pub fn kind(&self) -> MetricType {
        match self.part {
            Part::Registered(r) => self.gathered.registered[r].get_field_type(),
            Part::Store(i) => FAMILIES[i].kind,
        }
    }

    /// The family's samples whose name `keep` accepts, in order.
    pub fn for_each_sample(
        &self,
        keep: &mut dyn FnMut(&str) -> bool,
        f: &mut dyn FnMut(SampleRef<'_>),
    ) {
        match self.part {
            Part::Registered(r) => registered_samples(&self.gathered.registered[r], keep, f),
            Part::Store(i) => {
                let name = FAMILIES[i].name;
                if keep(name) {
                    self.gathered.store.for_each(i, |labels, value| {
                        f(SampleRef {
                            name,
                            labels,
                            value,
                        })
                    });
                }
            }
        }
    }

    /// The family's text (header and samples), appended to `out`.
    pub fn write_text(&self, out: &mut String) -> Result<(), prometheus::Error> {
        self.write_pieces(&mut Pieces::whole(out, &mut |_| Ok(())))
    }

    /// The family's text (header and samples), written in pieces ([`Gathered::write_pieces`]). A registry
    /// family (few series) is written whole, then handed on.
    pub fn write_pieces(&self, out: &mut Pieces<'_>) -> Result<(), prometheus::Error> {
        match self.part {
            Part::Registered(r) => {
                TextEncoder::new().encode_utf8(
                    std::slice::from_ref(&self.gathered.registered[r]),
                    out.text(),
                )?;
                out.mark()
            }
            Part::Store(i) => self.gathered.store.write(i, out),
        }
    }
}

/// The samples of a registry family as `TextEncoder` writes them: a counter's or gauge's value; a histogram's
/// `_bucket` per bound with `le` (and `+Inf` when no bound is infinite), `_sum`, `_count`; a summary's samples
/// per quantile with `quantile`, `_sum`, `_count`. Untyped families have no samples (`TextEncoder` cannot write
/// them either; the registry's metrics are never untyped).
fn registered_samples(
    mf: &MetricFamily,
    keep: &mut dyn FnMut(&str) -> bool,
    f: &mut dyn FnMut(SampleRef<'_>),
) {
    let name = mf.name();
    let kind = mf.get_field_type();
    let suffixed = |suffix: &str| format!("{name}{suffix}");
    let (bucket, sum, count) = match kind {
        MetricType::HISTOGRAM | MetricType::SUMMARY => {
            (suffixed("_bucket"), suffixed("_sum"), suffixed("_count"))
        }
        _ => Default::default(),
    };
    let keep_name = match kind {
        MetricType::HISTOGRAM => keep(&bucket),
        MetricType::UNTYPED => false,
        _ => keep(name),
    };
    let (keep_sum, keep_count) = match kind {
        MetricType::HISTOGRAM | MetricType::SUMMARY => (keep(&sum), keep(&count)),
        _ => (false, false),
    };
    for m in mf.get_metric() {
        let own = m.get_label();
        let mut emit = |name: &str, extra: Option<(&str, &str)>, value: f64| {
            let labels: Vec<(&str, &str)> = own
                .iter()
                .map(|l| (l.name(), l.value()))
                .chain(extra)
                .collect();
            f(SampleRef {
                name,
                labels: &labels,
                value,
            });
        };
        match kind {
            MetricType::COUNTER if keep_name => emit(name, None, m.get_counter().value()),
            MetricType::GAUGE if keep_name => emit(name, None, m.get_gauge().value()),
            MetricType::HISTOGRAM => {
                let h = m.get_histogram();
                if keep_name {
                    let mut inf_seen = false;
                    for b in h.get_bucket() {
                        let bound = b.upper_bound();
                        let le = bound.to_string();
                        emit(&bucket, Some(("le", &le)), b.cumulative_count() as f64);
                        inf_seen |= bound.is_sign_positive() && bound.is_infinite();
                    }
                    if !inf_seen {
                        emit(&bucket, Some(("le", "+Inf")), h.sample_count() as f64);
                    }
                }
                if keep_sum {
                    emit(&sum, None, h.sample_sum());
                }
                if keep_count {
                    emit(&count, None, h.sample_count() as f64);
                }
            }
            MetricType::SUMMARY => {
                let s = m.get_summary();
                if keep_name {
                    for q in s.get_quantile() {
                        let quantile = q.quantile().to_string();
                        emit(name, Some(("quantile", &quantile)), q.value());
                    }
                }
                if keep_sum {
                    emit(&sum, None, s.sample_sum());
                }
                if keep_count {
                    emit(&count, None, s.sample_count() as f64);
                }
            }
            _ => {}
        }
    }
}
