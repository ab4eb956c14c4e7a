//! Federated algorithms, one file each, behind the [`Algorithm`] trait, chosen in a scenario by
//! name from the [`registry`] (`algorithm: {name: fedavg, ...}`). Adding one: write its file
//! (settings implementing [`AlgorithmSettings`], the algorithm implementing [`Algorithm`]) and
//! add one line to [`registry::REGISTRY`].
//!
//! An algorithm says what the server holds, what each client keeps between rounds, what a
//! client computes locally (a pure function of its inputs and random stream, run on the trainer
//! pool), how updates are combined, and which model a client is evaluated with. It does not
//! decide who trains or when (that is the server's round policy), and it never touches time.

/// `init_global` (the initial model), `models` (it) and `broadcast_len` (its length) for an
/// [`Algorithm`] whose server holds one flat model (`Global = Vec<f32>`) and sends it whole.
macro_rules! one_global_model {
    () => {
        fn init_global(
            &self,
            _: &$crate::models::Architecture,
            init: &mut $crate::models::InitialModels<'_, rand_chacha::ChaCha20Rng>,
        ) -> Vec<f32> {
            init.model()
        }

        fn models(&self, global: &Vec<f32>) -> Vec<Vec<f32>> {
            vec![global.clone()]
        }

        fn broadcast_len(&self, global: &Vec<f32>) -> usize {
            global.len()
        }
    };
}

mod afl;
mod apfl;
mod clustered;
mod ditto;
mod fedavg;
mod fedbabu;
mod feddyn;
mod fedem;
mod fedgmm;
mod fednova;
mod fedrep;
mod local;
mod moon;
mod noop;
pub mod partial;
mod per_fedavg;
mod pfedme;
mod q_fedavg;
pub mod registry;
mod scaffold;

pub use apfl::{Apfl, ApflSpec};
pub use clustered::{complete_linkage_bipartition, Clustered, ClusteredSpec, Clusters};
pub use ditto::{Ditto, DittoSpec};
pub use fedavg::{DPsgdSpec, FedAvg, FedAvgPlusSpec, FedAvgSpec, FedProxSpec, ModelUpdate};
pub use fedbabu::{FedBabu, FedBabuSpec};
pub use fedem::{
    e_step, fit_mixture_weights, DFedEmSpec, FedEm, FedEmNovelty, FedEmSpec, Unsampled,
    MIN_MIXTURE_WEIGHT,
};
pub use fedgmm::{Covariance, FedGmm, FedGmmSpec, Gaussian, GmmGlobal, NoveltyScore};
pub use fedrep::{FedRep, FedRepSpec};
pub use local::{Local, LocalSpec};
pub use moon::{Moon, MoonSpec};
pub use noop::{Noop, NoopSpec};
pub use partial::{FedBnSpec, FedPerSpec, LayerSplit, LgFedAvgSpec, PartialFedAvg, SplitModel};
pub use per_fedavg::{PerFedAvg, PerFedAvgSpec};
pub use pfedme::{PFedMe, PFedMeSpec};
pub use registry::{
    names_where, trains_in_cohorts, AlgorithmSettings, AlgorithmSpec, Built, Capabilities,
    InRegistry, Planned, Population, Registration, RunBuilt,
};

use crate::data::{FederatedData, SplitView};
use crate::io::{Floats, Stored};
use crate::models::sample_losses;
use crate::models::{
    for_each_batch, train_dp_sgd_alone, train_sgd, Architecture, Batch, Contrastive, DeviceChoice,
    EvalStats, InitialModels, LocalPlan, LocalWork, Objective, Predictor, Proximal, StackedBatch,
};
use crate::records::{ModelKind, NoveltyScores, Split};
use crate::settings::{Cohorts, EvaluatedSplits, Precision, Spill};
use rand_chacha::ChaCha20Rng;
use serde::{de::DeserializeOwned, Serialize};
use std::borrow::Cow;

/// One evaluation of one of a client's models on one of its splits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    pub model: ModelKind,
    pub split: Split,
    pub stats: EvalStats,
}

/// Learning-rate schedule by global round.
#[derive(Clone, Debug, PartialEq)]
pub enum LrSchedule {
    Constant,
    /// Multiply by `gamma` once every milestone has passed: a round `r` uses
    /// `lr · gamma^{#{m : m < r}}` (so milestones 50 and 75 decay from rounds 51 and 76 on).
    MultiStep {
        milestones: Vec<u32>,
        gamma: f64,
    },
}

/// The local solver, shared by every algorithm.
#[derive(Clone, Debug, PartialEq)]
pub struct Training {
    pub plan: LocalPlan,
    pub lr: f64,
    pub schedule: LrSchedule,
    /// Keep each client's momentum buffer from one round to the next (the FedEM authors' code
    /// does), instead of starting each round from zero momentum.
    pub keep_momentum: bool,
    /// Whether a round's clients train as one stacked computation where they can.
    pub cohorts: Cohorts,
    /// The devices cohorts train on (`training.device`; each client alone trains on the CPU),
    /// resolved on the machine that runs the scenario ([`DeviceChoice::resolve_here`]).
    pub device: DeviceChoice,
    /// The float precision of the models' products (`training.precision`).
    pub precision: Precision,
    /// Which idle values go to a spill file instead of memory (`training.spill`).
    pub spill: Spill,
    /// At most this many bytes of clients' momentum buffers stay on the devices between
    /// rounds (`training.device_state_gib`).
    pub device_state_bytes: u64,
}

impl Training {
    pub fn lr_at(&self, round: u32) -> f64 {
        match &self.schedule {
            LrSchedule::Constant => self.lr,
            LrSchedule::MultiStep { milestones, gamma } => {
                let passed = milestones.iter().filter(|&&m| m < round).count();
                self.lr * gamma.powi(passed as i32)
            }
        }
    }

    /// What is left of a momentum buffer after a local run: all of it, or nothing unless the
    /// scenario keeps momentum across rounds.
    pub fn settle_momentum(&self, momentum: &mut Vec<f32>) {
        if !self.keep_momentum {
            *momentum = Vec::new(); // its memory too, not only its length
        }
    }
}

