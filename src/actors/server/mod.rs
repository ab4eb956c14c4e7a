//! The server: selects clients, sends them the model, and aggregates what arrives, under the
//! scenario's round policy.
//!
//! The server's shared state (the global model, the jobs in flight, the round's counts) is its
//! [`Core`]; when to start jobs and when to aggregate belongs to the round policy, a type that
//! owns the state it needs ([`RoundPolicy`]):
//! - [`Synchronous`] rounds (`synchronous.rs`): a round selects clients among the idle (and, if
//!   asked, online) ones and ends when every trainer has reported (update, completion notice or
//!   failure), when the first K updates are in (over-selection), or at the deadline. Jobs still
//!   running when a round ends are stragglers (deadline) or discarded (over-selection); a
//!   straggler's update may join the next aggregation with its staleness
//!   (`late_updates: next_round`).
//! - [`Fedbuff`] (`fedbuff.rs`): up to `concurrency` jobs run at any time; every `buffer_size`
//!   arrivals are aggregated with staleness weights; each aggregation is a "round".
//!
//! A client is never sent a second job while one is in flight. The server reads the system
//! model only to ask who is online; all durations are the clients' and the links'. A policy
//! must not read another policy's settings, nor start a job except through [`Core::dispatch`].

mod downlink;
mod fedbuff;
mod online;
mod saved;
mod synchronous;

pub(super) use saved::{Restored, SaveState};

use super::divergence::{DivergenceWatch, Seen};
use super::evaluation::EvaluatedClients;
use super::job::JobContext;
use super::messages::{FlEffects, Msg, PooledNovelty, PrivacyNote, ToClient, ToServer, TrainOrder};
use super::world::{guarded, Deliver, Outbox};
use crate::algorithms::{Algorithm, Finite, NoveltyShare, StaleUpdate, Updates};
use crate::io::Stored;
use crate::policy::{staleness_factor, FedbuffSpec, PolicySpec, SynchronousSpec};
use crate::privacy::{
    ClientLevelPrivacy, NoiseAt, RecordAccountant, SampleLevelPrivacy, ShareAccountant,
    TreeAccountant,
};
use crate::records::{
    AdaptiveRound, DivergenceStage, EarlyEndRecord, JobOutcome, JobRecord, Record, RoundPrivacy,
    RoundRecord,
};
use crate::sampling::{AllBut, Candidates, Feedback, Heard, ReportedLoss, Sampling};
use crate::server_optimizer::Moments;
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use downlink::Downlink;
use fedbuff::Fedbuff;
use online::{OnlineIdle, OnlineIdleView};
use std::collections::BTreeMap;
use std::sync::Arc;
use synchronous::Synchronous;

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
    /// Under DP-SGD: what the accountant of the clients' records needs.
    pub sample_privacy: Option<SampleLevelPrivacy>,
    /// Secure aggregation's cost, paid by every round.
    pub secure_aggregation: Option<crate::system::secagg::SecAggSpec>,
    /// How the model sent to clients is compressed (`compression.downlink`).
    pub downlink: Option<crate::compression::CompressorSpec>,
    /// How the server steps the global model along its aggregate's change (`server_optimizer`).
    pub server_optimizer: Option<crate::server_optimizer::ServerOptimizerSpec>,
}

/// The participants a draw may choose from ([`Core::candidates`]).
enum Idle<'a> {
    /// Every participant but those with a job in flight.
    AllBut(AllBut<'a>),
    /// The idle participants online now.
    Online(OnlineIdleView<'a>),
}

impl Candidates for Idle<'_> {
    fn len(&self) -> usize {
        match self {
            Idle::AllBut(idle) => idle.len(),
            Idle::Online(online) => online.len(),
        }
    }

    fn get(&self, i: usize) -> u32 {
        match self {
            Idle::AllBut(idle) => idle.get(i),
            Idle::Online(online) => online.get(i),
        }
    }

    fn to_vec(&self) -> Vec<u32> {
        match self {
            Idle::AllBut(idle) => idle.to_vec(),
            Idle::Online(online) => online.to_vec(),
        }
    }
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
    /// The mean loss its client reported with it (loss-guided selection).
    reported_loss: Option<f64>,
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

    /// The clients with a job in flight, ascending.
    fn clients(&self) -> impl Iterator<Item = u32> + '_ {
        self.jobs.keys().copied()
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
    /// Spilled where the run spills values of its size: read back at the aggregation.
    update: Stored<A::Update>,
    base: Arc<A::Global>,
    staleness: u32,
    /// With privacy: whether clipping scaled the update down.
    clipped: bool,
}

/// A held update read back into memory, with its client, base model and staleness (stale
/// aggregations take their updates all at once).
type ReadBack<A> = (
    u32,
    Arc<<A as Algorithm>::Global>,
    u32,
    <A as Algorithm>::Update,
);

