//! Decentralized runs: no server. Each peer trains on its own data (the same local work as the
//! client of the client-server algorithm), sends its model to its neighbours over the system
//! model's links, and mixes what it receives with its row of the round's mixing matrix.
//!
//! How a peer gathers its neighbours' models is its gossip mode's [`Inbox`] (`gossip.rs`):
//! - Synchronous gossip: a peer mixes round r once its own model and every neighbour's round-r
//!   model are in, then starts round r + 1. There is no global barrier: a peer waits only for
//!   its neighbours.
//! - Asynchronous gossip: a peer mixes right after its local work, with the newest model of each
//!   neighbour that arrived since it last mixed; a neighbour it has nothing new from leaves its
//!   weight on the peer itself.
//!
//! - Dropouts (`system.dropout`): a peer that drops out of round r's local work (after the
//!   fraction of its compute the system model draws) sits the round out: it sends nothing,
//!   keeps its model and starts round r + 1 at once. In synchronous gossip it tells its
//!   neighbours (a notice of no bytes, at link latency), and each puts the absent peer's mixing
//!   weight on itself; models that reach the absent peer for that round are dropped.
//!
//! - Availability (`system.availability`): a peer offline when a round is due starts it when
//!   it is next online (in synchronous gossip its neighbours wait for it, as for a slow peer);
//!   one that goes offline before its compute ends sits the round out at that moment, as a
//!   dropout does; one never online again sits out every round left. Models sent to an offline
//!   peer wait for it (the links store and forward), and a peer online at the end of its local
//!   work sends its model whatever happens to it afterwards.
//!
//! A monitor (rank 0) sees each peer's mixed model at no cost in time or bytes (it is the
//! experimenter, not a participant) and records a round's consensus distance, spectral gap and
//! bytes once every peer has mixed it. Peer p has rank p + 1 and uses client p's data and random
//! streams, so a peer trains exactly like client p would.

mod saved;

use super::checkpoint::Checkpoints;
use super::cohort::{Dispatch, EvalJob, TrainJob};
use super::divergence::{DivergenceWatch, Seen};
use super::evaluation::EvaluatedClients;
use super::evaluation::{evaluation_records, EvalContext};
use super::gossip::{Complete, Inbox};
use super::init::device_record;
use super::job::JobContext;
use super::world::{member_entity, run_world, Deliver, HubWorld, Outbox, Routed, SimOutput, Start};
use crate::algorithms::{ClientReport, Evaluation, Finite, Gossip, Planned};
use crate::io::Stored;
use crate::models::LocalPlan;
use crate::plan::Setup;
use crate::records::{ClientModelsRecord, DivergenceStage, GossipRecord, ModelKind, Record, Split};
use crate::sim::{Effects, Entity, RecordObserver, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, SystemModel};
use crate::topology::{StepWeights, Topology};
use actix::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A peer's messages.
pub enum PeerMsg<A: Gossip> {
    /// Peer: start round `round`'s local work.
    Train { round: u32 },
    /// Peer (from its own training job): local work done.
    Trained {
        round: u32,
        model: A::Global,
        state: A::ClientState,
    },
    /// Peer: neighbour `from`'s model after its local work of round `round`.
    Model {
        round: u32,
        from: u32,
        model: Arc<A::Global>,
    },
    /// Peer: neighbour `from` dropped out of round `round` (synchronous gossip).
    Absent { round: u32, from: u32 },
    /// Peer (to itself): it dropped out of round `round`'s local work, now.
    SatOut { round: u32 },
    /// Peer (from its own evaluation job).
    Evaluated {
        round: u32,
        results: Vec<Evaluation>,
        report: ClientReport,
    },
}

/// The monitor's message: peer `peer` mixed round `round` into `model`, having sent `bytes`
/// for it (or, `dropped`, sat the round out with `model` unchanged).
pub struct Mixed<A: Gossip> {
    round: u32,
    peer: u32,
    model: Arc<A::Global>,
    bytes: u64,
    dropped: bool,
}

