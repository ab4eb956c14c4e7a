//! The scenario file as written: serde structs that reject unknown fields. Defaults are filled
//! here so that the resolved scenario written next to the results states every setting.

use crate::algorithms::AlgorithmSpec;
use crate::data::{DatasetSpec, SplitSpec};
use crate::models::{DeviceChoice, ModelSpec};
use crate::policy::PolicySpec;
use crate::sampling::RawSampling;
use crate::settings::{Cohorts, Precision, Spill};
use crate::settings::{OnDivergence, RawEvaluation};
use crate::system::SystemSpec;
use crate::topology::TopologySpec;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// A short name; the default output folder is `results/<name>/seed-<seed>`.
    #[serde(default = "default_name")]
    pub name: String,
    /// Free text about the scenario, kept in the resolved scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Root of every random stream of the run.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Root seed of the data set (defaults to `seed`): fix it to train several seeds on the
    /// same data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_seed: Option<u64>,
    /// Number of communication rounds.
    pub rounds: u32,
    /// Evaluate every this many rounds (the last round is always evaluated); default 1. Also
    /// accepted as `evaluation.every`; the resolved scenario always states it here.
    #[serde(default)]
    pub eval_every: Option<u32>,
    /// Which clients an evaluation tests (all of them unless this says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<RawEvaluation>,
    /// The data set and how its rows are dealt to clients (`fedsim datasets` lists them).
    pub data: DatasetSpec,
    /// How each client's rows are split into training, validation and test rows.
    #[serde(default)]
    pub split: SplitSpec,
    /// The model family every client trains (`fedsim models` lists them).
    #[serde(default)]
    pub model: ModelSpec,
    /// The federated algorithm (`fedsim algorithms` lists them).
    pub algorithm: AlgorithmSpec,
    /// The local solver: minibatch SGD.
    #[serde(default)]
    pub training: RawTraining,
    /// Which clients a round selects, and how many (all of them unless this says otherwise).
    #[serde(default)]
    pub sampling: RawSampling,
    /// When the server aggregates: synchronous rounds (optionally with a deadline) or
    /// asynchronous buffered aggregation.
    #[serde(default)]
    pub policy: PolicySpec,
    /// How long work and transfers take in simulated time: devices, links, availability.
    #[serde(default)]
    pub system: SystemSpec,
    /// Report the simulated time at which the weighted mean test accuracy first reaches this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_accuracy: Option<f64>,
    /// How often the run saves a checkpoint to resume from after a kill (`--checkpoint-every`
    /// overrides it); by default every 60 s of wall-clock time. Not part of the resolved
    /// scenario: it changes no result.
    #[serde(default, skip_serializing)]
    pub checkpoint: Option<crate::settings::CheckpointSpec>,
    /// Report the run to TensorBoard or MLflow as it goes (their own file formats, in folders
    /// of yours). Not part of the resolved scenario: it changes no result.
    #[serde(default, skip_serializing)]
    pub tracking: Option<crate::settings::TrackingSpec>,
    /// Hold out clients from training, to test generalisation to unseen clients (FedEM
    /// Table 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<RawUnseen>,
    /// The peers' communication graph and mixing weights: makes the run decentralized (no
    /// server; algorithms `d_psgd` and `d_fedem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologySpec>,
    /// Client-level differential privacy (DP-FedAvg): each client's update clipped, Gaussian
    /// noise on the server's sum, ε spent reported after every round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy: Option<crate::privacy::PrivacySpec>,
    /// Secure aggregation's cost in virtual time (SecAgg or SecAgg+): its extra message steps,
    /// key and share bytes, computation and dropouts between steps; a round whose masks cannot
    /// be removed aggregates nothing. Synchronous rounds only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_aggregation: Option<crate::system::secagg::SecAggSpec>,
    /// Compressed updates: what each client does to its update before the uplink (top-k,
    /// random-k, QSGD, scaled sign, uniform quantization; with or without error feedback),
    /// and the exact bytes that then travel (they set the upload's simulated time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<crate::compression::CompressionSpec>,
    /// Byzantine clients: a seeded share of the participants send an attack instead of their
    /// honest update (sign flipping, Gaussian, scaled, ALIE, IPM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adversary: Option<crate::robust::AdversarySpec>,
    /// A robust aggregation rule in place of the algorithm's weighted mean (coordinate-wise
    /// median, trimmed mean, Krum, Bulyan, geometric median, centered clipping, norm
    /// bounding), each client counting the same; FedEM: per component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation: Option<crate::robust::RobustRuleSpec>,
    /// How the server steps the global model along the change its aggregation makes: plain
    /// SGD with a server learning rate, FedAvgM's momentum, FedAdam, FedYogi or FedAdagrad
    /// (Reddi et al. 2021). Without it, the aggregate is the new global model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_optimizer: Option<crate::server_optimizer::ServerOptimizerSpec>,
    /// When a client, a peer or the server first sees NaN or infinite numbers: `stop` the run
    /// there (default) or `continue`. Either way `summary.csv` says the run diverged, and when.
    #[serde(default, skip_serializing_if = "OnDivergence::is_stop")]
    pub on_divergence: OnDivergence,
}

