//! The rates of some of a node's series over the newest second ([`newest_rates`]), read from one walk over the
//! node's head, newest rows first, instead of a walk down each series' head column.
//!
//! Why: a node's snapshot (each scrape's) reads the rate of every link's byte counters, 72 series of a demo
//! node. A column walk finds its series' value in each row through the row's shape's column table (as long as
//! the node's slots, built by the shape's first reader and dropped with the shape's last row): those walks were
//! 17 % of the render thread at 400 demo nodes. One walk over the rows reads each row's slots once for all the
//! series asked for, and no table.

use super::head::Head;
use super::rate::RATE_WINDOW_NS;
use super::series::Series;
use super::ticks::Ticks;

/// Rank of a slot not asked for.
const NOT_ASKED: u32 = u32::MAX;

/// What the walk over the head found of one series asked for: of its samples there, newest first as far as
/// its rate reads them, the first and the last, all that `rate::window_rate` keeps of them (the newest, and
/// where the window starts so far).
#[derive(Default)]
struct Found {
    newest: Option<(i64, u64)>,
    /// The last sample taken after the newest.
    start: Option<(i64, u64)>,
    /// Whether they reach back a whole window from the newest (its rate reads nothing older).
    whole: bool,
}

/// [`Series::rate`] over `NodeState::samples` of each series in `slots` (slots of `series`, whose node holds
/// `head` and `ticks`), in that order; `None` for a slot past the end. The same figures: each series' samples
/// are read newest first as a rate reads them, its head column (from the walk, which keeps what the rate
/// keeps of it) and then, when that does not cover the window, its ring.
pub(super) fn newest_rates(
    series: &[Series],
    slots: &[usize],
    head: &Head,
    ticks: &Ticks,
) -> Vec<Option<f64>> {
    let mut rank = vec![NOT_ASKED; series.len()];
    let mut found: Vec<Found> = Vec::new();
    for &slot in slots {
        if let Some(r) = rank.get_mut(slot) {
            if *r == NOT_ASKED {
                *r = found.len() as u32;
                found.push(Found::default());
            }
        }
    }
    let mut open = found.len();
    head.rows_newest_first(|tick, row_slots, values| {
        // A tick the node no longer holds stamps nothing: its samples are skipped, as a series' samples skip it.
        let Some(t) = ticks.time(tick as u64) else {
            return true;
        };
        // A series takes at most one sample a tick (a reading not newer than the last is refused), so it is
        // in a row at most once.
        for (&slot, &v) in row_slots.iter().zip(values) {
            let r = rank.get(slot as usize).copied().unwrap_or(NOT_ASKED);
            let Some(f) = found.get_mut(r as usize) else {
                continue;
            };
            if f.whole {
                continue;
            }
            // `rate::window_rate` reads on to the first sample a window older than the newest, and stops there.
            match f.newest {
                None => f.newest = Some((t, v)),
                Some((newest, _)) => {
                    f.start = Some((t, v));
                    if t <= newest - RATE_WINDOW_NS {
                        f.whole = true;
                        open -= 1;
                    }
                }
            }
        }
        open > 0
    });
    slots
        .iter()
        .map(|&slot| {
            let s = series.get(slot)?;
            let f = &found[rank[slot] as usize];
            let older = (!f.whole).then(|| {
                s.ring
                    .iter()
                    .rev()
                    .filter_map(|(n, v)| Some((ticks.time(n as u64)?, v)))
            });
            // The newest and the start so far read on as the whole column would: the samples between them
            // moved only the start.
            let head = f.newest.into_iter().chain(f.start);
            s.rate_of(head.chain(older.into_iter().flatten()))
        })
        .collect()
}
