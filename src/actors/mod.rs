//! The federated entities as actix actors: the server, the clients, the peers of decentralized
//! runs (with their monitor) and the trainer pool.
//!
//! Actors handle one message at a time, delivered by the kernel's scheduler, and return the
//! effects they want; they never message each other directly. Training and evaluation run on
//! the trainer pool and come back as pending messages at times fixed by the system model.
//! This room wires entities to the kernel; it holds no polars code and reads no wall clock.

mod client;
mod cohort;
mod evaluation;
mod gossip;
mod init;
mod peer;
mod policy;
mod sampling;
mod server;
mod trainer;

use crate::algorithms::Launcher;
pub use init::SimInit;
pub use peer::{consensus_distance, PeerMsg};
pub use policy::staleness_factor;
pub use trainer::TrainerPool;

use crate::algorithms::{
    names_where, Algorithm, ClientReport, Evaluation, Gossip, NoveltyShare, Population, Tested,
    Training,
};
use crate::compression::{compress_changes, CompressorSpec};
use crate::data::{ClientRows, FederatedData};
use crate::io::{Floats, SpillStore, Stored};
use crate::models::Architecture;
use crate::models::{Placement, Predictor};
use crate::privacy::ClientLevelPrivacy;
use crate::records::{
    ClientModelsRecord, DeviceRecord, DivergenceRecord, DivergenceStage, EvalRecord, ExtraRecord,
    MixtureRecord, NoveltyRecord, Record,
};
use crate::records::{ModelKind, NoveltyScores, Split};
use crate::robust::{Adversaries, RobustRuleSpec};
use crate::scenario::RunSpec;
use crate::sim::{
    Delivery, Effects, Entity, EntityId, Pending, RecordObserver, Scheduler, SeedTree, SimDuration,
    SimError, SimTime, World,
};
use crate::spec::{EvaluatedSplits, NoveltyScoring, OnDivergence};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::dev::ToEnvelope;
use actix::prelude::*;
use client::Client;
use rand_chacha::ChaCha20Rng;
use sampling::ReportedLoss;
use server::Server;
use std::marker::PhantomData;
use std::sync::Arc;

/// One entity's watch for non-finite numbers: the first time it sees some, it records a
/// [`DivergenceRecord`] (later ones are not recorded again) and, under
/// `on_divergence: stop`, ends the run after the current event.
#[derive(Clone, Copy, Debug)]
struct DivergenceWatch {
    policy: OnDivergence,
    seen: bool,
}

/// When and where a check looks: after `round`, at `time`, at `client` (`None`: the server or
/// the monitor).
#[derive(Clone, Copy, Debug)]
struct Seen {
    round: u32,
    time: SimTime,
    client: Option<u32>,
}

impl DivergenceWatch {
    fn new(policy: OnDivergence) -> Self {
        DivergenceWatch {
            policy,
            seen: false,
        }
    }

    /// Whether `finite` holds; if not, records where it was `seen`, at `stage`, once.
    fn check<M>(
        &mut self,
        finite: bool,
        seen: Seen,
        stage: DivergenceStage,
        eff: &mut Effects<M, Record>,
    ) -> bool {
        if finite {
            return true;
        }
        if !self.seen {
            self.seen = true;
            eff.record(Record::Diverged(DivergenceRecord {
                round: seen.round,
                time: seen.time,
                client: seen.client,
                stage,
            }));
        }
        if self.policy.is_stop() {
            eff.stop();
        }
        false
    }

    /// Checks the losses of an evaluation.
    fn check_evaluation<M>(
        &mut self,
        results: &[Evaluation],
        seen: Seen,
        eff: &mut Effects<M, Record>,
    ) {
        let finite = results.iter().all(|e| e.stats.loss.is_finite());
        self.check(finite, seen, DivergenceStage::Evaluation, eff);
    }
}