/// The messages of a decentralized run, each in its recipient's own type.
type GossipMsg<A> = Routed<Mixed<A>, PeerMsg<A>>;

type PeerEffects<A> = Effects<GossipMsg<A>, Record>;

/// A model with its mixing weight.
type Weighted<A> = (f64, Arc<<A as crate::algorithms::Algorithm>::Global>);

/// What every peer shares.
struct Shared<A: Gossip> {
    jobs: Arc<JobContext<A>>,
    /// Where training jobs go: alone on the pool, or the cohort queue.
    dispatch: Dispatch<A>,
    system: Arc<SystemModel>,
    topology: Arc<Topology>,
    seeds: SeedTree,
    rounds: u32,
    /// When to evaluate, and which peers.
    evaluated: EvaluatedClients,
    /// ω_t: each peer's factor on the learning rate.
    step_weights: Vec<f64>,
}

impl<A: Gossip> Shared<A> {
    fn round_topology(&self, round: u32) -> Result<Arc<crate::topology::RoundTopology>, SimError> {
        self.topology
            .at(round)
            .map_err(|e| SimError::Setup(e.into()))
    }
}

struct Peer<A: Gossip> {
    id: u32,
    model: Arc<A::Global>,
    state: A::ClientState,
    shared: Arc<Shared<A>>,
    /// What it holds of rounds not mixed yet, as its gossip mode keeps it.
    inbox: Box<dyn Inbox<A>>,
    /// Bytes sent this round.
    sent: u64,
    watch: DivergenceWatch,
    /// Its training and evaluation jobs in flight, in the order they started, each with the
    /// version of the model and state it started from (what a checkpoint saves of them).
    in_flight: Vec<(PeerJob, u64)>,
    /// How many times its model or state has changed.
    version: u64,
}

/// A peer's job in flight as a checkpoint saves it: it starts again from the peer's model and
/// state, at the time it started.
#[derive(Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
enum PeerJob {
    Training { started: SimTime, round: u32 },
    Evaluation { started: SimTime, round: u32 },
}

impl<A: Gossip> Peer<A> {
    /// Starts round `round`'s local work now, or when the peer is next online; a peer that
    /// drops out or goes offline before its compute ends sits the round out then.
    fn train(
        &mut self,
        now: SimTime,
        round: u32,
        eff: &mut PeerEffects<A>,
    ) -> Result<(), SimError> {
        let system = &self.shared.system;
        let Some(online_until) = system.online_until(self.id, now) else {
            return match system.next_online(self.id, now) {
                Some(at) => {
                    eff.to_member(self.id, at - now, PeerMsg::Train { round });
                    Ok(())
                }
                // Gone for good: it sits out every round left, now.
                None => self.drop_out(round, SimDuration::ZERO, eff),
            };
        };
        let jobs = &self.shared.jobs;
        let n_train = jobs.data.split_len(self.id as usize, Split::Train);
        let planned = &jobs.training.plan;
        let plan = LocalPlan {
            work: system.local_work(self.id, round as u64, planned.work),
            ..*planned
        };
        let samples = jobs.algorithm.samples_processed(&plan, n_train);
        let compute = system.compute_time(self.id, round as u64, samples)?;
        if let Some(after) = system.cut_short(self.id, round as u64, now, online_until, compute) {
            return self.drop_out(round, after, eff);
        }
        let (jobs, id) = (jobs.clone(), self.id);
        let job = TrainJob {
            client: id,
            round,
            lr: jobs.training.lr_at(round) * self.shared.step_weights[id as usize],
            global: self.model.clone(),
            state: Stored::in_memory(self.state.clone()),
            rng: self
                .shared
                .seeds
                .rng(Entity::Client(id), "train", round as u64),
            work: plan.work,
            uploads: false,
            keeps_state: false,
        };
        let started = PeerJob::Training {
            started: now,
            round,
        };
        self.in_flight.push((started, self.version));
        let pending = self.shared.dispatch.train(job, move |t| {
            Routed::Member(PeerMsg::Trained {
                round,
                model: jobs.algorithm.local_model(t.update),
                state: t.state,
            })
        });
        eff.to_member_pending(self.id, compute, pending);
        Ok(())
    }

