//! What the entities emit, in event order: plain result records, and the two words they are
//! labelled with (which [`Split`] of a client's data, which [`ModelKind`] of model).
//!
//! This room sits at the bottom: it imports only the kernel's time types. It holds data, no
//! behaviour; how records become tables is `results`' business.

use crate::sim::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};

/// Which part of a client's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Val,
    Test,
    /// A backdoor adversary's triggered test images (the client's test rows of other labels,
    /// stamped and labelled with the target): accuracy there is the attack's success rate.
    /// No client trains or is split on them.
    Backdoor,
}

impl Split {
    /// The splits a client's rows are dealt into.
    pub const ALL: [Split; 3] = [Split::Train, Split::Val, Split::Test];
    /// The splits an evaluation measures where a client has rows in them.
    pub const EVALUATED: [Split; 4] = [Split::Train, Split::Val, Split::Test, Split::Backdoor];

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
            Split::Backdoor => "backdoor",
        }
    }
}

/// Which model an evaluation row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ModelKind {
    /// The server's model.
    Global,
    /// The model of the client's cluster.
    Cluster,
    /// A model trained by the client alone.
    Local,
    /// A client-specific model derived from the global one.
    Personalized,
    /// A client-specific mixture of global components.
    Mixture,
}

impl ModelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Global => "global",
            ModelKind::Cluster => "cluster",
            ModelKind::Local => "local",
            ModelKind::Personalized => "personalized",
            ModelKind::Mixture => "mixture",
        }
    }
}

/// One evaluation of one client's model on one split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub round: u32,
    pub time: SimTime,
    pub client: u32,
    pub split: Split,
    pub model: ModelKind,
    pub n_samples: usize,
    pub loss: f64,
    pub accuracy: f64,
    /// Whether the client trained in this round.
    pub sampled: bool,
    /// The client's cluster, for algorithms that cluster clients (Clustered FL).
    pub cluster: Option<u32>,
    /// The client was held out of training (`unseen` in the scenario).
    pub unseen: bool,
}

/// One finished round (an aggregation) as the server saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub round: u32,
    pub start: SimTime,
    pub end: SimTime,
    /// Training jobs started (synchronous: the selected clients).
    pub selected: u32,
    /// Fresh updates aggregated.
    pub completed: u32,
    /// Jobs lost to a dropout or a client going offline.
    pub failed: u32,
    /// Jobs still running at the deadline.
    pub stragglers: u32,
    /// Updates not aggregated: over-selected clients past the first K, or too stale.
    pub discarded: u32,
    /// Stale updates (of earlier rounds) aggregated.
    pub late: u32,
    pub bytes_down: u64,
    pub bytes_up: u64,
    /// With `privacy:`, the round's noise and the privacy spent so far.
    pub privacy: Option<RoundPrivacy>,
    /// With `secure_aggregation:`, what the protocol added to the round.
    pub secure_aggregation: Option<RoundSecAgg>,
}

/// What secure aggregation added to a round (see [`RoundRecord`]; its bytes are also in the
/// round's `bytes_up` and `bytes_down`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundSecAgg {
    /// Steps 1–2 (advertise and share keys), before the training orders went out.
    pub setup: SimDuration,
    /// The masks, the unmasking step and the server's work, after the last update.
    pub finish: SimDuration,
    /// The protocol's own bytes, both ways.
    pub bytes: u64,
    /// Clients that dropped in the protocol's own steps.
    pub dropped: u32,
    /// The masks could not be removed: the round aggregated nothing (its fresh updates are
    /// counted in `discarded`).
    pub failed: bool,
}

/// A round of a run with `privacy:` (see [`RoundRecord`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundPrivacy {
    /// σ, as given or solved for from `target_epsilon`.
    pub noise_multiplier: f64,
    /// The noise's standard deviation: central, on this round's new global model (the
    /// updates' σ times the sum's sensitivity, over the divisor of the sum; 0 when nothing was
    /// aggregated, except under Poisson participation, which noises every round); local, what
    /// each client adds to its update (σ·2C); DP-SGD, what each local step adds to its sum of
    /// clipped gradients (σ·C).
    pub noise_std: f64,
    /// The ε spent by the end of this round, at the scenario's δ (DP-SGD: the largest over the
    /// clients' records).
    pub epsilon: f64,
    /// Under adaptive clipping: the round's bound and how it moved.
    pub adaptive: Option<AdaptiveRound>,
}