/// The held-out clients of a run (sorted): `count` of `total`, drawn from the run's seed.
pub fn unseen_clients(seeds: &SeedTree, total: usize, count: usize) -> Vec<u32> {
    if count == 0 {
        return Vec::new();
    }
    let mut rng = seeds.rng(Entity::Run, "unseen_clients", 0);
    let mut chosen: Vec<u32> = rand::seq::index::sample(&mut rng, total, count)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// The malicious clients of a run (sorted): `adversary.fraction` of its participants (the
/// clients not held out), drawn from the run's `adversary` stream; none without `adversary:`.
pub fn malicious_clients(spec: &RunSpec, total: usize) -> Vec<u32> {
    let Some(adversary) = &spec.adversary else {
        return Vec::new();
    };
    let seeds = SeedTree::new(spec.seed);
    let held_out = (spec.unseen_fraction * total as f64).floor() as usize;
    let unseen = unseen_clients(&seeds, total, held_out);
    let participant = |position: usize| {
        // The position-th client not held out: step over each held-out one at or before it.
        let mut client = position as u32;
        for &gone in &unseen {
            if gone > client {
                break;
            }
            client += 1;
        }
        client
    };
    let mut rng = seeds.rng(Entity::Run, "adversary", 0);
    let mut chosen: Vec<u32> = (adversary.draw(total - unseen.len(), &mut rng).into_iter())
        .map(participant)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// What a finished run hands back.
pub struct SimOutput {
    pub records: Vec<Record>,
    pub end_time: SimTime,
    pub events: u64,
}

/// The messages of a run with a server, each in its recipient's own type.
type Msg<A> = Routed<ToServer<A>, ToClient<A>>;

/// The server's messages.
pub enum ToServer<A: Algorithm> {
    /// Begin round `round` (FedBuff: start the first jobs).
    StartRound { round: u32 },
    /// Round `round`'s deadline has come.
    Deadline { round: u32 },
    /// (FedBuff) A client may have come online; start jobs if slots are free.
    Wake,
    /// A client's update has arrived (`bytes`: what it took on the uplink).
    Update {
        round: u32,
        client: u32,
        update: Stored<A::Update>,
        bytes: u64,
        compute: SimDuration,
        privacy: PrivacyNote,
        /// Under a loss-guided strategy, the loss of the model it started from.
        loss: Option<ReportedLoss>,
    },
    /// (`evaluation.novelty: max_over_clients` or `mean_weights`) What `client` scores
    /// novelty with at round `round`'s evaluation.
    NoveltyShare {
        round: u32,
        client: u32,
        share: NoveltyShare,
    },
    /// A client that was not asked to upload has finished training.
    Done {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
    /// A client dropped out or went offline; its job is lost (the server notices when it
    /// happens, as a broken connection).
    Failed {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
}

/// What every evaluated client's rows are scored by once all of a round's
/// [`NoveltyShare`]s are in (`evaluation.novelty`).
#[derive(Debug, PartialEq)]
pub enum PooledNovelty<G> {
    /// Every evaluated client's classifier, in client order (`max_over_clients`).
    Classifiers(Vec<Vec<f32>>),
    /// The evaluated training clients' mean mixture weights, with the global model they were
    /// evaluated with (`mean_weights`).
    MeanWeights { weights: Vec<f64>, global: Arc<G> },
}

/// A client's messages.
pub enum ToClient<A: Algorithm> {
    /// Train, as the order says.
    Train(TrainOrder<A>),
    /// (From its own training job) Local work is done.
    Trained(FinishedWork<A>),
    /// Evaluate your model after `round`.
    Evaluate { round: u32, global: Arc<A::Global> },
    /// (From its own evaluation job) Results per model and split, and what the algorithm
    /// reports about the state it was evaluated with.
    Evaluated {
        round: u32,
        results: Vec<Evaluation>,
        report: ClientReport,
    },
    /// (`evaluation.novelty: max_over_clients` or `mean_weights`) Score your rows of round
    /// `round`'s evaluation by what every evaluated client shared.
    ScoreNovelty {
        round: u32,
        pooled: Arc<PooledNovelty<A::Global>>,
    },
    /// (From its own scoring job) Its test and novel rows' scores.
    NoveltyScored {
        round: u32,
        scores: Option<NoveltyScores>,
    },
}

/// The server's order to a client: train from `global` with learning rate `lr` for round
/// `round`; `job` indexes the client's random streams (the round, in synchronous runs). Send
/// the update if `upload`, else only a completion notice (pFedMe's unsampled clients train but
/// are not aggregated).
pub struct TrainOrder<A: Algorithm> {
    pub round: u32,
    pub job: u64,
    pub global: Arc<A::Global>,
    pub lr: f64,
    pub upload: bool,
    /// With privacy: the bound the update is clipped to (the round's, under adaptive clipping).
    pub clip: Option<f64>,
}

/// A client's local work for `round`, done after `compute` of simulated time.
pub struct FinishedWork<A: Algorithm> {
    pub round: u32,
    /// Spilled on the pool where the run spills values of its size, as is `state`.
    pub update: Stored<A::Update>,
    /// The update's bytes on the uplink (counted on the pool): 4 a float
    /// ([`Algorithm::update_len`]), or what compression makes of them.
    pub bytes: u64,
    pub state: Stored<A::ClientState>,
    /// Under error feedback, what compression has not sent yet (see [`CompressorSpec`]).
    pub residual: Option<Stored<Vec<f32>>>,
    /// Whether the server asked for the update.
    pub upload: bool,
    pub compute: SimDuration,
    /// Whether the update and the state hold only finite numbers (checked on the pool).
    pub finite: bool,
    pub privacy: PrivacyNote,
    /// Under a loss-guided strategy, the loss of the model the job started from on the
    /// client's training rows (measured on the pool).
    pub loss: Option<ReportedLoss>,
}

/// What privacy tells the server about an update besides the update itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrivacyNote {
    /// Client-level privacy: clipping scaled the update down (it was above the bound).
    pub clipped: bool,
    /// DP-SGD: the local runs whose outcomes the update holds (one per vector it sends), what
    /// the server's accountant composes for the client's records.
    pub dp_sgd_runs: u32,
}

type FlEffects<A> = Effects<Msg<A>, Record>;

/// A message of a world with a hub (rank 0: the server, or a decentralized run's monitor) and
/// members (rank `c + 1`: clients, or peers), in its recipient's own type. Entities send
/// through `Outbox`, which pairs each type with its ranks, so each handler matches only its
/// own messages; the world's `deliver` is the one place that checks a rank against a kind.
pub enum Routed<H, M> {
    Hub(H),
    Member(M),
}

/// Sends of a hub world's entities, typed by recipient.
trait Outbox<H, M> {
    /// `msg` to the hub, after `delay`.
    fn to_hub(&mut self, delay: SimDuration, msg: H);
    /// `msg` to member `member`, after `delay`.
    fn to_member(&mut self, member: u32, delay: SimDuration, msg: M);
    /// Member `member`'s own job's result (a [`Routed::Member`] message), due after `delay`.
    fn to_member_pending(
        &mut self,
        member: u32,
        delay: SimDuration,
        pending: Pending<Routed<H, M>>,
    );
}

impl<H, M> Outbox<H, M> for Effects<Routed<H, M>, Record> {
    fn to_hub(&mut self, delay: SimDuration, msg: H) {
        self.send(HUB, delay, Routed::Hub(msg));
    }

    fn to_member(&mut self, member: u32, delay: SimDuration, msg: M) {
        self.send(member_entity(member), delay, Routed::Member(msg));
    }

    fn to_member_pending(
        &mut self,
        member: u32,
        delay: SimDuration,
        pending: Pending<Routed<H, M>>,
    ) {
        self.send_pending(member_entity(member), delay, pending);
    }
}

/// Runs an entity's handling of one message: a panic inside it (a bug) becomes an error that
/// ends the run, which then keeps its results so far, instead of taking the actor system down
/// with it (`who` names the entity in the message).
fn guarded<T>(
    who: impl FnOnce() -> String,
    handle: impl FnOnce() -> Result<T, SimError>,
) -> Result<T, SimError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(handle)).unwrap_or_else(|panic| {
        Err(SimError::Internal(format!(
            "{} panicked: {}",
            who(),
            trainer::panic_message(&*panic)
        )))
    })
}

/// A message handed to an actor by the scheduler: `msg` in, the effects (sends of the world's
/// message type `W`) out.
struct Deliver<In, W> {
    now: SimTime,
    msg: In,
    world: PhantomData<fn() -> W>,
}

impl<In, W> Deliver<In, W> {
    fn new(now: SimTime, msg: In) -> Self {
        Deliver {
            now,
            msg,
            world: PhantomData,
        }
    }
}

impl<In: 'static, W: 'static> Message for Deliver<In, W> {
    type Result = Result<Effects<W, Record>, SimError>;
}

/// The members of a hub world, by index: actors that are always there (peers), or clients
/// woken on demand (the [`client::Roster`]); they take `In` in a world of messages `W`.
trait Members<In: 'static, W: 'static>: Clone + Unpin + 'static {
    type Actor: Actor + Handler<Deliver<In, W>>;
    fn addr(&self, index: u32) -> Addr<Self::Actor>;
}

