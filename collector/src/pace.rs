//! Pacing of the periodic passes over the whole fleet (the analysis evaluation, the step engine): a pass runs
//! every `interval`, but never more than [`MAX_DUTY`] of the time — after a pass that cost `t`, the next one
//! starts no sooner than `t / MAX_DUTY` after this one started. A pass's cost grows with the fleet; pacing
//! keeps it from crowding out ingest on a small machine (the figures then refresh less often, and say so in
//! their timestamps), while a small fleet keeps the configured interval.
//!
//! What a pass costs is its thread's CPU time when the thread runs under `SCHED_IDLE` ([`Paced::Ran`]): such a
//! thread gets only what the ingest leaves, so on a busy core its wall time measures the ingest, not the pass.
//! Charged by wall time, a pass over 400 demo nodes on one core took 4 s of wall time for 0.8 s of CPU and
//! waited 12 s more: the rules ran every 18 s, the step engine once in 90 s (BENCHMARKS.md, "Fresh findings
//! under load"). Where the policy was refused (a thread at a nice value competes with the ingest) and where
//! the OS gives no thread CPU time, the wall time is charged.
//!
//! Priority: each periodic pass runs on a thread of its own ([`PassThread`]) under Linux's `SCHED_IDLE` policy,
//! so that on a busy core the ingest (acks within a second, or agents resend) comes first and the passes take
//! only what it leaves: a waking ingest thread preempts an idle-policy thread at once. A nice value is not
//! enough: measured at 800 demo nodes on one core, two nice-10 pass threads took half of the core (every brief
//! wait of the ingest for its sockets handed them a time slice) and the ingest thread waited for the CPU 12 % of
//! the time; under `SCHED_IDLE` it waited 0 %. Where the policy is refused, the thread is lowered to nice
//! [`PASS_NICE`] instead.
//!
//! Work that someone waits for (a `/metrics` scrape, a remote-write gather: 1.4–1.9 s of CPU at 2,000 demo
//! nodes) runs on such a thread at a share of the core ([`export_thread`], `export_share`): not at
//! the ingest's priority, which had fallen seconds behind during every scrape at 600 demo nodes on one core, and
//! not at the lowest (nice 19), where a scrape at 2,000 demo nodes on a full core took 32–42 s, past
//! Prometheus' default timeout: a saturated collector then lost the metrics that say it is saturated.
//!
//! Work that must keep pace with a full core has a share of it instead ([`Yield::Share`]): the rules'
//! evaluation (`analysis_share`, also held to it by a [`Budget`]) and the step engine (`steps_share`, its
//! passes charged their CPU time). Under `SCHED_IDLE` neither ran at all once the ingest filled the core (no
//! evaluation in 90 s at 800 demo nodes, no step pass in 30 s at 2,000).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

/// Largest share of the time one periodic pass may cost (its CPU time under `SCHED_IDLE`, else its wall time).
pub const MAX_DUTY: f64 = 0.25;

/// Pause after a pass that took `wall` and cost `cost` (its wall time, or its CPU time under `SCHED_IDLE`),
/// for a pass every `interval`: `interval - wall`, or longer so that the pass costs at most [`MAX_DUTY`] of
/// the time.
pub fn pause_after(interval: Duration, wall: Duration, cost: Duration) -> Duration {
    let by_interval = interval.saturating_sub(wall);
    let by_duty = cost.mul_f64(1.0 / MAX_DUTY - 1.0);
    by_interval.max(by_duty)
}

/// What one pass of [`run_paced`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paced {
    /// It ran; `charged` is its cost when not its wall time (see the module's doc: [`PassThread::run_charged`]).
    Ran { charged: Option<Duration> },
    /// The passes end.
    Stop,
}

/// Runs `pass` forever: once now, then again after [`pause_after`] its cost (what it says it was charged, else
/// its wall time). Returns only when `pass` returns [`Paced::Stop`].
pub async fn run_paced<F, Fut>(interval: Duration, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Paced>,
{
    loop {
        let started = tokio::time::Instant::now();
        let Paced::Ran { charged } = pass().await else {
            return;
        };
        let wall = started.elapsed();
        tokio::time::sleep(pause_after(interval, wall, charged.unwrap_or(wall))).await;
    }
}

/// A share of a core, in CPU time: credit accrues at `share` CPU seconds per second of wall time, up to one
/// `window`'s worth; work charges what it cost. The analysis evaluates while it has credit and then waits for
/// more ([`Budget::wait`]): a guaranteed share at the ingest's priority, where a pass under `SCHED_IDLE` got
/// only what the ingest left.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    share: f64,
    /// Most credit held, CPU seconds.
    cap: f64,
    /// CPU seconds that may still be spent (negative after an overdraft).
    credit: f64,
    refilled: std::time::Instant,
}