/// What a client's local work sees.
pub struct LocalContext<'a> {
    pub arch: &'a Architecture,
    /// The scenario's training, its plan doing the job's local work (`system.local_work`).
    pub training: Cow<'a, Training>,
    /// Rows holding this client's (all clients' when resident, see [`FederatedData::rows_for`]).
    pub data: &'a FederatedData,
    /// This client's index in `data`.
    pub data_index: usize,
    /// The client's id (its state, its cluster).
    pub client: u32,
    pub round: u32,
    /// The learning rate of this round.
    pub lr: f64,
    /// The splits an evaluation measures (`evaluation.splits`).
    pub evaluated: EvaluatedSplits,
    /// The training rows' losses under the models [`SgdUpdate::scores`] declares, where a
    /// cohort computed them beforehand (one vector per model).
    pub scored: Option<&'a [Vec<f32>]>,
    /// The fine-tuned parameters of the [`Algorithm::FINE_TUNING`] the client's tests ask for,
    /// where a cohort trained them beforehand (drawing from the client's stream what
    /// [`LocalContext::fine_tune`] would).
    pub tuned: Option<&'a [f32]>,
}

impl LocalContext<'_> {
    pub fn train_view(&self) -> SplitView<'_> {
        self.data
            .view(self.data_index, crate::records::Split::Train)
    }

    /// Every training row's loss under each of `models` (one vector per model): the ones a
    /// cohort computed beforehand where it did (`models` are then those the update's
    /// [`SgdUpdate::scores`] declares), else computed here, alone.
    pub fn train_losses<M: AsRef<[f32]>>(&self, models: &[M]) -> Cow<'_, [Vec<f32>]> {
        match self.scored {
            Some(scored) => {
                assert_eq!(
                    scored.len(),
                    models.len(),
                    "scored under the declared models"
                );
                Cow::Borrowed(scored)
            }
            None => Cow::Owned(sample_losses(self.arch, models, self.train_view())),
        }
    }

    /// The mean loss of the training rows under `model` (one of the models the update's
    /// [`SgdUpdate::scores`] declares, where a cohort scored them; 0 without rows): q-FedAvg's
    /// and AFL's F_k(w).
    pub fn mean_train_loss(&self, model: &[f32]) -> f64 {
        let losses = self.train_losses(&[model]);
        let rows = losses[0].len().max(1) as f64;
        losses[0].iter().map(|&l| l as f64).sum::<f64>() / rows
    }

    /// Trains one of an update's local SGD runs alone (see [`SgdUpdate`]) with this round's
    /// plan. The momentum buffer is then kept or cleared, as the scenario says.
    pub fn train_run(&self, run: &mut SgdRun<'_>, rng: &mut ChaCha20Rng) {
        let objective = Objective {
            sample_weights: run.sample_weights.as_deref(),
            proximal: run.proximal.as_ref().map(ProximalTerm::borrow),
            correction: run.correction.as_deref(),
            contrastive: run.contrastive.as_ref().map(ContrastiveTerm::borrow),
        };
        let plan = LocalPlan {
            momentum: if run.plain_sgd {
                0.0
            } else {
                self.training.plan.momentum
            },
            ..self.training.plan
        };
        let lr = run.lr.unwrap_or(self.lr);
        let (params, momentum) = (run.params.to_mut(), &mut run.momentum);
        let data = self.train_view();
        if plan.dp_sgd.is_some() {
            train_dp_sgd_alone(
                self.arch, params, momentum, data, &plan, lr, rng, &objective,
            );
        } else {
            train_sgd(
                self.arch, params, momentum, data, &plan, lr, rng, &objective,
            );
        }
        self.training.settle_momentum(momentum);
    }

    /// `tuning`'s epochs at its learning rate on a copy of its start, from zero momentum
    /// (evaluation-time adaptation: nothing is kept); the parameters a cohort trained
    /// beforehand where it did (`tuning` is then the one [`Algorithm::FINE_TUNING`] declares,
    /// and the cohort has drawn its words from `rng`).
    pub fn fine_tune(&self, tuning: &FineTuning<'_>, rng: &mut ChaCha20Rng) -> Vec<f32> {
        if let Some(tuned) = self.tuned {
            assert_eq!(
                tuned.len(),
                tuning.start.len(),
                "the declared fine-tuning's model"
            );
            return tuned.to_vec();
        }
        let mut tuned = tuning.start.to_vec();
        train_sgd(
            self.arch,
            &mut tuned,
            &mut Vec::new(),
            self.train_view(),
            &tuning.plan(&self.training.plan),
            tuning.lr,
            rng,
            &Objective::default(),
        );
        tuned
    }

    /// Each of `tested` evaluated alone on each of this client's non-empty splits, in that
    /// order (models first).
    pub fn evaluate(&self, tested: &[Tested<'_>]) -> Vec<Evaluation> {
        tested
            .iter()
            .flat_map(|t| {
                self.splits().into_iter().map(move |split| Evaluation {
                    model: t.kind,
                    split,
                    stats: t
                        .model
                        .evaluate(self.arch, self.data.view(self.data_index, split)),
                })
            })
            .collect()
    }

    /// The splits this client's evaluation measures: those the scenario asks for where the
    /// client has rows, in [`Split::EVALUATED`] order.
    pub fn splits(&self) -> Vec<Split> {
        Split::EVALUATED
            .into_iter()
            .filter(|&s| is_measured(self.evaluated, s))
            .filter(|&s| self.data.split_len(self.data_index, s) > 0)
            .collect()
    }
}

/// Whether an evaluation with `splits` measures `split` (a backdoor's rows go with the test
/// split, which is always measured).
pub fn is_measured(splits: EvaluatedSplits, split: Split) -> bool {
    match split {
        Split::Train => splits.train,
        Split::Val => splits.val,
        Split::Test | Split::Backdoor => true,
    }
}

/// A model a client is tested with, and which of its models it is.
pub struct Tested<'a> {
    pub kind: ModelKind,
    pub model: Predictor<'a>,
}

impl<'a> Tested<'a> {
    /// `params` as the model `kind`.
    pub fn params(kind: ModelKind, params: impl Into<Cow<'a, [f32]>>) -> Self {
        Tested {
            kind,
            model: Predictor::Params(params.into()),
        }
    }
}

/// Whether every number in a model, an update or a client's state is finite: what the actors
/// check to notice a diverged run when it happens.
pub trait Finite {
    fn is_finite(&self) -> bool;
}

impl Finite for f32 {
    fn is_finite(&self) -> bool {
        f32::is_finite(*self)
    }
}

impl Finite for f64 {
    fn is_finite(&self) -> bool {
        f64::is_finite(*self)
    }
}

/// Sizes and other counts: always finite.
impl Finite for usize {
    fn is_finite(&self) -> bool {
        true
    }
}

impl Finite for () {
    fn is_finite(&self) -> bool {
        true
    }
}

impl<T: Finite> Finite for Vec<T> {
    fn is_finite(&self) -> bool {
        self.iter().all(Finite::is_finite)
    }
}

