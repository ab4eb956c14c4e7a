//! Synchronous rounds, one after the other. A round ends when every trainer has reported, when
//! the first K updates are in (over-selection), or at its deadline; what arrives after that is a
//! straggler (dropped, or held for the next aggregation with its staleness) or discarded.
//! Under `secure_aggregation:` the protocol's key steps come before the training orders go out
//! and its unmasking after the round closes ([`crate::system::secagg`]); a round whose masks
//! cannot be removed aggregates nothing.

use super::saved::{mismatch, Models, PolicyState, SavedModels};
use super::{Core, Held, InFlight, Report, RoundPolicy};
use crate::actors::job::JobContext;
use crate::actors::messages::{FlEffects, ToServer};
use crate::actors::world::Outbox;
use crate::algorithms::Algorithm;
use crate::io::Stored;
use crate::policy::LateUpdates;
use crate::records::{JobOutcome, Record, RoundRecord, RoundSecAgg};
use crate::sim::{Entity, SimDuration, SimError, SimTime};
use crate::system::secagg::{Setup, Step};
use rand::Rng;

pub(super) struct Synchronous<A: Algorithm> {
    /// How long after its start a round stops waiting.
    deadline: Option<SimDuration>,
    late_updates: LateUpdates,
    max_staleness: u32,
    staleness_exponent: f64,
    /// The round is open (between its start and its aggregation).
    open: bool,
    /// The round waits to start until a client is idle.
    start_when_idle: bool,
    /// This round's sampled clients (sorted): those whose updates it aggregates.
    selected: Vec<u32>,
    /// This round's trainers that have not reported yet.
    outstanding: usize,
    /// This round's updates.
    fresh: Vec<Held<A>>,
    /// Stragglers accepted for the next aggregation.
    late: Vec<Held<A>>,
    /// Under secure aggregation: this round's key steps, and the job records of its fresh
    /// updates, held until the unmasking says whether they were aggregated.
    setup: Option<Setup>,
    held_jobs: Vec<Record>,
}

impl<A: Algorithm> Synchronous<A> {
    pub fn new(
        deadline: Option<SimDuration>,
        late_updates: LateUpdates,
        max_staleness: u32,
        staleness_exponent: f64,
    ) -> Self {
        Synchronous {
            deadline,
            late_updates,
            max_staleness,
            staleness_exponent,
            open: false,
            start_when_idle: false,
            selected: Vec::new(),
            outstanding: 0,
            fresh: Vec::new(),
            late: Vec::new(),
            setup: None,
            held_jobs: Vec::new(),
        }
    }

    /// Whether `client` drops before secure aggregation's `step` of `round` (its own stream).
    fn secagg_drops(core: &Core<A>, round: u32, client: u32, step: Step) -> bool {
        let Some(spec) = &core.cfg.secure_aggregation else {
            return false;
        };
        if spec.dropout == 0.0 {
            return false;
        }
        let index = 3 * round as u64 + step.index();
        let mut rng = (core.cfg.seeds).rng(Entity::Client(client), "secagg_dropout", index);
        rng.gen::<f64>() < spec.dropout
    }

    /// Under secure aggregation, once the round's updates are in: the masks, the unmasking step
    /// and the server's work (recorded on the round); how long they take, and whether the
    /// masks came off (else `fresh` is emptied: nothing is aggregated).
    fn unmask(&mut self, core: &mut Core<A>) -> Result<SimDuration, SimError> {
        let (Some(setup), Some(spec)) = (self.setup.take(), core.cfg.secure_aggregation.clone())
        else {
            return Ok(SimDuration::ZERO);
        };
        let round = core.round;
        let mut arrived: Vec<u32> = self.fresh.iter().map(|h| h.client).collect();
        arrived.sort_unstable();
        let uploaded: Vec<bool> = (self.selected.iter())
            .map(|c| arrived.binary_search(c).is_ok())
            .collect();
        let floats = core.alg().broadcast_len(&core.global);
        let system = core.cfg.system.clone();
        let link = |c, link, bytes| system.transfer_time(c, link, bytes);
        let drops = |c, step| Self::secagg_drops(core, round, c, step);
        let finish = spec.finish(&self.selected, &setup, &uploaded, floats, link, drops)?;
        if !finish.unmasked {
            core.ledger.counts.discarded += self.fresh.len() as u32;
            self.fresh.clear();
            for record in &mut self.held_jobs {
                if let Record::Job(job) = record {
                    job.outcome = JobOutcome::Discarded;
                }
            }
        }
        core.ledger.counts.bytes_up += finish.bytes_up;
        core.ledger.counts.bytes_down += finish.bytes_down;
        core.ledger.counts.secure_aggregation = Some(RoundSecAgg {
            setup: setup.time,
            finish: finish.time,
            bytes: setup.bytes_up + setup.bytes_down + finish.bytes_up + finish.bytes_down,
            dropped: setup.dropped + finish.dropped,
            failed: !finish.unmasked,
        });
        Ok(finish.time)
    }