impl Budget {
    /// `share` (0..=1) of a core, at most one `window`'s worth held; starts full.
    pub fn new(share: f64, window: Duration) -> Budget {
        let cap = share.clamp(0.0, 1.0) * window.as_secs_f64();
        Budget {
            share: share.clamp(0.0, 1.0),
            cap,
            credit: cap,
            refilled: std::time::Instant::now(),
        }
    }

    /// Adds the credit earned since the last refill (up to the cap).
    pub fn refill(&mut self, now: std::time::Instant) {
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * self.share;
        self.credit = (self.credit + earned).min(self.cap);
        self.refilled = now;
    }

    /// Whether there is credit left to start more work.
    pub fn available(&self) -> bool {
        self.credit > 0.0
    }

    /// Charges `cost` of CPU time (the credit may go negative: work started with credit is finished).
    pub fn charge(&mut self, cost: Duration) {
        self.credit -= cost.as_secs_f64();
    }

    /// How long until there is credit again (zero while there is).
    pub fn wait(&self) -> Duration {
        if self.credit > 0.0 || self.share <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-self.credit / self.share)
    }
}

/// The nice value at which a thread gets `share` (0..=1) of a core against one busy thread at the ingest's
/// nice 0: the scheduler weighs nice n as 1024 / 1.25ⁿ, so a share s wants a weight of 1024 · s / (1 − s). A
/// quarter is nice 5 (weight 335 against 1,024: 25 %), 0.4 nice 2 (655: 39 %), the nearest; half or more the ingest's own
/// 0 (never above it); at most 19.
pub fn nice_for_share(share: f64) -> i32 {
    if share >= 0.5 {
        return 0;
    }
    let s = share.max(1e-3);
    (((1.0 - s) / s).ln() / 1.25f64.ln())
        .round()
        .clamp(0.0, 19.0) as i32
}

/// The nice value of the passes' threads where `SCHED_IDLE` is refused (0 is the ingest's; 19 the lowest).
pub const PASS_NICE: i32 = 10;

/// Starts a thread for work someone waits for (a `/metrics` render, a remote-write gather) at `share` of a
/// core against a busy ingest ([`Yield::Share`]: nice 4 for the default 0.3). Such a thread takes locks
/// others need (a node's while it copies the node, the step history's read lock): a thread that waits for one
/// leaves the core it shared with the holder, which then runs; the wait is the copy and at most a scheduler
/// slice. `None` (logged) where no thread could be started: [`run_on`] then uses tokio's blocking pool, at the
/// ingest's priority.
pub fn export_thread(name: &str, share: f64) -> Option<PassThread> {
    PassThread::start_with(name, Yield::Share(share))
        .map_err(|e| tracing::warn!(error = %e, name, "no thread of its own; on the blocking pool"))
        .ok()
}

/// Runs `f` on `thread`, or on tokio's blocking pool without one; a panic or a lost thread is the error.
pub async fn run_on<T: Send + 'static>(
    thread: Option<&PassThread>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match thread {
        Some(t) => t.run(f).await.map_err(|e| e.to_string()),
        None => tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// How a [`PassThread`] gives way to the ingest on a busy core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Yield {
    /// `SCHED_IDLE` (nice [`PASS_NICE`] where refused): only what the ingest leaves. For the periodic passes,
    /// which may come late.
    Idle,
    /// A nice value above the ingest's 0: the ingest comes first, yet the thread keeps a share of a full core
    /// (nice 19: about 1.5 %) and all that the ingest leaves.
    Nice(i32),
    /// A share (0..=1) of a core guaranteed against one busy ingest thread: the nice value
    /// [`nice_for_share`] gives, with the thread's passes charged their CPU time
    /// ([`PassThread::run_charged`]). For a periodic pass that must not starve on a full core (the step
    /// engine): charged its wall time, it would be paced further apart the busier the core.
    Share(f64),
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs one pass at a time at a priority below the ingest's (see the module's doc). It ends when
/// dropped.
pub struct PassThread {
    jobs: mpsc::Sender<Job>,
    /// Whether its passes are charged their CPU time: under `SCHED_IDLE`, or at a [`Yield::Share`] (false at
    /// a [`Yield::Nice`], asked for or taken where the policy was refused).
    charge_cpu: bool,
}

