//! How a step's AllReduce is laid out in bursts: one burst after compute (the square wave), or — the
//! `overlap` variant — gradient buckets spread over the second half of compute.
//!
//! **One burst** (default): it starts `overlap` before the last rank finishes compute and lasts as long as
//! the slowest link needs for its bytes (`link`).
//!
//! **Buckets** (`overlap`): DDP reduces the gradients in [`OVERLAP_BUCKETS`] buckets as backward produces
//! them. The second half of compute (the slowest node's) is cut into that many equal slots; bucket `i`
//! starts at its slot's start and lasts the longer of [`PACED_PERMILLE`] of the slot (backward produces
//! gradients no faster) and its share of the link time (`link / buckets`). Defaults: 4 slots of 37.5 ms
//! from 150 ms, each bucket 33.75 ms: the link is busy 135 ms of the 300 ms step (45 %) at 3.21 GB/s per
//! HCA, and nothing is exposed — the period is the compute. When the buckets need longer than their
//! slots (a slow link) they queue back to back and the tail is exposed. When the job does not overlap
//! (`no-overlap`) the buckets run back to back after compute.

/// Gradient buckets per step in the `overlap` variant.
pub const OVERLAP_BUCKETS: u64 = 4;
/// Share of its slot a bucket's burst lasts at least, in permille, in the `overlap` variant.
pub const PACED_PERMILLE: u64 = 900;

/// The bursts of a nominal step (nanoseconds from its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BurstLayout {
    /// Start of the first burst.
    pub(crate) first_ns: u64,
    /// Bursts per step.
    pub(crate) buckets: u64,
    /// Between burst starts.
    pub(crate) spacing_ns: u64,
    /// Each burst's duration.
    pub(crate) bucket_ns: u64,
    /// Each burst's duration in a step where the flapping port is down.
    pub(crate) flapped_bucket_ns: u64,
}

/// What the layout depends on (nanoseconds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepPhases {
    /// When the slowest rank finishes compute (host phase + compute).
    pub(crate) ready_ns: u64,
    /// The slowest rank's compute.
    pub(crate) compute_ns: u64,
    /// How long before `ready` the AllReduce may start (0: not overlapped).
    pub(crate) overlap_ns: u64,
    /// Time the slowest link needs for a step's bytes.
    pub(crate) link_ns: u64,
    /// The same in a step where the flapping port is down.
    pub(crate) flapped_link_ns: u64,
}

impl BurstLayout {
    /// One burst per step, `overlap` before `ready`.
    pub(crate) fn single(p: &StepPhases) -> BurstLayout {
        BurstLayout {
            first_ns: p.ready_ns - p.overlap_ns,
            buckets: 1,
            spacing_ns: 0,
            bucket_ns: p.link_ns,
            flapped_bucket_ns: p.flapped_link_ns,
        }
    }

    /// [`OVERLAP_BUCKETS`] buckets over the second half of compute; `margin_ns` is kept free after each
    /// burst (the jitter's room).
    pub(crate) fn overlapped(p: &StepPhases, margin_ns: u64) -> BurstLayout {
        let n = OVERLAP_BUCKETS;
        let share = |link: u64| link.div_ceil(n);
        if p.overlap_ns == 0 {
            let (b, f) = (share(p.link_ns), share(p.flapped_link_ns));
            return BurstLayout {
                first_ns: p.ready_ns,
                buckets: n,
                spacing_ns: b.max(f) + margin_ns,
                bucket_ns: b,
                flapped_bucket_ns: f,
            };
        }
        let half = p.compute_ns / 2;
        let slot = half / n;
        let paced = slot / 1000 * PACED_PERMILLE;
        let (b, f) = (
            share(p.link_ns).max(paced),
            share(p.flapped_link_ns).max(paced),
        );
        BurstLayout {
            first_ns: p.ready_ns - half,
            buckets: n,
            spacing_ns: slot.max(b.max(f) + margin_ns),
            bucket_ns: b,
            flapped_bucket_ns: f,
        }
    }

    /// The longest burst, nominal.
    pub(crate) fn longest_ns(&self) -> u64 {
        self.bucket_ns.max(self.flapped_bucket_ns)
    }

    /// The nominal step: long enough for compute and for the last burst with `margin_ns` to spare.
    pub(crate) fn period_ns(&self, ready_ns: u64, margin_ns: u64) -> u64 {
        let last = self.first_ns + (self.buckets - 1) * self.spacing_ns;
        ready_ns.max(last + self.longest_ns() + margin_ns)
    }

    /// From the first burst's start to the last one's end, nominal (not flapped).
    pub(crate) fn span_ns(&self) -> u64 {
        (self.buckets - 1) * self.spacing_ns + self.bucket_ns
    }
}