    /// Whether `job` belongs to the round in progress (and its report counts there).
    fn is_current(&self, core: &Core<A>, job: &InFlight<A::Global>) -> bool {
        self.open && job.round == core.round && job.late.is_none()
    }

    /// The number of fresh updates that ends the round early (over-selection), if any.
    fn quota(core: &Core<A>) -> Option<usize> {
        let sampling = &core.cfg.sampling;
        (sampling.over_selection > 0.0).then(|| sampling.per_round(core.cfg.participants.len()))
    }

    fn maybe_close(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let quota_met = Self::quota(core).is_some_and(|k| self.fresh.len() >= k);
        if self.open && (self.outstanding == 0 || quota_met) {
            let reason = if self.outstanding == 0 {
                None
            } else {
                Some(JobOutcome::Discarded)
            };
            self.close(core, now, reason, eff)?;
        }
        Ok(())
    }

    /// Ends the round: jobs still out become `late_as`, then aggregate.
    fn close(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        late_as: Option<JobOutcome>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        self.open = false;
        let round = core.round;
        if let Some(outcome) = late_as {
            for job in core
                .in_flight
                .iter_mut()
                .filter(|j| j.round == round && j.late.is_none())
            {
                job.late = Some(outcome);
                match outcome {
                    JobOutcome::Straggler => core.ledger.counts.stragglers += 1,
                    _ => core.ledger.counts.discarded += 1,
                }
            }
        }
        let unmasking = self.unmask(core)?;
        for record in self.held_jobs.drain(..) {
            eff.record(record);
        }
        let now = now + unmasking;
        core.ledger.counts.completed = self.fresh.len() as u32;
        let mut held: Vec<Held<A>> = std::mem::take(&mut self.fresh);
        held.append(&mut self.late);
        core.aggregate(held, 1.0, self.staleness_exponent)?;
        core.end_round(now, eff);
        if round < core.cfg.rounds {
            eff.to_hub(unmasking, ToServer::StartRound { round: round + 1 });
        }
        Ok(())
    }

    /// The staleness of a late update arriving now: it would join the next aggregation, that
    /// of the open round or of the next one.
    fn round_joined_late(&self, core: &Core<A>, job: &InFlight<A::Global>) -> u32 {
        let joins = if self.open {
            core.round
        } else {
            core.round + 1
        };
        joins - job.round
    }

    /// An update that arrives after its round ended.
    fn late_arrival(
        &mut self,
        core: &mut Core<A>,
        client: u32,
        job: &InFlight<A::Global>,
        update: Stored<A::Update>,
        clipped: bool,
    ) -> JobOutcome {
        let outcome = job.late.unwrap_or(JobOutcome::Discarded);
        let staleness = self.round_joined_late(core, job);
        if outcome == JobOutcome::Straggler
            && self.late_updates == LateUpdates::NextRound
            && staleness <= self.max_staleness
            && job.round + staleness <= core.cfg.rounds
        {
            core.ledger.counts.late += 1;
            self.late.push(Held {
                client,
                update,
                base: job.base.clone(),
                staleness,
                clipped,
            });
            return JobOutcome::Late;
        }
        outcome
    }

    fn start_if_waiting(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        if self.start_when_idle {
            self.start(core, now, core.round, eff)?;
        }
        Ok(())
    }
}

impl<A: Algorithm> RoundPolicy<A> for Synchronous<A> {
    /// Between two rounds (the last one aggregated, the next not started, no secure
    /// aggregation under way): the last round's sampled clients and the stragglers' updates
    /// held for the next aggregation.
    fn saved(
        &self,
        models: &mut Models<A::Global>,
    ) -> Result<Option<PolicyState<A::Update>>, SimError> {
        // (`outstanding` counts only while a round is open.)
        let between = !self.open && !self.start_when_idle;
        let holds = !self.fresh.is_empty() || !self.held_jobs.is_empty();
        if !between || holds || self.setup.is_some() {
            return Ok(None);
        }
        let late = (self.late.iter())
            .map(|h| h.saved(models))
            .collect::<Result<_, _>>()?;
        Ok(Some(PolicyState::Synchronous {
            selected: self.selected.clone(),
            late,
        }))
    }