    /// Drops out of round `round`, `after` from now; in synchronous gossip the neighbours hear
    /// of it then, one link latency later.
    fn drop_out(
        &mut self,
        round: u32,
        after: SimDuration,
        eff: &mut PeerEffects<A>,
    ) -> Result<(), SimError> {
        if self.inbox.sat_out(round) {
            let topology = self.shared.round_topology(round)?;
            for to in topology.mixing.sources(self.id) {
                let (latency, _) = self.shared.system.peer_transfer_time(self.id, to, 0)?;
                let msg = PeerMsg::Absent {
                    round,
                    from: self.id,
                };
                eff.to_member(to, after + latency, msg);
            }
        }
        eff.to_member(self.id, after, PeerMsg::SatOut { round });
        Ok(())
    }

    /// Sends the trained model to every neighbour that mixes it, one after the other on this
    /// peer's uplink, then mixes (now, or when the neighbours' models are in).
    fn trained(
        &mut self,
        now: SimTime,
        round: u32,
        model: A::Global,
        state: A::ClientState,
        eff: &mut PeerEffects<A>,
    ) -> Result<(), SimError> {
        (self.in_flight).retain(|(j, _)| !matches!(j, PeerJob::Training { .. }));
        self.version += 1;
        self.state = state;
        let model = Arc::new(model);
        let topology = self.shared.round_topology(round)?;
        let bytes = payload_bytes(self.shared.jobs.algorithm.broadcast_len(&model));
        let mut uplink_busy = SimDuration::ZERO;
        let mut neighbours = 0;
        // The support of every mixing matrix is symmetric: the peers this one mixes from are
        // the peers that mix from it.
        for to in topology.mixing.sources(self.id) {
            let (latency, transfer) = self.shared.system.peer_transfer_time(self.id, to, bytes)?;
            uplink_busy = uplink_busy + transfer;
            let msg = PeerMsg::Model {
                round,
                from: self.id,
                model: model.clone(),
            };
            eff.to_member(to, latency + uplink_busy, msg);
            self.sent += bytes;
            neighbours += 1;
        }
        self.inbox.own(round, model, neighbours);
        self.mix_if_complete(now, eff)
    }

    /// Neighbour `from`'s model of `round`, or (`None`) its notice that it sat the round out.
    fn received(
        &mut self,
        now: SimTime,
        round: u32,
        from: u32,
        model: Option<Arc<A::Global>>,
        eff: &mut PeerEffects<A>,
    ) -> Result<(), SimError> {
        self.inbox.neighbour(round, from, model);
        self.mix_if_complete(now, eff)
    }

    /// Mixes the round the inbox has complete, if any, with this peer's row of the round's
    /// mixing matrix: a neighbour without a model in it leaves its weight on this peer.
    fn mix_if_complete(&mut self, now: SimTime, eff: &mut PeerEffects<A>) -> Result<(), SimError> {
        let Some(Complete {
            round,
            own,
            mut neighbours,
        }) = self.inbox.complete()
        else {
            return Ok(());
        };
        let topology = self.shared.round_topology(round)?;
        let row = topology.mixing.row(self.id);
        let models: Vec<Weighted<A>> =
            mixing_weights(row, self.id, |j| neighbours.contains_key(&j))
                .into_iter()
                .map(|(j, w)| match j == self.id {
                    true => (w, own.clone()),
                    false => (w, neighbours.remove(&j).expect("present")),
                })
                .collect();
        self.finish_round(now, round, Some(&models), eff);
        Ok(())
    }

