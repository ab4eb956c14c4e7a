//! The server: selects clients, sends them the model, and aggregates what arrives, under the
//! scenario's round policy.
//!
//! - **Synchronous**: a round selects clients among the idle (and, if asked, online) ones and
//!   ends when every trainer has reported (update, completion notice or failure), when the
//!   first K updates are in (over-selection), or at the deadline. Jobs still running when a
//!   round ends are stragglers (deadline) or discarded (over-selection); a straggler's update
//!   may join the next aggregation with its staleness (`late_updates: next_round`).
//! - **FedBuff**: up to `concurrency` jobs run at any time; every `buffer_size` arrivals are
//!   aggregated with staleness weights; each aggregation is a "round".
//!
//! A client is never sent a second job while one is in flight. The server reads the system
//! model only to ask who is online; all durations are the clients' and the links'.

use super::evaluation::EvaluatedClients;
use super::policy::{staleness_factor, LateUpdates, PolicySpec};
use super::{
    client_entity, Deliver, DivergenceWatch, FlEffects, JobContext, Msg, Sampling, SERVER,
};
use crate::algorithms::{Algorithm, Finite, StaleUpdate};
use crate::report::{DivergenceStage, JobOutcome, JobRecord, Record, RoundRecord};
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) struct ServerConfig<A: Algorithm> {
    pub algorithm: Arc<JobContext<A>>,
    pub rounds: u32,
    /// When to evaluate, and which clients.
    pub evaluated: EvaluatedClients,
    pub num_clients: u32,
    /// The clients that take part in training (all but the held-out ones), sorted.
    pub participants: Vec<u32>,
    pub sampling: Sampling,
    pub policy: PolicySpec,
    pub system: Arc<SystemModel>,
    pub seeds: SeedTree,
}

/// A job the server is waiting for.
struct InFlight<G> {
    /// The round it was started for (FedBuff: the model version it starts from, + 1).
    round: u32,
    base: Arc<G>,
    sent: SimTime,
    download: SimDuration,
    /// Set when its round ended without it: what it will be if it arrives.
    late: Option<JobOutcome>,
}

/// The jobs in flight by client (a client runs one job at a time), iterated in client order;
/// a job costs its entry, an idle client one bit.
struct InFlightJobs<G> {
    jobs: BTreeMap<u32, InFlight<G>>,
    /// Bit `c` is set while client `c` has a job in flight.
    busy: Vec<u64>,
}

impl<G> InFlightJobs<G> {
    fn new(clients: usize) -> Self {
        InFlightJobs {
            jobs: BTreeMap::new(),
            busy: vec![0; clients.div_ceil(64)],
        }
    }

    fn is_busy(&self, client: u32) -> bool {
        self.busy[client as usize / 64] & (1 << (client % 64)) != 0
    }

    fn insert(&mut self, client: u32, job: InFlight<G>) {
        let previous = self.jobs.insert(client, job);
        debug_assert!(
            previous.is_none(),
            "a busy client is never sent a second job"
        );
        self.busy[client as usize / 64] |= 1 << (client % 64);
    }

    fn remove(&mut self, client: u32) -> Option<InFlight<G>> {
        let job = self.jobs.remove(&client)?;
        self.busy[client as usize / 64] &= !(1 << (client % 64));
        Some(job)
    }

    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut InFlight<G>> {
        self.jobs.values_mut()
    }
}

/// An update waiting for an aggregation.
struct Held<A: Algorithm> {
    client: u32,
    update: A::Update,
    base: Arc<A::Global>,
    staleness: u32,
}

