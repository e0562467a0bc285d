//! The collector's lifecycle: one stop signal that every task watches ([`Shutdown`]), and the tasks started in
//! order and stopped in reverse ([`Tasks`]).
//!
//! Three kinds of task, by how they stop:
//! - a *server* ([`Tasks::spawn_server`]) watches the signal itself and drains (the gRPC and HTTP servers);
//!   if it ends on its own — a failure — it sends the signal, so the whole collector stops;
//! - a *loop* ([`Tasks::spawn_loop`]) is dropped at the signal (periodic passes: nothing to finish);
//! - an adopted task ([`Tasks::adopt`]) ends by itself once what feeds it is gone (the persistence writer
//!   commits what is queued after the last ingest stream ends).
//!
//! [`Tasks::wait`] waits for the signal, then for each task in reverse start order, each at most
//! [`SHUTDOWN_GRACE`] before it is aborted.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

/// How long [`Tasks::wait`] waits for each task after the signal (streams, the final commit).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The stop signal: sent once (sending again is harmless), seen by every receiver.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Sender<bool>);

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown(watch::channel(false).0)
    }

    /// Sends the signal.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// A receiver that reads `true` once the signal was sent (for tasks that watch it themselves).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }

    /// Resolves once the signal was sent (at once if it was already).
    pub async fn triggered(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// The collector's tasks, in start order.
pub struct Tasks {
    shutdown: Shutdown,
    started: Vec<(&'static str, JoinHandle<()>)>,
}

impl Tasks {
    /// No task yet; every task added stops on `shutdown`.
    pub fn new(shutdown: Shutdown) -> Tasks {
        Tasks {
            shutdown,
            started: Vec::new(),
        }
    }

    /// Starts a server: `serve` watches the signal itself; if it ends first, it sends the signal.
    pub fn spawn_server(
        &mut self,
        name: &'static str,
        serve: impl Future<Output = ()> + Send + 'static,
    ) {
        let shutdown = self.shutdown.clone();
        let task = tokio::spawn(async move {
            serve.await;
            if !shutdown.is_triggered() {
                warn!(
                    task = name,
                    "ended before the collector was stopped: stopping the collector"
                );
                shutdown.trigger();
            }
        });
        self.started.push((name, task));
    }

    /// Starts a loop that is dropped at the signal.
    pub fn spawn_loop(
        &mut self,
        name: &'static str,
        run: impl Future<Output = ()> + Send + 'static,
    ) {
        let shutdown = self.shutdown.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = run => {}
                _ = shutdown.triggered() => {}
            }
        });
        self.started.push((name, task));
    }

    /// Takes a task that ends by itself once what feeds it is gone.
    pub fn adopt(&mut self, name: &'static str, task: JoinHandle<()>) {
        self.started.push((name, task));
    }

    /// Waits for the signal, then for every task in reverse start order, each at most [`SHUTDOWN_GRACE`]
    /// (then aborted, and logged).
    pub async fn wait(self) {
        self.shutdown.triggered().await;
        for (name, task) in self.started.into_iter().rev() {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                warn!(task = name, "did not stop within the grace period; aborted");
                abort.abort();
            }
        }
    }

    /// Stops every task at once, in start order, without letting any finish (what a kill does), and sends
    /// the signal for anything that watches it.
    pub fn abort(self) {
        for (_, task) in &self.started {
            task.abort();
        }
        self.shutdown.trigger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn a_failed_server_stops_all_servers_drain_and_loops_are_dropped() {
        let shutdown = Shutdown::new();
        let mut tasks = Tasks::new(shutdown.clone());
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let finished = Arc::new(AtomicUsize::new(0));
        for name in ["first", "second"] {
            let (order, mut rx) = (order.clone(), shutdown.subscribe());
            tasks.spawn_server(name, async move {
                let _ = rx.wait_for(|s| *s).await;
                // Draining takes a while; the grace allows it.
                let ms = if name == "first" { 50 } else { 10 };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                order.lock().push(name);
            });
        }
        let f = finished.clone();
        tasks.spawn_loop("loop", async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                f.fetch_add(1, Ordering::Relaxed);
            }
        });
        // A server that fails stops everything.
        tasks.spawn_server("failing", async {});
        tasks.wait().await;
        assert!(shutdown.is_triggered());
        assert_eq!(*order.lock(), vec!["second", "first"]);
        assert_eq!(finished.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_does_not_stop_is_aborted_after_the_grace() {
        let shutdown = Shutdown::new();
        let mut tasks = Tasks::new(shutdown.clone());
        tasks.adopt("stuck", tokio::spawn(std::future::pending()));
        shutdown.trigger();
        let t0 = tokio::time::Instant::now();
        tasks.wait().await;
        assert_eq!(t0.elapsed(), SHUTDOWN_GRACE);
    }
}