    /// Ends `round`: mixes `models` into this peer's model (`None`: it sat the round out and
    /// keeps its model), reports to the monitor, evaluates if due and starts the next round.
    fn finish_round(
        &mut self,
        now: SimTime,
        round: u32,
        models: Option<&[Weighted<A>]>,
        eff: &mut PeerEffects<A>,
    ) {
        if let Some(models) = models {
            let items: Vec<(f64, &A::Global)> = models.iter().map(|(w, m)| (*w, &**m)).collect();
            self.model = Arc::new(self.shared.jobs.algorithm.mix(&items));
            self.version += 1;
        }
        let bytes = std::mem::take(&mut self.sent);
        let mixed = Mixed {
            round,
            peer: self.id,
            model: self.model.clone(),
            bytes,
            dropped: models.is_none(),
        };
        eff.to_hub(SimDuration::ZERO, mixed);
        let shared = self.shared.clone();
        if shared.evaluated.is_due(round, shared.rounds)
            && shared.evaluated.includes(round, self.id)
        {
            self.evaluate(now, round, eff);
        }
        if round < shared.rounds {
            eff.to_member(
                self.id,
                SimDuration::ZERO,
                PeerMsg::Train { round: round + 1 },
            );
        }
    }

    fn evaluate(&mut self, now: SimTime, round: u32, eff: &mut PeerEffects<A>) {
        let started = PeerJob::Evaluation {
            started: now,
            round,
        };
        self.in_flight.push((started, self.version));
        let job = EvalJob {
            client: self.id,
            round,
            global: self.model.clone(),
            state: Stored::in_memory(self.state.clone()),
            unseen: false,
            scores_novelty: false,
            rng: (self.shared.seeds).rng(Entity::Client(self.id), "evaluate", round as u64),
        };
        let pending = self.shared.dispatch.evaluate(job, move |e| {
            Routed::Member(PeerMsg::Evaluated {
                round,
                results: e.results,
                report: e.report,
            })
        });
        eff.to_member_pending(self.id, SimDuration::ZERO, pending);
    }

    fn evaluated(
        &self,
        now: SimTime,
        round: u32,
        results: Vec<Evaluation>,
        report: ClientReport,
        eff: &mut PeerEffects<A>,
    ) {
        let context = EvalContext {
            round,
            time: now,
            client: self.id,
            sampled: true,
            unseen: false,
        };
        let records = evaluation_records(context, results, report);
        records.into_iter().for_each(|r| eff.record(r));
    }
}

impl<A: Gossip> Actor for Peer<A> {
    type Context = Context<Self>;
}

impl<A: Gossip> Handler<Deliver<PeerMsg<A>, GossipMsg<A>>> for Peer<A> {
    type Result = Result<PeerEffects<A>, SimError>;

    fn handle(
        &mut self,
        d: Deliver<PeerMsg<A>, GossipMsg<A>>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let id = self.id;
        super::world::guarded(|| format!("peer {id}"), || self.on_message(d))
    }
}

impl<A: Gossip> Peer<A> {
    /// The peer's whole behaviour: one message in, its effects out.
    fn on_message(
        &mut self,
        d: Deliver<PeerMsg<A>, GossipMsg<A>>,
    ) -> Result<PeerEffects<A>, SimError> {
        let mut eff = PeerEffects::<A>::new();
        match d.msg {
            PeerMsg::Train { round } => self.train(d.now, round, &mut eff)?,
            PeerMsg::Absent { round, from } => self.received(d.now, round, from, None, &mut eff)?,
            PeerMsg::SatOut { round } => self.finish_round(d.now, round, None, &mut eff),
            PeerMsg::Trained {
                round,
                model,
                state,
            } => {
                let finite = model.is_finite() && state.is_finite();
                let at = Seen {
                    round,
                    time: d.now,
                    client: Some(self.id),
                };
                self.watch
                    .check(finite, at, DivergenceStage::Training, &mut eff);
                self.trained(d.now, round, model, state, &mut eff)?
            }
            PeerMsg::Model { round, from, model } => {
                self.received(d.now, round, from, Some(model), &mut eff)?
            }
            PeerMsg::Evaluated {
                round,
                results,
                report,
            } => {
                let done = (self.in_flight.iter()).position(
                    |(j, _)| matches!(j, PeerJob::Evaluation { round: r, .. } if *r == round),
                );
                done.map(|i| self.in_flight.remove(i));
                let at = Seen {
                    round,
                    time: d.now,
                    client: Some(self.id),
                };
                self.watch.check_evaluation(&results, at, &mut eff);
                self.evaluated(d.now, round, results, report, &mut eff)
            }
        }
        Ok(eff)
    }
}