/// When the server starts jobs and aggregates: one type per policy, owning the state it needs.
/// The server hands it every event after the bookkeeping all policies share (a report's job is
/// taken out of flight, its bytes counted; a failure is recorded).
trait RoundPolicy<A: Algorithm> {
    /// `StartRound { round }`: the run's first event, and a synchronous round's start.
    fn start(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        round: u32,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError>;

    /// `client`'s `job` came back with its update, or with a completion notice (`None`).
    fn receive(
        &mut self,
        core: &mut Core<A>,
        report: Report<A>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError>;

    /// `job` failed at `now` (dropout or offline); its record is written.
    fn failed(
        &mut self,
        core: &mut Core<A>,
        now: SimTime,
        job: &InFlight<A::Global>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError>;

    /// What the policy keeps, where the run can be saved now (the models its held updates
    /// started from go into `models`); `None` where it cannot.
    fn saved(
        &self,
        models: &mut saved::Models<A::Global>,
    ) -> Result<Option<saved::PolicyState<A::Update>>, SimError>;

    /// Takes back what [`RoundPolicy::saved`] kept.
    fn restore(
        &mut self,
        state: saved::PolicyState<A::Update>,
        models: &saved::SavedModels<A::Global>,
        jobs: &JobContext<A>,
    ) -> Result<(), SimError>;

    /// `Deadline { round }`, which only a policy with deadlines schedules (and implements).
    fn deadline(
        &mut self,
        _core: &mut Core<A>,
        _now: SimTime,
        round: u32,
        _eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        Err(SimError::Internal(format!(
            "the round policy got a deadline for round {round} that it never scheduled"
        )))
    }

    /// `Wake`, which only a policy that waits for clients to come online schedules (and
    /// implements).
    fn wake(
        &mut self,
        _core: &mut Core<A>,
        _now: SimTime,
        _eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        Err(SimError::Internal(
            "the round policy got a wake-up it never scheduled".into(),
        ))
    }
}

/// A job's report as the round policy gets it.
struct Report<A: Algorithm> {
    now: SimTime,
    client: u32,
    job: InFlight<A::Global>,
    /// `None`: a completion notice (the client was not asked to upload).
    update: Option<Stored<A::Update>>,
    compute: SimDuration,
    /// With privacy: whether clipping scaled the update down.
    clipped: bool,
}

/// The round policy `spec` asks for, in its initial state: the server's behaviour for each
/// item of [`crate::policy::POLICIES`] (a test starts every one).
fn round_policy<A: Algorithm>(spec: &PolicySpec) -> Box<dyn RoundPolicy<A>> {
    if let Some(s) = spec.settings::<SynchronousSpec>() {
        return Box::new(Synchronous::new(
            s.deadline_s.map(SimDuration::from_secs_f64_ceil),
            s.late_updates,
            s.max_staleness,
            s.staleness_exponent,
        ));
    }
    if let Some(s) = spec.settings::<FedbuffSpec>() {
        return Box::new(Fedbuff::new(s.clone()));
    }
    unreachable!("policy `{}` has no behaviour in the server", spec.name())
}

/// What every round policy shares: the global model, the jobs in flight and the counts of the
/// round being recorded.
struct Core<A: Algorithm> {
    cfg: ServerConfig<A>,
    global: Arc<A::Global>,
    /// The current round (synchronous) or the number of aggregations so far (FedBuff).
    round: u32,
    in_flight: InFlightJobs<A::Global>,
    /// What the server has counted and learned so far (a checkpoint saves it whole).
    ledger: Ledger,
    /// Under `compression.downlink`, the clients' copy of the model and what each holds.
    downlink: Option<Downlink<A::Global>>,
    /// Under `evaluation.novelty: max_over_clients` or `mean_weights`, what the evaluated
    /// clients have shared so far, by round and client, with the global model each round was
    /// evaluated with.
    novelty_shares: BTreeMap<u32, NoveltyGather<A::Global>>,
    /// Rows are scored by what the evaluated clients share (`evaluation.novelty` is not
    /// `own` and the data set has novel rows): each evaluation gathers their shares.
    pools_novelty: bool,
}

/// What the server has counted and learned so far, besides its models: plain values, which
/// a checkpoint saves as they are (`saved.rs`).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Ledger {
    round_start: SimTime,
    counts: RoundRecord,
    /// Who of the idle participants is online, once a draw among online clients needs it.
    online: Option<OnlineIdle>,
    /// The last round has been aggregated: start no more jobs.
    finished: bool,
    watch: DivergenceWatch,
    /// Aggregations released with privacy's central noise so far (what its accountant
    /// composes).
    private_releases: u64,
    /// Under local privacy: the updates received from each client so far, and the most any
    /// client has sent (what its accountant composes).
    uploads: BTreeMap<u32, u64>,
    most_uploads: u64,
    /// The noise's standard deviation in this round's aggregation.
    noise_std: f64,
    /// With privacy: the bound clients clip to (moved after each aggregation under adaptive
    /// clipping).
    clip: f64,
    /// Under adaptive clipping, set by this round's aggregation: the bound it used and the
    /// noised fraction of updates within it.
    adaptive_round: Option<AdaptiveRound>,
    /// Under DP-SGD: what each client's records have spent, by the updates received.
    records: Option<RecordAccountant>,
    /// Under DP-FTRL: the releases each client took part in.
    tree: Option<TreeAccountant>,
    /// Under distributed DP: the releases, each with the noise its sum carried.
    shares: Option<ShareAccountant>,
    /// Under `aggregation:`, the robust rule's change of the last round, per sent vector
    /// (centered clipping starts from it).
    robust_last: Vec<Vec<f64>>,
    /// Under `server_optimizer:`, what it keeps for each global vector it steps.
    server_moments: Vec<Moments>,
    /// Under a loss-guided strategy, what clients reported with the updates received.
    feedback: Feedback,
}

/// One evaluation's [`NoveltyShare`]s gathered so far (see [`Core::gather_novelty_share`]).
struct NoveltyGather<G> {
    global: Arc<G>,
    shares: BTreeMap<u32, NoveltyShare>,
}

pub(super) struct Server<A: Algorithm> {
    core: Core<A>,
    rounds: Box<dyn RoundPolicy<A>>,
}

impl<A: Algorithm> Server<A> {
    pub fn new(cfg: ServerConfig<A>, global: Arc<A::Global>) -> Self {
        let initial = global.clone();
        Server {
            rounds: round_policy(&cfg.policy),
            core: Core {
                global,
                round: 0,
                in_flight: InFlightJobs::new(cfg.num_clients as usize),
                ledger: Ledger {
                    round_start: SimTime::ZERO,
                    counts: RoundRecord::default(),
                    online: None,
                    finished: false,
                    watch: DivergenceWatch::new(cfg.algorithm.on_divergence),
                    private_releases: 0,
                    uploads: BTreeMap::new(),
                    most_uploads: 0,
                    noise_std: 0.0,
                    clip: cfg.algorithm.privacy.as_ref().map_or(0.0, |p| p.clip),
                    adaptive_round: None,
                    records: cfg.sample_privacy.map(RecordAccountant::new),
                    tree: (cfg.algorithm.privacy.as_ref())
                        .filter(|p| p.tree_aggregation())
                        .map(|_| TreeAccountant::new(cfg.rounds as u64)),
                    shares: (cfg.algorithm.privacy.as_ref())
                        .filter(|p| p.noise_at == NoiseAt::Shares)
                        .map(|_| ShareAccountant::new()),
                    robust_last: Vec::new(),
                    server_moments: Vec::new(),
                    feedback: Feedback::default(),
                },
                downlink: (cfg.downlink.clone()).map(|c| Downlink::new(c, initial)),
                novelty_shares: BTreeMap::new(),
                pools_novelty: !cfg.algorithm.novelty.is_own(),
                cfg,
            },
        }
    }
}

impl<A: Algorithm> Core<A> {
    fn alg(&self) -> &A {
        &self.cfg.algorithm.algorithm
    }

    /// Draws `count` of the idle participants (no job in flight; online at `now` if
    /// `online_only`) from the server's sampling stream `index`; `None` when there are none.
    fn draw(
        &mut self,
        now: SimTime,
        online_only: bool,
        count: usize,
        index: u64,
    ) -> Option<Vec<u32>> {
        self.track_online(now, online_only);
        let candidates = self.candidates(online_only);
        if candidates.is_empty() {
            return None;
        }
        Some(self.choose(&candidates, count, index))
    }

    /// Every idle participant (online at `now` if `online_only`), in id order.
    fn idle(&mut self, now: SimTime, online_only: bool) -> Vec<u32> {
        self.track_online(now, online_only);
        self.candidates(online_only).to_vec()
    }

    /// Brings the record of who is online up to `now`, where draws need it: made at the
    /// first such draw (one question per participant), then moved by availability changes.
    fn track_online(&mut self, now: SimTime, online_only: bool) {
        if !online_only || self.cfg.system.always_online() {
            return;
        }
        let (participants, system) = (&self.cfg.participants, &self.cfg.system);
        match &mut self.ledger.online {
            Some(online) => online.advance(participants, system, now),
            None => {
                let busy = |c| self.in_flight.is_busy(c);
                self.ledger.online = Some(OnlineIdle::new(participants, system, now, busy));
            }
        }
    }

    /// The idle participants (online ones, as [`Core::track_online`] last left them, if
    /// `online_only`): the participants less the busy ones where availability does not
    /// matter, never copied, so a draw costs what it draws.
    fn candidates(&self, online_only: bool) -> Idle<'_> {
        let participants = &self.cfg.participants;
        match &self.ledger.online {
            Some(online) if online_only => Idle::Online(online.view(participants)),
            _ => Idle::AllBut(AllBut::new(participants, self.in_flight.clients())),
        }
    }

    /// Marks `client` busy (a job sent) or idle (its job back) for the record of who is online.
    fn set_busy(&mut self, client: u32, busy: bool) {
        if let Some(online) = &mut self.ledger.online {
            let position = self
                .cfg
                .participants
                .binary_search(&client)
                .expect("jobs go to participants");
            online.set_idle(position, !busy);
        }
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

    fn choose(
        &self,
        candidates: &(impl Candidates + ?Sized),
        count: usize,
        index: u64,
    ) -> Vec<u32> {
        let mut rng = self.cfg.seeds.rng(Entity::Server, "sampling", index);
        let data = &self.cfg.algorithm.data;
        let n_train = |c: u32| data.split_len(c as usize, crate::records::Split::Train) as f64;
        let guide = (&self.ledger.feedback, index as u32);
        self.cfg
            .sampling
            .select(candidates, count, n_train, guide, &mut rng)
    }

    /// Sends the current model to `client` for job `job` of round `round`, `lead` after `now`
    /// (secure aggregation's setup steps come first). With `cut_at` (a deadline that cuts the
    /// work, `late_updates: partial_work`), the client's compute must end by then, less its
    /// upload of the whole model.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        now: SimTime,
        lead: SimDuration,
        client: u32,
        round: u32,
        job: u64,
        upload: bool,
        cut_at: Option<SimTime>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let now = now + lead;
        let whole = payload_bytes(self.alg().broadcast_len(&self.global));
        let compute_by = match cut_at {
            Some(at) => {
                let upload = self.cfg.system.transfer_time(client, Link::Up, whole)?;
                Some(SimTime(at.0.saturating_sub(upload.0)))
            }
            None => None,
        };
        let (model, bytes) = match &mut self.downlink {
            Some(downlink) => downlink.send_to(client, whole),
            None => (self.global.clone(), whole),
        };
        let download = self.cfg.system.transfer_time(client, Link::Down, bytes)?;
        self.ledger.counts.bytes_down += bytes;
        self.ledger.counts.selected += 1;
        self.in_flight.insert(
            client,
            InFlight {
                round,
                base: model.clone(),
                sent: now,
                download,
                late: None,
                reported_loss: None,
            },
        );
        self.set_busy(client, true);
        eff.to_member(
            client,
            lead + download,
            ToClient::Train(TrainOrder {
                round,
                job,
                global: model,
                lr: self.cfg.algorithm.training.lr_at(round),
                upload,
                clip: self
                    .cfg
                    .algorithm
                    .privacy
                    .as_ref()
                    .map(|_| self.ledger.clip),
                compute_by,
            }),
        );
        Ok(())
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
            // Under Poisson participation a private round releases its noise (and moves an
            // adaptive bound) whoever came, none included.
            let poisson = (self.cfg.algorithm.privacy.as_ref())
                .is_some_and(|p| p.noise_at == NoiseAt::Server && p.fixed_count.is_some());
            if poisson && A::PRIVATE_UPDATES.is_some() {
                let mut next = (*self.global).clone();
                self.add_privacy_noise(&mut next, &[], 0);
                self.server_step(&mut next);
                self.set_global(next);
            }
            return Ok(());
        }
        held.sort_by_key(|h| h.client);
        let round = self.round;
        let failed = |panic: Box<dyn std::any::Any + Send>| {
            SimError::JobFailed(format!(
                "aggregating round {round}: {}",
                crate::actors::trainer::panic_message(&*panic)
            ))
        };
        let mut next = if held.iter().all(|h| h.staleness == 0) && server_lr == 1.0 {
            let aggregated: Vec<u32> = held.iter().map(|h| h.client).collect();
            let within = held.iter().filter(|h| !h.clipped).count();
            let mut updates =
                Updates::new(held.into_iter().map(|h| (h.client, h.update)).collect());
            if self.cfg.algorithm.rewrites_rounds() {
                // Robust rules and crafted attacks need the round's updates all at once.
                let mut all =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| updates.into_vec()))
                        .map_err(failed)?;
                let last = &mut self.ledger.robust_last;
                self.cfg
                    .algorithm
                    .robust_round(&self.global, &mut all, last);
                updates = Updates::from(all);
            }
            // Updates kept on the device are summed there, where the algorithm's aggregation
            // is summed (the same bits as on the host).
            let on_device = A::SUMMED.filter(|_| updates.any_on_device());
            // A spilled update that cannot be read back panics inside: the run's error.
            let aggregate = || match on_device {
                Some(summed) => {
                    let items = updates.into_items();
                    let (sums, skeletons) = super::resident::sum_on_device(items, summed.weight);
                    (summed.finish)(self.alg(), &self.global, sums, skeletons)
                }
                None => self.alg().aggregate(&self.global, updates),
            };
            let mut next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(aggregate))
                .map_err(failed)?;
            self.add_privacy_noise(&mut next, &aggregated, within);
            next
        } else {
            // Stale aggregations take their updates all at once.
            let loaded: Vec<ReadBack<A>> = held
                .into_iter()
                .map(|h| {
                    let (client, base, staleness) = (h.client, h.base, h.staleness);
                    h.update.into_inner().map(|u| (client, base, staleness, u))
                })
                .collect::<Result<_, _>>()
                .map_err(|e| SimError::JobFailed(format!("aggregating round {round}: {e}")))?;
            let stale: Vec<StaleUpdate<'_, A::Global, A::Update>> = loaded
                .iter()
                .map(|(client, base, staleness, update)| StaleUpdate {
                    client: *client,
                    update,
                    base: &**base,
                    factor: staleness_factor(*staleness, exponent),
                })
                .collect();
            let Some(aggregate_stale) = A::STALE_UPDATES else {
                // The scenario refuses a policy with stale updates for such an algorithm.
                return Err(SimError::Internal(
                    "stale updates reached an algorithm that cannot take them".into(),
                ));
            };
            aggregate_stale(self.alg(), &self.global, &stale, server_lr)
        };
        self.server_step(&mut next);
        self.set_global(next);
        Ok(())
    }

    /// Under `server_optimizer:`, steps each global vector the algorithm declares along the
    /// change to its aggregate in `next` (privacy noise included), writing the step into
    /// `next` ([`Algorithm::SERVER_OPTIMIZED`]).
    fn server_step(&mut self, next: &mut A::Global) {
        let (Some(optimizer), Some(vectors)) = (&self.cfg.server_optimizer, A::SERVER_OPTIMIZED)
        else {
            return;
        };
        let pairs = vectors(&self.global, next);
        self.ledger
            .server_moments
            .resize_with(pairs.len(), Moments::default);
        for ((global, aggregate), moments) in pairs.into_iter().zip(&mut self.ledger.server_moments)
        {
            optimizer.step(global, aggregate, moments);
        }
    }

    /// Makes `next` the global model; under a compressed downlink, the clients' copy follows
    /// it (from the server's `downlink` stream of the copy's next version).
    fn set_global(&mut self, mut next: A::Global) {
        if let (Some(downlink), Some(hooks)) = (&mut self.downlink, A::PRIVATE_UPDATES) {
            let floats = self.cfg.algorithm.algorithm.broadcast_len(&next);
            let vectors: usize = (hooks.global)(&mut next).iter().map(|v| v.len()).sum();
            let extra = payload_bytes(floats.saturating_sub(vectors));
            let version = downlink.version() as u64 + 1;
            let mut rng = self.cfg.seeds.rng(Entity::Server, "downlink", version);
            downlink.follow(&next, hooks.global, extra, &mut rng);
        }
        self.global = Arc::new(next);
    }

    /// With central privacy, Gaussian noise on the new global model `next`, made of the
    /// clipped updates of `clients` (in client order), from the server's
    /// `privacy_noise` stream of this round (DP-FTRL: the tree's increment, each node from its
    /// `dp_ftrl_node` stream); under adaptive clipping, the bound moved by the noised count of
    /// the `within` updates that were within it (from the server's `privacy_clip` stream of the
    /// round).
    fn add_privacy_noise(&mut self, next: &mut A::Global, clients: &[u32], within: usize) {
        let aggregated = clients.len();
        let (Some(privacy), Some(hooks)) = (&self.cfg.algorithm.privacy, A::PRIVATE_UPDATES) else {
            return;
        };
        if privacy.noise_at == NoiseAt::Client {
            return;
        }
        let divisor = (hooks.divisor)(self.alg(), aggregated as f64);
        if let Some(shares) = &mut self.ledger.shares {
            // The clients' shares are in the sum already: account the noise it carried.
            self.ledger.private_releases += 1;
            let sigma = shares.release(privacy, aggregated);
            self.ledger.noise_std = sigma * privacy.sensitivity(self.ledger.clip) / divisor;
            return;
        }
        let divisor = match privacy.fixed_count {
            None => divisor,
            Some(expected) => {
                // Poisson participation: move by the sum over the expected count instead.
                let fixed = (hooks.divisor)(self.alg(), expected);
                if aggregated > 0 && divisor != fixed {
                    let mut base = (*self.global).clone();
                    let (base, moved) = ((hooks.global)(&mut base), (hooks.global)(next));
                    let mut pairs: Vec<(&[f32], &mut [f32])> =
                        base.into_iter().map(|b| &*b).zip(moved).collect();
                    ClientLevelPrivacy::scale_changes(&mut pairs, divisor / fixed);
                }
                fixed
            }
        };
        let std = privacy.noise_std(self.ledger.clip, divisor);
        self.ledger.private_releases += 1;
        if let Some(tree) = &mut self.ledger.tree {
            let leaf = self.ledger.private_releases;
            tree.release(leaf, clients.iter().copied());
            let (enter, leave) = crate::privacy::tree::increment(leaf);
            let streams = |nodes: &[crate::privacy::tree::Node]| -> Vec<_> {
                (nodes.iter())
                    .map(|n| (self.cfg.seeds).rng(Entity::Server, "dp_ftrl_node", n.stream()))
                    .collect()
            };
            let (mut enter_rngs, mut leave_rngs) = (streams(&enter), streams(&leave));
            let vectors = &mut (hooks.global)(next);
            ClientLevelPrivacy::add_tree_noise(vectors, std, &mut enter_rngs, &mut leave_rngs);
            self.ledger.noise_std = std * ((enter.len() + leave.len()) as f64).sqrt();
        } else {
            let mut rng = (self.cfg.seeds).rng(Entity::Server, "privacy_noise", self.round as u64);
            ClientLevelPrivacy::add_noise(&mut (hooks.global)(next), std, &mut rng);
            self.ledger.noise_std = std;
        }
        if let Some(adaptive) = privacy.adaptive {
            let mut rng = (self.cfg.seeds).rng(Entity::Server, "privacy_clip", self.round as u64);
            let counted = privacy.fixed_count.unwrap_or(aggregated as f64);
            let (bound, unclipped) =
                adaptive.next_bound(self.ledger.clip, within, counted, &mut rng);
            self.ledger.adaptive_round = Some(AdaptiveRound {
                clip: self.ledger.clip,
                unclipped,
            });
            self.ledger.clip = bound;
        }
    }

    /// Records the round's counts (ended at `now`), then the divergence check, evaluations
    /// and the final models after the aggregation that completed `self.round`.
    fn end_round(&mut self, now: SimTime, eff: &mut FlEffects<A>) {
        self.ledger.counts.end = now;
        if let Some(privacy) = &self.cfg.algorithm.privacy {
            let (noise_std, releases) = match privacy.noise_at {
                NoiseAt::Server | NoiseAt::Shares => (
                    std::mem::take(&mut self.ledger.noise_std),
                    self.ledger.private_releases,
                ),
                NoiseAt::Client => (
                    privacy.client_noise_std().unwrap_or(0.0),
                    self.ledger.most_uploads,
                ),
            };
            let adaptive = privacy.adaptive.map(|_| {
                (self.ledger.adaptive_round.take()).unwrap_or(AdaptiveRound {
                    clip: self.ledger.clip,
                    unclipped: None,
                })
            });
            let epsilon = match (&self.ledger.tree, &self.ledger.shares) {
                (Some(tree), _) => tree.worst_epsilon(privacy.noise_multiplier, privacy.delta),
                (_, Some(shares)) => shares.epsilon(privacy.delta),
                _ => privacy.epsilon_after(releases),
            };
            self.ledger.counts.privacy = Some(RoundPrivacy {
                noise_multiplier: privacy.noise_multiplier,
                noise_std,
                epsilon,
                adaptive,
            });
        }
        if let (Some(records), Some(sample)) = (&self.ledger.records, &self.cfg.sample_privacy) {
            self.ledger.counts.privacy = Some(RoundPrivacy {
                noise_multiplier: sample.dp_sgd.noise_multiplier,
                noise_std: sample.dp_sgd.noise_std(),
                epsilon: records.worst_epsilon(),
                adaptive: None,
            });
        }
        eff.record(Record::Round(std::mem::take(&mut self.ledger.counts)));
        let round = self.round;
        let finite = self.global.is_finite();
        self.ledger.watch.check(
            finite,
            Seen {
                round,
                time: now,
                client: None,
            },
            DivergenceStage::Aggregation,
            eff,
        );
        if self.cfg.evaluated.is_due(round, self.cfg.rounds) {
            self.evaluate(round, eff);
        }
        if round == self.cfg.rounds {
            self.finish(eff);
        }
    }

    /// No client is online at `now` or will be again (an availability trace has ended): the
    /// run ends after `completed` rounds and keeps what it has, the global model evaluated at
    /// that round (unless it just was) and its final models.
    fn end_early(&mut self, now: SimTime, completed: u32, eff: &mut FlEffects<A>) {
        self.round = completed;
        eff.record(Record::EndedEarly(EarlyEndRecord {
            round: completed,
            time: now,
        }));
        // `end_round` evaluated the last completed round if it was due (round 0 never is).
        let evaluated = completed > 0 && self.cfg.evaluated.is_due(completed, self.cfg.rounds);
        if !evaluated {
            self.evaluate(completed, eff);
        }
        self.finish(eff);
    }

    /// Sends the global model of `round` to be evaluated by the clients that evaluate then.
    fn evaluate(&mut self, round: u32, eff: &mut FlEffects<A>) {
        if self.pools_novelty {
            let global = self.global.clone();
            let shares = BTreeMap::new();
            (self.novelty_shares).insert(round, NoveltyGather { global, shares });
        }
        let evaluate = |c: u32, eff: &mut FlEffects<A>| {
            let global = self.global.clone();
            eff.to_member(c, SimDuration::ZERO, ToClient::Evaluate { round, global });
        };
        match self.cfg.evaluated.at(round) {
            None => (0..self.cfg.num_clients).for_each(|c| evaluate(c, eff)),
            Some(chosen) => chosen.iter().for_each(|&c| evaluate(c, eff)),
        }
    }

    /// Keeps what `client` shared of `round`'s evaluation; once every client evaluated then
    /// has sent its own, sends each of them what they all shared: their classifiers, in client
    /// order (`evaluation.novelty: max_over_clients`), or the mean of the training clients'
    /// mixture weights, summed in client order, with the global model they were evaluated with
    /// (`mean_weights`).
    fn gather_novelty_share(
        &mut self,
        round: u32,
        client: u32,
        share: NoveltyShare,
        eff: &mut FlEffects<A>,
    ) {
        let Some(gather) = self.novelty_shares.get_mut(&round) else {
            return;
        };
        gather.shares.insert(client, share);
        let evaluated = (self.cfg.evaluated.at(round))
            .map_or(self.cfg.num_clients as usize, |chosen| chosen.len());
        if gather.shares.len() < evaluated {
            return;
        }
        let NoveltyGather { global, shares } = (self.novelty_shares.remove(&round)).expect("held");
        let clients: Vec<u32> = shares.keys().copied().collect();
        let pooled = Arc::new(pool_novelty_shares(shares.into_values().collect(), global));
        for c in clients {
            let pooled = pooled.clone();
            eff.to_member(
                c,
                SimDuration::ZERO,
                ToClient::ScoreNovelty { round, pooled },
            );
        }
    }

    /// The run's last aggregation is done: start no more jobs and record the final models.
    fn finish(&mut self, eff: &mut FlEffects<A>) {
        self.ledger.finished = true;
        eff.record(Record::FinalModels(self.alg().models(&self.global)));
    }

    /// The record of `client`'s `job`, ended at `now` as `outcome`.
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
            reported_loss: job.reported_loss,
        })
    }

    /// `client`'s report at `now` (its update with its size and whether it was clipped, or
    /// `None`: a completion notice), with its job taken out of flight, the update's bytes
    /// counted and the loss it reports heard.
    fn report(
        &mut self,
        now: SimTime,
        client: u32,
        update: Option<(Stored<A::Update>, u64, PrivacyNote)>,
        loss: Option<ReportedLoss>,
        compute: SimDuration,
    ) -> Result<Report<A>, SimError> {
        let mut job = self.take_job(client)?;
        job.reported_loss = loss.map(|l| l.mean);
        if let Some(loss) = loss {
            let heard = Heard {
                loss,
                duration: now - job.sent,
                round: job.round,
            };
            self.ledger.feedback.hear(client, heard);
        }
        let note = update.as_ref().map_or(PrivacyNote::default(), |u| u.2);
        let clipped = note.clipped;
        if let Some(records) = &mut self.ledger.records {
            let (plan, data) = (&self.cfg.algorithm.training.plan, &self.cfg.algorithm.data);
            let rows = data.split_len(client as usize, crate::records::Split::Train);
            records.add(client, plan.dp_sampling_rate(rows), note.dp_sgd_steps);
        }
        let update = update.map(|(update, bytes, _)| {
            self.ledger.counts.bytes_up += bytes;
            update
        });
        let local =
            (self.cfg.algorithm.privacy.as_ref()).is_some_and(|p| p.noise_at == NoiseAt::Client);
        if local && update.is_some() {
            let sent = self.ledger.uploads.entry(client).or_default();
            *sent += 1;
            self.ledger.most_uploads = self.ledger.most_uploads.max(*sent);
        }
        Ok(Report {
            now,
            client,
            job,
            update,
            compute,
            clipped,
        })
    }

    fn take_job(&mut self, client: u32) -> Result<InFlight<A::Global>, SimError> {
        let job = self.in_flight.remove(client).ok_or_else(|| {
            SimError::Internal(format!("client {client} reported a job it was never sent"))
        })?;
        self.set_busy(client, false);
        Ok(job)
    }
}

