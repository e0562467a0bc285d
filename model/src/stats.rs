//! Small statistics used by the step engine, the analysis rules and `diagnose`.

/// Median of `v` (sorted in place, NaN ordered last by `total_cmp`); `None` when empty. An even count gives
/// the mean of the two middle values.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median of integers (sorted in place); an even count gives the lower middle plus half the gap, rounded
/// toward the lower value, so the result never overflows. `None` when empty.
pub fn median_i64(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        let (lo, hi) = (v[n / 2 - 1], v[n / 2]);
        lo + ((hi as i128 - lo as i128) / 2) as i64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_even_empty_and_nan() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [f64::NAN, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn integer_median() {
        assert_eq!(median_i64(&mut []), None);
        assert_eq!(median_i64(&mut [5, 1, 3]), Some(3));
        assert_eq!(median_i64(&mut [4, 1, 2, 3]), Some(2));
        assert_eq!(median_i64(&mut [10, 20]), Some(15));
        assert_eq!(median_i64(&mut [i64::MIN, i64::MAX]), Some(-1));
    }
}
