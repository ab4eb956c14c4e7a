//! Assembling a run's shared parts from its plan, in one place for server runs, peer runs and
//! the actors' tests (in the spirit of nexosim's `SimInit`): the jobs' shared context and the
//! trainer pool. Everything was decided by the plan; nothing here can fail on input.

use super::cohort::Dispatch;
use super::job::JobContext;
use super::trainer::TrainerPool;
use crate::algorithms::{Algorithm, Planned};
use crate::plan::Setup;
use crate::records::{DeviceRecord, Record};
use crate::system::{Link, SystemModel};
use std::sync::Arc;

/// What an algorithm's run starts from.
pub(super) struct Started<A: Algorithm> {
    /// The initial global model (every client's and peer's first model).
    pub(super) global: A::Global,
    pub(super) jobs: Arc<JobContext<A>>,
    pub(super) dispatch: Dispatch<A>,
}

/// `planned`'s initial global model, its jobs' context over `setup`, and a trainer pool of
/// `setup.threads` threads. Needs a running actix system.
pub(super) fn start<A: Algorithm>(planned: Planned<A>, setup: &Setup) -> Started<A> {
    let Planned { algorithm, global } = planned;
    let jobs = Arc::new(JobContext::new(algorithm, setup));
    let dispatch = Dispatch::new(
        TrainerPool::start(setup.threads, jobs.training.precision),
        jobs.clone(),
    );
    Started {
        global,
        jobs,
        dispatch,
    }
}

/// Client (or peer) `c`'s device and links as the system model drew them.
pub(super) fn device_record(system: &SystemModel, c: u32) -> Record {
    Record::Device(DeviceRecord {
        client: c,
        samples_per_second: system.samples_per_second(c),
        downlink_mbps: system.bandwidth_mbps(c, Link::Down),
        uplink_mbps: system.bandwidth_mbps(c, Link::Up),
    })
}