/// A pass that panicked on a [`PassThread`]; its message.
#[derive(Debug, thiserror::Error)]
#[error("pass panicked: {0}")]
pub struct PassPanicked(pub String);

impl PassThread {
    /// Starts the thread under `SCHED_IDLE`, named `name` (as `ps -L` and `top -H` show it).
    pub fn start(name: &str) -> std::io::Result<PassThread> {
        PassThread::start_with(name, Yield::Idle)
    }

    /// Starts the thread at `priority`, named `name` (waits for the thread to have set it: microseconds).
    pub fn start_with(name: &str, priority: Yield) -> std::io::Result<PassThread> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (set_tx, set_rx) = mpsc::channel::<bool>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _ = set_tx.send(lower_priority(priority));
                while let Ok(job) = rx.recv() {
                    job();
                }
            })?;
        let idle = set_rx.recv().unwrap_or(false);
        let charge_cpu = idle || matches!(priority, Yield::Share(_));
        Ok(PassThread { jobs, charge_cpu })
    }

    /// [`PassThread::run`], with what the pass is charged for pacing: its thread's CPU time under
    /// `SCHED_IDLE` or at a [`Yield::Share`], `None` (its wall time) otherwise or where the OS does not say
    /// ([`Paced::Ran`]).
    pub async fn run_charged<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<(T, Paced), PassPanicked> {
        let charge_cpu = self.charge_cpu;
        let (out, cpu_ns) = self
            .run(move || {
                let before = charge_cpu.then(thread_cpu_ns).flatten();
                let out = f();
                let after = before.and(thread_cpu_ns());
                (out, before.zip(after).map(|(b, a)| a.saturating_sub(b)))
            })
            .await?;
        Ok((
            out,
            Paced::Ran {
                charged: cpu_ns.map(Duration::from_nanos),
            },
        ))
    }

    /// Runs `f` on the thread and waits for it; a panic in `f` is caught and returned as [`PassPanicked`]
    /// (the thread goes on).
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PassPanicked> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let out = catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
                let msg = e
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                PassPanicked(msg)
            });
            let _ = tx.send(out);
        });
        self.jobs
            .send(job)
            .map_err(|_| PassPanicked("the pass thread is gone".into()))?;
        rx.await
            .map_err(|_| PassPanicked("the pass thread is gone".into()))?
    }
}

/// CPU time the calling thread has run, nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: the scheduler's runtime of the
/// thread, what `/proc/thread-self/schedstat` starts with, without a file to open and parse); `None` where the
/// clock is refused. What a pass under `SCHED_IDLE` is charged, and the passes' CPU metric
/// (`telemetry::Passes`).
pub fn thread_cpu_ns() -> Option<u64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer, a live local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(t.tv_sec).ok()?;
    let nanos = u64::try_from(t.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// Puts the calling thread under `SCHED_IDLE` (Linux: the policy is per thread; lowered to nice [`PASS_NICE`]
/// where that is refused) or at the nice value of `priority`. It only ever lowers: a thread already nicer than
/// asked (the collector started under `nice -n 10`) keeps its value, even where privileges would allow raising
/// it. A failure is logged and the work runs at the priority it has. Returns whether the thread is under
/// `SCHED_IDLE`.
fn lower_priority(priority: Yield) -> bool {
    let asked = match priority {
        Yield::Nice(n) => n,
        Yield::Share(share) => nice_for_share(share),
        Yield::Idle => {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `sched_setscheduler` reads `param`, a live local, and changes only the calling thread's
            // (pid 0) scheduling attributes.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
            if rc == 0 {
                return true;
            }
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_IDLE refused; nice instead");
            PASS_NICE
        }
    };
    let nice = asked.max(current_nice());
    // SAFETY: `gettid` and `setpriority` take no pointers; this changes the calling thread's nice value only.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), nice,
            "could not lower the thread's priority");
    }
    false
}

/// The calling thread's scheduling policy (Linux), for tests.
#[cfg(test)]
fn current_policy() -> i32 {
    // SAFETY: takes no pointers; reads the calling thread's policy.
    unsafe { libc::sched_getscheduler(0) }
}

