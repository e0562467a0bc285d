//! A list's two middle values found near an earlier median, without a selection: what a kept window's
//! medians need at each evaluation when the window slid by a few values since the last one.
//!
//! Why: a kept window's median sampling interval and its bursts' interior rate were selected at each
//! evaluation (`select_nth_unstable` on ~400 and ~180 values of a demo node's links): a tenth of the kept
//! input's instructions, and its partition mispredicts a branch every other value. A window that slid by a
//! second moves its median by a few ranks: counting the values below and equal to the last median, and
//! keeping the few nearest beyond it, finds the new middle values in two reads of the list without a branch
//! on which side of the median a value lies (the pivot was near enough at 99.5 % of the demo node's
//! evaluations in `measure::analysis_cost`).
//!
//! Contract: [`middles_near`] gives the values a selection gives (each one of the list; floats as their
//! [`f64_key`]s, in [`f64::total_cmp`]'s order, bit for bit), or `None` where they lie more than [`NEAR`]
//! ranks beyond the pivot's (then the caller selects). `tests` compare both on random lists and pivots.

/// Ranks beyond the pivot's the search keeps values for: farther, the caller selects on a copy.
pub const NEAR: usize = 8;

/// Where a rank lies from the pivot: among the values equal to it, or the `j`th beyond it (0: the nearest).
#[derive(Clone, Copy)]
enum Place {
    At,
    Above(usize),
    Below(usize),
}

/// The values nearest beyond the pivot on one side, the nearest first, at most `want` of them.
struct Nearest {
    held: [i64; NEAR],
    len: usize,
    want: usize,
}

impl Nearest {
    fn new(want: usize) -> Nearest {
        Nearest {
            held: [0; NEAR],
            len: 0,
            want,
        }
    }

    /// The farthest value held once `want` are (a value beyond it is not kept), `none` before.
    fn bound(&self, none: i64) -> i64 {
        match self.len.checked_sub(1) {
            Some(k) if self.len == self.want => self.held[k],
            _ => none,
        }
    }

    /// Keeps `x`, nearer than the farthest held (`nearer(a, b)`: `a` comes before `b`), dropping that one
    /// when `want` are held.
    fn keep(&mut self, x: i64, nearer: impl Fn(i64, i64) -> bool) {
        if self.len == self.want {
            self.len -= 1;
        }
        let mut k = self.len;
        while k > 0 && nearer(x, self.held[k - 1]) {
            self.held[k] = self.held[k - 1];
            k -= 1;
        }
        self.held[k] = x;
        self.len += 1;
    }

    /// The `j`th nearest (0: the nearest).
    fn get(&self, j: usize) -> Option<i64> {
        (j < self.len).then(|| self.held[j])
    }
}

/// The `(n - 1) / 2`th and `n / 2`th smallest (0-based: the two middle ranks of an even `n`, the middle one
/// twice of an odd `n`) of the `n` values `values()` yields, found by counting those below and equal to
/// `pivot` (a median of the list as it was a moment ago) and keeping the [`NEAR`] nearest beyond it where a
/// middle rank lies there: the values a selection on a copy gives (`select_nth_unstable` at `n / 2`, and the
/// greatest of those before it). `values` is called once or twice and must yield the same `n` values each
/// time. `None` where `n` is 0 or a middle rank lies more than `NEAR` ranks beyond the values equal to the
/// pivot.
///
/// Each read of the list compares without a branch on the values' order (about half lie on either side of
/// the pivot: a branch on that, as a selection's partition takes, is mispredicted every other value).
pub fn middles_near<I: Iterator<Item = i64>>(
    values: impl Fn() -> I,
    n: usize,
    pivot: i64,
) -> Option<(i64, i64)> {
    if n == 0 {
        return None;
    }
    let (below, equal) = values().fold((0usize, 0usize), |(b, e), x| {
        (b + usize::from(x < pivot), e + usize::from(x == pivot))
    });
    let place = |r: usize| {
        if r < below {
            Place::Below(below - 1 - r)
        } else if r < below + equal {
            Place::At
        } else {
            Place::Above(r - below - equal)
        }
    };
    let (lo, hi) = (place((n - 1) / 2), place(n / 2));
    let (mut up, mut down) = (0, 0);
    for p in [lo, hi] {
        match p {
            Place::Above(j) => up = up.max(j + 1),
            Place::Below(j) => down = down.max(j + 1),
            Place::At => {}
        }
    }
    if up > NEAR || down > NEAR {
        return None;
    }
    let (mut above, mut beneath) = (Nearest::new(up), Nearest::new(down));
    if up > 0 {
        for x in values() {
            if strictly_between(pivot, x, above.bound(i64::MAX)) {
                above.keep(x, |a, b| a < b);
            }
        }
    }
    if down > 0 {
        for x in values() {
            if strictly_between(beneath.bound(i64::MIN), x, pivot) {
                beneath.keep(x, |a, b| a > b);
            }
        }
    }
    let value = |p: Place| match p {
        Place::At => Some(pivot),
        Place::Above(j) => above.get(j),
        Place::Below(j) => beneath.get(j),
    };
    Some((value(lo)?, value(hi)?))
}