impl<In, W, C> Members<In, W> for Arc<Vec<Addr<C>>>
where
    In: 'static,
    W: 'static,
    C: Actor + Handler<Deliver<In, W>>,
{
    type Actor = C;
    fn addr(&self, index: u32) -> Addr<C> {
        self[index as usize].clone()
    }
}

impl<A: Algorithm> Members<ToClient<A>, Msg<A>> for std::rc::Rc<client::Roster<A>> {
    type Actor = Client<A>;
    fn addr(&self, index: u32) -> Addr<Client<A>> {
        self.wake(index)
    }
}

/// The entities of a run as the scheduler sees them: a hub with rank 0 (the server, or the
/// monitor of a decentralized run) that takes `HM`, and members with rank `c + 1` (clients,
/// or peers) that take `MM`.
struct HubWorld<H: Actor, Ms, HM, MM> {
    hub: Addr<H>,
    members: Ms,
    /// The cohort queue the scheduler flushes before it waits, if members train in cohorts.
    cohorts: Option<Arc<dyn cohort::Flush>>,
    _msg: PhantomData<fn() -> (HM, MM)>,
}

impl<H: Actor, Ms, HM, MM> HubWorld<H, Ms, HM, MM> {
    fn new(hub: Addr<H>, members: Ms) -> Self {
        HubWorld {
            hub,
            members,
            cohorts: None,
            _msg: PhantomData,
        }
    }
}

impl<H: Actor, Ms: Clone, HM, MM> Clone for HubWorld<H, Ms, HM, MM> {
    fn clone(&self) -> Self {
        HubWorld {
            hub: self.hub.clone(),
            members: self.members.clone(),
            cohorts: self.cohorts.clone(),
            _msg: PhantomData,
        }
    }
}

impl<H, Ms, HM, MM> World for HubWorld<H, Ms, HM, MM>
where
    HM: Send + Unpin + 'static,
    MM: Send + Unpin + 'static,
    H: Actor + Handler<Deliver<HM, Routed<HM, MM>>>,
    H::Context: ToEnvelope<H, Deliver<HM, Routed<HM, MM>>>,
    Ms: Members<MM, Routed<HM, MM>>,
    <Ms::Actor as Actor>::Context: ToEnvelope<Ms::Actor, Deliver<MM, Routed<HM, MM>>>,
{
    type Msg = Routed<HM, MM>;
    type Record = Record;

    fn deliver(&self, now: SimTime, to: EntityId, msg: Self::Msg) -> Delivery<Self::Msg, Record> {
        let gone = move |e: MailboxError| SimError::ActorGone(format!("entity {}: {e}", to.0));
        match (to, msg) {
            (HUB, Routed::Hub(msg)) => {
                let req = self.hub.send(Deliver::new(now, msg));
                Box::pin(async move { req.await.map_err(gone)? })
            }
            (EntityId(rank @ 1..), Routed::Member(msg)) => {
                let req = self.members.addr(rank - 1).send(Deliver::new(now, msg));
                Box::pin(async move { req.await.map_err(gone)? })
            }
            (EntityId(rank), _) => Box::pin(std::future::ready(Err(SimError::Misrouted(rank)))),
        }
    }

    fn flush(&self) {
        if let Some(queue) = &self.cohorts {
            queue.flush();
        }
    }
}

/// Whose evaluation it is: client (or peer) `client`'s after `round`, at `time`; whether it
/// trained in that round (`sampled`) and whether it is held out of training (`unseen`).
struct EvalContext {
    round: u32,
    time: SimTime,
    client: u32,
    sampled: bool,
    unseen: bool,
}

/// The records of one client's evaluation: what the algorithm reports (mixture weights,
/// extras), then one row per (model, split).
fn evaluation_records(
    EvalContext {
        round,
        time: now,
        client,
        sampled,
        unseen,
    }: EvalContext,
    results: Vec<Evaluation>,
    report: ClientReport,
) -> Vec<Record> {
    let ClientReport {
        mixture,
        cluster,
        extras,
        novelty,
        models,
        // Sent to the server by the client (`evaluation.novelty`).
        novelty_share: _,
    } = report;
    let models = (!models.is_empty()).then_some({
        Record::ClientModels(ClientModelsRecord {
            round,
            client,
            models,
        })
    });
    let novelty = novelty.map(|scores| {
        Record::Novelty(NoveltyRecord {
            round,
            client,
            unseen,
            scores,
        })
    });
    let weights = mixture.map(|weights| {
        Record::Mixture(MixtureRecord {
            round,
            client,
            unseen,
            weights,
        })
    });
    let extras = extras.into_iter().map(|(name, values)| {
        Record::Extra(ExtraRecord {
            round,
            client,
            unseen,
            name,
            values,
        })
    });
    let rows = results.into_iter().map(|e| {
        Record::Eval(EvalRecord {
            round,
            time: now,
            client,
            split: e.split,
            model: e.model,
            n_samples: e.stats.n,
            loss: e.stats.loss,
            accuracy: e.stats.accuracy,
            sampled,
            cluster,
            unseen,
        })
    });
    weights
        .into_iter()
        .chain(extras)
        .chain(novelty)
        .chain(models)
        .chain(rows)
        .collect()
}

