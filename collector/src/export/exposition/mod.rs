//! `/metrics`: the store's families are written straight into the exposition text at scrape time (bounded work
//! per scrape, nothing per sample on the ingest path). Each node is copied under its own lock
//! ([`Store::snapshot`]) and formatted outside it.
//!
//! [`Exposition::render`] writes the text format 0.0.4 into one buffer sized from the previous scrape
//! ([`Exposition::render_plain`]: a buffer kept between scrapes and lent to the response;
//! [`Exposition::render_gzip`]: in pieces of 256 KiB straight into the gzip stream, never the whole text): the
//! collector's own families (the health `Registry`: health, steps, findings, jobs; few series) are encoded by
//! the prometheus crate's `TextEncoder`, the store's families (nodes, links, GPUs, store size: hundreds of
//! thousands of series in a large fleet) by [`write_exposition`], which takes label values straight from the
//! snapshot's strings: no `MetricFamily`, no owned label per series. Both sets are interleaved by family name,
//! and within a family the samples are ordered by label count, then by label values, as `Registry::gather`
//! orders them, so the text is byte for byte what `gather` and `TextEncoder` make of the same store (label
//! values escaped as the format requires, values printed as `TextEncoder` prints an `f64`).
//!
//! The store's view is exported as [`apply_export_detail`] shapes it (NVLink per GPU, a link's named counters
//! per family, the node's CPU total, the GPU summary, by default); remote write gathers through the same
//! [`Exposition`] ([`Exposition::gather`]: the typed families, no text), so both export the same series.
//!
//! Parts: `families` holds the family table ([`FAMILIES`]: names, help, types), which family each series goes
//! to, and [`StoreDescs`]; `samples` gathers the store's samples per family in `gather`'s order; `gathered`
//! interleaves them with the registry's families into one typed gather ([`Gathered`]: per family its name,
//! help, type, and per sample its labels and value), which the text writer (`writer`: escaping, values,
//! headers) and remote write ([`Exposition::gather`]) both read.
//!
//! The store's family names are still registered in the health registry ([`StoreDescs`], no samples of its
//! own), so a collector registering a family of the same name is refused at start, as before.
//!
//! The tests compare the text with the one the previous path makes (`MetricFamily` values built for a
//! `Registry` and encoded by `TextEncoder`): that reference encoder is compiled only into the tests and into
//! `benches/exposition.rs`, which times both.

mod detail;
mod families;
pub mod gathered;
mod lent;
pub mod nvlink;
mod samples;
mod writer;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use commwatch_httpd::GzipFast;
use parking_lot::Mutex;
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, TextEncoder};

use commwatch_model::clock::unix_now_ns;
pub use detail::{
    apply_counter_detail, apply_cpu_detail, apply_export_detail, apply_gpu_detail, ExportDetail,
};
pub use families::{Family, StoreDescs, FAMILIES};
pub use gathered::{Gathered, GatheredFamily, SampleRef};
use lent::Kept;
pub use nvlink::{apply_nvlink_detail, NvlinkDetail};
use samples::SampleBuffers;
pub use writer::Pieces;

use crate::store::{NodeSnapshot, Store, StoreMemory};
use crate::telemetry::Health;

/// The text is handed to the gzip stream in pieces of this many bytes ([`Exposition::render_gzip`]): small
/// enough to stay in the CPU's cache between the writer and the compressor, large enough that a piece costs
/// the stream one call among thousands of lines.
const PIECE: usize = 256 * 1024;