pub(super) struct Server<A: Algorithm> {
    cfg: ServerConfig<A>,
    global: Arc<A::Global>,
    /// The current round (synchronous) or the number of aggregations so far (FedBuff).
    round: u32,
    round_start: SimTime,
    in_flight: InFlightJobs<A::Global>,
    /// Synchronous: the round is open (between its start and its aggregation).
    open: bool,
    /// Synchronous: a round waits to start until a client is idle.
    start_when_idle: bool,
    selected: Vec<u32>,
    /// Synchronous: this round's trainers that have not reported yet.
    outstanding: usize,
    /// Updates to aggregate: this round's (synchronous), or the buffer (FedBuff).
    fresh: Vec<Held<A>>,
    /// Synchronous: stragglers accepted for the next aggregation.
    late: Vec<Held<A>>,
    counts: RoundRecord,
    /// FedBuff: jobs started so far (each job's index for its random streams).
    jobs_started: u64,
    /// FedBuff: a wake-up is scheduled at this time.
    wake_at: Option<SimTime>,
    /// The last round has been aggregated: start no more jobs.
    finished: bool,
    watch: DivergenceWatch,
}

impl<A: Algorithm> Server<A> {
    pub fn new(cfg: ServerConfig<A>, global: Arc<A::Global>) -> Self {
        Server {
            global,
            round: 0,
            round_start: SimTime::ZERO,
            in_flight: InFlightJobs::new(cfg.num_clients as usize),
            open: false,
            start_when_idle: false,
            selected: Vec::new(),
            outstanding: 0,
            fresh: Vec::new(),
            late: Vec::new(),
            counts: RoundRecord::default(),
            jobs_started: 0,
            wake_at: None,
            finished: false,
            watch: DivergenceWatch::new(cfg.algorithm.on_divergence),
            cfg,
        }
    }

    fn alg(&self) -> &A {
        &self.cfg.algorithm.algorithm
    }

    fn is_async(&self) -> bool {
        matches!(self.cfg.policy, PolicySpec::Fedbuff { .. })
    }