impl<A: Algorithm> Actor for Server<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<ToServer<A>, Msg<A>>> for Server<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<ToServer<A>, Msg<A>>, _: &mut Context<Self>) -> Self::Result {
        guarded(|| "the server".into(), || self.on_message(d.now, d.msg))
    }
}

impl<A: Algorithm> Server<A> {
    /// The server's whole behaviour: one message in, its effects out.
    fn on_message(&mut self, now: SimTime, msg: ToServer<A>) -> Result<FlEffects<A>, SimError> {
        let mut eff = FlEffects::<A>::new();
        let core = &mut self.core;
        match msg {
            ToServer::StartRound { round } => self.rounds.start(core, now, round, &mut eff)?,
            ToServer::Update {
                client,
                update,
                bytes,
                compute,
                privacy,
                loss,
                ..
            } => {
                let update = Some((update, bytes, privacy));
                let report = core.report(now, client, update, loss, compute)?;
                self.rounds.receive(core, report, &mut eff)?
            }
            ToServer::Done {
                client, compute, ..
            } => {
                let report = core.report(now, client, None, None, compute)?;
                self.rounds.receive(core, report, &mut eff)?
            }
            ToServer::Failed {
                client, compute, ..
            } => {
                let job = core.take_job(client)?;
                let record = core.job_record(now, client, &job, JobOutcome::Failed, compute, 0);
                eff.record(record);
                self.rounds.failed(core, now, &job, &mut eff)?
            }
            ToServer::Deadline { round } => self.rounds.deadline(core, now, round, &mut eff)?,
            ToServer::Wake => self.rounds.wake(core, now, &mut eff)?,
            ToServer::NoveltyShare {
                round,
                client,
                share,
            } => core.gather_novelty_share(round, client, share, &mut eff),
        }
        Ok(eff)
    }
}