/// A federated algorithm. Implementations are immutable configuration; all state lives in
/// the `Global` and `ClientState` values the actors hold.
pub trait Algorithm: Send + Sync + 'static {
    /// What the server holds and broadcasts.
    /// (Serialized, with the client states, into a run's checkpoints.)
    type Global: Clone + Finite + Send + Sync + Unpin + Serialize + DeserializeOwned + 'static;
    /// What a client keeps between rounds (its float buffers, [`Floats`], may be spilled to
    /// a file while it is idle: `training.spill`).
    type ClientState: Finite
        + Floats
        + Clone
        + Send
        + Unpin
        + Serialize
        + DeserializeOwned
        + 'static;
    /// What a client sends back (its float buffers may be spilled until the aggregation).
    /// (Serialized into a run's checkpoints while it is on its way or held for an aggregation.)
    type Update: Finite + Floats + Clone + Send + Unpin + Serialize + DeserializeOwned + 'static;

    /// The initial global model: its models from `init` ([`InitialModels::model`], drawn or
    /// from `model.init`'s file, in the order [`Algorithm::models`] lists them), anything
    /// else from [`InitialModels::rng`].
    fn init_global(
        &self,
        arch: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> Self::Global;

    fn init_client(&self, global: &Self::Global, client: u32) -> Self::ClientState;

    /// Number of f32 values the server sends a client each round (0: no message).
    fn broadcast_len(&self, global: &Self::Global) -> usize;

    /// Number of f32 values in an update (0: no message).
    fn update_len(&self, update: &Self::Update) -> usize;

    /// How a client's update for one round is computed: the one choice every algorithm
    /// makes, at compile time (an algorithm without it does not compile). Local SGD runs
    /// ([`LocalUpdate::Sgd`]) and minibatch rules ([`LocalUpdate::Batchwise`]) let a round's
    /// clients train as one stacked computation (`training.cohorts`); [`LocalUpdate::Own`]
    /// trains each client alone.
    const UPDATE: LocalUpdate<Self>;

    /// A client's local work for one round, alone, as [`Algorithm::UPDATE`] says. Runs on the
    /// trainer pool; depends only on its arguments.
    fn local_update(
        &self,
        ctx: &LocalContext<'_>,
        global: &Self::Global,
        state: &mut Self::ClientState,
        rng: &mut ChaCha20Rng,
    ) -> Self::Update {
        match Self::UPDATE {
            LocalUpdate::Own(update) => update(self, ctx, global, state, rng),
            LocalUpdate::Batchwise(batchwise) => {
                (batchwise.begin)(self, ctx, global, state);
                let plan = (batchwise.plan)(self, &ctx.training.plan);
                for_each_batch(ctx.arch, ctx.train_view(), &plan, rng, |batch| {
                    let mut alone = [BatchwiseClient {
                        state: &mut *state,
                        lr: ctx.lr,
                    }];
                    (batchwise.step)(self, &mut alone, batch);
                });
                (batchwise.finish)(self, ctx, global, state)
            }
            LocalUpdate::Sgd(sgd) => {
                let mut runs = (sgd.begin)(self, ctx, global, state, rng);
                for run in &mut runs {
                    ctx.train_run(run, rng);
                }
                (sgd.finish)(self, ctx, global, state, runs)
            }
        }
    }

    /// Whether its local SGD runs ([`LocalUpdate::Sgd`]) can train under DP-SGD (`privacy:
    /// {mechanism: dp_sgd}`); `false` where a term of its loss has no per-row form (MOON's).
    const DP_SGD: bool = true;

    /// Whether the algorithm trains and evaluates a model; `false` (`noop`): its runs record
    /// the system only (jobs, rounds, time), with no metrics to compare.
    const TRAINS_MODELS: bool = true;

    /// How many model-sized vectors a client keeps between rounds once it has trained (a
    /// personal model, a copy of the global one), at least: what the memory estimate charges
    /// each client that trains. Momentum kept across rounds is not counted (it is optional).
    const CLIENT_MODELS: usize = 0;

    /// Samples a client's local work processes (what the device model charges time for), for
    /// `n_train` training rows. One pass of the plan unless the algorithm does more.
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        plan.samples_processed(n_train)
    }

    /// Whether every client trains each round while only the sampled ones are aggregated
    /// (pFedMe's Algorithm 1); otherwise only sampled clients train.
    fn trains_unsampled(&self) -> bool {
        false
    }

    /// The server's models as flat parameter vectors (recorded after the last round).
    fn models(&self, global: &Self::Global) -> Vec<Vec<f32>>;

    /// What to record about a client at an evaluation besides its accuracy (mixture weights,
    /// cluster, anything else by name), from the state it was evaluated with.
    fn report(
        &self,
        _global: &Self::Global,
        _state: &Self::ClientState,
        _client: u32,
    ) -> ClientReport {
        ClientReport::default()
    }

    /// The state of a client held out of training once it has adapted to `global` with its own
    /// training data, as the algorithm does for a newcomer; it is then evaluated like a training
    /// client, and nothing is kept. By default a fresh client state.
    fn adapt_unseen(
        &self,
        ctx: &LocalContext<'_>,
        global: &Self::Global,
        _rng: &mut ChaCha20Rng,
    ) -> Self::ClientState {
        self.init_client(global, ctx.client)
    }

    /// How the algorithm combines updates computed from older models (asynchronous FedBuff
    /// rounds, late updates accepted into the next round), if it can: `None` declares that it
    /// cannot, and validation refuses such policies for it (see [`Capabilities`]).
    const STALE_UPDATES: Option<AggregateStale<Self>> = None;

    /// How client-level privacy (`privacy:`) reaches this algorithm's updates, if it can:
    /// `None` declares that it cannot, and validation refuses `privacy:` for it (see
    /// [`Capabilities`]).
    const PRIVATE_UPDATES: Option<PrivateUpdates<Self>> = None;

    /// Where [`Algorithm::aggregate`] is a weighted sum per float vector, finished by the
    /// algorithm ([`Summed`], [`summed_aggregate`]): declared, a server whose updates wait on
    /// the device ([`SgdUpdate::sends`]) sums them there, in the same order with the same
    /// arithmetic (so the same bits), and only the sums cross to the host. `None`: the
    /// aggregation is something else.
    const SUMMED: Option<Summed<Self>> = None;

    /// Where the server combines updates into vectors of the global model, which ones: a
    /// `server_optimizer:` steps each global vector along the change to its aggregate
    /// ([`crate::server_optimizer`]). `None` declares that the server does something else,
    /// and validation refuses `server_optimizer:` for it (see [`Capabilities`]).
    const SERVER_OPTIMIZED: Option<AggregatedVectors<Self>> = None;

    /// Combines one round's updates, given in increasing client order. Visiting them one at a
    /// time ([`Updates::for_each`]) holds one in memory at a time where they were spilled;
    /// [`Updates::into_vec`] holds them all.
    fn aggregate(&self, global: &Self::Global, updates: Updates<Self::Update>) -> Self::Global;

    /// Where a client's typicality is one classifier's confidence maxᵧ p(y | x), that
    /// classifier's parameters (the global model, a cluster's, a personal one): the default
    /// [`Algorithm::typicality`] scores with it, and `evaluation.novelty: max_over_clients`
    /// scores each row by the most confident of every evaluated client's ([`Capabilities`]).
    /// `None` declares that the typicality is something else (a mixture's confidence, a
    /// density) or nothing.
    const CONFIDENCE_MODEL: Option<ConfidenceModel<Self>> = None;

    /// Where a client's model weighs shared components by its own mixture weights (FedEM's
    /// π), where a client state keeps them and how to make a state that holds only given
    /// weights, enough for [`Algorithm::typicality`] to score with: `evaluation.novelty:
    /// mean_weights` scores every client's rows with the evaluated training clients' mean
    /// weights ([`Capabilities`]). `None` declares that the algorithm has no such weights.
    const MIXTURE_WEIGHTS: Option<MixtureWeights<Self>> = None;

    /// Where the models a client is tested with are fine-tuned first by plain local SGD
    /// (FedAvg+), which fine-tuning ([`LocalContext::fine_tune`], which `tested_models` calls
    /// with it): declared, a cohort that stacks its evaluations trains every client's at once,
    /// and the client's tests read the result. `None`: no fine-tuning.
    const FINE_TUNING: Option<FineTunings<Self>> = None;

    /// How typical each row of `view` is for this client's model, for novelty detection
    /// (higher: more like its training data): FedGMM's log p(x), a classifier's confidence
    /// maxᵧ p(y | x) (by default, that of [`Algorithm::CONFIDENCE_MODEL`]). `None`: the
    /// algorithm does not score novelty. Runs on the trainer pool.
    fn typicality(
        &self,
        ctx: &LocalContext<'_>,
        global: &Self::Global,
        state: &Self::ClientState,
        view: SplitView<'_>,
    ) -> Option<Vec<f64>> {
        let model = Self::CONFIDENCE_MODEL?;
        Some(confidence_of(ctx, model(ctx.client, global, state), view))
    }

    /// The models the client is tested with, each evaluated on each of its non-empty splits
    /// (alone, [`LocalContext::evaluate`], or stacked with other clients' in a cohort); an
    /// algorithm with a global and a personalized model (pFedMe) names both. Runs on the
    /// trainer pool; `rng` is the client's evaluation stream for the round, for algorithms
    /// that adapt before testing. The client's state is not changed.
    fn tested_models<'a>(
        &'a self,
        ctx: &LocalContext<'_>,
        global: &'a Self::Global,
        state: &'a Self::ClientState,
        rng: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>>;
}