/// Collects each round's mixed models and measures how far the peers are from consensus.
struct Monitor<A: Gossip> {
    shared: Arc<Shared<A>>,
    peers: usize,
    /// Mixed models (and bytes sent) of rounds not every peer has finished yet.
    rounds: BTreeMap<u32, RoundMixes<A>>,
    watch: DivergenceWatch,
}

/// One round's mixed model per peer (`None` until that peer has mixed), the bytes sent and
/// the peers that sat the round out.
type RoundMixes<A> = (
    Vec<Option<Arc<<A as crate::algorithms::Algorithm>::Global>>>,
    u64,
    u64,
);

impl<A: Gossip> Monitor<A> {
    fn mixed(
        &mut self,
        now: SimTime,
        Mixed {
            round,
            peer,
            model,
            bytes,
            dropped,
        }: Mixed<A>,
        eff: &mut PeerEffects<A>,
    ) -> Result<(), SimError> {
        let peers = self.peers;
        let entry = self
            .rounds
            .entry(round)
            .or_insert_with(|| (vec![None; peers], 0, 0));
        entry.0[peer as usize] = Some(model);
        entry.1 += bytes;
        entry.2 += dropped as u64;
        if entry.0.iter().any(Option::is_none) {
            return Ok(());
        }
        let (models, bytes, dropped) = self.rounds.remove(&round).expect("present");
        let models: Vec<Arc<A::Global>> = models.into_iter().flatten().collect();
        let algorithm = &self.shared.jobs.algorithm;
        let flat: Vec<Vec<f32>> = models
            .iter()
            .map(|m| algorithm.models(m).concat())
            .collect();
        let topology = self.shared.round_topology(round)?;
        eff.record(Record::Gossip(GossipRecord {
            round,
            time: now,
            consensus_distance: consensus_distance(&flat),
            spectral_gap: topology.mixing.spectral_gap(),
            connected: topology.connected,
            links: topology.graph.edge_count() as u64,
            bytes,
            dropped,
        }));
        if round == self.shared.rounds && self.shared.jobs.saves_client_models {
            // Each peer's own copy after the last round: its `global` model.
            for (peer, model) in (0..).zip(&models) {
                eff.record(Record::ClientModels(ClientModelsRecord {
                    round,
                    client: peer,
                    models: vec![(ModelKind::Global, algorithm.models(model))],
                }));
            }
        }
        if round == self.shared.rounds {
            let uniform: Vec<(f64, &A::Global)> = models.iter().map(|m| (1.0, &**m)).collect();
            eff.record(Record::FinalModels(
                algorithm.models(&algorithm.mix(&uniform)),
            ));
        }
        Ok(())
    }
}

/// Peer `me`'s weights for one mix, from its row of the mixing matrix (`(j, W_ij)`, j
/// increasing, `me` absent where its own weight is 0) and the neighbours whose model it has
/// (`present`): a neighbour without one leaves its weight on `me`. In j order, `me` included
/// only with a positive weight, so the weights always sum to the row's sum.
fn mixing_weights(row: &[(u32, f64)], me: u32, present: impl Fn(u32) -> bool) -> Vec<(u32, f64)> {
    let missing: f64 = row
        .iter()
        .filter(|&&(j, _)| j != me && !present(j))
        .map(|&(_, w)| w)
        .sum();
    let own = row.iter().find(|e| e.0 == me).map_or(0.0, |e| e.1) + missing;
    let mut weights: Vec<(u32, f64)> = row
        .iter()
        .filter(|&&(j, _)| j != me && present(j))
        .copied()
        .collect();
    if own > 0.0 {
        let at = weights.partition_point(|e| e.0 < me);
        weights.insert(at, (me, own));
    }
    weights
}