/// A round under adaptive clipping (see [`RoundPrivacy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveRound {
    /// The bound the round's updates were clipped to.
    pub clip: f64,
    /// The noised fraction of the aggregated updates that were within it, which moved the
    /// bound for the next round (`None` when nothing was aggregated).
    pub unclipped: Option<f64>,
}

/// What became of a training job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JobOutcome {
    /// Aggregated in the round it was trained for.
    Aggregated,
    /// Aggregated in a later round (a late straggler, or asynchronous).
    Late,
    /// Arrived after its round's deadline and was dropped.
    Straggler,
    /// Arrived after its round had its K updates, or too stale; dropped.
    Discarded,
    /// The client dropped out or went offline before its update arrived.
    Failed,
    /// Trained without uploading (pFedMe's unsampled clients).
    Unsampled,
}

impl JobOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Aggregated => "aggregated",
            JobOutcome::Late => "late",
            JobOutcome::Straggler => "straggler",
            JobOutcome::Discarded => "discarded",
            JobOutcome::Failed => "failed",
            JobOutcome::Unsampled => "unsampled",
        }
    }
}

/// One training job of one client, once its fate is known.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The round it was trained for (asynchronous: the model version it started from, + 1).
    pub round: u32,
    pub client: u32,
    pub outcome: JobOutcome,
    /// When the server sent the model, and when the update (or the failure) reached it.
    pub sent: SimTime,
    pub end: SimTime,
    pub download: SimDuration,
    /// Compute time spent (up to the failure, for a failed job).
    pub compute: SimDuration,
    /// Aggregations between the model it started from and the one it joined.
    pub staleness: u32,
    /// What its client reported with the update where the sampling strategy asks for it
    /// (power-of-choice, Oort): the mean loss, on its training rows, of the model the job
    /// started from. `None` otherwise, and for failed jobs.
    pub reported_loss: Option<f64>,
}

/// A client's device and links as the system model drew them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceRecord {
    pub client: u32,
    pub samples_per_second: f64,
    pub downlink_mbps: f64,
    pub uplink_mbps: f64,
}

/// One round of a decentralized run, once every peer has mixed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GossipRecord {
    pub round: u32,
    /// When the last peer mixed this round.
    pub time: SimTime,
    /// (1/n) Σ_p ‖x_p − x̄‖² over the peers' mixed models (all components, flat).
    pub consensus_distance: f64,
    /// 1 − |λ₂| of the round's mixing matrix.
    pub spectral_gap: f64,
    pub connected: bool,
    /// Links of the round's graph.
    pub links: u64,
    /// Bytes all peers sent in this round.
    pub bytes: u64,
    /// Peers that dropped out of this round (`system.dropout`).
    pub dropped: u64,
}

impl GossipRecord {
    /// The gossip records among `records`, in order.
    pub fn all(records: &[Record]) -> Vec<&GossipRecord> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::Gossip(g) => Some(g),
                _ => None,
            })
            .collect()
    }
}

/// A client's mixture weights at an evaluation (FedEM).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixtureRecord {
    pub round: u32,
    pub client: u32,
    /// A client held out of training: its weights were fitted with the components frozen.
    pub unseen: bool,
    pub weights: Vec<f64>,
}

/// The models a client (or peer) holds as its own at an evaluation, kept only when the run
/// saves them (`fedsim run --save-client-models`): each kind it is tested with besides the
/// server's (a peer's own copy in a decentralized run), as flat parameter vectors (several for
/// a model of several vectors, such as a peer's FedEM components).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientModelsRecord {
    pub round: u32,
    pub client: u32,
    pub models: Vec<(ModelKind, Vec<Vec<f32>>)>,
}