/// The confidence maxᵧ p(y | x) of one model on each row of `view`: how the classifiers of
/// the baselines score novelty ([`Algorithm::typicality`]), as the FedGMM paper adapts them.
pub fn confidence_of(
    ctx: &LocalContext<'_>,
    params: &[f32],
    view: crate::data::SplitView<'_>,
) -> Vec<f64> {
    crate::models::confidence(
        ctx.arch,
        &[params],
        crate::models::Gates::Fixed(&[1.0]),
        view,
    )
}

/// log Σ exp over the first index, for each row: `log_terms[j][i]` → one value per row i
/// (−∞ where every term is).
fn log_sum_exp(log_terms: &[Vec<f64>]) -> Vec<f64> {
    let n = log_terms.first().map_or(0, Vec::len);
    (0..n)
        .map(|i| {
            let top = log_terms
                .iter()
                .map(|t| t[i])
                .fold(f64::NEG_INFINITY, f64::max);
            if !top.is_finite() {
                return top;
            }
            top + log_terms
                .iter()
                .map(|t| (t[i] - top).exp())
                .sum::<f64>()
                .ln()
        })
        .collect()
}

/// The proximal term (μ/2)·‖θ − anchor‖² of an [`SgdRun`]: its anchor borrowed from the
/// global model (so a cohort sends it to the device once) or owned.
#[derive(Clone, Debug, PartialEq)]
pub struct ProximalTerm<'g> {
    pub anchor: Cow<'g, [f32]>,
    pub mu: f64,
}

impl ProximalTerm<'_> {
    pub fn borrow(&self) -> Proximal<'_> {
        Proximal {
            anchor: &self.anchor,
            mu: self.mu,
        }
    }
}

/// MOON's model-contrastive term of a run ([`Contrastive`] with its vectors held): the models
/// whose representations are the positive and the negative, μ and τ.
#[derive(Clone, Debug, PartialEq)]
pub struct ContrastiveTerm<'g> {
    pub global: Cow<'g, [f32]>,
    pub previous: Cow<'g, [f32]>,
    pub mu: f64,
    pub temperature: f64,
}

impl ContrastiveTerm<'_> {
    pub fn borrow(&self) -> Contrastive<'_> {
        Contrastive {
            global: &self.global,
            previous: &self.previous,
            mu: self.mu,
            temperature: self.temperature,
        }
    }
}

/// One local SGD run of a client's update: the parameters it starts from (trained in place),
/// their momentum buffer (empty: none yet) and what the loss adds to the plain per-row loss.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SgdRun<'g> {
    /// Where the run starts, and after training where it ended (always owned then). Borrowed
    /// from the global model where the run starts there (FedAvg's run, FedEM's components): a
    /// cohort then sends each such vector to the device once for all the runs that start from
    /// it, instead of a copy per run.
    pub params: Cow<'g, [f32]>,
    pub momentum: Vec<f32>,
    /// One weight per training row: a batch's loss is Σᵢ wᵢ·ℓᵢ / batch size (FedEM's M-step).
    pub sample_weights: Option<Vec<f32>>,
    /// Adds (μ/2)·‖θ − anchor‖² to the loss (FedProx, Ditto).
    pub proximal: Option<ProximalTerm<'g>>,
    /// Adds ⟨c, θ⟩ to the loss: c to every step's gradient (SCAFFOLD's c − c_i).
    pub correction: Option<Vec<f32>>,
    /// Adds μ times MOON's model-contrastive term (no sample weights, no DP-SGD).
    pub contrastive: Option<ContrastiveTerm<'g>>,
    /// The run's learning rate [default: the round's].
    pub lr: Option<f64>,
    /// Plain SGD: the plan's momentum is not used and `momentum` stays empty (Ditto's
    /// personal model).
    pub plain_sgd: bool,
    /// The run starts from zero momentum whatever `training.keep_momentum` says, and its
    /// buffer is not kept for the next round (FedNova, whose normalizer counts the steps of a
    /// buffer that starts at zero): `momentum` must be empty, and no buffer kept on a device
    /// is used.
    pub fresh_momentum: bool,
}