/// Mean squared distance of the vectors to their average: (1/n) Σ_p ‖x_p − x̄‖².
pub fn consensus_distance(models: &[Vec<f32>]) -> f64 {
    let n = models.len();
    if n == 0 {
        return 0.0;
    }
    let dim = models[0].len();
    let mut mean = vec![0f64; dim];
    for m in models {
        for (a, &x) in mean.iter_mut().zip(m) {
            *a += x as f64;
        }
    }
    mean.iter_mut().for_each(|a| *a /= n as f64);
    let total: f64 = models
        .iter()
        .map(|m| {
            m.iter()
                .zip(&mean)
                .map(|(&x, a)| (x as f64 - a).powi(2))
                .sum::<f64>()
        })
        .sum();
    total / n as f64
}

impl<A: Gossip> Actor for Monitor<A> {
    type Context = Context<Self>;
}

impl<A: Gossip> Handler<Deliver<Mixed<A>, GossipMsg<A>>> for Monitor<A> {
    type Result = Result<PeerEffects<A>, SimError>;

    fn handle(
        &mut self,
        d: Deliver<Mixed<A>, GossipMsg<A>>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        super::world::guarded(
            || "the gossip monitor".into(),
            || {
                let mut eff = PeerEffects::<A>::new();
                let at = Seen {
                    round: d.msg.round,
                    time: d.now,
                    client: Some(d.msg.peer),
                };
                let finite = d.msg.model.is_finite();
                self.watch
                    .check(finite, at, DivergenceStage::Mixing, &mut eff);
                self.mixed(d.now, d.msg, &mut eff)?;
                Ok(eff)
            },
        )
    }
}