/// Rank 0 is the hub (the server, or a decentralized run's monitor); member `c` (client or
/// peer) has rank `c + 1`.
const HUB: EntityId = EntityId(0);

fn member_entity(c: u32) -> EntityId {
    EntityId(c + 1)
}

/// Immutable context shared by all jobs of a run.
pub(crate) struct JobContext<A: Algorithm> {
    algorithm: A,
    arch: Architecture,
    training: Training,
    /// Where cohorts train: `training.device` resolved on this machine.
    placement: Placement,
    data: Arc<FederatedData>,
    on_divergence: OnDivergence,
    /// Where idle values wait (`training.spill`), if anywhere.
    spill: Option<Arc<SpillStore>>,
    /// Client-level privacy (`privacy:`): clients clip what they send, the server noises it.
    privacy: Option<ClientLevelPrivacy>,
    /// How clients compress what they send (`compression.uplink`).
    uplink: Option<CompressorSpec>,
    /// Which clients are malicious, and their attack (`adversary:`).
    adversary: Option<Adversaries>,
    /// The server's robust rule (`aggregation:`).
    robust: Option<RobustRuleSpec>,
    /// The splits an evaluation measures (`evaluation.splits`).
    evaluated: EvaluatedSplits,
    /// Clients report the loss of the model they start from (`sampling.strategy` reads it).
    reports_loss: bool,
    /// Clients copy their own models into their evaluation reports
    /// ([`RunSpec::saves_client_models`]).
    saves_client_models: bool,
    /// How rows are scored for novelty (`evaluation.novelty`; `own` where no client has
    /// novel rows, so that nothing is gathered).
    novelty: NoveltyScoring,
}

impl<A: Algorithm> JobContext<A> {
    /// The context of `spec`'s jobs: `algorithm` training `arch` on `data`, with a spill file
    /// if `training.spill` asks for one, and `privacy` resolved for the run's clients.
    fn new(
        algorithm: A,
        arch: Architecture,
        spec: &RunSpec,
        placement: Placement,
        data: Arc<FederatedData>,
        privacy: Option<ClientLevelPrivacy>,
    ) -> Self {
        let spill = (spec.training.spill.store_settings())
            .map(|(min_floats, budget)| SpillStore::new(min_floats, budget));
        let data_clients = data.num_clients();
        // The pooled scores gather every evaluated client's share, so only where some client
        // has novel rows to score.
        let novelty = match spec.evaluation.novelty {
            pooled if !pooled.is_own() && data.has_novel_rows() => pooled,
            _ => NoveltyScoring::Own,
        };
        JobContext {
            algorithm,
            arch,
            training: spec.training.clone(),
            placement,
            data,
            on_divergence: spec.on_divergence,
            spill,
            privacy,
            uplink: spec.compression.as_ref().and_then(|c| c.uplink.clone()),
            adversary: (spec.adversary.as_ref()).map(|a| Adversaries {
                attack: a.attack.clone(),
                malicious: malicious_clients(spec, data_clients),
            }),
            robust: spec.aggregation.clone(),
            evaluated: spec.evaluation.splits,
            reports_loss: spec.sampling.strategy.uses_feedback(),
            saves_client_models: spec.saves_client_models,
            novelty,
        }
    }

    /// Client `client`'s test and novel rows of round `round`'s evaluation, each scored by
    /// what every evaluated client shared: the highest confidence maxᵧ p(y | x) of their
    /// classifiers, or the algorithm's score with their mean mixture weights
    /// (`evaluation.novelty`); `None` where the data set has no novel rows. Runs on the pool.
    fn novelty_pooled(
        &self,
        client: u32,
        round: u32,
        pooled: &PooledNovelty<A::Global>,
    ) -> Option<NoveltyScores> {
        let rows = self.data.rows_for(&[client]);
        let (data, index) = (rows.data(), rows.index(0));
        if data.novel.is_empty() {
            return None;
        }
        let (test, novel) = (data.view(index, Split::Test), data.novel_view(index));
        match pooled {
            PooledNovelty::Classifiers(models) => {
                let models: Vec<&[f32]> = models.iter().map(Vec::as_slice).collect();
                let highest = |view| crate::models::highest_confidence(&self.arch, &models, view);
                Some(NoveltyScores {
                    typical: highest(test),
                    novel: highest(novel),
                })
            }
            PooledNovelty::MeanWeights { weights, global } => {
                // Validation has checked that the algorithm has mixture weights.
                let mixture = A::MIXTURE_WEIGHTS.expect("the algorithm has mixture weights");
                let state = (mixture.state)(weights.clone());
                let ctx = self.local((&rows, 0), client, round, self.training.lr_at(round));
                let score = |view| self.algorithm.typicality(&ctx, global, &state, view);
                score(test)
                    .zip(score(novel))
                    .map(|(typical, novel)| NoveltyScores { typical, novel })
            }
        }
    }