/// How an algorithm computes a client's update ([`Algorithm::UPDATE`]).
pub enum LocalUpdate<A: Algorithm + ?Sized> {
    /// Local SGD runs, with the work before and after them (FedAvg, FedEM, Ditto, ...):
    /// cohorts stack the runs.
    Sgd(SgdUpdate<A>),
    /// A rule applied minibatch by minibatch (pFedMe, APFL, Per-FedAvg): cohorts take each
    /// step together, their gradient queries answered by one stacked computation.
    Batchwise(BatchwiseUpdate<A>),
    /// The algorithm's own function, for each client alone.
    Own(OwnUpdate<A>),
}

impl<A: Algorithm + ?Sized> LocalUpdate<A> {
    /// Whether a round's clients can train as one stacked computation.
    pub const fn stacks(&self) -> bool {
        !matches!(self, LocalUpdate::Own(_))
    }

    /// Whether the update is made of local SGD runs.
    pub const fn is_sgd_runs(&self) -> bool {
        matches!(self, LocalUpdate::Sgd(_))
    }

    /// Whether the update reads its training rows' losses under models it declares
    /// ([`SgdUpdate::scores`]).
    pub const fn scores_rows(&self) -> bool {
        matches!(
            self,
            LocalUpdate::Sgd(SgdUpdate {
                scores: Some(_),
                ..
            })
        )
    }

    /// The models the update's E-step scores its training rows under ([`SgdUpdate::scores`]).
    pub fn scored_models(&self) -> Option<ScoredModels<A>> {
        match self {
            LocalUpdate::Sgd(sgd) => sgd.scores,
            _ => None,
        }
    }
}

/// See [`LocalUpdate::Own`].
pub type OwnUpdate<A> = fn(
    &A,
    &LocalContext<'_>,
    &<A as Algorithm>::Global,
    &mut <A as Algorithm>::ClientState,
    &mut ChaCha20Rng,
) -> <A as Algorithm>::Update;

/// A client's update made of local SGD runs on its training split, with this round's plan and
/// learning rate. `begin` says which runs the update needs (it may change the client's state
/// and draw from its stream); the runs are then trained, alone in this order or stacked with
/// other clients' runs, each drawing its minibatches from the client's stream in turn; `finish`
/// makes the update from the trained runs. Neither may depend on anything but its arguments.
pub struct SgdUpdate<A: Algorithm + ?Sized> {
    /// The models under which `begin` reads every training row's loss (an E-step's: FedEM's
    /// components, FedGMM's classifiers), with [`LocalContext::train_losses`], as
    /// [`Algorithm::adapt_unseen`] may for a held-out client. Declared, a cohort that stacks
    /// its evaluations scores its whole shard in stacked forward passes before any job begins
    /// (and an evaluation shard its held-out clients); alone, they are computed when asked.
    pub scores: Option<ScoredModels<A>>,
    pub begin: SgdBegin<A>,
    pub finish: SgdFinish<A>,
    /// Which trained runs' parameters `finish` moves into the update, unread, as its float
    /// vectors ([`Floats`] order). Where the algorithm's aggregation is summed
    /// ([`Algorithm::SUMMED`]), a cohort may then leave them on the device for the server to
    /// sum there.
    pub sends: SentRuns,
    /// Which trained run's parameters the client keeps between rounds as one of its state's
    /// float vectors, moved there by `finish` unread, the run starting from that vector where it
    /// holds one (Ditto's personal model): a cohort on the GPU path may then keep the vector on
    /// the device between rounds. `None`: no such run.
    pub keeps: Option<KeptRun>,
}

/// See [`SgdUpdate::keeps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptRun {
    /// The run, in the order `begin` gives them.
    pub run: usize,
    /// The state's float vector ([`Floats`] order).
    pub state_vector: usize,
}

/// See [`SgdUpdate::sends`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentRuns {
    /// `finish` reads the runs or computes the update: it is made on the host.
    Computed,
    /// Every run's parameters, in run order (FedAvg's one run, FedEM's components).
    All,
    /// The first run's parameters (Ditto: the second is the personal model, kept).
    First,
}

impl SentRuns {
    /// Whether run `run` of `runs` is sent.
    pub fn sends(self, run: usize) -> bool {
        match self {
            SentRuns::Computed => false,
            SentRuns::All => true,
            SentRuns::First => run == 0,
        }
    }
}

/// An aggregation that is, for each float vector of the updates ([`Floats`] order), the
/// weighted sum over the round's updates in client order, accumulated in f64
/// ([`Updates::weighted_sums`]), then finished by the algorithm ([`Algorithm::SUMMED`]).
pub struct Summed<A: Algorithm + ?Sized> {
    /// An update's weight in the sum of its float vector `k`.
    pub weight: fn(&A::Update, usize) -> f64,
    /// The new global model: [`SummedFinish`].
    pub finish: SummedFinish<A>,
}

/// [`Summed::finish`]: the new global model from the sums (one per float vector) and the
/// updates' skeletons (what else they carry, their float vectors emptied), in client order.
pub type SummedFinish<A> = fn(
    &A,
    &<A as Algorithm>::Global,
    Vec<WeightedSum>,
    Vec<<A as Algorithm>::Update>,
) -> <A as Algorithm>::Global;

/// [`Algorithm::aggregate`] for an algorithm whose aggregation is [`Algorithm::SUMMED`].
pub fn summed_aggregate<A: Algorithm>(
    alg: &A,
    global: &A::Global,
    updates: Updates<A::Update>,
) -> A::Global {
    let summed = A::SUMMED.expect("the algorithm declares its summed aggregation");
    let (sums, skeletons) = updates.weighted_sums(summed.weight);
    (summed.finish)(alg, global, sums, skeletons)
}

/// See [`SgdUpdate::scores`].
pub type ScoredModels<A> = fn(&<A as Algorithm>::Global) -> Vec<&[f32]>;

/// See [`SgdUpdate`]. The runs may borrow from the global model (not from the state).
pub type SgdBegin<A> = for<'g> fn(
    &A,
    &LocalContext<'_>,
    &'g <A as Algorithm>::Global,
    &mut <A as Algorithm>::ClientState,
    &mut ChaCha20Rng,
) -> Vec<SgdRun<'g>>;

/// See [`SgdUpdate`]. The trained runs' parameters are owned.
pub type SgdFinish<A> = fn(
    &A,
    &LocalContext<'_>,
    &<A as Algorithm>::Global,
    &mut <A as Algorithm>::ClientState,
    Vec<SgdRun<'_>>,
) -> <A as Algorithm>::Update;

