//! The trainer pool: a `SyncArbiter` of worker threads running jobs as pure functions.
//!
//! Each worker pins libtorch to one intra-op thread, so results do not depend on how many
//! workers there are, and parallelism comes from running clients side by side. A job's result
//! is handed back through a [`Pending`] that the scheduler awaits only when its event is due.
//! When a simulation ends with jobs still queued or running (a diverged run stopped early,
//! stragglers cut off by a deadline), [`Drain`] skips the queued ones and waits for the running
//! ones, so no job is still inside libtorch when the process exits.

use crate::settings::Precision;
use crate::sim::Pending;
use actix::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;

struct Worker {
    precision: Precision,
}

impl Actor for Worker {
    type Context = SyncContext<Self>;

    fn started(&mut self, _: &mut SyncContext<Self>) {
        tch::set_num_threads(1);
        crate::models::precision::use_on_this_thread(self.precision);
    }
}

struct Job(Box<dyn FnOnce() + Send>);

impl Message for Job {
    type Result = ();
}

impl Handler<Job> for Worker {
    type Result = ();

    fn handle(&mut self, job: Job, _: &mut SyncContext<Self>) {
        (job.0)()
    }
}

/// Whether queued jobs still run, and how many are running.
#[derive(Default)]
struct Activity {
    cancelled: AtomicBool,
    running: Mutex<usize>,
    idle: Condvar,
}

/// Handle to the pool. Cheap to clone.
#[derive(Clone)]
pub struct TrainerPool {
    addr: Addr<Worker>,
    activity: Arc<Activity>,
}

/// Ends a pool's work when dropped: jobs not yet started are skipped (their results never
/// come), and the drop waits for the running ones.
pub struct Drain(Arc<Activity>);

impl Drop for Drain {
    fn drop(&mut self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        let mut running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        while *running > 0 {
            running = self.0.idle.wait(running).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl TrainerPool {
    /// Starts `threads` workers whose products run in `precision` (`training.precision`).
    /// Needs a running actix `System`.
    pub fn start(threads: usize, precision: Precision) -> Self {
        TrainerPool {
            addr: SyncArbiter::start(threads.max(1), move || Worker { precision }),
            activity: Arc::default(),
        }
    }

    /// A guard that ends this pool's work when the simulation using it is over.
    pub fn drain_on_drop(&self) -> Drain {
        Drain(self.activity.clone())
    }

    /// Queues `job` (never blocks: `do_send` ignores mailbox capacity). A panic inside the
    /// job becomes an error result.
    pub fn submit<M: Send + 'static>(
        &self,
        job: impl FnOnce() -> M + Send + 'static,
    ) -> Pending<M> {
        let (tx, rx) = oneshot::channel();
        self.spawn(move || {
            let result =
                catch_unwind(AssertUnwindSafe(job)).map_err(|panic| panic_message(&*panic));
            let _ = tx.send(result);
        });
        rx
    }

    /// Queues `job`, which reports its own results (a cohort's shard answers each of its
    /// jobs); it is skipped if the simulation is over before it starts. `job` must not panic.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let activity = self.activity.clone();
        self.addr.do_send(Job(Box::new(move || {
            {
                let mut running = activity.running.lock().unwrap_or_else(|e| e.into_inner());
                if activity.cancelled.load(Ordering::SeqCst) {
                    return; // the simulation is over: nobody awaits this result
                }
                *running += 1;
            }
            job();
            let mut running = activity.running.lock().unwrap_or_else(|e| e.into_inner());
            *running -= 1;
            activity.idle.notify_all();
        })));
    }
}

/// What a panic carried, as an error message.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a training job panicked".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn drain_skips_queued_jobs_and_waits_for_the_running_one() {
        actix::System::new().block_on(async {
            let pool = TrainerPool::start(1, Precision::Fp32);
            let drain = pool.drain_on_drop();
            let (started, finished) =
                (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let pending: Vec<_> = (0..4)
                .map(|_| {
                    let (s, f) = (started.clone(), finished.clone());
                    pool.submit(move || {
                        s.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        f.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            // The arbiter hands jobs to the workers: let it run until the first has started.
            while started.load(Ordering::SeqCst) == 0 {
                actix::clock::sleep(Duration::from_millis(1)).await;
            }
            drop(drain); // returns once the running job is done
            assert_eq!(finished.load(Ordering::SeqCst), 1);
            let mut outcomes = Vec::new();
            for p in pending {
                outcomes.push(matches!(p.await, Ok(Ok(()))));
            }
            assert_eq!(
                outcomes,
                [true, false, false, false],
                "queued jobs never report"
            );
            assert_eq!(started.load(Ordering::SeqCst), 1);
        });
    }
}