    fn restore(
        &mut self,
        state: PolicyState<A::Update>,
        models: &SavedModels<A::Global>,
        jobs: &JobContext<A>,
    ) -> Result<(), SimError> {
        let PolicyState::Synchronous { selected, late } = state else {
            return Err(mismatch("policy"));
        };
        self.selected = selected;
        self.late = (late.into_iter())
            .map(|h| Held::from_saved(h, models, jobs))
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn start(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        core.round = round;
        self.start_when_idle = false;
        let total = core.cfg.participants.len();
        let online_only = core.cfg.sampling.available_only;
        let to_select = core.cfg.sampling.to_select(total);
        let Some(selected) = core.draw(now, online_only, to_select, round as u64) else {
            if !core.in_flight.is_empty() {
                // Every idle client is busy: start when one reports.
                self.start_when_idle = true;
                return Ok(());
            }
            let Some(at) = core.next_online(now) else {
                core.end_early(now, round - 1, eff);
                return Ok(());
            };
            eff.to_hub(at - now, ToServer::StartRound { round });
            return Ok(());
        };
        let mut trainers = if core.alg().trains_unsampled() {
            core.idle(now, online_only)
        } else {
            selected.clone()
        };
        // Secure aggregation's key steps: who is still there trains, after them.
        let mut lead = SimDuration::ZERO;
        let mut setup_bytes = (0, 0);
        self.setup = match core.cfg.secure_aggregation.clone() {
            None => None,
            Some(spec) => {
                let mut rng = (core.cfg.seeds).rng(Entity::Server, "secagg_graph", round as u64);
                let graph = spec.graph(selected.len(), &mut rng);
                let system = core.cfg.system.clone();
                let link = |c, link, bytes| system.transfer_time(c, link, bytes);
                let drops = |c, step| Self::secagg_drops(core, round, c, step);
                let setup = spec.setup(&selected, graph, link, drops)?;
                let gone: Vec<u32> = (selected.iter().zip(&setup.shared))
                    .filter(|(_, &shared)| !shared)
                    .map(|(&c, _)| c)
                    .collect();
                trainers.retain(|c| gone.binary_search(c).is_err());
                lead = setup.time;
                setup_bytes = (setup.bytes_up, setup.bytes_down);
                Some(setup)
            }
        };
        self.selected = selected;
        self.open = true;
        core.ledger.round_start = now;
        // Late updates (and their bytes) that arrived while no round was open count here.
        let gap = std::mem::take(&mut core.ledger.counts);
        core.ledger.counts = RoundRecord {
            round,
            start: now,
            late: gap.late,
            bytes_up: gap.bytes_up,
            ..Default::default()
        };
        self.outstanding = trainers.len();
        let cut_at = (self.deadline)
            .filter(|_| self.late_updates == LateUpdates::PartialWork)
            .map(|deadline| now + lead + deadline);
        for c in trainers {
            let upload = self.selected.binary_search(&c).is_ok();
            core.dispatch(now, lead, c, round, round as u64, upload, cut_at, eff)?;
        }
        core.ledger.counts.selected = self.selected.len() as u32;
        core.ledger.counts.bytes_up += setup_bytes.0;
        core.ledger.counts.bytes_down += setup_bytes.1;
        if self.outstanding == 0 {
            if lead > SimDuration::ZERO {
                // Everyone dropped in secure aggregation's key steps: the round ends after them.
                eff.to_hub(lead, ToServer::Deadline { round });
                return Ok(());
            }
            // Nobody drawn (Poisson participation can draw no one): the round ends now.
            return self.maybe_close(core, now, eff);
        }
        if let Some(deadline) = self.deadline {
            eff.to_hub(lead + deadline, ToServer::Deadline { round });
        }
        Ok(())
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
        let outcome = match (update, self.is_current(core, &job)) {
            (None, true) => {
                self.outstanding -= 1;
                JobOutcome::Unsampled
            }
            (None, false) => JobOutcome::Unsampled,
            (Some(update), true) => {
                self.outstanding -= 1;
                self.fresh.push(Held {
                    client,
                    update,
                    base: job.base.clone(),
                    staleness: 0,
                    clipped,
                });
                JobOutcome::Aggregated
            }
            (Some(update), false) => self.late_arrival(core, client, &job, update, clipped),
        };
        let staleness = match outcome {
            JobOutcome::Late => self.round_joined_late(core, &job),
            _ => 0,
        };
        let record = core.job_record(now, client, &job, outcome, compute, staleness);
        if outcome == JobOutcome::Aggregated && self.setup.is_some() {
            // Secure aggregation: aggregated only if the masks come off.
            self.held_jobs.push(record);
        } else {
            eff.record(record);
        }
        self.maybe_close(core, now, eff)?;
        self.start_if_waiting(core, now, eff)
    }

    fn failed(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        job: &InFlight<A::Global>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        if self.is_current(core, job) {
            core.ledger.counts.failed += 1;
            self.outstanding -= 1;
            self.maybe_close(core, now, eff)?;
        }
        self.start_if_waiting(core, now, eff)
    }

    fn deadline(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        if self.open && round == core.round {
            self.close(core, now, Some(JobOutcome::Straggler), eff)?;
        }
        Ok(())
    }
}