/// A client's update made step by step over the minibatches of a local plan, by the algorithm's
/// own rule. `begin` puts what the update works on into the client's state (from the global
/// model; it draws nothing); `step` moves the states of the clients that have a minibatch at a
/// step, asking `batch` for the gradients it needs (one vector per client per query, in the
/// clients' order: alone, one client; in a cohort, all the step's clients at once); `finish`
/// makes the update from the state and leaves the state to keep. The minibatches come from the
/// client's stream as [`for_each_batch`] draws them. None of them may depend on anything but
/// its arguments, and `step` must treat each client as it would alone.
pub struct BatchwiseUpdate<A: Algorithm + ?Sized> {
    /// The plan whose minibatches the update steps over, from the round's plan.
    pub plan: fn(&A, &LocalPlan) -> LocalPlan,
    pub begin: fn(&A, &LocalContext<'_>, &A::Global, &mut A::ClientState),
    pub step: fn(&A, &mut [BatchwiseClient<'_, A>], &dyn Gradients),
    pub finish: fn(&A, &LocalContext<'_>, &A::Global, &mut A::ClientState) -> A::Update,
}

/// One client of a [`BatchwiseUpdate`] step: its state and its learning rate this round.
pub struct BatchwiseClient<'s, A: Algorithm + ?Sized> {
    pub state: &'s mut A::ClientState,
    pub lr: f64,
}

/// A minibatch step's gradient queries: for each client of the step, the gradient of the mean
/// loss of its own minibatch at the parameters given for it, plus the plan's weight decay
/// times those parameters (the L2 term PyTorch's SGD adds).
pub trait Gradients {
    fn gradients(&self, params: &[&[f32]]) -> Vec<Vec<f32>>;
}

impl Gradients for Batch<'_> {
    fn gradients(&self, params: &[&[f32]]) -> Vec<Vec<f32>> {
        params.iter().map(|p| self.gradient(p)).collect()
    }
}

impl Gradients for StackedBatch<'_> {
    fn gradients(&self, params: &[&[f32]]) -> Vec<Vec<f32>> {
        StackedBatch::gradients(self, params)
    }
}

/// What client-level privacy needs of an algorithm ([`Algorithm::PRIVATE_UPDATES`]): the
/// vectors an update sends, each with the global vector it moves from (their changes are
/// clipped together), a way to make every client weigh the same, and the global model's
/// vectors (the server's noise goes there). With equal weights, the algorithm's aggregation of
/// fresh updates must move the global model by the sum of the clients' changes divided by
/// `divisor` (of the number of updates aggregated), so that one client moves it by at most
/// C / divisor and the server's noise is scaled alike. Under Poisson participation the server
/// rescales the move to divide by `divisor` of the expected number instead (a fixed
/// denominator), so `divisor` must be proportional to the count or not depend on it.
pub struct PrivateUpdates<A: Algorithm + ?Sized> {
    pub sent: SentVectors<A>,
    pub equal_weight: fn(&A, &mut A::Update),
    pub divisor: fn(&A, f64) -> f64,
    pub global: fn(&mut A::Global) -> Vec<&mut [f32]>,
}

/// See [`PrivateUpdates::sent`]: `(global vector, sent vector)` pairs, in a fixed order.
pub type SentVectors<A> = for<'a> fn(
    &'a <A as Algorithm>::Global,
    &'a mut <A as Algorithm>::Update,
) -> Vec<(&'a [f32], &'a mut [f32])>;

/// See [`Algorithm::SERVER_OPTIMIZED`]: `(global vector, aggregated vector)` pairs of the
/// current global model and the one a round's aggregation made, in a fixed order.
pub type AggregatedVectors<A> = for<'a> fn(
    &'a <A as Algorithm>::Global,
    &'a mut <A as Algorithm>::Global,
) -> Vec<(&'a [f32], &'a mut [f32])>;

/// The classifier whose confidence is client `client`'s typicality, given the global model and
/// the client's state (see [`Algorithm::CONFIDENCE_MODEL`]).
pub type ConfidenceModel<A> =
    for<'a> fn(u32, &'a <A as Algorithm>::Global, &'a <A as Algorithm>::ClientState) -> &'a [f32];

/// The fine-tuning a client's tests ask for, if any (see [`Algorithm::FINE_TUNING`]).
pub type FineTunings<A> = for<'a> fn(
    &A,
    &LocalContext<'_>,
    &'a <A as Algorithm>::Global,
    &'a <A as Algorithm>::ClientState,
) -> Option<FineTuning<'a>>;

/// Evaluation-time fine-tuning: `epochs` local epochs of plain SGD (the plan's momentum from a
/// zero buffer, no privacy) at `lr` from `start`.
#[derive(Clone, Debug)]
pub struct FineTuning<'a> {
    pub start: Cow<'a, [f32]>,
    pub epochs: u32,
    pub lr: f64,
}

impl FineTuning<'_> {
    /// The local plan of the fine-tuning, from the round's.
    pub fn plan(&self, round: &LocalPlan) -> LocalPlan {
        LocalPlan {
            work: LocalWork::Epochs(self.epochs),
            dp_sgd: None,
            ..*round
        }
    }
}

/// A client's mixture weights, both ways (see [`Algorithm::MIXTURE_WEIGHTS`]).
pub struct MixtureWeights<A: Algorithm + ?Sized> {
    /// The weights a client state holds.
    pub of: fn(&A::ClientState) -> &[f64],
    /// A client state holding only the given weights.
    pub state: fn(Vec<f64>) -> A::ClientState,
}

/// Combines stale updates, each with the model it started from and a staleness factor, in
/// increasing client order: the server moves by `server_lr` times the factor-weighted average
/// change.
pub type AggregateStale<A> = fn(
    &A,
    &<A as Algorithm>::Global,
    &[StaleUpdate<'_, <A as Algorithm>::Global, <A as Algorithm>::Update>],
    f64,
) -> <A as Algorithm>::Global;

/// What an algorithm reports about a client at an evaluation besides its accuracy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientReport {
    /// Mixture weights (FedEM's π, FedGMM's joint π): `mixtures.parquet`.
    pub mixture: Option<Vec<f64>>,
    /// The client's cluster (Clustered FL): the `cluster` column of the metrics.
    pub cluster: Option<u32>,
    /// Anything else, by name, as numbers: `extras.parquet` (one row per value).
    pub extras: Vec<(String, Vec<f64>)>,
    /// Typicality scores of the client's test rows and of its novel rows, where the data set
    /// has novel rows and the algorithm scores them (filled in by the client from
    /// [`Algorithm::typicality`]): `novelty.parquet` and the summary's novelty figures.
    pub novelty: Option<NoveltyScores>,
    /// The client's own models it was tested with (every kind but the server's), where the
    /// run saves them (filled in by the client from [`Algorithm::tested_models`]):
    /// `client_models.safetensors`.
    pub models: Vec<(ModelKind, Vec<Vec<f32>>)>,
    /// Under `evaluation.novelty: max_over_clients` or `mean_weights`, what the client scores
    /// novelty with, for the server to gather (in place of `novelty`, which every client's
    /// rows get once all the round's shares are in).
    pub novelty_share: Option<NoveltyShare>,
}

