//! The server's state where a run is saved, written into its checkpoint and given back to a
//! server that resumes the run ([`super::super::checkpoint`]): the global model, the jobs in
//! flight with the models they started from, the updates the round policy holds, and what the
//! server has counted and learned so far; the rest is the scenario's. Each distinct model is
//! saved once (jobs started together share theirs), and shared again on resume.
//!
//! This room must not save what the scenario decides (it is built again from it), nor change
//! a value it saves: a resumed server holds the same bits.

use super::downlink::Downlink;
use super::{Core, Held, InFlight, Ledger, Server};
use crate::actors::checkpoint::{decode, encode};
pub(super) use crate::actors::checkpoint::{ModelTable as Models, SavedModels};
use crate::actors::job::JobContext;
use crate::algorithms::Algorithm;
use crate::records::JobOutcome;
use crate::sim::{SimDuration, SimError, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a round policy keeps, where the run can be saved.
#[derive(Serialize, Deserialize)]
pub(super) enum PolicyState<U> {
    /// Synchronous rounds between two rounds: the last round's sampled clients, and the
    /// stragglers' updates held for the next aggregation.
    Synchronous {
        selected: Vec<u32>,
        late: Vec<SavedHeld<U>>,
    },
    /// FedBuff: the updates waiting for the next aggregation, the jobs started so far, and
    /// when a wake-up is scheduled.
    Fedbuff {
        buffer: Vec<SavedHeld<U>>,
        jobs_started: u64,
        wake_at: Option<SimTime>,
    },
}

/// A [`Held`] update, its base as an index into the saved models.
#[derive(Serialize, Deserialize)]
pub(super) struct SavedHeld<U> {
    client: u32,
    update: U,
    base: u32,
    staleness: u32,
    clipped: bool,
}

/// An [`InFlight`] job of `client`, its base as an index into the saved models.
#[derive(Serialize, Deserialize)]
struct SavedJob {
    client: u32,
    round: u32,
    base: u32,
    sent: SimTime,
    download: SimDuration,
    late: Option<JobOutcome>,
    reported_loss: Option<f64>,
}

impl<A: Algorithm> Held<A> {
    /// The held update as a checkpoint saves it (read back where it was spilled).
    pub(super) fn saved(
        &self,
        models: &mut Models<A::Global>,
    ) -> Result<SavedHeld<A::Update>, SimError> {
        let update = self.update.clone().into_inner().map_err(|e| {
            SimError::JobFailed(format!(
                "reading client {}'s update for a checkpoint: {e}",
                self.client
            ))
        })?;
        Ok(SavedHeld {
            client: self.client,
            update,
            base: models.index(&self.base),
            staleness: self.staleness,
            clipped: self.clipped,
        })
    }

    /// The update a checkpoint saved, kept as the run keeps updates of its size.
    pub(super) fn from_saved(
        saved: SavedHeld<A::Update>,
        models: &SavedModels<A::Global>,
        jobs: &JobContext<A>,
    ) -> Result<Self, SimError> {
        Ok(Held {
            client: saved.client,
            update: jobs.keep(saved.update),
            base: models.get(saved.base)?,
            staleness: saved.staleness,
            clipped: saved.clipped,
        })
    }
}

/// The server's [`Core`] where the run is saved, less what the scenario decides.
#[derive(Serialize, Deserialize)]
struct CoreState<G, U> {
    /// The global model first, then every other model a job or a held update started from.
    models: Vec<G>,
    round: u32,
    ledger: Ledger,
    in_flight: Vec<SavedJob>,
    /// Under `compression.downlink`: the clients' copy, the bytes of its moves and the
    /// version each client holds.
    downlink: Option<(G, Vec<u64>, BTreeMap<u32, u32>)>,
    policy: PolicyState<U>,
}

/// Asks the server for [`Server::saved`].
pub(in crate::actors) struct SaveState<G>(std::marker::PhantomData<fn() -> G>);

impl<G> SaveState<G> {
    pub fn new() -> Self {
        SaveState(std::marker::PhantomData)
    }
}

/// The server's state where it can be saved: the round under way (or about to start), the
/// state encoded, and the global model (which the clients' evaluations in flight must have
/// started from).
pub(in crate::actors) struct SavedServer<G> {
    pub round: u32,
    pub bytes: Vec<u8>,
    pub global: Arc<G>,
}

impl<G: 'static> actix::Message for SaveState<G> {
    type Result = Result<Option<SavedServer<G>>, SimError>;
}

