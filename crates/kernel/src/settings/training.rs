//! How a run's clients are trained on the machine, as written under `training:`: in cohorts or
//! alone (`cohorts`, which matches training alone up to float rounding), in which float
//! precision (`precision`, which changes results), and which idle values wait in a spill file
//! (`spill`, which changes no result).

/// Whether clients train in cohorts (`training.cohorts`): a round's training jobs as one
/// stacked computation, where the algorithm declares an update cohorts can train
/// (`LocalUpdate::Sgd`, `LocalUpdate::Batchwise` in `algorithms`) and the model stacks
/// (`Architecture::stacks` in `models`). Results match training each client alone up to
/// float rounding.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Cohorts {
    /// Cohorts wherever the algorithm and the model allow and stacking pays on the devices
    /// trained on (on the CPU: dense models; on a GPU: every model that stacks), each client
    /// alone otherwise.
    #[default]
    Auto,
    /// Cohorts wherever the algorithm and the model allow, even where each client alone is
    /// faster (convolutions on the CPU): to check a GPU run's stacked path on a CPU.
    Always,
    /// Every client trains alone.
    Off,
}

impl Cohorts {
    /// The default, left out of the resolved scenario so that run ids stay as they were.
    pub fn is_auto(&self) -> bool {
        *self == Cohorts::Auto
    }
}

/// The float precision of the models' products (`training.precision`). Parameters, momentum,
/// losses and aggregation stay f32 in every mode; what changes is how matrix products and
/// convolutions round. Results are bit-identical from run to run in every mode (on CUDA: on the
/// same GPU model); they differ between modes.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Full f32 everywhere (libtorch's TF32 convolutions switched off on GPUs): GPU results
    /// differ from the CPU's by float rounding only.
    #[default]
    Fp32,
    /// CUDA only: matrix products and convolutions on TF32 tensor cores (inputs rounded to
    /// 10-bit mantissas, f32 sums), PyTorch's `allow_tf32`. A process-wide setting of
    /// libtorch: runs of one process that differ in it (a sweep's cells) take turns on the GPU.
    Tf32,
    /// Mixed precision as PyTorch's `torch.autocast(dtype=torch.bfloat16)` does it, on the CPU
    /// and on GPUs: matrix products, convolutions and LSTM cells in bf16 (8-bit mantissas),
    /// losses, softmaxes and everything the optimizer keeps in f32. fedsim's plain-Rust paths
    /// (the linear model scored from host rows) stay f32.
    Bf16,
}

impl Precision {
    /// The default, left out of the resolved scenario so that run ids stay as they were.
    pub fn is_fp32(&self) -> bool {
        *self == Precision::Fp32
    }
}

/// Which values wait in a spill file (an unnamed file in `TMPDIR`) instead of memory while
/// nobody needs them (`training.spill`): a client's state between its jobs, a finished job's
/// state until the client takes it, an update until its round's aggregation. They read back
/// bit for bit, so results never depend on it; memory then follows the round's jobs instead of
/// the number of clients.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Spill {
    /// Values whose float buffers hold at least 2¹⁸ floats (1 MiB: the CNNs, the LSTM, FedEM's
    /// momentum), where a file write costs little beside the training that made them, once
    /// such values kept in memory take a quarter of the machine's memory (the cgroup's limit
    /// where one is set): a run whose idle values fit is not slowed by the file.
    #[default]
    Auto,
    /// Every value of at least 2¹⁸ floats, however much memory is free: the least memory.
    Large,
    /// Every value with float buffers (to check the spilled path with small models).
    Always,
    /// Everything stays in memory.
    Off,
}

/// The share of the machine's memory that `spill: auto` fills with idle values before it
/// spills.
pub const AUTO_SPILL_SHARE: f64 = 0.25;

impl Spill {
    /// The least number of floats a spilled value holds and the bytes of such values kept in
    /// memory before any is spilled, or `None`: nothing is spilled.
    /// `machine_memory`: the bytes of memory the run may use (what `io` reads of the machine).
    pub fn store_settings(&self, machine_memory: f64) -> Option<(usize, u64)> {
        match self {
            Spill::Auto => Some((1 << 18, (AUTO_SPILL_SHARE * machine_memory) as u64)),
            Spill::Large => Some((1 << 18, 0)),
            Spill::Always => Some((1, 0)),
            Spill::Off => None,
        }
    }
}