/// The calling thread's nice value (Linux). `getpriority` cannot fail for the calling thread's own id.
fn current_nice() -> i32 {
    // SAFETY: `gettid` and `getpriority` take no pointers; this reads the calling thread's nice value.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice value for a share gives about that share against one busy thread at nice 0.
    #[test]
    fn a_share_of_a_core_is_the_nice_value_whose_weight_gives_it() {
        let weight = |nice: i32| 1024.0 / 1.25f64.powi(nice);
        assert_eq!(nice_for_share(0.25), 5);
        assert_eq!(nice_for_share(0.4), 2);
        assert_eq!(nice_for_share(0.5), 0);
        assert_eq!(nice_for_share(1.0), 0);
        assert_eq!(nice_for_share(0.001), 19);
        for share in [0.05, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45] {
            let w = weight(nice_for_share(share));
            let got = w / (w + 1024.0);
            assert!((got / share - 1.0).abs() < 0.13, "{share}: {got}");
        }
    }

    #[test]
    fn a_budget_holds_work_to_its_share_of_a_core() {
        let t0 = std::time::Instant::now();
        let mut b = Budget::new(0.25, Duration::from_secs(1));
        assert!(b.available() && b.wait().is_zero());
        // 0.4 s of work against 0.25 s of credit: 0.15 s overdrawn, 0.6 s of wall time to earn back.
        b.charge(Duration::from_millis(400));
        assert!(!b.available());
        assert!(
            (b.wait().as_secs_f64() - 0.6).abs() < 1e-9,
            "{:?}",
            b.wait()
        );
        b.refilled = t0;
        b.refill(t0 + Duration::from_millis(600));
        assert!(b.credit.abs() < 1e-9 && !b.available());
        // Credit never exceeds one window's worth.
        b.refill(t0 + Duration::from_secs(60));
        assert!((b.credit - 0.25).abs() < 1e-9);
    }

    #[test]
    fn thread_cpu_time_grows_with_work_and_not_with_sleep() {
        let t0 = thread_cpu_ns().expect("the thread CPU clock");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let t1 = thread_cpu_ns().unwrap();
        assert!(t1 > t0, "{t0} then {t1}");
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_ns().unwrap() - t1;
        assert!(slept < 20_000_000, "{slept} ns of CPU while asleep");
    }

    #[test]
    fn a_cheap_pass_keeps_the_interval_and_a_costly_one_is_spread_out() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(pause_after(s(1), ms(10), ms(10)), ms(990));
        // 250 ms of a 1 s interval is exactly the duty: no change.
        assert_eq!(pause_after(s(1), ms(250), ms(250)), ms(750));
        // 400 ms would be 40 %: the next pass waits 1.2 s (one pass per 1.6 s).
        assert_eq!(pause_after(s(1), ms(400), ms(400)), ms(1200));
        // Longer than the interval itself.
        assert_eq!(pause_after(ms(500), s(2), s(2)), s(6));
        // 2 s of wall time for 100 ms of CPU: the interval is over, the duty allows the next pass at once.
        assert_eq!(pause_after(s(1), s(2), ms(100)), ms(300));
        // 400 ms of CPU in 600 ms of wall time: 1.2 s more, as for 400 ms of wall time.
        assert_eq!(pause_after(s(1), ms(600), ms(400)), ms(1200));
    }

    #[tokio::test]
    async fn a_pass_thread_runs_at_lower_priority_and_survives_a_panic() {
        let (before, policy_before) = (current_nice(), current_policy());
        let t = PassThread::start("pass-test").expect("thread");
        let (policy, nice, name) = t
            .run(|| {
                (
                    current_policy(),
                    current_nice(),
                    std::thread::current().name().map(String::from),
                )
            })
            .await
            .expect("ran");
        // SCHED_IDLE; or, where a sandbox refuses it, PASS_NICE (or lower still when the tests themselves run
        // at a lower priority).
        assert!(
            policy == libc::SCHED_IDLE || nice == PASS_NICE.max(before),
            "policy {policy}, nice {nice} (before: {before})"
        );
        assert_eq!(name.as_deref(), Some("pass-test"));
        // The caller's own priority and policy are untouched.
        assert_eq!(current_nice(), before);
        assert_eq!(current_policy(), policy_before);
        let e = t.run(|| panic!("boom")).await.unwrap_err();
        assert_eq!(e.to_string(), "pass panicked: boom");
        assert_eq!(t.run(|| 7).await.expect("after the panic"), 7);
    }

    #[tokio::test]
    async fn a_nice_thread_keeps_the_normal_policy_at_its_nice_value() {
        let (before, policy_before) = (current_nice(), current_policy());
        let t = PassThread::start_with("nice-test", Yield::Nice(7)).expect("thread");
        let (policy, nice) = t
            .run(|| (current_policy(), current_nice()))
            .await
            .expect("ran");
        // The caller's policy (a new thread inherits it), not SCHED_IDLE.
        assert_eq!(policy, policy_before);
        // Passes are only ever made nicer: a test run already nicer than 7 (`nice -n 10`) stays where it is,
        // root included (root may lower a nice value; the pass thread must not).
        assert_eq!(nice, 7.max(before));
        assert_eq!(current_nice(), before);
    }

    #[tokio::test]
    async fn an_export_thread_runs_at_its_share_under_the_normal_policy() {
        let policy_before = current_policy();
        let t = export_thread("export-test", 0.2).expect("thread");
        let (policy, nice) = run_on(Some(&t), || (current_policy(), current_nice()))
            .await
            .expect("ran");
        // Never SCHED_IDLE (a full core would starve a scrape); nice 6 for a fifth, or nicer where the
        // process already was.
        assert_eq!(policy, policy_before);
        assert_eq!(nice, 6.max(current_nice()));
    }

    /// When three passes of [`run_paced`] every second start, the second taking 2 s of wall time, each pass
    /// charged `charged` (paused time: the clock advances only by the sleeps).
    async fn starts_of_three_passes(charged: Option<Duration>) -> Vec<Duration> {
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
                if n == 2 {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                if n < 3 {
                    Paced::Ran { charged }
                } else {
                    Paced::Stop
                }
            }
        })
        .await;
        let v = starts.lock().clone();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_charged_less_than_its_wall_time_is_paced_by_its_charge() {
        // 2 s of wall time for 100 ms of CPU (a pass under SCHED_IDLE on a busy core): the next one starts 300 ms
        // after it (its duty), not 6 s after it as a pass charged its wall time would.
        let secs = |s: f64| Duration::from_secs_f64(s);
        assert_eq!(
            starts_of_three_passes(Some(Duration::from_millis(100))).await,
            vec![secs(0.0), secs(1.0), secs(3.3)]
        );
    }

    #[tokio::test]
    async fn a_pass_is_charged_its_cpu_time_under_sched_idle_or_a_share() {
        let busy = || {
            let t = std::time::Instant::now();
            let mut x = 0u64;
            while t.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        };
        // What a pass on `t` is charged: its CPU time where `cpu` (at most the 30 ms of wall time the loop
        // ran, less when the core was shared), else none (its wall time).
        let charged_on = |t: PassThread, cpu: bool| async move {
            let (_, paced) = t.run_charged(busy).await.expect("ran");
            let Paced::Ran { charged } = paced else {
                panic!("{paced:?}")
            };
            if cpu && thread_cpu_ns().is_some() {
                let c = charged.expect("charged its CPU time");
                assert!(
                    c > Duration::ZERO && c <= Duration::from_millis(40),
                    "{c:?}"
                );
            } else {
                assert_eq!(charged, None);
            }
            t
        };
        let idle = PassThread::start("charge-idle").expect("thread");
        let under_idle = idle.run(current_policy).await.expect("ran") == libc::SCHED_IDLE;
        charged_on(idle, under_idle).await;
        let nice = PassThread::start_with("charge-nice", Yield::Nice(7)).expect("thread");
        charged_on(nice, false).await;
        let share = PassThread::start_with("charge-share", Yield::Share(0.1)).expect("thread");
        let share = charged_on(share, true).await;
        // At its share's nice value (10 for a tenth), or nicer where the process already was.
        assert!(share.run(current_nice).await.expect("ran") >= nice_for_share(0.1));
    }

    #[tokio::test(start_paused = true)]
    async fn run_paced_spaces_passes_by_their_cost() {
        // The second pass is costly (2 s) and charged its wall time: the third starts 8 s after the second.
        assert_eq!(
            starts_of_three_passes(None).await,
            vec![
                Duration::ZERO,
                Duration::from_secs(1),
                Duration::from_secs(9)
            ]
        );
    }
}