/// Runs `planned` on peers over `setup`'s topology. Every peer starts from the same initial
/// model (the run's `model_init` stream).
/// With `checkpoints`, the run saves its state where one is due ([`saved`]), and starts from
/// the checkpoint it is given, if any.
pub(super) fn simulate_peers<A: Gossip>(
    planned: Planned<A>,
    setup: Setup,
    observer: RecordObserver<Record>,
    checkpoints: Option<Checkpoints>,
) -> Result<SimOutput, SimError> {
    let system = actix::System::new();
    system.block_on(async move {
        let super::init::Started {
            global,
            jobs,
            dispatch,
        } = super::init::start(planned, &setup);
        let Setup {
            spec,
            seeds,
            data,
            system: system_model,
            topology,
            ..
        } = setup;
        let topology_spec = (spec.topology.clone()).expect("a decentralized plan has a topology");
        let topology = topology.expect("a decentralized plan has a topology");
        let peers = data.num_clients();
        let n_train: Vec<f64> = (0..peers)
            .map(|p| data.split_len(p, Split::Train) as f64)
            .collect();
        let devices = (0..peers as u32)
            .map(|p| device_record(&system_model, p))
            .collect();
        let system_model = Arc::new(system_model);
        let init = Arc::new(global);
        let states: Vec<A::ClientState> = (0..peers as u32)
            .map(|p| jobs.algorithm.init_client(&init, p))
            .collect();
        let total: f64 = n_train.iter().sum();
        let step_weights = match topology_spec.step_weights {
            StepWeights::DataSize if total > 0.0 => {
                n_train.iter().map(|n| peers as f64 * n / total).collect()
            }
            _ => vec![1.0; peers],
        };
        let shared = Arc::new(Shared {
            jobs,
            dispatch,
            system: system_model,
            topology: Arc::new(topology),
            seeds,
            rounds: spec.rounds,
            evaluated: EvaluatedClients::new(spec.evaluation, peers, seeds),
            step_weights,
        });
        let _drain = shared.dispatch.pool().drain_on_drop();
        let (resume, checkpoints) = match checkpoints {
            Some(mut c) => (c.resume.take(), Some(c)),
            None => (None, None),
        };
        let mut resumed = (resume)
            .map(|from| saved::ResumedPeers::<A>::read(from, peers, &shared.jobs))
            .transpose()?;
        let mut saved_peers = (resumed.as_mut()).map(|r| std::mem::take(&mut r.peers).into_iter());
        let mut jobs = Vec::new();
        let mut peer_addrs: Vec<Addr<Peer<A>>> = Vec::with_capacity(peers);
        for (p, state) in states.into_iter().enumerate() {
            let mut peer = Peer {
                watch: DivergenceWatch::new(spec.on_divergence),
                id: p as u32,
                model: init.clone(),
                state,
                shared: shared.clone(),
                inbox: super::gossip::inbox(topology_spec.gossip),
                sent: 0,
                in_flight: Vec::new(),
                version: 0,
            };
            if let Some(saved) = saved_peers.as_mut().and_then(Iterator::next) {
                jobs.push(peer.restore(saved)?);
            }
            peer_addrs.push(peer.start());
        }
        let queue = shared.dispatch.queue();
        let job_context = shared.jobs.clone();
        let mut monitor = Monitor {
            watch: DivergenceWatch::new(spec.on_divergence),
            shared,
            peers,
            rounds: BTreeMap::new(),
        };
        if let Some(resumed) = resumed.as_mut() {
            resumed.restore_monitor(&mut monitor);
        }
        let monitor = monitor.start();
        let peer_addrs = Arc::new(peer_addrs);
        let mut world: HubWorld<_, _, Mixed<A>, PeerMsg<A>> =
            HubWorld::new(monitor.clone(), peer_addrs.clone());
        world.cohorts = queue.map(|queue| queue as Arc<dyn super::world::Flush>);
        world.saver = (checkpoints)
            .map(|c| saved::checkpoint_saver(c, monitor, peer_addrs.clone(), job_context));
        let start = match resumed {
            Some(resumed) => Start::Resume(resumed.resume(&peer_addrs, jobs).await?),
            None => {
                let start = (0..peers as u32)
                    .map(|p| {
                        let train = Routed::Member(PeerMsg::Train { round: 1 });
                        (member_entity(p), member_entity(p), train)
                    })
                    .collect();
                Start::Fresh {
                    start,
                    first: devices,
                }
            }
        };
        run_world(world, start, observer).await
    })
}

#[cfg(test)]
mod tests {
    use super::{consensus_distance, mixing_weights};

    #[test]
    fn an_absent_neighbour_leaves_its_weight_on_the_peer() {
        // Peer 1 with its own weight 0.2 and neighbours 0 (0.5) and 3 (0.3); 3 is absent.
        let row = [(0, 0.5), (1, 0.2), (3, 0.3)];
        assert_eq!(
            mixing_weights(&row, 1, |j| j != 3),
            vec![(0, 0.5), (1, 0.2 + 0.3)]
        );
        assert_eq!(mixing_weights(&row, 1, |_| true), row.to_vec());
        // A row without the peer itself (W_ii = 0, as Fastest Mixing Markov Chain weights can
        // have): it mixes only its neighbours while all are there, takes an absent one's weight,
        // and keeps its own model when all are absent.
        let row = [(0, 0.6), (2, 0.4)];
        assert_eq!(mixing_weights(&row, 1, |_| true), row.to_vec());
        assert_eq!(
            mixing_weights(&row, 1, |j| j == 2),
            vec![(1, 0.6), (2, 0.4)]
        );
        assert_eq!(mixing_weights(&row, 1, |_| false), vec![(1, 0.6 + 0.4)]);
    }

    #[test]
    fn consensus_distance_by_hand() {
        // Mean (1, 1); squared distances 2 and 2: mean 2.
        let d = consensus_distance(&[vec![0.0, 0.0], vec![2.0, 2.0]]);
        assert!((d - 2.0).abs() < 1e-12);
        assert_eq!(consensus_distance(&[vec![1.0, 3.0], vec![1.0, 3.0]]), 0.0);
    }
}