/// What a round's evaluated clients shared, in client order, pooled: their classifiers, or
/// the mean of the mixture weights of those that train (of all of them where only held-out
/// clients were evaluated), each weight summed in f64 in client order and divided by their
/// number, with `global`.
fn pool_novelty_shares<G>(shares: Vec<NoveltyShare>, global: Arc<G>) -> PooledNovelty<G> {
    let mut classifiers = Vec::new();
    let mut weighed = Vec::new();
    for share in shares {
        match share {
            NoveltyShare::Classifier(model) => classifiers.push(model),
            NoveltyShare::MixtureWeights { weights, unseen } => weighed.push((weights, unseen)),
        }
    }
    if !classifiers.is_empty() {
        return PooledNovelty::Classifiers(classifiers);
    }
    let any_trained = weighed.iter().any(|(_, unseen)| !unseen);
    let counted: Vec<&Vec<f64>> = (weighed.iter())
        .filter(|(_, unseen)| !(any_trained && *unseen))
        .map(|(weights, _)| weights)
        .collect();
    let mut sum = vec![0.0; counted.first().map_or(0, |w| w.len())];
    for weights in &counted {
        sum.iter_mut()
            .zip(weights.iter())
            .for_each(|(s, w)| *s += w);
    }
    let weights = sum.into_iter().map(|s| s / counted.len() as f64).collect();
    PooledNovelty::MeanWeights { weights, global }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::world::Routed;
    use crate::algorithms::{FedAvg, ModelUpdate};
    use crate::settings::EvaluationPlan;

    /// A FedAvg server over two clients of a tiny data set, under `policy`, for 3 rounds.
    fn server(policy: &str) -> Server<FedAvg> {
        let (s, jobs, system) =
            crate::actors::testkit::fedavg_run(&format!("policy: {policy}\n"), &[]);
        let seeds = SeedTree::new(1);
        let mut rng = seeds.rng(Entity::Run, "model_init", 0);
        let global = jobs.algorithm.init_global(
            &jobs.arch,
            &mut crate::models::InitialModels::drawn(&jobs.arch, &mut rng),
        );
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
            sample_privacy: None,
            secure_aggregation: None,
            downlink: None,
            server_optimizer: None,
        };
        Server::new(config, Arc::new(global))
    }

    fn secs(s: u64) -> SimTime {
        SimTime(s * 1_000_000)
    }

    /// Every registered round policy has its behaviour here: its example starts a server.
    #[test]
    fn every_registered_policy_starts_a_server() {
        for policy in crate::policy::POLICIES {
            let section = policy.example_section();
            let spec: PolicySpec = serde_yaml::from_str(&section).unwrap();
            let _ = round_policy::<FedAvg>(&spec);
            server(&section);
        }
    }

    /// Under `evaluation.novelty: max_over_clients`, nothing is scored until every evaluated
    /// client's classifier of that round is in; then each of them gets all of them, in client
    /// order whatever order they came in.
    #[test]
    fn classifiers_are_sent_out_once_every_evaluated_client_has_sent_its_own() {
        let mut s = server("{kind: synchronous}");
        // What `evaluate` opens for round 2 where rows are scored by the clients' shares.
        let global = s.core.global.clone();
        (s.core.novelty_shares).insert(
            2,
            NoveltyGather {
                global,
                shares: BTreeMap::new(),
            },
        );
        let model = |round, client, value| ToServer::NoveltyShare {
            round,
            client,
            share: NoveltyShare::Classifier(vec![value; 3]),
        };
        let eff = s.on_message(secs(4), model(2, 1, 1.0)).unwrap();
        assert_eq!(
            eff.sends().count(),
            0,
            "client 0's classifier is still to come"
        );
        let eff = s.on_message(secs(4), model(2, 0, 0.5)).unwrap();
        let sent: Vec<_> = eff
            .sends()
            .map(|(to, delay, msg)| match msg {
                Some(Routed::Member(ToClient::ScoreNovelty { round, pooled })) => {
                    (to.0, delay, *round, pooled.clone())
                }
                _ => panic!("only scoring orders"),
            })
            .collect();
        assert_eq!(sent.len(), 2);
        let in_order = PooledNovelty::Classifiers(vec![vec![0.5; 3], vec![1.0; 3]]);
        for (k, (rank, delay, round, pooled)) in sent.into_iter().enumerate() {
            assert_eq!((rank, delay, round), (k as u32 + 1, SimDuration::ZERO, 2));
            assert_eq!(*pooled, in_order);
        }
        assert!(eff.records().is_empty());
        assert!(
            s.core.novelty_shares.is_empty(),
            "the round's classifiers are let go"
        );
    }

    /// `evaluation.novelty: mean_weights`: the training clients' weights averaged, the
    /// held-out client's left out, unless only held-out clients were evaluated.
    #[test]
    fn mixture_weights_pool_into_the_training_clients_mean() {
        let weights = |w: [f64; 2], unseen| NoveltyShare::MixtureWeights {
            weights: w.to_vec(),
            unseen,
        };
        let global = Arc::new(vec![1.0f32]);
        let pooled = pool_novelty_shares(
            vec![
                weights([0.5, 0.5], false),
                weights([1.0, 0.0], true),
                weights([0.25, 0.75], false),
                weights([0.0, 1.0], false),
            ],
            global.clone(),
        );
        // (0.5 + 0.25 + 0) / 3 = 0.25 and (0.5 + 0.75 + 1) / 3 = 0.75.
        let expected = PooledNovelty::MeanWeights {
            weights: vec![0.25, 0.75],
            global: global.clone(),
        };
        assert_eq!(pooled, expected);
        let held_out = vec![weights([1.0, 0.0], true), weights([0.5, 0.5], true)];
        let pooled = pool_novelty_shares(held_out, global.clone());
        let expected = PooledNovelty::MeanWeights {
            weights: vec![0.75, 0.25],
            global,
        };
        assert_eq!(pooled, expected);
    }

    /// What a handler asked for, as `(target rank, message)` lines and record kinds.
    fn effects(eff: &FlEffects<FedAvg>) -> (Vec<String>, Vec<String>) {
        let sends = eff
            .sends()
            .map(|(to, _, msg)| {
                let what = match msg {
                    Some(Routed::Hub(ToServer::StartRound { round })) => format!("start {round}"),
                    Some(Routed::Hub(ToServer::Deadline { round })) => format!("deadline {round}"),
                    Some(Routed::Member(ToClient::Train(o))) => format!("train {}", o.round),
                    Some(Routed::Member(ToClient::Evaluate { round, .. })) => {
                        format!("evaluate {round}")
                    }
                    Some(Routed::Hub(ToServer::Wake)) => "wake".into(),
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

    fn update(round: u32, client: u32, value: f32) -> ToServer<FedAvg> {
        ToServer::Update {
            round,
            client,
            update: Stored::in_memory(ModelUpdate {
                params: vec![value; 4],
                weight: 10.0,
            }),
            bytes: 16,
            compute: SimDuration(1),
            privacy: PrivacyNote::default(),
            loss: None,
        }
    }

    #[test]
    fn a_round_ends_when_every_trainer_reported_and_its_old_deadline_is_ignored() {
        let mut s = server("{kind: synchronous, deadline_s: 100}");
        let eff = s
            .on_message(secs(0), ToServer::StartRound { round: 1 })
            .unwrap();
        assert_eq!(effects(&eff).0, ["1 train 1", "2 train 1", "0 deadline 1"]);
        assert!(effects(&s.on_message(secs(1), update(1, 0, 0.5)).unwrap())
            .0
            .is_empty());
        let eff = s.on_message(secs(2), update(1, 1, 0.5)).unwrap();
        let (sends, records) = effects(&eff);
        assert_eq!(sends, ["1 evaluate 1", "2 evaluate 1", "0 start 2"]);
        assert_eq!(records, ["job 1 aggregated", "round 1 stragglers 0"]);
        // The next round starts; round 1's deadline, when it comes, changes nothing.
        s.on_message(secs(2), ToServer::StartRound { round: 2 })
            .unwrap();
        let eff = s
            .on_message(secs(100), ToServer::Deadline { round: 1 })
            .unwrap();
        assert_eq!(effects(&eff), (vec![], vec![]));
        assert!(!eff.stops());
    }

    #[test]
    fn a_deadline_closes_the_round_and_the_late_update_is_a_straggler() {
        let mut s = server("{kind: synchronous, deadline_s: 100}");
        s.on_message(secs(0), ToServer::StartRound { round: 1 })
            .unwrap();
        s.on_message(secs(1), update(1, 0, 0.5)).unwrap();
        let eff = s
            .on_message(secs(100), ToServer::Deadline { round: 1 })
            .unwrap();
        let (sends, records) = effects(&eff);
        assert_eq!(records, ["round 1 stragglers 1"]);
        assert_eq!(sends, ["1 evaluate 1", "2 evaluate 1", "0 start 2"]);
        let eff = s.on_message(secs(120), update(1, 1, 0.5)).unwrap();
        assert_eq!(effects(&eff).1, ["job 1 straggler"]);
    }

    /// The server hears a client's reported loss when its update arrives, with the time its
    /// job took on the server's clock, and nothing of a client that only finished.
    #[test]
    fn reported_losses_are_heard_when_updates_arrive() {
        let mut s = server("{kind: synchronous}");
        s.on_message(secs(0), ToServer::StartRound { round: 1 })
            .unwrap();
        let loss = ReportedLoss::of(&[0.5, 1.5]);
        let mut reported = update(1, 0, 0.5);
        if let ToServer::Update { loss: l, .. } = &mut reported {
            *l = Some(loss);
        }
        assert!(s.core.ledger.feedback.get(0).is_none());
        s.on_message(secs(3), reported).unwrap();
        let heard = Heard {
            loss,
            duration: SimDuration(3_000_000),
            round: 1,
        };
        assert_eq!(s.core.ledger.feedback.get(0), Some(&heard));
        s.on_message(secs(4), update(1, 1, 0.5)).unwrap();
        assert!(s.core.ledger.feedback.get(1).is_none());
    }

    #[test]
    fn a_report_of_a_job_never_sent_is_an_error() {
        let mut s = server("{kind: synchronous}");
        let e = s.on_message(secs(1), update(1, 1, 0.5)).err().unwrap();
        assert_eq!(
            e.to_string(),
            "internal error (a bug in fedsim; please report it): client 1 reported a job it was \
             never sent"
        );
    }

    #[test]
    fn a_wake_with_every_slot_busy_starts_nothing() {
        let mut s = server("{kind: fedbuff, buffer_size: 2, concurrency: 2}");
        let eff = s
            .on_message(secs(0), ToServer::StartRound { round: 1 })
            .unwrap();
        assert_eq!(effects(&eff).0, ["1 train 1", "2 train 1"]);
        let eff = s.on_message(secs(5), ToServer::Wake).unwrap();
        assert_eq!(effects(&eff), (vec![], vec![]));
    }

    #[test]
    fn a_non_finite_aggregate_is_recorded_once_and_stops_the_run() {
        let mut s = server("{kind: synchronous}");
        s.on_message(secs(0), ToServer::StartRound { round: 1 })
            .unwrap();
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
