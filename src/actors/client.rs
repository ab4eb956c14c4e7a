//! A client: trains when the server asks, evaluates when asked, and keeps its own state
//! between rounds. Its jobs run on the trainer pool; their results come back to it as
//! pending messages at the time the system model says they finish.

use super::{Deliver, FlEffects, JobContext, Msg, TrainerPool, SERVER};
use crate::algorithms::{Algorithm, Evaluation};
use crate::data::Split;
use crate::report::{EvalRecord, MixtureRecord, Record};
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
            id,
            unseen,
            state,
            jobs,
            pool,
            system,
            seeds,
            last_trained: None,
        }
    }

    fn me(&self) -> crate::sim::EntityId {
        super::client_entity(self.id)
    }

    fn train(
        &mut self,
        round: u32,
        global: Arc<A::Global>,
        lr: f64,
        upload: bool,
        eff: &mut FlEffects<A>,
    ) {
        let (jobs, id) = (self.jobs.clone(), self.id);
        let mut state = self.state.clone();
        let mut rng = self.seeds.rng(Entity::Client(id), "train", round as u64);
        let pending = self.pool.submit(move || {
            let ctx = jobs.local(id, round, lr);
            let update = jobs
                .algorithm
                .local_update(&ctx, &global, &mut state, &mut rng);
            Msg::Trained {
                round,
                update,
                state,
                upload,
            }
        });
        let n_train = self.jobs.data.split_len(id as usize, Split::Train);
        let samples = self
            .jobs
            .algorithm
            .samples_processed(&self.jobs.training.plan, n_train);
        eff.send_pending(self.me(), self.system.compute_time(id, samples), pending);
    }

    fn trained(
        &mut self,
        round: u32,
        update: A::Update,
        state: A::ClientState,
        upload: bool,
        eff: &mut FlEffects<A>,
    ) {
        self.state = state;
        self.last_trained = Some(round);
        if !upload {
            let delay = self.system.transfer_time(self.id, Link::Up, 0);
            eff.send(
                SERVER,
                delay,
                Msg::Done {
                    round,
                    client: self.id,
                },
            );
            return;
        }
        let bytes = payload_bytes(self.jobs.algorithm.update_len(&update));
        let delay = self.system.transfer_time(self.id, Link::Up, bytes);
        eff.send(
            SERVER,
            delay,
            Msg::Update {
                round,
                client: self.id,
                update,
            },
        );
    }

    fn evaluate(&mut self, round: u32, global: Arc<A::Global>, eff: &mut FlEffects<A>) {
        let (jobs, id) = (self.jobs.clone(), self.id);
        let (state, unseen) = (self.state.clone(), self.unseen);
        let cluster = self.jobs.algorithm.cluster(&global, id);
        let mut rng = self.seeds.rng(Entity::Client(id), "evaluate", round as u64);
        let pending = self.pool.submit(move || {
            let ctx = jobs.local(id, round, jobs.training.lr_at(round));
            let alg = &jobs.algorithm;
            let results = if unseen {
                alg.evaluate_unseen(&ctx, &global, &mut rng)
            } else {
                alg.evaluate(&ctx, &global, &state, &mut rng)
            };
            Msg::Evaluated {
                round,
                results,
                cluster,
            }
        });
        eff.send_pending(self.me(), SimDuration::ZERO, pending);
    }

    fn evaluated(
        &self,
        now: SimTime,
        round: u32,
        results: Vec<Evaluation>,
        cluster: Option<u32>,
        eff: &mut FlEffects<A>,
    ) {
        if !self.unseen {
            if let Some(weights) = self.jobs.algorithm.mixture_weights(&self.state) {
                eff.record(Record::Mixture(MixtureRecord {
                    round,
                    client: self.id,
                    weights,
                }));
            }
        }
        for Evaluation {
            model,
            split,
            stats,
        } in results
        {
            eff.record(Record::Eval(EvalRecord {
                round,
                time: now,
                client: self.id,
                split,
                model,
                n_samples: stats.n,
                loss: stats.loss,
                accuracy: stats.accuracy,
                sampled: self.last_trained == Some(round),
                cluster,
                unseen: self.unseen,
            }));
        }
    }
}

impl<A: Algorithm> Actor for Client<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<A>> for Client<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<A>, _: &mut Context<Self>) -> Self::Result {
        let mut eff = FlEffects::<A>::new();
        match d.msg {
            Msg::Train {
                round,
                global,
                lr,
                upload,
            } => self.train(round, global, lr, upload, &mut eff),
            Msg::Trained {
                round,
                update,
                state,
                upload,
            } => self.trained(round, update, state, upload, &mut eff),
            Msg::Evaluate { round, global } => self.evaluate(round, global, &mut eff),
            Msg::Evaluated {
                round,
                results,
                cluster,
            } => self.evaluated(d.now, round, results, cluster, &mut eff),
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
