//! Asynchronous buffered aggregation (FedBuff, Nguyen et al. 2022): up to `concurrency` jobs run
//! at any time, each started as soon as a slot is free and a client is online; every
//! `buffer_size` arrivals are aggregated with staleness weights, and each aggregation is a
//! "round". A job's random streams are indexed by how many jobs started before it.

use super::saved::{mismatch, Models, PolicyState, SavedModels};
use super::{Core, Held, InFlight, Report, RoundPolicy};
use crate::actors::job::JobContext;
use crate::actors::messages::{FlEffects, ToServer};
use crate::actors::world::Outbox;
use crate::algorithms::Algorithm;
use crate::policy::FedbuffSpec;
use crate::records::JobOutcome;
use crate::sim::{SimDuration, SimError, SimTime};

pub(super) struct Fedbuff<A: Algorithm> {
    settings: FedbuffSpec,
    /// The updates waiting for the next aggregation.
    buffer: Vec<Held<A>>,
    /// Jobs started so far (each job's index for its random streams).
    jobs_started: u64,
    /// A wake-up is scheduled at this time.
    wake_at: Option<SimTime>,
}

impl<A: Algorithm> Fedbuff<A> {
    pub fn new(settings: FedbuffSpec) -> Self {
        Fedbuff {
            settings,
            buffer: Vec::new(),
            jobs_started: 0,
            wake_at: None,
        }
    }

    /// Starts jobs until `concurrency` are running, on idle online clients; if none is online,
    /// wakes up when the first one comes online.
    fn fill(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let concurrency = self.settings.concurrency;
        if core.ledger.finished || core.in_flight.len() >= concurrency {
            return Ok(());
        }
        let wanted = concurrency - core.in_flight.len();
        let chosen = core
            .draw(now, true, wanted, self.jobs_started)
            .unwrap_or_default();
        let round = core.round + 1;
        let upload = true;
        for c in chosen {
            let job = self.jobs_started;
            self.jobs_started += 1;
            core.dispatch(now, SimDuration::ZERO, c, round, job, upload, None, eff)?;
        }
        if core.in_flight.len() < concurrency {
            match core.next_online(now) {
                Some(at) if self.wake_at.is_none_or(|w| at < w) => {
                    self.wake_at = Some(at);
                    eff.to_hub(at - now, ToServer::Wake);
                }
                None if core.in_flight.is_empty() => {
                    let completed = core.round;
                    core.end_early(now, completed, eff);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Aggregates the buffer: the round it completes ends at `now`.
    fn aggregate(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let held = std::mem::take(&mut self.buffer);
        core.ledger.counts.completed = held.iter().filter(|h| h.staleness == 0).count() as u32;
        core.ledger.counts.late = held.len() as u32 - core.ledger.counts.completed;
        let FedbuffSpec {
            server_lr,
            staleness_exponent,
            ..
        } = self.settings;
        core.aggregate(held, server_lr, staleness_exponent)?;
        core.round += 1;
        core.ledger.counts.round = core.round;
        core.ledger.counts.start = core.ledger.round_start;
        core.ledger.round_start = now;
        core.end_round(now, eff);
        Ok(())
    }
}

impl<A: Algorithm> RoundPolicy<A> for Fedbuff<A> {
    /// Anywhere: the buffer, the jobs started so far and the wake-up scheduled.
    fn saved(
        &self,
        models: &mut Models<A::Global>,
    ) -> Result<Option<PolicyState<A::Update>>, SimError> {
        let buffer = (self.buffer.iter())
            .map(|h| h.saved(models))
            .collect::<Result<_, _>>()?;
        Ok(Some(PolicyState::Fedbuff {
            buffer,
            jobs_started: self.jobs_started,
            wake_at: self.wake_at,
        }))
    }

    fn restore(
        &mut self,
        state: PolicyState<A::Update>,
        models: &SavedModels<A::Global>,
        jobs: &JobContext<A>,
    ) -> Result<(), SimError> {
        let PolicyState::Fedbuff {
            buffer,
            jobs_started,
            wake_at,
        } = state
        else {
            return Err(mismatch("policy"));
        };
        self.buffer = (buffer.into_iter())
            .map(|h| Held::from_saved(h, models, jobs))
            .collect::<Result<_, _>>()?;
        (self.jobs_started, self.wake_at) = (jobs_started, wake_at);
        Ok(())
    }

    /// The run's start: fill every slot.
    fn start(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        _round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        core.ledger.round_start = now;
        self.fill(core, now, eff)
    }

    fn receive(
        &mut self,
        core: &mut Core<A>,
        report: Report<A>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let Report {
            now,
            client,
            job,
            update,
            compute,
            clipped,
        } = report;
        let update =
            update.ok_or_else(|| SimError::Internal("asynchronous jobs always upload".into()))?;
        let staleness = core.round + 1 - job.round;
        if core.ledger.finished || staleness > self.settings.max_staleness {
            if !core.ledger.finished {
                core.ledger.counts.discarded += 1;
            }
            let discarded = JobOutcome::Discarded;
            eff.record(core.job_record(now, client, &job, discarded, compute, staleness));
            return self.fill(core, now, eff);
        }
        let outcome = if staleness == 0 {
            JobOutcome::Aggregated
        } else {
            JobOutcome::Late
        };
        eff.record(core.job_record(now, client, &job, outcome, compute, staleness));
        self.buffer.push(Held {
            client,
            update,
            base: job.base,
            staleness,
            clipped,
        });
        if self.buffer.len() >= self.settings.buffer_size {
            self.aggregate(core, now, eff)?;
        }
        self.fill(core, now, eff)
    }

    /// A failed job frees its slot.
    fn failed(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        _job: &InFlight<A::Global>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        core.ledger.counts.failed += 1;
        self.fill(core, now, eff)
    }

    /// A client may have come online: start jobs if slots are free.
    fn wake(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        if self.wake_at == Some(now) {
            self.wake_at = None;
        }
        self.fill(core, now, eff)
    }
}
