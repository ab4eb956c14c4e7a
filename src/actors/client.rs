//! A client: trains when the server asks, evaluates when asked, and keeps its own state
//! between rounds. Its jobs run on the trainer pool; their results come back to it as
//! pending messages at the time the system model says they finish.

use super::{Deliver, DivergenceWatch, FlEffects, JobContext, Msg, TrainerPool, SERVER};
use crate::algorithms::{Algorithm, Evaluation, Finite};
use crate::data::Split;
use crate::report::DivergenceStage;
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use std::sync::Arc;

pub(super) struct Client<A: Algorithm> {
    id: u32,
    /// Held out of training: adapts to the trained model only to be tested.
    unseen: bool,
    state: A::ClientState,
    jobs: Arc<JobContext<A>>,
    pool: TrainerPool,
    system: Arc<SystemModel>,
    seeds: SeedTree,
    last_trained: Option<u32>,
    watch: DivergenceWatch,
}

impl<A: Algorithm> Client<A> {
    pub fn new(
        id: u32,
        unseen: bool,
        state: A::ClientState,
        jobs: Arc<JobContext<A>>,
        pool: TrainerPool,
        system: Arc<SystemModel>,
        seeds: SeedTree,
    ) -> Self {
        Client {
            watch: DivergenceWatch::new(jobs.on_divergence),
            id,
            unseen,
            state,
            jobs,
            pool,
            system,
            last_trained: None,
            seeds,
        }
    }

    fn me(&self) -> crate::sim::EntityId {
        super::client_entity(self.id)
    }

    /// Starts a training job, unless the client drops out or goes offline before its
    /// compute ends (then the server hears of the failure when it happens).
    fn train(
        &mut self,
        now: SimTime,
        (round, job): (u32, u64),
        global: Arc<A::Global>,
        lr: f64,
        upload: bool,
        eff: &mut FlEffects<A>,
    ) {
        let n_train = self.jobs.data.split_len(self.id as usize, Split::Train);
        let samples = self
            .jobs
            .algorithm
            .samples_processed(&self.jobs.training.plan, n_train);
        let compute = self.system.compute_time(self.id, job, samples);
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        let dropout = self
            .system
            .dropout_point(self.id, job)
            .map(|f| SimDuration::from_secs_f64_ceil(compute.as_secs_f64() * f));
        let offline = (online_until < now + compute).then(|| online_until - now);
        if let Some(after) = [dropout, offline].into_iter().flatten().min() {
            self.fail(round, after, after, eff);
            return;
        }
        let (jobs, id) = (self.jobs.clone(), self.id);
        let mut state = self.state.clone();
        let mut rng = self.seeds.rng(Entity::Client(id), "train", job);
        let pending = self.pool.submit(move || {
            let ctx = jobs.local(id, round, lr);
            let update = jobs
                .algorithm
                .local_update(&ctx, &global, &mut state, &mut rng);
            Msg::Trained {
                round,
                finite: update.is_finite() && state.is_finite(),
                update,
                state,
                upload,
                compute,
            }
        });
        eff.send_pending(self.me(), compute, pending);
    }

    /// Tells the server, `after` from now, that this job is lost (after `compute` of work).
    fn fail(&self, round: u32, after: SimDuration, compute: SimDuration, eff: &mut FlEffects<A>) {
        eff.send(
            SERVER,
            after,
            Msg::Failed {
                round,
                client: self.id,
                compute,
            },
        );
    }

    fn trained(
        &mut self,
        now: SimTime,
        round: u32,
        update: A::Update,
        state: A::ClientState,
        (upload, compute): (bool, SimDuration),
        eff: &mut FlEffects<A>,
    ) {
        self.state = state;
        self.last_trained = Some(round);
        let floats = if upload {
            self.jobs.algorithm.update_len(&update)
        } else {
            0
        };
        let delay = self
            .system
            .transfer_time(self.id, Link::Up, payload_bytes(floats));
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        if online_until < now + delay {
            self.fail(round, online_until - now, compute, eff);
            return;
        }
        let client = self.id;
        let msg = if upload {
            Msg::Update {
                round,
                client,
                update,
                compute,
            }
        } else {
            Msg::Done {
                round,
                client,
                compute,
            }
        };
        eff.send(SERVER, delay, msg);
    }

    fn evaluate(&mut self, round: u32, global: Arc<A::Global>, eff: &mut FlEffects<A>) {
        let (jobs, id) = (self.jobs.clone(), self.id);
        let (state, unseen) = (self.state.clone(), self.unseen);
        let cluster = self.jobs.algorithm.cluster(&global, id);
        let mut rng = self.seeds.rng(Entity::Client(id), "evaluate", round as u64);
        let pending = self.pool.submit(move || {
            let ctx = jobs.local(id, round, jobs.training.lr_at(round));
            let alg = &jobs.algorithm;
            let state = match unseen {
                true => alg.adapt_unseen(&ctx, &global, &mut rng),
                false => state,
            };
            Msg::Evaluated {
                round,
                results: alg.evaluate(&ctx, &global, &state, &mut rng),
                cluster,
                mixture: alg.mixture_weights(&state),
            }
        });
        eff.send_pending(self.me(), SimDuration::ZERO, pending);
    }

    fn evaluated(
        &self,
        now: SimTime,
        round: u32,
        results: Vec<Evaluation>,
        (cluster, mixture): (Option<u32>, Option<Vec<f64>>),
        eff: &mut FlEffects<A>,
    ) {
        let sampled = self.last_trained == Some(round);
        let records = super::evaluation_records(
            (round, now, self.id),
            results,
            mixture,
            (sampled, cluster, self.unseen),
        );
        records.into_iter().for_each(|r| eff.record(r));
    }
}

impl<A: Algorithm> Actor for Client<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<Msg<A>>> for Client<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<Msg<A>>, _: &mut Context<Self>) -> Self::Result {
        let mut eff = FlEffects::<A>::new();
        match d.msg {
            Msg::Train {
                round,
                job,
                global,
                lr,
                upload,
            } => self.train(d.now, (round, job), global, lr, upload, &mut eff),
            Msg::Trained {
                round,
                update,
                state,
                upload,
                compute,
                finite,
            } => {
                let at = (round, d.now, Some(self.id));
                self.watch
                    .check(finite, at, DivergenceStage::Training, &mut eff);
                self.trained(d.now, round, update, state, (upload, compute), &mut eff)
            }
            Msg::Evaluate { round, global } => self.evaluate(round, global, &mut eff),
            Msg::Evaluated {
                round,
                results,
                cluster,
                mixture,
            } => {
                let at = (round, d.now, Some(self.id));
                self.watch.check_evaluation(&results, at, &mut eff);
                self.evaluated(d.now, round, results, (cluster, mixture), &mut eff)
            }
            _ => {
                return Err(SimError::Model(format!(
                    "client {} got a server message",
                    self.id
                )))
            }
        }
        Ok(eff)
    }
}