    /// Idle participants (no job in flight), online at `now` if the sampling asks for it;
    /// all participants, uncopied, when no job is out and availability does not matter.
    fn candidates(&self, now: SimTime, online_only: bool) -> Cow<'_, [u32]> {
        if self.in_flight.is_empty() && !online_only {
            return Cow::Borrowed(&self.cfg.participants);
        }
        self.cfg
            .participants
            .iter()
            .copied()
            .filter(|&c| !self.in_flight.is_busy(c))
            .filter(|&c| !online_only || self.cfg.system.online_until(c, now).is_some())
            .collect()
    }

    /// The earliest time after `now` when an idle participant comes online.
    fn next_online(&self, now: SimTime) -> Option<SimTime> {
        self.cfg
            .participants
            .iter()
            .filter(|&&c| !self.in_flight.is_busy(c))
            .filter_map(|&c| self.cfg.system.next_online(c, now + SimDuration(1)))
            .min()
    }

    fn choose(&self, candidates: &[u32], count: usize, index: u64) -> Vec<u32> {
        let mut rng = self.cfg.seeds.rng(Entity::Server, "sampling", index);
        let data = &self.cfg.algorithm.data;
        let n_train = |c: u32| data.split_len(c as usize, crate::data::Split::Train) as f64;
        self.cfg
            .sampling
            .select(candidates, count, n_train, &mut rng)
    }

    /// Sends the current model to `client` for job `job` of round `round`.
    fn dispatch(
        &mut self,
        now: SimTime,
        client: u32,
        round: u32,
        job: u64,
        upload: bool,
        eff: &mut FlEffects<A>,
    ) {
        let bytes = payload_bytes(self.alg().broadcast_len(&self.global));
        let download = self.cfg.system.transfer_time(client, Link::Down, bytes);
        self.counts.bytes_down += bytes;
        self.counts.selected += 1;
        self.in_flight.insert(
            client,
            InFlight {
                round,
                base: self.global.clone(),
                sent: now,
                download,
                late: None,
            },
        );
        eff.send(
            client_entity(client),
            download,
            Msg::Train {
                round,
                job,
                global: self.global.clone(),
                lr: self.cfg.algorithm.training.lr_at(round),
                upload,
            },
        );
    }

    fn start(&mut self, now: SimTime, round: u32, eff: &mut FlEffects<A>) -> Result<(), SimError> {
        if self.is_async() {
            self.round_start = now;
            return self.fill(now, eff);
        }
        self.start_round(now, round, eff)
    }

    // ---- synchronous rounds ----

    fn start_round(
        &mut self,
        now: SimTime,
        round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        self.round = round;
        self.start_when_idle = false;
        let total = self.cfg.participants.len();
        let candidates = self.candidates(now, self.cfg.sampling.available_only);
        if candidates.is_empty() {
            if !self.in_flight.is_empty() {
                // Every idle client is busy: start when one reports.
                self.start_when_idle = true;
                return Ok(());
            }
            let Some(at) = self.next_online(now) else {
                return Err(SimError::Model(format!(
                    "round {round}: no client is online now or will ever be again"
                )));
            };
            eff.send(SERVER, at - now, Msg::StartRound { round });
            return Ok(());
        }
        let selected = self.choose(
            &candidates,
            self.cfg.sampling.to_select(total),
            round as u64,
        );
        let trainers = if self.alg().trains_unsampled() {
            candidates.into_owned()
        } else {
            selected.clone()
        };
        self.selected = selected;
        self.open = true;
        self.round_start = now;
        // Late updates (and their bytes) that arrived while no round was open count here.
        let gap = std::mem::take(&mut self.counts);
        self.counts = RoundRecord {
            round,
            start: now,
            late: gap.late,
            bytes_up: gap.bytes_up,
            ..Default::default()
        };
        self.outstanding = trainers.len();
        for c in trainers {
            let upload = self.selected.binary_search(&c).is_ok();
            self.dispatch(now, c, round, round as u64, upload, eff);
        }
        self.counts.selected = self.selected.len() as u32;
        if let PolicySpec::Synchronous {
            deadline_s: Some(d),
            ..
        } = self.cfg.policy
        {
            eff.send(
                SERVER,
                SimDuration::from_secs_f64_ceil(d),
                Msg::Deadline { round },
            );
        }
        Ok(())
    }

    /// The number of fresh updates that ends the round early (over-selection), if any.
    fn quota(&self) -> Option<usize> {
        (self.cfg.sampling.over_selection > 0.0)
            .then(|| self.cfg.sampling.per_round(self.cfg.participants.len()))
    }

    fn maybe_close(&mut self, now: SimTime, eff: &mut FlEffects<A>) -> Result<(), SimError> {
        let quota_met = self.quota().is_some_and(|k| self.fresh.len() >= k);
        if self.open && (self.outstanding == 0 || quota_met) {
            let reason = if self.outstanding == 0 {
                None
            } else {
                Some(JobOutcome::Discarded)
            };
            self.close(now, reason, eff)?;
        }
        Ok(())
    }

    /// Ends the synchronous round: jobs still out become `late_as`, then aggregate.
    fn close(
        &mut self,
        now: SimTime,
        late_as: Option<JobOutcome>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        self.open = false;
        let round = self.round;
        if let Some(outcome) = late_as {
            for job in self
                .in_flight
                .iter_mut()
                .filter(|j| j.round == round && j.late.is_none())
            {
                job.late = Some(outcome);
                match outcome {
                    JobOutcome::Straggler => self.counts.stragglers += 1,
                    _ => self.counts.discarded += 1,
                }
            }
        }
        let exponent = self.staleness_exponent();
        self.counts.completed = self.fresh.len() as u32;
        let mut held: Vec<Held<A>> = std::mem::take(&mut self.fresh);
        held.append(&mut self.late);
        self.aggregate(held, 1.0, exponent)?;
        self.counts.end = now;
        eff.record(Record::Round(std::mem::take(&mut self.counts)));
        self.after_aggregation(now, eff);
        if round < self.cfg.rounds {
            eff.send(
                SERVER,
                SimDuration::ZERO,
                Msg::StartRound { round: round + 1 },
            );
        }
        Ok(())
    }

    fn staleness_exponent(&self) -> f64 {
        match self.cfg.policy {
            PolicySpec::Synchronous {
                staleness_exponent, ..
            }
            | PolicySpec::Fedbuff {
                staleness_exponent, ..
            } => staleness_exponent,
        }
    }

    /// Aggregates `held` into the global model: the algorithm's own rule when every update is
    /// fresh and the server's step is 1, its stale-aware rule otherwise.
    fn aggregate(
        &mut self,
        mut held: Vec<Held<A>>,
        server_lr: f64,
        exponent: f64,
    ) -> Result<(), SimError> {
        if held.is_empty() {
            return Ok(());
        }
        held.sort_by_key(|h| h.client);
        let next = if held.iter().all(|h| h.staleness == 0) && server_lr == 1.0 {
            let updates: Vec<(u32, A::Update)> =
                held.into_iter().map(|h| (h.client, h.update)).collect();
            self.alg().aggregate(&self.global, &updates)
        } else {
            let stale: Vec<StaleUpdate<'_, A::Global, A::Update>> = held
                .iter()
                .map(|h| StaleUpdate {
                    client: h.client,
                    update: &h.update,
                    base: &*h.base,
                    factor: staleness_factor(h.staleness, exponent),
                })
                .collect();
            let Some(aggregate_stale) = A::STALE_UPDATES else {
                return Err(SimError::Model(
                    "this algorithm cannot take stale updates; use a synchronous policy without \
                     late updates"
                        .into(),
                ));
            };
            aggregate_stale(self.alg(), &self.global, &stale, server_lr)
        };
        self.global = Arc::new(next);
        Ok(())
    }

    /// The divergence check, evaluations and the final models after an aggregation that
    /// completed `self.round`.
    fn after_aggregation(&mut self, now: SimTime, eff: &mut FlEffects<A>) {
        let round = self.round;
        let finite = self.global.is_finite();
        self.watch.check(
            finite,
            (round, now, None),
            DivergenceStage::Aggregation,
            eff,
        );
        if self.cfg.evaluated.is_due(round, self.cfg.rounds) {
            let evaluate = |c: u32, eff: &mut FlEffects<A>| {
                let global = self.global.clone();
                eff.send(
                    client_entity(c),
                    SimDuration::ZERO,
                    Msg::Evaluate { round, global },
                );
            };
            match self.cfg.evaluated.at(round) {
                None => (0..self.cfg.num_clients).for_each(|c| evaluate(c, eff)),
                Some(chosen) => chosen.iter().for_each(|&c| evaluate(c, eff)),
            }
        }
        if round == self.cfg.rounds {
            self.finished = true;
            eff.record(Record::FinalModels(self.alg().models(&self.global)));
        }
    }

    // ---- arrivals (both policies) ----

    fn job_record(
        &self,
        now: SimTime,
        client: u32,
        job: &InFlight<A::Global>,
        outcome: JobOutcome,
        compute: SimDuration,
        staleness: u32,
    ) -> Record {
        Record::Job(JobRecord {
            round: job.round,
            client,
            outcome,
            sent: job.sent,
            end: now,
            download: job.download,
            compute,
            staleness,
        })
    }

    fn take_job(&mut self, client: u32) -> Result<InFlight<A::Global>, SimError> {
        self.in_flight.remove(client).ok_or_else(|| {
            SimError::Model(format!("client {client} reported a job it was never sent"))
        })
    }

    fn receive(
        &mut self,
        now: SimTime,
        client: u32,
        update: Option<A::Update>,
        compute: SimDuration,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let job = self.take_job(client)?;
        if let Some(u) = &update {
            self.counts.bytes_up += payload_bytes(self.alg().update_len(u));
        }
        if self.is_async() {
            return self.receive_async(now, client, job, update, compute, eff);
        }
        let current = self.open && job.round == self.round && job.late.is_none();
        let outcome = match (update, current) {
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
                });
                JobOutcome::Aggregated
            }
            (Some(update), false) => self.late_arrival(client, &job, update),
        };
        let staleness = match outcome {
            JobOutcome::Late => self.round_joined_late(&job),
            _ => 0,
        };
        eff.record(self.job_record(now, client, &job, outcome, compute, staleness));
        self.maybe_close(now, eff)?;
        self.start_if_waiting(now, eff)
    }

    /// The staleness of a late synchronous update arriving now: it would join the next
    /// aggregation, that of the open round or of the next one.
    fn round_joined_late(&self, job: &InFlight<A::Global>) -> u32 {
        let joins = if self.open {
            self.round
        } else {
            self.round + 1
        };
        joins - job.round
    }

    /// A synchronous update that arrives after its round ended.
    fn late_arrival(
        &mut self,
        client: u32,
        job: &InFlight<A::Global>,
        update: A::Update,
    ) -> JobOutcome {
        let PolicySpec::Synchronous {
            late_updates,
            max_staleness,
            ..
        } = self.cfg.policy
        else {
            unreachable!("only synchronous rounds end with jobs out")
        };
        let outcome = job.late.unwrap_or(JobOutcome::Discarded);
        let staleness = self.round_joined_late(job);
        if outcome == JobOutcome::Straggler
            && late_updates == LateUpdates::NextRound
            && staleness <= max_staleness
            && job.round + staleness <= self.cfg.rounds
        {
            self.counts.late += 1;
            self.late.push(Held {
                client,
                update,
                base: job.base.clone(),
                staleness,
            });
            return JobOutcome::Late;
        }
        outcome
    }

    fn failed(
        &mut self,
        now: SimTime,
        client: u32,
        compute: SimDuration,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let job = self.take_job(client)?;
        eff.record(self.job_record(now, client, &job, JobOutcome::Failed, compute, 0));
        if self.is_async() {
            self.counts.failed += 1;
            return self.fill(now, eff);
        }
        if self.open && job.round == self.round && job.late.is_none() {
            self.counts.failed += 1;
            self.outstanding -= 1;
            self.maybe_close(now, eff)?;
        }
        self.start_if_waiting(now, eff)
    }

    fn deadline(
        &mut self,
        now: SimTime,
        round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        if self.open && round == self.round {
            self.close(now, Some(JobOutcome::Straggler), eff)?;
        }
        Ok(())
    }

    fn start_if_waiting(&mut self, now: SimTime, eff: &mut FlEffects<A>) -> Result<(), SimError> {
        if self.start_when_idle {
            self.start_round(now, self.round, eff)?;
        }
        Ok(())
    }

    // ---- FedBuff ----

    /// Starts jobs until `concurrency` are running, on idle online clients; if none is online,
    /// wakes up when the first one comes online.
    fn fill(&mut self, now: SimTime, eff: &mut FlEffects<A>) -> Result<(), SimError> {
        let PolicySpec::Fedbuff { concurrency, .. } = self.cfg.policy else {
            unreachable!()
        };
        if self.finished || self.in_flight.len() >= concurrency {
            return Ok(());
        }
        let candidates = self.candidates(now, true);
        let wanted = concurrency - self.in_flight.len();
        let chosen = self.choose(&candidates, wanted, self.jobs_started);
        let round = self.round + 1;
        let upload = true;
        for c in chosen {
            let job = self.jobs_started;
            self.jobs_started += 1;
            self.dispatch(now, c, round, job, upload, eff);
        }
        if self.in_flight.len() < concurrency {
            match self.next_online(now) {
                Some(at) if self.wake_at.is_none_or(|w| at < w) => {
                    self.wake_at = Some(at);
                    eff.send(SERVER, at - now, Msg::Wake);
                }
                None if self.in_flight.is_empty() => {
                    return Err(SimError::Model(
                        "asynchronous rounds: no client is online now or will ever be again".into(),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn receive_async(
        &mut self,
        now: SimTime,
        client: u32,
        job: InFlight<A::Global>,
        update: Option<A::Update>,
        compute: SimDuration,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let PolicySpec::Fedbuff {
            buffer_size,
            max_staleness,
            staleness_exponent,
            server_lr,
            ..
        } = self.cfg.policy
        else {
            unreachable!()
        };
        let update =
            update.ok_or_else(|| SimError::Model("asynchronous jobs always upload".into()))?;
        let staleness = self.round + 1 - job.round;
        if self.finished || staleness > max_staleness {
            if !self.finished {
                self.counts.discarded += 1;
            }
            eff.record(self.job_record(
                now,
                client,
                &job,
                JobOutcome::Discarded,
                compute,
                staleness,
            ));
            return self.fill(now, eff);
        }
        let outcome = if staleness == 0 {
            JobOutcome::Aggregated
        } else {
            JobOutcome::Late
        };
        eff.record(self.job_record(now, client, &job, outcome, compute, staleness));
        self.fresh.push(Held {
            client,
            update,
            base: job.base,
            staleness,
        });
        if self.fresh.len() >= buffer_size {
            let held = std::mem::take(&mut self.fresh);
            self.counts.completed = held.iter().filter(|h| h.staleness == 0).count() as u32;
            self.counts.late = held.len() as u32 - self.counts.completed;
            self.aggregate(held, server_lr, staleness_exponent)?;
            self.round += 1;
            self.counts.round = self.round;
            self.counts.start = self.round_start;
            self.counts.end = now;
            self.round_start = now;
            eff.record(Record::Round(std::mem::take(&mut self.counts)));
            self.after_aggregation(now, eff);
        }
        self.fill(now, eff)
    }
}

impl<A: Algorithm> Actor for Server<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<Msg<A>>> for Server<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<Msg<A>>, _: &mut Context<Self>) -> Self::Result {
        self.on_message(d.now, d.msg)
    }
}

impl<A: Algorithm> Server<A> {
    /// The server's whole behaviour: one message in, its effects out.
    fn on_message(&mut self, now: SimTime, msg: Msg<A>) -> Result<FlEffects<A>, SimError> {
        let mut eff = FlEffects::<A>::new();
        match msg {
            Msg::StartRound { round } => self.start(now, round, &mut eff)?,
            Msg::Update {
                client,
                update,
                compute,
                ..
            } => self.receive(now, client, Some(update), compute, &mut eff)?,
            Msg::Done {
                client, compute, ..
            } => self.receive(now, client, None, compute, &mut eff)?,
            Msg::Failed {
                client, compute, ..
            } => self.failed(now, client, compute, &mut eff)?,
            Msg::Deadline { round } => self.deadline(now, round, &mut eff)?,
            Msg::Wake => {
                if self.wake_at == Some(now) {
                    self.wake_at = None;
                }
                self.fill(now, &mut eff)?
            }
            _ => return Err(SimError::Model("the server got a client message".into())),
        }
        Ok(eff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::evaluation::EvaluationPlan;
    use crate::algorithms::{FedAvg, ModelUpdate};
    use crate::report::DivergenceStage;

    /// A FedAvg server over two clients of a tiny data set, under `policy`, for 3 rounds.
    fn server(policy: &str) -> Server<FedAvg> {
        let (s, jobs, system) =
            crate::actors::testkit::fedavg_run(&format!("policy: {policy}\n"), &[]);
        let seeds = SeedTree::new(1);
        let global = jobs
            .algorithm
            .init_global(&jobs.arch, &mut seeds.rng(Entity::Run, "model_init", 0));
        let config = ServerConfig {
            algorithm: jobs,
            rounds: 3,
            evaluated: EvaluatedClients::new(EvaluationPlan::all_every(1), 2, seeds),
            num_clients: 2,
            participants: vec![0, 1],
            sampling: s.run.sampling.clone(),
            policy: s.run.policy.clone(),
            system,
            seeds,
        };
        Server::new(config, Arc::new(global))
    }

    fn secs(s: u64) -> SimTime {
        SimTime(s * 1_000_000)
    }

    /// What a handler asked for, as `(target rank, message)` lines and record kinds.
    fn effects(eff: &FlEffects<FedAvg>) -> (Vec<String>, Vec<String>) {
        let sends = eff
            .sends()
            .map(|(to, _, msg)| {
                let what = match msg {
                    Some(Msg::StartRound { round }) => format!("start {round}"),
                    Some(Msg::Deadline { round }) => format!("deadline {round}"),
                    Some(Msg::Train { round, .. }) => format!("train {round}"),
                    Some(Msg::Evaluate { round, .. }) => format!("evaluate {round}"),
                    Some(Msg::Wake) => "wake".into(),
                    Some(_) => "other".into(),
                    None => "pending".into(),
                };
                format!("{} {what}", to.0)
            })
            .collect();
        let records = eff
            .records()
            .iter()
            .map(|r| match r {
                Record::Round(r) => format!("round {} stragglers {}", r.round, r.stragglers),
                Record::Job(j) => format!("job {} {}", j.client, j.outcome.as_str()),
                Record::Diverged(d) => format!("diverged {}", d.stage.as_str()),
                _ => "other".into(),
            })
            .collect();
        (sends, records)
    }

    fn update(round: u32, client: u32, value: f32) -> Msg<FedAvg> {
        Msg::Update {
            round,
            client,
            update: ModelUpdate {
                params: vec![value; 4],
                weight: 10.0,
            },
            compute: SimDuration(1),
        }
    }

    #[test]
    fn a_round_ends_when_every_trainer_reported_and_its_old_deadline_is_ignored() {
        let mut s = server("{kind: synchronous, deadline_s: 100}");
        let eff = s.on_message(secs(0), Msg::StartRound { round: 1 }).unwrap();
        assert_eq!(effects(&eff).0, ["1 train 1", "2 train 1", "0 deadline 1"]);
        assert!(effects(&s.on_message(secs(1), update(1, 0, 0.5)).unwrap())
            .0
            .is_empty());
        let eff = s.on_message(secs(2), update(1, 1, 0.5)).unwrap();
        let (sends, records) = effects(&eff);
        assert_eq!(sends, ["1 evaluate 1", "2 evaluate 1", "0 start 2"]);
        assert_eq!(records, ["job 1 aggregated", "round 1 stragglers 0"]);
        // The next round starts; round 1's deadline, when it comes, changes nothing.
        s.on_message(secs(2), Msg::StartRound { round: 2 }).unwrap();
        let eff = s.on_message(secs(100), Msg::Deadline { round: 1 }).unwrap();
        assert_eq!(effects(&eff), (vec![], vec![]));
        assert!(!eff.stops());
    }

    #[test]
    fn a_deadline_closes_the_round_and_the_late_update_is_a_straggler() {
        let mut s = server("{kind: synchronous, deadline_s: 100}");
        s.on_message(secs(0), Msg::StartRound { round: 1 }).unwrap();
        s.on_message(secs(1), update(1, 0, 0.5)).unwrap();
        let eff = s.on_message(secs(100), Msg::Deadline { round: 1 }).unwrap();
        let (sends, records) = effects(&eff);
        assert_eq!(records, ["round 1 stragglers 1"]);
        assert_eq!(sends, ["1 evaluate 1", "2 evaluate 1", "0 start 2"]);
        let eff = s.on_message(secs(120), update(1, 1, 0.5)).unwrap();
        assert_eq!(effects(&eff).1, ["job 1 straggler"]);
    }

    #[test]
    fn a_report_of_a_job_never_sent_is_an_error() {
        let mut s = server("{kind: synchronous}");
        let e = s.on_message(secs(1), update(1, 1, 0.5)).err().unwrap();
        assert_eq!(e.to_string(), "client 1 reported a job it was never sent");
    }

    #[test]
    fn a_wake_with_every_slot_busy_starts_nothing() {
        let mut s = server("{kind: fedbuff, buffer_size: 2, concurrency: 2}");
        let eff = s.on_message(secs(0), Msg::StartRound { round: 1 }).unwrap();
        assert_eq!(effects(&eff).0, ["1 train 1", "2 train 1"]);
        let eff = s.on_message(secs(5), Msg::Wake).unwrap();
        assert_eq!(effects(&eff), (vec![], vec![]));
    }

    #[test]
    fn a_non_finite_aggregate_is_recorded_once_and_stops_the_run() {
        let mut s = server("{kind: synchronous}");
        s.on_message(secs(0), Msg::StartRound { round: 1 }).unwrap();
        s.on_message(secs(1), update(1, 0, f32::NAN)).unwrap();
        let eff = s.on_message(secs(2), update(1, 1, 0.5)).unwrap();
        assert!(eff.stops());
        assert_eq!(
            effects(&eff).1,
            [
                "job 1 aggregated",
                "round 1 stragglers 0",
                "diverged aggregation"
            ]
        );
        assert!(matches!(
            eff.records().last(),
            Some(Record::Diverged(d)) if d.stage == DivergenceStage::Aggregation
                && d.client.is_none() && d.round == 1
        ));
    }
}