/// Renders `/metrics` for one collector: its store, its detail, the lengths of the previous text and of its
/// compressed form (the next buffers' sizes), and the buffers a render writes into, kept from one render to the
/// next.
pub struct Exposition {
    store: Arc<Store>,
    detail: ExportDetail,
    last_len: AtomicUsize,
    last_gzip_len: AtomicUsize,
    /// The plain text of the latest [`Exposition::render_plain`], lent to its response and given back when it
    /// is sent. Its pages stay mapped: a fresh buffer per scrape is fresh memory the kernel zeroes page by page
    /// as the text is written (the allocator has returned the previous one's pages by the next scrape, 15 s
    /// later).
    plain: Kept,
    /// The compressed text of the latest [`Exposition::render_gzip`], lent likewise.
    gzipped: Kept,
    /// The piece of text [`Exposition::render_gzip`] writes before handing it to the gzip stream.
    piece: Mutex<String>,
    /// Samples per store family in the previous gather: the next one reserves as much ([`Gathered::sized`]).
    sizes: Mutex<Vec<usize>>,
    /// The vectors and strings the previous gather's samples were built in, emptied with their room kept, for
    /// the next ([`Gathered::into_buffers`]): a gather costs no fresh memory for them. `None`: every gather
    /// allocates its own ([`Exposition::with_fresh_buffers`]).
    buffers: Option<Mutex<SampleBuffers>>,
}

impl Exposition {
    /// With the default detail ([`ExportDetail::default`]).
    pub fn new(store: Arc<Store>) -> Exposition {
        Exposition::with_detail(store, ExportDetail::default())
    }

    /// The store's view exported at `detail` ([`apply_export_detail`]).
    pub fn with_detail(store: Arc<Store>, detail: ExportDetail) -> Exposition {
        Exposition {
            store,
            detail,
            last_len: AtomicUsize::new(0),
            last_gzip_len: AtomicUsize::new(0),
            plain: Kept::default(),
            gzipped: Kept::default(),
            piece: Mutex::new(String::new()),
            sizes: Mutex::new(Vec::new()),
            buffers: Some(Mutex::new(SampleBuffers::default())),
        }
    }

    /// Every gather allocates the vectors its samples are built in afresh (sized from the previous gather), as
    /// before they were kept: for comparing the two (`benches/exposition.rs`).
    pub fn with_fresh_buffers(mut self) -> Exposition {
        self.buffers = None;
        self
    }

    /// Bytes this exposition keeps between renders: the room of the plain text's and the compressed text's
    /// buffers (while in their slots), of the gzip path's piece, and of the gather's buffers.
    pub fn kept_bytes(&self) -> usize {
        let buffers = self.buffers.as_ref().map_or(0, |b| b.lock().bytes());
        self.plain.room() + self.gzipped.room() + self.piece.lock().capacity() + buffers
    }

    /// The whole `/metrics` text (store families and the registry's), in a buffer of its own. CPU-bound: call it
    /// off the async workers (`spawn_blocking`) for large fleets. Observes `scrape_seconds`.
    pub fn render(&self, health: &Health) -> Result<String, prometheus::Error> {
        let mut out = String::new();
        self.render_into(health, &mut out)?;
        Ok(out)
    }

    /// The whole `/metrics` text, as [`Exposition::render`] writes it, in the buffer this exposition keeps for
    /// it, lent to the returned body: a scrape costs no fresh memory for the text while the previous body has
    /// been sent (else a buffer of its own). The buffer stays as large as the largest text since it was last
    /// cut back (when it held over twice the text and 1 MiB more). Observes `scrape_seconds`.
    pub fn render_plain(&self, health: &Health) -> Result<Bytes, prometheus::Error> {
        let mut text = String::from_utf8(self.plain.take()).unwrap_or_default();
        self.render_into(health, &mut text)?;
        let len = text.len();
        if text.capacity() > 2 * len + (1 << 20) {
            text.shrink_to(len + len / 16);
        }
        Ok(self.plain.lend(text.into_bytes()))
    }

    /// The `/metrics` text gzip-compressed ([`commwatch_httpd::GzipFast`]), written in pieces straight into the
    /// compressor: the whole text is never in memory, only a piece of it (256 KiB and a line). The compressed
    /// bytes are written into the buffer this exposition keeps for them, sized from the previous scrape's and
    /// lent to the returned body, as [`Exposition::render_plain`]'s. Decompressed, byte for byte
    /// [`Exposition::render`]'s text. Observes `scrape_seconds`.
    pub fn render_gzip(&self, health: &Health) -> Result<Bytes, prometheus::Error> {
        self.render_gzip_in(health, PIECE)
    }