impl<A: Algorithm> actix::Handler<SaveState<A::Global>> for Server<A> {
    type Result = Result<Option<SavedServer<A::Global>>, SimError>;

    fn handle(&mut self, _: SaveState<A::Global>, _: &mut actix::Context<Self>) -> Self::Result {
        self.saved()
    }
}

/// What a resumed server hands the run: the global model (what evaluations in flight started
/// from) and the model of each client's job in flight, by client (what training orders on
/// their way, and the jobs started again, carry).
pub(in crate::actors) struct Restored<G> {
    pub global: Arc<G>,
    pub job_models: BTreeMap<u32, Arc<G>>,
}

impl<A: Algorithm> Server<A> {
    /// The server's state, encoded, with the round under way, where it can be saved (no
    /// evaluation gathering, and the round policy between rounds or, FedBuff, anywhere).
    fn saved(&self) -> Result<Option<SavedServer<A::Global>>, SimError> {
        let core = &self.core;
        if !core.novelty_shares.is_empty() {
            return Ok(None);
        }
        let mut models = Models::new();
        models.index(&core.global);
        let Some(policy) = self.rounds.saved(&mut models)? else {
            return Ok(None);
        };
        let in_flight = (core.in_flight.jobs.iter())
            .map(|(&client, job)| SavedJob {
                client,
                round: job.round,
                base: models.index(&job.base),
                sent: job.sent,
                download: job.download,
                late: job.late,
                reported_loss: job.reported_loss,
            })
            .collect();
        let state = CoreState {
            models: models.models().iter().map(|m| (**m).clone()).collect(),
            round: core.round,
            ledger: core.ledger.clone(),
            in_flight,
            downlink: (core.downlink.as_ref()).map(Downlink::saved),
            policy,
        };
        Ok(Some(SavedServer {
            round: core.round + 1,
            bytes: encode(&state),
            global: core.global.clone(),
        }))
    }

    /// Gives a server built from the scenario the state [`Server::saved`] encoded.
    pub(in crate::actors) fn restore(
        &mut self,
        bytes: &[u8],
    ) -> Result<Restored<A::Global>, SimError> {
        let state: CoreState<A::Global, A::Update> = decode(bytes, "the server's state")?;
        let models = SavedModels(state.models.into_iter().map(Arc::new).collect());
        let core: &mut Core<A> = &mut self.core;
        core.global = models.get(0)?;
        core.round = state.round;
        core.ledger = state.ledger;
        let mut bases = BTreeMap::new();
        for job in state.in_flight {
            let base = models.get(job.base)?;
            bases.insert(job.client, base.clone());
            let job_in_flight = InFlight {
                round: job.round,
                base,
                sent: job.sent,
                download: job.download,
                late: job.late,
                reported_loss: job.reported_loss,
            };
            core.in_flight.insert(job.client, job_in_flight);
        }
        match (&mut core.downlink, state.downlink) {
            (Some(downlink), Some(saved)) => downlink.restore(saved),
            (None, None) => {}
            _ => return Err(mismatch("compression.downlink")),
        }
        let jobs = core.cfg.algorithm.clone();
        self.rounds.restore(state.policy, &models, &jobs)?;
        Ok(Restored {
            global: core.global.clone(),
            job_models: bases,
        })
    }
}

/// A saved state that the scenario's server cannot take: the scenario differs from the run's
/// that saved it, which the checkpoint's own checks rule out (a bug).
pub(super) fn mismatch(what: &str) -> SimError {
    SimError::Internal(format!(
        "a checkpoint's server state does not match the scenario's {what}"
    ))
}