    /// Where the run saves its clients' own models, copies of those in `tested` (every kind but
    /// the server's model, whose parameters are in the final models; a mixture's weights are
    /// in the report already), for the client's report.
    fn own_models(&self, tested: &[Tested<'_>]) -> Vec<(ModelKind, Vec<Vec<f32>>)> {
        if !self.saves_client_models {
            return Vec::new();
        }
        tested
            .iter()
            .filter(|t| t.kind != ModelKind::Global)
            .filter_map(|t| match &t.model {
                Predictor::Params(params) => Some((t.kind, vec![params.to_vec()])),
                Predictor::Mixture { .. } => None,
            })
            .collect()
    }

    /// Where clients report their loss, the loss of the model `client`'s job started from
    /// (the global vector `update` moves from) on its training rows; `None` where they do not.
    /// Runs on the pool.
    fn starting_loss(
        &self,
        client: u32,
        global: &A::Global,
        update: &mut A::Update,
    ) -> Option<ReportedLoss> {
        let hooks = A::PRIVATE_UPDATES.filter(|_| self.reports_loss)?;
        let sent = (hooks.sent)(global, update);
        let [(base, _)] = &sent[..] else {
            panic!("a loss-guided strategy runs only with algorithms that send one vector");
        };
        let rows = self.data.rows_for(&[client]);
        let view = rows.data().view(rows.index(0), Split::Train);
        let losses = crate::models::sample_losses(&self.arch, &[base], view);
        Some(ReportedLoss::of(&losses[0]))
    }

    /// Whether the server rewrites a round's updates before aggregating them
    /// ([`JobContext::robust_round`]).
    fn rewrites_rounds(&self) -> bool {
        self.robust.is_some() || (self.adversary.as_ref()).is_some_and(|a| a.attack.is_crafted())
    }

    /// Whether `client` is one of the run's malicious clients.
    fn is_malicious(&self, client: u32) -> bool {
        (self.adversary.as_ref()).is_some_and(|a| a.malicious.binary_search(&client).is_ok())
    }

    /// Under a crafted attack or a robust rule, the round's fresh `updates` (in client order)
    /// rewritten so that the algorithm's own aggregation makes the move they call for: the
    /// malicious clients' vectors replaced by the attack crafted from the honest ones (ALIE,
    /// IPM), then every update's change replaced by the robust rule's (one per sent vector;
    /// FedEM: per component) with every client weighing the same. The algorithm's aggregation
    /// then moves the global model as it would by a round of clients that all sent the rule's
    /// change. Without either, nothing changes.
    /// `last` holds the rule's change of the previous round, per vector (empty before the
    /// first), and is set to this round's.
    fn robust_round(
        &self,
        global: &A::Global,
        updates: &mut [(u32, A::Update)],
        last: &mut Vec<Vec<f64>>,
    ) {
        let crafted = (self.adversary.as_ref()).filter(|a| a.attack.is_crafted());
        let (Some(hooks), true) = (
            A::PRIVATE_UPDATES,
            crafted.is_some() || self.robust.is_some(),
        ) else {
            return;
        };
        let n = updates.len();
        // changes[i][j]: client i's change of sent vector j, in f64.
        let mut changes: Vec<Vec<Vec<f64>>> = (updates.iter_mut())
            .map(|(_, u)| {
                (hooks.sent)(global, u)
                    .iter()
                    .map(|(b, s)| crate::models::change(b, s))
                    .collect()
            })
            .collect();
        let vectors = changes.first().map_or(0, Vec::len);
        if let Some(adversary) = crafted {
            let bad: Vec<bool> = updates.iter().map(|(c, _)| self.is_malicious(*c)).collect();
            let malicious = bad.iter().filter(|&&b| b).count();
            if malicious > 0 && malicious < n {
                for j in 0..vectors {
                    let honest: Vec<&[f64]> = (changes.iter().zip(&bad))
                        .filter(|(_, &b)| !b)
                        .map(|(c, _)| &c[j][..])
                        .collect();
                    let lie = adversary.attack.crafted(&honest, n, malicious);
                    for (c, _) in changes.iter_mut().zip(&bad).filter(|(_, &b)| b) {
                        c[j].clone_from(&lie);
                    }
                }
            }
        }
        if let Some(rule) = &self.robust {
            last.resize(vectors, Vec::new());
            for (j, previous) in last.iter_mut().enumerate() {
                let round: Vec<&[f64]> = changes.iter().map(|c| &c[j][..]).collect();
                *previous = rule.combine(&round, previous);
                changes.iter_mut().for_each(|c| c[j].clone_from(previous));
            }
        }
        for ((_, u), change) in updates.iter_mut().zip(&changes) {
            for ((base, sent), c) in (hooks.sent)(global, u).into_iter().zip(change) {
                for ((s, &b), d) in sent.iter_mut().zip(base).zip(c) {
                    *s = (b as f64 + d) as f32;
                }
            }
            if self.robust.is_some() {
                (hooks.equal_weight)(&self.algorithm, u);
            }
        }
    }

    /// A client's fresh update as it leaves the client, and the bytes it puts on the uplink
    /// (`update_len` floats of 4 bytes each, or what compression makes of them). In order:
    /// - a malicious client's own attack (`attack`: its `attack` stream of the job; crafted
    ///   attacks are the server's, [`JobContext::robust_round`]);
    /// - with client-level privacy, its changes from `global` clipped to `bound` (the
    ///   order's), noised from `noise` under the local mechanism or with its share of the noise
    ///   under the distributed one (the client's `privacy_noise` stream of the job);
    /// - with `compression.uplink`, each sent vector's change (plus its part of `residual`
    ///   under error feedback, which then keeps what was not sent) compressed, drawing from
    ///   the client's `compression` stream of the job;
    /// - with privacy, its weight made every client's.
    ///
    /// Under DP-SGD, privacy changes nothing here: the note counts the vectors sent, each one
    /// local run's outcome.
    fn prepare_upload(
        &self,
        global: &A::Global,
        update: &mut A::Update,
        attack: Option<&mut ChaCha20Rng>,
        bound: Option<f64>,
        noise: Option<&mut ChaCha20Rng>,
        compression: Option<(&mut ChaCha20Rng, &mut Vec<f32>)>,
    ) -> (PrivacyNote, u64) {
        if let (Some(rng), Some(adversary), Some(hooks)) =
            (attack, &self.adversary, A::PRIVATE_UPDATES)
        {
            for (base, sent) in (hooks.sent)(global, update) {
                let mut change = crate::models::change(base, sent);
                adversary.attack.own(&mut change, rng);
                for ((s, &b), d) in sent.iter_mut().zip(base).zip(change) {
                    *s = (b as f64 + d) as f32;
                }
            }
        }
        let mut clipped = false;
        let mut dp_sgd_runs = 0;
        if let (Some(_), Some(hooks)) = (self.training.plan.dp_sgd, A::PRIVATE_UPDATES) {
            dp_sgd_runs = (hooks.sent)(global, update).len() as u32;
        }
        if let (Some(privacy), Some(hooks)) = (&self.privacy, A::PRIVATE_UPDATES) {
            let bound = bound.expect("a private run's order carries its bound");
            let mut sent = (hooks.sent)(global, update);
            clipped = ClientLevelPrivacy::clip(&mut sent, bound) > bound;
            if let Some(std) = privacy.client_noise_std() {
                let noise = noise.expect("the client's noise stream");
                let mut vectors: Vec<&mut [f32]> = sent.into_iter().map(|(_, v)| v).collect();
                ClientLevelPrivacy::add_noise(&mut vectors, std, noise);
            }
        }
        // (bytes of the compressed vectors, floats they stood for)
        let mut compressed = (0, 0);
        if let (Some(uplink), Some(hooks)) = (&self.uplink, A::PRIVATE_UPDATES) {
            let (rng, residual) = compression.expect("the client's compression stream");
            let mut sent = (hooks.sent)(global, update);
            let dense = sent.iter().map(|(b, _)| b.len()).sum();
            compressed = (compress_changes(uplink, &mut sent, residual, rng), dense);
        }
        if let (Some(_), Some(hooks)) = (&self.privacy, A::PRIVATE_UPDATES) {
            (hooks.equal_weight)(&self.algorithm, update);
        }
        let floats = self.algorithm.update_len(update);
        let bytes = compressed.0 + payload_bytes(floats.saturating_sub(compressed.1));
        let note = PrivacyNote {
            clipped,
            dp_sgd_runs,
        };
        (note, bytes)
    }

    /// `value`, spilled if the run spills values of its size. Runs on the pool: a failed write
    /// fails the job with the spill file's error.
    fn keep<T: Floats>(&self, value: T) -> Stored<T> {
        match &self.spill {
            None => Stored::in_memory(value),
            Some(store) => store
                .keep(value)
                .unwrap_or_else(|e| panic!("spilling a finished job's result: {e}")),
        }
    }

    /// What client `client`'s job sees in `round`, at learning rate `lr`; its rows are the
    /// `k`-th of `rows` (from [`FederatedData::rows_for`]).
    fn local<'a>(
        &'a self,
        (rows, k): (&'a ClientRows<'_>, usize),
        client: u32,
        round: u32,
        lr: f64,
    ) -> crate::algorithms::LocalContext<'a> {
        crate::algorithms::LocalContext {
            arch: &self.arch,
            training: &self.training,
            data: rows.data(),
            data_index: rows.index(k),
            client,
            round,
            lr,
            evaluated: self.evaluated,
        }
    }
}