/// Numbers an algorithm reports about a client at an evaluation under a name of its own
/// (FedGMM's Gaussians, say): one open record instead of a column per algorithm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtraRecord {
    pub round: u32,
    pub client: u32,
    pub unseen: bool,
    pub name: String,
    pub values: Vec<f64>,
}

/// A client's typicality scores of its test rows and its novel rows at an evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoveltyRecord {
    pub round: u32,
    pub client: u32,
    pub unseen: bool,
    pub scores: NoveltyScores,
}

/// Where a run's numbers first stopped being finite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DivergenceStage {
    /// A client's (or peer's) local training produced a non-finite update or state.
    Training,
    /// The server's aggregated model holds a non-finite number.
    Aggregation,
    /// A peer's mixed model holds a non-finite number.
    Mixing,
    /// An evaluation gave a non-finite loss (a personal model, say, that is never aggregated).
    Evaluation,
}

impl DivergenceStage {
    pub fn as_str(self) -> &'static str {
        match self {
            DivergenceStage::Training => "training",
            DivergenceStage::Aggregation => "aggregation",
            DivergenceStage::Mixing => "mixing",
            DivergenceStage::Evaluation => "evaluation",
        }
    }
}

/// The first non-finite number one entity (a client, a peer or the server) saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergenceRecord {
    pub round: u32,
    pub time: SimTime,
    /// The client or peer (`None`: the server).
    pub client: Option<u32>,
    pub stage: DivergenceStage,
}

impl DivergenceRecord {
    /// The first divergence among `records` (they are in event order).
    pub fn first(records: &[Record]) -> Option<&DivergenceRecord> {
        records.iter().find_map(|r| match r {
            Record::Diverged(d) => Some(d),
            _ => None,
        })
    }

    /// One line for people: what diverged, where and when.
    pub fn describe(&self) -> String {
        let who = match self.client {
            Some(c) => format!("client {c}"),
            None => "the server".to_string(),
        };
        let what = match self.stage {
            DivergenceStage::Training => "local training produced NaN or infinite parameters",
            DivergenceStage::Aggregation => "the aggregated model holds NaN or infinite parameters",
            DivergenceStage::Mixing => "the mixed model holds NaN or infinite parameters",
            DivergenceStage::Evaluation => "evaluation gave a NaN or infinite loss",
        };
        format!("round {}, {who}: {what}", self.round)
    }
}

/// A run that ended before its last round because no client was online at `time` or ever
/// after (an availability trace had ended), having completed `round` rounds. What it had is
/// kept: its global model is evaluated at `round` and its final models recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlyEndRecord {
    pub round: u32,
    pub time: SimTime,
}

impl EarlyEndRecord {
    /// One line for people: when the run ended and why.
    pub fn describe(&self) -> String {
        format!(
            "after round {}: no client is online at {:.3} s (simulated) or will be again",
            self.round,
            self.time.as_secs_f64()
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Eval(EvalRecord),
    Round(RoundRecord),
    Mixture(MixtureRecord),
    /// What an algorithm reports about a client by name.
    Extra(ExtraRecord),
    /// Novelty scores of a client's rows.
    Novelty(NoveltyRecord),
    Job(JobRecord),
    Device(DeviceRecord),
    Gossip(GossipRecord),
    /// The server's models after the last round (FedAvg: one; FedEM: the M components;
    /// Clustered FL: one per cluster; decentralized runs: the peers' average), flat in
    /// parameter order.
    FinalModels(Vec<Vec<f32>>),
    /// A client's own models at an evaluation, in runs that save them.
    ClientModels(ClientModelsRecord),
    /// An entity saw non-finite numbers for the first time.
    Diverged(DivergenceRecord),
    /// The run ended before its last round: no client will be online again.
    EndedEarly(EarlyEndRecord),
    /// The malicious clients (`adversary:`), sorted, before anything else.
    Malicious(Vec<u32>),
}

/// Typicality scores (higher: more like the training data) of a client's rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoveltyScores {
    /// The test split's rows (in distribution).
    pub typical: Vec<f64>,
    /// The novel rows.
    pub novel: Vec<f64>,
}