/// What a client sends the server to score novelty with, where its rows are scored by what
/// every evaluated client holds (`evaluation.novelty`).
#[derive(Clone, Debug, PartialEq)]
pub enum NoveltyShare {
    /// Its classifier ([`Algorithm::CONFIDENCE_MODEL`]; `max_over_clients`).
    Classifier(Vec<f32>),
    /// Its mixture weights, which count towards the mean unless the client is held out of
    /// training (`mean_weights`).
    MixtureWeights { weights: Vec<f64>, unseen: bool },
}

/// An algorithm that also runs without a server (D-PSGD from FedAvg, D-FedEM from FedEM):
/// each peer holds its own copy of what a server would hold, runs the same local work on it,
/// and averages the result with its neighbours' copies.
pub trait Gossip: Algorithm {
    /// The model a peer holds after its local work.
    fn local_model(&self, update: Self::Update) -> Self::Global;

    /// Σ wᵢ·xᵢ / Σ wᵢ over peers' models in the given order, accumulated in f64.
    fn mix(&self, items: &[(f64, &Self::Global)]) -> Self::Global;
}

/// An update with the global model it was computed from and the factor its staleness gives it
/// (1 for a fresh update).
pub struct StaleUpdate<'a, G, U> {
    pub client: u32,
    pub update: &'a U,
    pub base: &'a G,
    pub factor: f64,
}

/// `global + lr · Σ fᵢ·wᵢ·(xᵢ − bᵢ) / total` in the given order, accumulated in f64: the
/// stale-aware average of model changes (FedBuff). With fresh updates (bᵢ = global, fᵢ = 1),
/// lr = 1 and total = Σ wᵢ it is the weighted average of the xᵢ.
pub fn stale_delta_average<'a>(
    global: &[f32],
    items: impl IntoIterator<Item = (f64, f64, &'a [f32], &'a [f32])>,
    total: f64,
    lr: f64,
) -> Vec<f32> {
    assert!(total > 0.0, "stale average needs a positive total weight");
    let mut acc = vec![0f64; global.len()];
    for (w, f, x, b) in items {
        assert!(
            x.len() == acc.len() && b.len() == acc.len(),
            "vectors of different lengths"
        );
        let k = f * w / total;
        for ((a, &xi), &bi) in acc.iter_mut().zip(x).zip(b) {
            *a += k * (xi as f64 - bi as f64);
        }
    }
    global
        .iter()
        .zip(acc)
        .map(|(&g, d)| (g as f64 + lr * d) as f32)
        .collect()
}

/// θ ← θ − lr·d.
pub fn descend(theta: &mut [f32], lr: f64, direction: &[f32]) {
    assert_eq!(theta.len(), direction.len(), "vectors of different lengths");
    let lr = lr as f32;
    theta
        .iter_mut()
        .zip(direction)
        .for_each(|(t, d)| *t -= lr * d);
}

/// Σ wᵢ·vᵢ / Σ wᵢ in the given order, accumulated in f64.
pub fn weighted_average<'a>(items: impl IntoIterator<Item = (f64, &'a [f32])>) -> Vec<f32> {
    let mut sum = WeightedSum::default();
    for (w, v) in items {
        sum.add(w, v);
    }
    sum.average()
}

/// Σ wᵢ·vᵢ and Σ wᵢ, accumulated in f64 in the order the items are added: a
/// [`weighted_average`] built one item at a time (an aggregation visiting spilled updates).
#[derive(Clone, Debug, Default)]
pub struct WeightedSum {
    acc: Vec<f64>,
    total: f64,
}

impl WeightedSum {
    /// The sum whose accumulated Σ wᵢ·vᵢ is `acc` and Σ wᵢ `total` (summed elsewhere, in the
    /// same order with the same arithmetic: on a device).
    pub fn from_parts(acc: Vec<f64>, total: f64) -> Self {
        WeightedSum { acc, total }
    }

    pub fn add(&mut self, w: f64, v: &[f32]) {
        if self.acc.is_empty() {
            self.acc = vec![0.0; v.len()];
        }
        assert_eq!(self.acc.len(), v.len(), "vectors of different lengths");
        self.total += w;
        for (a, &x) in self.acc.iter_mut().zip(v) {
            *a += w * x as f64;
        }
    }

    /// Σ wᵢ so far.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// Σ wᵢ·vᵢ / Σ wᵢ.
    pub fn average(self) -> Vec<f32> {
        assert!(
            self.total > 0.0,
            "weighted average needs a positive total weight"
        );
        let total = self.total;
        self.acc.into_iter().map(|a| (a / total) as f32).collect()
    }
}

/// One round's updates in increasing client order, each in memory or spilled
/// ([`Stored`]). A spilled update is read back when it is visited, so an aggregation that
/// visits them one at a time holds one at a time. A read that fails panics with the spill
/// file's error (the server reports it as the run's error).
pub struct Updates<U> {
    items: Vec<(u32, Stored<U>)>,
}

impl<U: Floats> Updates<U> {
    /// `items`, in increasing client order.
    pub fn new(items: Vec<(u32, Stored<U>)>) -> Self {
        debug_assert!(items.windows(2).all(|w| w[0].0 <= w[1].0), "client order");
        Updates { items }
    }

    /// Visits each update with its client, in client order, one in memory at a time.
    pub fn for_each(self, mut f: impl FnMut(u32, &U)) {
        for (client, stored) in self.items {
            f(client, &read_back(stored));
        }
    }

    /// For each float vector k of the updates ([`Floats`] order), Σ wᵢ·vᵢ with wᵢ =
    /// `weight(update, k)`, accumulated in f64 in client order ([`WeightedSum`]), one update
    /// in memory at a time; with the updates' skeletons (their float vectors emptied), in
    /// client order. No updates: no sums.
    pub fn weighted_sums(self, weight: impl Fn(&U, usize) -> f64) -> (Vec<WeightedSum>, Vec<U>) {
        let mut sums: Vec<WeightedSum> = Vec::new();
        let mut skeletons = Vec::with_capacity(self.items.len());
        for (_, stored) in self.items {
            let mut update = read_back(stored);
            let weights: Vec<f64> = (0..update.floats_mut().len())
                .map(|k| weight(&update, k))
                .collect();
            let vectors = update.floats_mut();
            if sums.is_empty() {
                sums = vec![WeightedSum::default(); vectors.len()];
            }
            assert_eq!(sums.len(), vectors.len(), "updates of one shape");
            for ((sum, v), w) in sums.iter_mut().zip(vectors).zip(weights) {
                sum.add(w, v);
                *v = Vec::new();
            }
            skeletons.push(update);
        }
        (sums, skeletons)
    }