/// Runs one simulation on `threads` trainer threads: the scenario's algorithm, with a server or
/// on peers as it is registered. `observer` sees every record as it is made, and says whether
/// the output keeps them.
pub fn simulate(
    spec: &RunSpec,
    data: Arc<FederatedData>,
    threads: usize,
    observer: RecordObserver<Record>,
) -> Result<SimOutput, SimError> {
    crate::spec::check_client_counts(
        data.num_clients(),
        spec.unseen_fraction,
        &spec.sampling,
        &spec.evaluation,
    )
    .map_err(SimError::Scenario)?;
    crate::scenario::check_robust_counts(
        spec.aggregation.as_ref(),
        data.num_clients(),
        spec.unseen_fraction,
        &spec.sampling,
    )
    .map_err(SimError::Scenario)?;
    let data = poisoned(spec, data)?;
    let placement = spec.training.device.resolve_here().map_err(|m| {
        SimError::Scenario(crate::spec::FieldError::new("training.device".into(), m))
    })?;
    let held_out_count = (spec.unseen_fraction * data.num_clients() as f64).floor() as usize;
    let unseen = unseen_clients(
        &SeedTree::new(spec.seed),
        data.num_clients(),
        held_out_count,
    );
    spec.algorithm
        .launch(Launch {
            spec,
            placement,
            data,
            threads,
            unseen,
            observer,
        })
        .map_err(SimError::Scenario)?
}

/// `data` with the malicious clients' training data poisoned, under an adversary that
/// poisons data (resident data only: rows made on demand are made for each job, unpoisoned):
/// the attack's own poisoning ([`crate::robust::AttackSpec::poison`]).
fn poisoned(spec: &RunSpec, data: Arc<FederatedData>) -> Result<Arc<FederatedData>, SimError> {
    let Some(adversary) = &spec.adversary else {
        return Ok(data);
    };
    let refuse = |path: &str, message: String| {
        Err(SimError::Scenario(crate::spec::FieldError::new(
            path.into(),
            message,
        )))
    };
    let malicious = malicious_clients(spec, data.num_clients());
    if malicious.is_empty() {
        return refuse(
            "adversary.fraction",
            format!(
                "{} of this run's participants is no client (⌊fraction·N⌋ = 0); raise it",
                adversary.fraction
            ),
        );
    }
    let attack = &adversary.attack;
    if !attack.poisons_data() {
        return Ok(data);
    }
    if !data.is_resident() {
        return refuse(
            "adversary.attack",
            format!(
                "`{}` poisons the malicious clients' training data in memory, and this data \
                 set makes its rows on demand; load it whole (no `on_demand`) or use another \
                 attack",
                attack.name()
            ),
        );
    }
    let mut data = Arc::unwrap_or_clone(data);
    attack
        .poison(&mut data, &malicious, spec.seed)
        .map_err(|message| {
            SimError::Scenario(crate::spec::FieldError::new(
                "adversary.attack".into(),
                message,
            ))
        })?;
    Ok(Arc::new(data))
}