/// Whether `lo < x < hi`, in one comparison of distances where `lo < hi` (wrapping: exact over the whole range of `i64`), so
/// that the compiler makes no branch on `x < hi` alone: most values lie on the far side of a pivot, half of
/// them below it, and a branch on that was mispredicted every other value.
fn strictly_between(lo: i64, x: i64, hi: i64) -> bool {
    let from_lo = x.wrapping_sub(lo).wrapping_sub(1) as u64;
    // `lo < hi` holds at every call but the pivot's at `i64::MAX` (then no value lies above).
    lo < hi && from_lo < hi.wrapping_sub(lo).wrapping_sub(1) as u64
}

/// `x` as an integer in [`f64::total_cmp`]'s order (its own key: what `total_cmp` compares).
pub fn f64_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// The value whose [`f64_key`] is `key`.
pub fn f64_of_key(key: i64) -> f64 {
    f64::from_bits((key ^ (((key >> 63) as u64) >> 1) as i64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    /// The middle values as a selection on a copy gives them.
    fn selected<T: Copy>(v: &[T], cmp: impl Fn(&T, &T) -> Ordering) -> (T, T) {
        let mut w = v.to_vec();
        let n = w.len();
        let (before, &mut hi, _) = w.select_nth_unstable_by(n / 2, &cmp);
        let lo = match n % 2 {
            0 => before.iter().copied().max_by(&cmp).unwrap_or(hi),
            _ => hi,
        };
        (lo, hi)
    }

    /// A small deterministic generator (xorshift), so that a failure can be replayed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn gives_the_selected_middles_or_none_on_random_lists_and_pivots() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut found, mut refused) = (0, 0);
        for round in 0..20_000 {
            let n = (rng.next() % 40) as usize + 1;
            // Few distinct values in some lists (ties at the pivot and the middles), many in others.
            let spread = [3, 20, 1_000_000][round % 3];
            let v: Vec<i64> = (0..n).map(|_| (rng.next() % spread) as i64).collect();
            let want = selected(&v, Ord::cmp);
            let pivot = match rng.next() % 3 {
                0 => v[(rng.next() % n as u64) as usize],
                1 => want.1 + (rng.next() % 5) as i64 - 2,
                _ => (rng.next() % spread) as i64,
            };
            match middles_near(|| v.iter().copied(), n, pivot) {
                Some(got) => {
                    assert_eq!(got, want, "{v:?} around {pivot}");
                    found += 1;
                }
                None => refused += 1,
            }
        }
        // Both ways taken: the search is not vacuous, and a far pivot is refused rather than answered.
        assert!(
            found > 10_000 && refused > 100,
            "{found} found, {refused} refused"
        );
    }

    #[test]
    fn floats_in_total_order_give_the_selected_bits() {
        let mut rng = Rng(7);
        for _ in 0..5_000 {
            let n = (rng.next() % 30) as usize + 1;
            let v: Vec<f64> = (0..n)
                .map(|_| match rng.next() % 9 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f64::NAN,
                    _ => (rng.next() % 100) as f64 / 4.0,
                })
                .collect();
            let want = selected(&v, f64::total_cmp);
            let pivot = v[(rng.next() % n as u64) as usize];
            let keys = || v.iter().map(|x| f64_key(*x));
            if let Some(got) = middles_near(keys, n, f64_key(pivot)) {
                let got = (f64_of_key(got.0), f64_of_key(got.1));
                assert_eq!(
                    (got.0.to_bits(), got.1.to_bits()),
                    (want.0.to_bits(), want.1.to_bits()),
                    "{v:?} around {pivot}"
                );
            }
        }
    }

    #[test]
    fn between_is_strict_over_the_whole_range() {
        let edges = [
            i64::MIN,
            i64::MIN + 1,
            -2,
            -1,
            0,
            1,
            2,
            i64::MAX - 1,
            i64::MAX,
        ];
        for lo in edges {
            for x in edges {
                for hi in edges {
                    assert_eq!(
                        strictly_between(lo, x, hi),
                        lo < x && x < hi,
                        "{lo} {x} {hi}"
                    );
                }
            }
        }
    }

    #[test]
    fn far_pivots_and_empty_lists_are_refused() {
        let v: Vec<i64> = (0..100).collect();
        assert_eq!(middles_near(|| v.iter().copied(), 100, 1_000), None);
        assert_eq!(middles_near(|| v.iter().copied(), 100, -5), None);
        assert_eq!(middles_near(|| v.iter().copied(), 100, 52), Some((49, 50)));
        assert_eq!(middles_near(std::iter::empty, 0, 3), None);
    }
}