    /// [`Exposition::render_gzip`] with pieces of `piece` bytes.
    fn render_gzip_in(&self, health: &Health, piece: usize) -> Result<Bytes, prometheus::Error> {
        let started = Instant::now();
        let mut body = self.gzipped.take();
        let last = self.last_gzip_len.load(Ordering::Relaxed);
        body.reserve((last + last / 16).max(64 * 1024));
        let mut z = GzipFast::new(body);
        let mut len = 0;
        {
            let mut kept = self.piece.try_lock();
            let mut own = String::new();
            let text = kept.as_deref_mut().unwrap_or(&mut own);
            text.clear();
            text.reserve(piece + piece / 4);
            let mut sink = |s: &str| {
                len += s.len();
                z.write(s.as_bytes()).map_err(prometheus::Error::from)
            };
            let mut pieces = Pieces::new(text, piece, &mut sink);
            self.gather(health, |g| g.write_pieces(&mut pieces))?;
            pieces.flush()?;
            if text.capacity() > 2 * piece {
                text.shrink_to(piece + piece / 4);
            }
        }
        let mut body = z.finish()?;
        self.last_len.store(len, Ordering::Relaxed);
        self.last_gzip_len.store(body.len(), Ordering::Relaxed);
        if body.capacity() > 2 * body.len() + (1 << 20) {
            body.shrink_to(body.len() + body.len() / 16);
        }
        health
            .scrape_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(self.gzipped.lend(body))
    }

    /// Appends the text to `out`, reserving the previous text's length and a sixteenth more first. Observes
    /// `scrape_seconds`.
    pub fn render_into(&self, health: &Health, out: &mut String) -> Result<(), prometheus::Error> {
        let started = Instant::now();
        let last = self.last_len.load(Ordering::Relaxed);
        out.reserve((last + last / 16).max(64 * 1024));
        let from = out.len();
        self.gather(health, |g| g.write_text(out))?;
        self.last_len.store(out.len() - from, Ordering::Relaxed);
        health
            .scrape_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// One gather of the families `/metrics` shows now, as typed data, handed to `f` (it borrows the store's
    /// snapshot, which lives for the call): the registry's families, the store's snapshot at this
    /// exposition's detail, its size gauges. [`Exposition::render`] writes it as text; remote write reads its
    /// samples. CPU-bound like a render, less the text. Built in the buffers this exposition keeps; while
    /// another gather holds them, in buffers of its own. Observes nothing.
    pub fn gather<R>(&self, health: &Health, f: impl FnOnce(&Gathered<'_>) -> R) -> R {
        let registered = health.registry.gather();
        let mut nodes = self.store.snapshot(unix_now_ns());
        apply_export_detail(&mut nodes, self.detail);
        let memory = self.store.memory();
        let sizes = std::mem::take(&mut *self.sizes.lock());
        let mut kept = self.buffers.as_ref().and_then(|b| b.try_lock());
        let buffers = kept.as_deref_mut().map(std::mem::take).unwrap_or_default();
        let gathered = Gathered::sized(&registered, &nodes, Some(&memory), &sizes, buffers);
        *self.sizes.lock() = gathered.sizes();
        let r = f(&gathered);
        if let Some(kept) = kept.as_deref_mut() {
            *kept = gathered.into_buffers();
        }
        r
    }
}

/// The `Content-Type` of [`Exposition::render`]'s output.
pub fn content_type() -> String {
    TextEncoder::new().format_type().to_string()
}

/// Writes the exposition: the families of `registered` (as `Registry::gather` returns them: sorted by name) and
/// the store's families for `nodes` (and its size gauges with `memory`), interleaved by family name; each
/// family's samples in `gather`'s order. Byte for byte what `gather` and `TextEncoder` would write with the
/// store's families collected into the registry.
pub fn write_exposition(
    registered: &[MetricFamily],
    nodes: &[NodeSnapshot],
    memory: Option<&StoreMemory>,
    out: &mut String,
) -> Result<(), prometheus::Error> {
    Gathered::new(registered, nodes, memory).write_text(out)
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