/// Clients held out of training: after each evaluated round they adapt to the trained model
/// with their own training data (as their algorithm does it) and are tested.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUnseen {
    /// Fraction of the clients held out, drawn from the run's seed.
    #[serde(default = "default_unseen_fraction")]
    pub fraction: f64,
}

fn default_unseen_fraction() -> f64 {
    0.2
}

fn default_name() -> String {
    "scenario".into()
}
fn default_seed() -> u64 {
    1
}
/// The local solver: minibatch SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTraining {
    /// Local epochs per round (give this or `local_steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_epochs: Option<u32>,
    /// Local SGD steps per round (give this or `local_epochs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_steps: Option<u32>,
    /// Rows per minibatch (a client's last batch of an epoch may be shorter).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// The learning rate of local SGD.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// SGD momentum (PyTorch's form: the buffer accumulates gradients).
    #[serde(default)]
    pub momentum: f64,
    /// L2 weight decay, added to the gradient as PyTorch's SGD does.
    #[serde(default)]
    pub weight_decay: f64,
    /// Keep each client's momentum buffer between rounds (as the FedEM authors' code does).
    #[serde(default = "default_true")]
    pub keep_momentum: bool,
    /// How the learning rate changes over rounds: `constant` or `multi_step`.
    #[serde(default)]
    pub lr_schedule: RawLrSchedule,
    /// Train a round's clients as one stacked computation where possible (`auto`) or each
    /// alone (`off`); results agree up to float rounding.
    #[serde(default, skip_serializing_if = "Cohorts::is_auto")]
    pub cohorts: Cohorts,
    /// Where cohorts train: `cpu` (the default), `cuda` (every visible GPU), `cuda:N` or
    /// `auto`.
    #[serde(default, skip_serializing_if = "DeviceChoice::is_cpu")]
    pub device: DeviceChoice,
    /// The float precision of the models' products: `fp32` (the default), `tf32` (CUDA
    /// tensor cores) or `bf16` (mixed precision, as `torch.autocast`). Changes results.
    #[serde(default, skip_serializing_if = "Precision::is_fp32")]
    pub precision: Precision,
    /// Which idle values wait in a spill file in `TMPDIR` instead of memory: `auto` (those of
    /// at least 2¹⁸ floats), `always` or `off`. Results are the same bit for bit, so it is
    /// left out of the resolved scenario (and of the run id).
    #[serde(default, skip_serializing)]
    pub spill: Spill,
    /// At most this many GiB of clients' momentum buffers and personal models (between rounds)
    /// and updates (until the server sums them) stay on the GPUs, where cohorts train there (or
    /// under `cohorts: always`); the rest cross each round. 0 keeps none there. Results are the same bit for bit, so it is left out of the resolved
    /// scenario (and of the run id).
    #[serde(default = "default_device_state_gib", skip_serializing)]
    pub device_state_gib: f64,
}

fn default_device_state_gib() -> f64 {
    16.0
}

fn default_batch() -> usize {
    128
}
fn default_lr() -> f64 {
    0.1
}
fn default_true() -> bool {
    true
}

impl Default for RawTraining {
    fn default() -> Self {
        RawTraining {
            local_epochs: None,
            local_steps: None,
            batch_size: default_batch(),
            lr: default_lr(),
            momentum: 0.0,
            weight_decay: 0.0,
            keep_momentum: true,
            lr_schedule: RawLrSchedule::default(),
            cohorts: Cohorts::Auto,
            device: DeviceChoice::Cpu,
            precision: Precision::Fp32,
            spill: Spill::Auto,
            device_state_gib: default_device_state_gib(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawLrSchedule {
    /// The same learning rate every round.
    Constant {},
    /// Multiply the learning rate by `gamma` after each milestone round.
    MultiStep {
        /// The rounds after which the rate is multiplied by `gamma`, strictly increasing
        /// (round numbers: one at or past the last round never applies, and fedsim says so).
        milestones: Vec<u32>,
        /// The factor applied at each milestone.
        #[serde(default = "default_gamma")]
        gamma: f64,
    },
}

impl Default for RawLrSchedule {
    /// The same learning rate every round.
    fn default() -> Self {
        RawLrSchedule::Constant {}
    }
}

fn default_gamma() -> f64 {
    0.1
}