    /// Whether some update's float vectors are on a device ([`Stored::on_device`]).
    pub fn any_on_device(&self) -> bool {
        self.items.iter().any(|(_, u)| u.device_floats().is_some())
    }

    /// The updates as stored, in client order.
    pub fn into_items(self) -> Vec<(u32, Stored<U>)> {
        self.items
    }

    /// All updates in memory at once, in client order.
    pub fn into_vec(self) -> Vec<(u32, U)> {
        self.items
            .into_iter()
            .map(|(client, stored)| (client, read_back(stored)))
            .collect()
    }
}

/// Updates kept in memory (tests, and callers that never spill).
impl<U> From<Vec<(u32, U)>> for Updates<U> {
    fn from(items: Vec<(u32, U)>) -> Self {
        Updates {
            items: items
                .into_iter()
                .map(|(c, u)| (c, Stored::in_memory(u)))
                .collect(),
        }
    }
}

fn read_back<U: Floats>(stored: Stored<U>) -> U {
    stored
        .into_inner()
        .unwrap_or_else(|e| panic!("reading an update back: {e}"))
}

/// Tiny hand-checkable settings for the algorithms' unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::*;
    use crate::data::ClientShard;
    use crate::models::ModelSpec;

    pub fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    /// One client whose rows are all training rows, a linear model, plain SGD, one step.
    pub struct Kit {
        pub data: FederatedData,
        pub arch: Architecture,
        pub training: Training,
    }

    impl Kit {
        /// Binary labels; `rows` are (features, label); batches of `batch_size`, lr `lr`.
        pub fn binary(rows: &[(&[f32], i64)], batch_size: usize, lr: f64) -> Kit {
            let dim = rows[0].0.len();
            let data = FederatedData {
                layout: crate::data::Layout::Flat,
                dim,
                classes: 2,
                features: rows.iter().flat_map(|r| r.0.iter().copied()).collect(),
                labels: rows.iter().map(|r| r.1).collect(),
                clients: vec![ClientShard {
                    train: 0..rows.len(),
                    val: rows.len()..rows.len(),
                    test: rows.len()..rows.len(),
                }],
                truth: None,
                novel: Vec::new(),
                backdoor: Vec::new(),
                on_demand: None,
                lead: 0,
            };
            Kit {
                arch: Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), dim, 2),
                data,
                training: Training {
                    plan: LocalPlan {
                        work: LocalWork::Steps(1),
                        batch_size,
                        momentum: 0.0,
                        weight_decay: 0.0,
                        dp_sgd: None,
                    },
                    lr,
                    schedule: LrSchedule::Constant,
                    keep_momentum: false,
                    cohorts: Cohorts::Off,
                    spill: Spill::Off,
                    device: DeviceChoice::Cpu,
                    precision: Precision::Fp32,
                    device_state_bytes: 0,
                },
            }
        }

        /// The kit with the model `yaml` (a model section) instead of the linear one.
        pub fn with_model(mut self, yaml: &str) -> Kit {
            let spec = ModelSpec::from_yaml(yaml).unwrap();
            self.arch = Architecture::new(&spec, self.data.dim, self.data.classes);
            self
        }

        /// The kit's one client as an algorithm is built for it.
        pub fn population(&self) -> Population {
            Population {
                clients: 1,
                participants_train: self.data.split_len(0, crate::records::Split::Train),
                input_dim: self.data.dim,
                data: std::sync::Arc::new(self.data.clone()),
                unseen: Vec::new(),
                arch: self.arch.clone(),
            }
        }

        pub fn ctx(&self) -> LocalContext<'_> {
            LocalContext {
                arch: &self.arch,
                training: Cow::Borrowed(&self.training),
                data: &self.data,
                data_index: 0,
                client: 0,
                round: 1,
                lr: self.training.lr,
                evaluated: EvaluatedSplits::ALL,
                scored: None,
                tuned: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::LocalWork;

    #[test]
    fn weighted_average_by_hand() {
        let a = [1.0f32, 2.0];
        let b = [3.0f32, 6.0];
        assert_eq!(
            weighted_average([(1.0, &a[..]), (3.0, &b[..])]),
            vec![2.5, 5.0]
        );
    }

    #[test]
    fn stale_average_by_hand() {
        let g = [1.0f32, 1.0];
        let (x1, b1) = ([3.0f32, 1.0], [1.0f32, 1.0]);
        let (x2, b2) = ([0.0f32, 4.0], [0.0f32, 0.0]);
        // Fresh, unit factors: the weighted average of the models.
        let fresh = stale_delta_average(
            &g,
            [
                (1.0, 1.0, &x1[..], &g[..]),
                (3.0, 1.0, &[5.0f32, 1.0][..], &g[..]),
            ],
            4.0,
            1.0,
        );
        assert_eq!(fresh, vec![4.5, 1.0]);
        // g + 0.5 · (1·2·(2, 0) + 0.5·2·(0, 4)) / 4 = (1.5, 1.5).
        let stale = stale_delta_average(
            &g,
            [(2.0, 1.0, &x1[..], &b1[..]), (2.0, 0.5, &x2[..], &b2[..])],
            4.0,
            0.5,
        );
        assert_eq!(stale, vec![1.5, 1.5]);
    }

    #[test]
    fn multistep_decays_after_milestones() {
        let t = Training {
            plan: LocalPlan {
                work: LocalWork::Epochs(1),
                batch_size: 1,
                momentum: 0.0,
                weight_decay: 0.0,
                dp_sgd: None,
            },
            lr: 0.1,
            schedule: LrSchedule::MultiStep {
                milestones: vec![50, 75],
                gamma: 0.1,
            },
            keep_momentum: true,
            cohorts: Cohorts::Auto,
            spill: Spill::Auto,
            device: DeviceChoice::Cpu,
            precision: Precision::Fp32,
            device_state_bytes: 0,
        };
        assert_eq!(t.lr_at(1), 0.1);
        assert_eq!(t.lr_at(50), 0.1);
        assert!((t.lr_at(51) - 0.01).abs() < 1e-15);
        assert!((t.lr_at(76) - 0.001).abs() < 1e-15);
    }
}