/// DP-SGD as `spec`'s run over `data` applies it (σ solved where it gives `target_epsilon`),
/// with the local runs an update sends, without running it: what `fedsim describe` prints.
/// `None` without DP-SGD.
pub fn sample_privacy(
    spec: &RunSpec,
    data: Arc<FederatedData>,
) -> Result<Option<(crate::privacy::SampleLevelPrivacy, u64)>, SimError> {
    if spec.training.plan.dp_sgd.is_none() {
        return Ok(None);
    }
    let held_out_count = (spec.unseen_fraction * data.num_clients() as f64).floor() as usize;
    let unseen = unseen_clients(
        &SeedTree::new(spec.seed),
        data.num_clients(),
        held_out_count,
    );
    let init = SimInit::new(spec, data.clone())?;
    spec.algorithm
        .launch(SamplePrivacy {
            spec,
            init,
            population: population_of(&data, &unseen),
        })
        .map_err(SimError::Scenario)?
}

/// What [`sample_privacy`] hands the registry: it builds the algorithm, and its initial global
/// model says how many local runs an update sends.
struct SamplePrivacy<'a> {
    spec: &'a RunSpec,
    init: SimInit,
    population: Population,
}

impl Launcher for SamplePrivacy<'_> {
    type Output = Result<Option<(crate::privacy::SampleLevelPrivacy, u64)>, SimError>;

    fn population(&self) -> Population {
        self.population.clone()
    }

    fn server<A: Algorithm>(self, algorithm: A) -> Self::Output {
        self.init.sample_privacy_of(&algorithm, self.spec)
    }

    fn peers<A: Gossip>(self, algorithm: A) -> Self::Output {
        self.init.sample_privacy_of(&algorithm, self.spec)
    }
}

/// The clients as an algorithm sees them when it is built (`unseen` sorted).
fn population_of(data: &Arc<FederatedData>, unseen: &[u32]) -> Population {
    let participants_train = (0..data.num_clients())
        .filter(|&c| unseen.binary_search(&(c as u32)).is_err())
        .map(|c| data.split_len(c, Split::Train))
        .sum();
    Population {
        clients: data.num_clients(),
        participants_train,
        input_dim: data.dim,
        data: Arc::clone(data),
        unseen: unseen.to_vec(),
    }
}

/// Everything a run needs but its algorithm: what the registry hands the algorithm it builds.
pub struct Launch<'a> {
    spec: &'a RunSpec,
    placement: Placement,
    data: Arc<FederatedData>,
    threads: usize,
    /// The held-out clients (sorted).
    unseen: Vec<u32>,
    observer: RecordObserver<Record>,
}

impl Launcher for Launch<'_> {
    type Output = Result<SimOutput, SimError>;

    fn population(&self) -> Population {
        population_of(&self.data, &self.unseen)
    }

    fn server<A: Algorithm>(self, algorithm: A) -> Result<SimOutput, SimError> {
        if self.spec.topology.is_some() {
            return Err(SimError::Scenario(crate::spec::FieldError::new(
                "topology".into(),
                format!(
                    "`{}` needs a server; a topology takes {}",
                    self.spec.algorithm.name(),
                    names_where(|c| c.decentralized)
                ),
            )));
        }
        simulate_with(algorithm, self)
    }

    /// On peers over the scenario's topology.
    fn peers<A: Gossip>(self, algorithm: A) -> Result<SimOutput, SimError> {
        if self.spec.topology.is_none() {
            return Err(SimError::Scenario(crate::spec::FieldError::new(
                "topology".into(),
                format!(
                    "`{}` runs on peers and needs a `topology`",
                    self.spec.algorithm.name()
                ),
            )));
        }
        peer::simulate_peers(
            algorithm,
            self.spec,
            self.placement,
            self.data,
            self.threads,
            self.observer,
        )
    }
}

/// Client (or peer) `c`'s device and links as the system model drew them.
fn device_record(system: &SystemModel, c: u32) -> Record {
    Record::Device(DeviceRecord {
        client: c,
        samples_per_second: system.samples_per_second(c),
        downlink_mbps: system.bandwidth_mbps(c, Link::Down),
        uplink_mbps: system.bandwidth_mbps(c, Link::Up),
    })
}

