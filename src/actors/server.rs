//! The server: runs synchronous rounds (select, broadcast, wait for every update, aggregate)
//! and asks clients to evaluate at evaluation rounds.

use super::{client_entity, Deliver, FlEffects, JobContext, Msg, Sampling, SERVER};
use crate::algorithms::Algorithm;
use crate::report::{Record, RoundRecord};
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) struct ServerConfig<A: Algorithm> {
    pub algorithm: Arc<JobContext<A>>,
    pub rounds: u32,
    pub eval_every: u32,
    pub num_clients: u32,
    /// The clients that take part in training (all but the held-out ones), sorted.
    pub participants: Vec<u32>,
    pub sampling: Sampling,
    pub system: Arc<SystemModel>,
    pub seeds: SeedTree,
}

pub(super) struct Server<A: Algorithm> {
    cfg: ServerConfig<A>,
    global: Arc<A::Global>,
    round: u32,
    round_start: SimTime,
    selected: Vec<u32>,
    /// Clients training this round that have not reported yet.
    training: usize,
    bytes_down: u64,
    bytes_up: u64,
    /// Updates of the current round, keyed (and so iterated) by client id.
    arrived: BTreeMap<u32, A::Update>,
}

impl<A: Algorithm> Server<A> {
    pub fn new(cfg: ServerConfig<A>, global: A::Global) -> Self {
        Server {
            cfg,
            global: Arc::new(global),
            round: 0,
            round_start: SimTime::ZERO,
            selected: Vec::new(),
            training: 0,
            bytes_down: 0,
            bytes_up: 0,
            arrived: BTreeMap::new(),
        }
    }

    fn start_round(&mut self, now: SimTime, round: u32, eff: &mut FlEffects<A>) {
        self.round = round;
        self.round_start = now;
        self.arrived.clear();
        let mut rng = self.cfg.seeds.rng(Entity::Server, "sampling", round as u64);
        let participants = &self.cfg.participants;
        self.selected = self
            .cfg
            .sampling
            .select(participants.len(), &mut rng)
            .into_iter()
            .map(|i| participants[i as usize])
            .collect();
        let alg = &self.cfg.algorithm.algorithm;
        let bytes = payload_bytes(alg.broadcast_len(&self.global));
        let lr = self.cfg.algorithm.training.lr_at(round);
        let trainers: Vec<u32> = if alg.trains_unsampled() {
            self.cfg.participants.clone()
        } else {
            self.selected.clone()
        };
        self.training = trainers.len();
        self.bytes_down = bytes * trainers.len() as u64;
        self.bytes_up = 0;
        for c in trainers {
            let delay = self.cfg.system.transfer_time(c, Link::Down, bytes);
            eff.send(
                client_entity(c),
                delay,
                Msg::Train {
                    round,
                    global: self.global.clone(),
                    lr,
                    upload: self.selected.binary_search(&c).is_ok(),
                },
            );
        }
    }

    /// A client that trained without uploading has finished.
    fn done(&mut self, now: SimTime, round: u32, eff: &mut FlEffects<A>) {
        debug_assert_eq!(round, self.round, "synchronous rounds never overlap");
        self.training -= 1;
        self.maybe_finish_round(now, eff);
    }

    fn receive(
        &mut self,
        now: SimTime,
        round: u32,
        client: u32,
        update: A::Update,
        eff: &mut FlEffects<A>,
    ) {
        debug_assert_eq!(round, self.round, "synchronous rounds never overlap");
        self.bytes_up += payload_bytes(self.cfg.algorithm.algorithm.update_len(&update));
        self.arrived.insert(client, update);
        self.training -= 1;
        self.maybe_finish_round(now, eff);
    }

    /// Aggregates and moves on once every client training this round has reported.
    fn maybe_finish_round(&mut self, now: SimTime, eff: &mut FlEffects<A>) {
        if self.training > 0 {
            return;
        }
        let round = self.round;
        let updates: Vec<(u32, A::Update)> =
            std::mem::take(&mut self.arrived).into_iter().collect();
        self.global = Arc::new(
            self.cfg
                .algorithm
                .algorithm
                .aggregate(&self.global, &updates),
        );
        eff.record(Record::Round(RoundRecord {
            round,
            start: self.round_start,
            end: now,
            selected: self.selected.len() as u32,
            completed: updates.len() as u32,
            bytes_down: self.bytes_down,
            bytes_up: self.bytes_up,
        }));
        if round % self.cfg.eval_every == 0 || round == self.cfg.rounds {
            for c in 0..self.cfg.num_clients {
                eff.send(
                    client_entity(c),
                    SimDuration::ZERO,
                    Msg::Evaluate {
                        round,
                        global: self.global.clone(),
                    },
                );
            }
        }
        if round == self.cfg.rounds {
            eff.record(Record::FinalModels(
                self.cfg.algorithm.algorithm.models(&self.global),
            ));
        }
        if round < self.cfg.rounds {
            eff.send(
                SERVER,
                SimDuration::ZERO,
                Msg::StartRound { round: round + 1 },
            );
        }
    }
}

impl<A: Algorithm> Actor for Server<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<A>> for Server<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<A>, _: &mut Context<Self>) -> Self::Result {
        let mut eff = FlEffects::<A>::new();
        match d.msg {
            Msg::StartRound { round } => self.start_round(d.now, round, &mut eff),
            Msg::Update {
                round,
                client,
                update,
            } => self.receive(d.now, round, client, update, &mut eff),
            Msg::Done { round, .. } => self.done(d.now, round, &mut eff),
            _ => return Err(SimError::Model("the server got a client message".into())),
        }
        Ok(eff)
    }
}
