//! Pacing of the periodic passes over the whole fleet (the analysis evaluation, the step engine): a pass runs
//! every `interval`, but never more than [`MAX_DUTY`] of the time — after a pass that took `t`, the next one
//! starts no sooner than `t / MAX_DUTY` after this one started. A pass's cost grows with the fleet; pacing
//! keeps it from crowding out ingest on a small machine (the figures then refresh less often, and say so in
//! their timestamps), while a small fleet keeps the configured interval.

use std::time::Duration;

/// Largest share of wall time one periodic pass may take.
pub const MAX_DUTY: f64 = 0.25;

/// Pause after a pass that took `took`, for a pass every `interval`: `interval - took`, or longer so that the
/// pass takes at most [`MAX_DUTY`] of the time.
pub fn pause_after(interval: Duration, took: Duration) -> Duration {
    let by_interval = interval.saturating_sub(took);
    let by_duty = took.mul_f64(1.0 / MAX_DUTY - 1.0);
    by_interval.max(by_duty)
}

/// Runs `pass` forever: once now, then again after [`pause_after`] its duration. Returns only when `pass`
/// returns `false`.
pub async fn run_paced<F, Fut>(interval: Duration, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        let started = tokio::time::Instant::now();
        if !pass().await {
            return;
        }
        tokio::time::sleep(pause_after(interval, started.elapsed())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cheap_pass_keeps_the_interval_and_a_costly_one_is_spread_out() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(pause_after(s(1), ms(10)), ms(990));
        // 250 ms of a 1 s interval is exactly the duty: no change.
        assert_eq!(pause_after(s(1), ms(250)), ms(750));
        // 400 ms would be 40 %: the next pass waits 1.2 s (one pass per 1.6 s).
        assert_eq!(pause_after(s(1), ms(400)), ms(1200));
        // Longer than the interval itself.
        assert_eq!(pause_after(ms(500), s(2)), s(6));
    }

    #[tokio::test(start_paused = true)]
    async fn run_paced_spaces_passes_by_their_cost() {
        let starts = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let s2 = starts.clone();
        let t0 = tokio::time::Instant::now();
        run_paced(Duration::from_secs(1), move || {
            let s2 = s2.clone();
            async move {
                let n = {
                    let mut v = s2.lock();
                    v.push(t0.elapsed());
                    v.len()
                };
                // The second pass is costly (2 s): the third starts 8 s after the second.
                if n == 2 {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                n < 3
            }
        })
        .await;
        let v = starts.lock().clone();
        assert_eq!(
            v,
            vec![
                Duration::ZERO,
                Duration::from_secs(1),
                Duration::from_secs(9)
            ]
        );
    }
}