/// Runs `algorithm` with a server and clients, as `launch` says.
fn simulate_with<A: Algorithm>(algorithm: A, launch: Launch) -> Result<SimOutput, SimError> {
    let Launch {
        spec,
        placement,
        data,
        threads,
        unseen,
        observer,
    } = launch;
    let spec = spec.clone();
    let privacy = (spec.privacy_for(data.num_clients())).map_err(SimError::Scenario)?;
    let system = actix::System::new();
    system.block_on(async move {
        let num_clients = data.num_clients() as u32;
        let init::Started {
            seeds,
            global,
            jobs,
            dispatch,
            system: system_model,
            sample_privacy,
        } = SimInit::new(&spec, data)?.start(algorithm, &spec, placement, threads, privacy)?;
        let _drain = dispatch.pool().drain_on_drop();
        let global = Arc::new(global);
        let clients = client::Roster::new(client::RosterParts {
            jobs: jobs.clone(),
            dispatch: dispatch.clone(),
            system: system_model.clone(),
            seeds,
            unseen: unseen.clone(),
            initial: global.clone(),
            clients: num_clients as usize,
        });
        let server = Server::new(
            server::ServerConfig {
                algorithm: jobs.clone(),
                rounds: spec.rounds,
                evaluated: evaluation::EvaluatedClients::new(
                    spec.evaluation,
                    num_clients as usize,
                    seeds,
                ),
                num_clients,
                participants: (0..num_clients)
                    .filter(|c| unseen.binary_search(c).is_err())
                    .collect(),
                sampling: spec.sampling.clone(),
                policy: spec.policy.clone(),
                system: system_model,
                seeds,
                sample_privacy,
                secure_aggregation: spec.secure_aggregation.clone(),
                downlink: spec.compression.as_ref().and_then(|c| c.downlink.clone()),
            },
            global,
        )
        .start();
        let mut world: HubWorld<_, _, ToServer<A>, ToClient<A>> = HubWorld::new(server, clients);
        world.cohorts = dispatch
            .queue()
            .map(|queue| queue as Arc<dyn cohort::Flush>);
        let start = vec![(HUB, HUB, Routed::Hub(ToServer::StartRound { round: 1 }))];
        // Each client's device is recorded when it first wakes.
        // The malicious clients come first; each client's device is recorded when it first
        // wakes.
        let malicious = (jobs.adversary.as_ref()).map(|a| Record::Malicious(a.malicious.clone()));
        run_world(world, start, malicious.into_iter().collect(), observer).await
    })
}

/// Runs `world` from the `start` events; the device records come first in the output (and are
/// shown to `observer` first).
async fn run_world<W: World<Record = Record>>(
    world: W,
    start: Vec<(EntityId, EntityId, W::Msg)>,
    devices: Vec<Record>,
    mut observer: RecordObserver<Record>,
) -> Result<SimOutput, SimError> {
    let mut records: Vec<Record> = devices
        .into_iter()
        .filter_map(|r| observer.see(r))
        .collect();
    let outcome = Scheduler::run(world, start, observer).await?;
    records.extend(outcome.records);
    Ok(SimOutput {
        records,
        end_time: outcome.end_time,
        events: outcome.events,
    })
}

/// A tiny FedAvg run for the actors' unit tests: two clients of three features, 3 rounds.
#[cfg(test)]
pub(crate) mod testkit {
    use super::JobContext;
    use crate::algorithms::FedAvg;
    use crate::models::Placement;
    use crate::scenario::Scenario;
    use crate::sim::SeedTree;
    use crate::system::SystemModel;
    use std::path::Path;
    use std::sync::Arc;

    /// The scenario `rounds: 3` on that data with `fedavg` and the extra YAML lines `extra`,
    /// then `overrides`; its job context and system model, all from seed 1.
    pub fn fedavg_run(
        extra: &str,
        overrides: &[&str],
    ) -> (Scenario, Arc<JobContext<FedAvg>>, Arc<SystemModel>) {
        let text = format!(
            "rounds: 3\ndata: {{kind: fedem_synthetic, clients: 2, dim: 3}}\n\
             algorithm: {{name: fedavg}}\n{extra}"
        );
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let s = Scenario::from_yaml(&text, Path::new("t.yaml"), &overrides).unwrap();
        let data = Arc::new(s.data.build(&s.split, &SeedTree::new(1)).unwrap());
        let parts = super::SimInit::new(&s.run, data).unwrap();
        let jobs = Arc::new(JobContext::new(
            FedAvg::plain(),
            parts.arch,
            &s.run,
            Placement::default(),
            parts.data,
            None,
        ));
        (s, jobs, Arc::new(parts.system))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oort's panic on non-finite feedback ended runs as "Mailbox has closed": a panic inside
    /// an entity is now an error that names it and what it said.
    #[test]
    fn a_panic_inside_an_entity_is_an_error_naming_it() {
        let handled: Result<(), SimError> = guarded(
            || "client 3".into(),
            || panic!("`amount` of samples must be less than or equal to `length`"),
        );
        let e = handled.unwrap_err().to_string();
        assert_eq!(
            e,
            "internal error (a bug in fedsim; please report it): client 3 panicked: `amount` of \
             samples must be less than or equal to `length`"
        );
        assert_eq!(guarded(|| "the server".into(), || Ok(7)).unwrap(), 7);
    }

    /// An actor that answers every message with no effects.
    struct Quiet;

    impl Actor for Quiet {
        type Context = Context<Self>;
    }

    type Words = Routed<&'static str, u32>;

    impl Handler<Deliver<&'static str, Words>> for Quiet {
        type Result = Result<Effects<Words, Record>, SimError>;
        fn handle(
            &mut self,
            _: Deliver<&'static str, Words>,
            _: &mut Context<Self>,
        ) -> Self::Result {
            Ok(Effects::new())
        }
    }

    impl Handler<Deliver<u32, Words>> for Quiet {
        type Result = Result<Effects<Words, Record>, SimError>;
        fn handle(&mut self, _: Deliver<u32, Words>, _: &mut Context<Self>) -> Self::Result {
            Ok(Effects::new())
        }
    }

    #[test]
    fn a_world_delivers_each_kind_only_to_its_ranks() {
        actix::System::new().block_on(async {
            let members = Arc::new(vec![Quiet.start(), Quiet.start()]);
            let world: HubWorld<Quiet, _, &'static str, u32> =
                HubWorld::new(Quiet.start(), members);
            let now = SimTime::ZERO;
            assert!(world.deliver(now, HUB, Routed::Hub("start")).await.is_ok());
            let to_member = world.deliver(now, member_entity(1), Routed::Member(7));
            assert!(to_member.await.is_ok());
            let member_kind_to_hub = world.deliver(now, HUB, Routed::Member(7)).await;
            assert!(matches!(member_kind_to_hub, Err(SimError::Misrouted(0))));
            let hub_kind_to_member = world.deliver(now, member_entity(1), Routed::Hub("x")).await;
            assert!(matches!(hub_kind_to_member, Err(SimError::Misrouted(2))));
        });
    }
}
