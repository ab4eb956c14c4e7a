//! The trainer pool: a `SyncArbiter` of worker threads running jobs as pure functions.
//!
//! Each worker pins libtorch to one intra-op thread, so results do not depend on how many
//! workers there are, and parallelism comes from running clients side by side. A job's result
//! is handed back through a [`Pending`] that the scheduler awaits only when its event is due.

use crate::sim::Pending;
use actix::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::sync::oneshot;

struct Worker;

impl Actor for Worker {
    type Context = SyncContext<Self>;

    fn started(&mut self, _: &mut SyncContext<Self>) {
        tch::set_num_threads(1);
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

/// Handle to the pool. Cheap to clone.
#[derive(Clone)]
pub struct TrainerPool {
    addr: Addr<Worker>,
}

impl TrainerPool {
    /// Starts `threads` workers. Needs a running actix `System`.
    pub fn start(threads: usize) -> Self {
        TrainerPool {
            addr: SyncArbiter::start(threads.max(1), || Worker),
        }
    }

    /// Queues `job` (never blocks: `do_send` ignores mailbox capacity). A panic inside the
    /// job becomes an error result.
    pub fn submit<M: Send + 'static>(
        &self,
        job: impl FnOnce() -> M + Send + 'static,
    ) -> Pending<M> {
        let (tx, rx) = oneshot::channel();
        self.addr.do_send(Job(Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(job)).map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a training job panicked".into())
            });
            let _ = tx.send(result);
        })));
        rx
    }
}
