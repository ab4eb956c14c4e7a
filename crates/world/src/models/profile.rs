//! Where the wall time of cohort training and evaluation goes, for performance work: opt in
//! with the environment variable `FEDSIM_PROFILE=1`, and `fedsim run` prints each phase's
//! seconds (summed over threads) at its end. On a GPU each phase waits for the device before
//! its clock stops, so a phase holds the kernels it launched.
//!
//! It also counts the bytes that cross between host vectors and tensors on the cohort path
//! ([`crossed`]): parameter vectors (parameters, momentum, anchors) stacked into tensors and
//! brought back, and data rows put into tensors. On the CPU as on a GPU, the counts show how
//! the traffic grows with the clients and the model.
//!
//! And it counts the arithmetic the models do ([`computed`], from their FLOP counts: a
//! forward and backward pass of a row is three forward passes), so that each phase's rate can
//! be read against the device's: the report measures one large fp32 matrix product on the
//! device cohorts worked on (on the CPU, with one thread, as each trainer thread computes).
//!
//! A profile is never written to a result file, and reading the clock decides nothing: a
//! profiled run's results are those of the same run unprofiled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// The phases timed, in the order they happen in a round (and in declaration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Clients' values read back from spill files into memory.
    Restore,
    /// The training rows' losses under the models an update's E-step weighs them by (FedEM's
    /// components, FedGMM's classifiers), for a whole shard in stacked forward passes.
    Score,
    /// Each job's update begun: its runs, their passes and dropout streams drawn.
    Begin,
    /// The cohort's rows uploaded to the device.
    UploadRows,
    /// The runs' parameters, momentum buffers and anchors stacked and put on the device.
    Stack,
    /// Each step's minibatch gathered and its dropout masks drawn and uploaded.
    Gather,
    /// Each step's forward and backward passes.
    Gradients,
    /// Each step's parameter update.
    Update,
    /// The trained parameters and buffers brought back as flat vectors.
    Unstack,
    /// Each job's update finished (momentum settled, the algorithm's own arithmetic).
    Finish,
    /// A cohort's evaluation, whole.
    Evaluate,
    /// The server's sums of the updates kept on the device.
    Aggregate,
}

/// Every phase, in declaration order: `phase as usize` is its index here.
const PHASES: [Phase; 12] = [
    Phase::Restore,
    Phase::Score,
    Phase::Begin,
    Phase::UploadRows,
    Phase::Stack,
    Phase::Gather,
    Phase::Gradients,
    Phase::Update,
    Phase::Unstack,
    Phase::Finish,
    Phase::Evaluate,
    Phase::Aggregate,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Restore => "restore from spill",
            Phase::Score => "score training rows",
            Phase::Begin => "begin updates",
            Phase::UploadRows => "upload rows",
            Phase::Stack => "stack parameters",
            Phase::Gather => "gather minibatches",
            Phase::Gradients => "forward + backward",
            Phase::Update => "parameter update",
            Phase::Unstack => "unstack parameters",
            Phase::Finish => "finish updates",
            Phase::Evaluate => "evaluate",
            Phase::Aggregate => "sum updates",
        }
    }
}

/// What crosses between host memory and tensors on the cohort path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossing {
    /// Flat parameter vectors (parameters, momentum buffers, anchors) stacked into tensors.
    VectorsIn,
    /// Stacked tensors brought back as flat parameter vectors.
    VectorsOut,
    /// Data rows (features and labels, minibatches or whole splits) put into tensors.
    RowsIn,
    /// Values per data row brought back from tensors (the E-steps' per-row losses).
    RowValuesOut,
}

/// Every crossing, in declaration order: `crossing as usize` is its index here.
const CROSSINGS: [Crossing; 4] = [
    Crossing::VectorsIn,
    Crossing::VectorsOut,
    Crossing::RowsIn,
    Crossing::RowValuesOut,
];

impl Crossing {
    fn name(self) -> &'static str {
        match self {
            Crossing::VectorsIn => "vectors host → tensor",
            Crossing::VectorsOut => "vectors tensor → host",
            Crossing::RowsIn => "rows host → tensor",
            Crossing::RowValuesOut => "row values tensor → host",
        }
    }
}

static BYTES: [AtomicU64; CROSSINGS.len()] = [const { AtomicU64::new(0) }; CROSSINGS.len()];
static CROSSED: [AtomicU64; CROSSINGS.len()] = [const { AtomicU64::new(0) }; CROSSINGS.len()];

/// Counts `bytes` crossing as `what` says, when profiling.
pub fn crossed(what: Crossing, bytes: usize) {
    if profiling() {
        BYTES[what as usize].fetch_add(bytes as u64, Ordering::Relaxed);
        CROSSED[what as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The most bytes of clients' state kept on the devices between rounds at once.
static KEPT: AtomicU64 = AtomicU64::new(0);

/// Notes that `bytes` of clients' state (momentum buffers) are kept on the devices now, when
/// profiling: the report gives the most at once.
pub fn kept_on_device(bytes: u64) {
    if profiling() {
        KEPT.fetch_max(bytes, Ordering::Relaxed);
    }
}

static NANOS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
static CALLS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
static FLOPS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
/// The device cohorts last worked on: -1 the CPU, else the GPU's index.
static DEVICE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);

/// Counts `flops` floating-point operations of the model's own arithmetic done in `phase` (from
/// the models' FLOP counts: a forward pass of a row is [`crate::models::Architecture::
/// flops_per_sample`], a forward and backward pass three times that), when profiling.
pub fn computed(phase: Phase, flops: u64) {
    if profiling() {
        FLOPS[phase as usize].fetch_add(flops, Ordering::Relaxed);
    }
}

/// Whether `FEDSIM_PROFILE` is set to something other than `0` or nothing.
pub fn profiling() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FEDSIM_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Runs `work`, adding its wall time to `phase` when profiling (waiting for `device` first
/// where it is a GPU).
pub fn timed<T>(phase: Phase, device: Device, work: impl FnOnce() -> T) -> T {
    if !profiling() {
        return work();
    }
    let start = Instant::now();
    let out = work();
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
    let k = phase as usize;
    NANOS[k].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    CALLS[k].fetch_add(1, Ordering::Relaxed);
    let index = match device {
        Device::Cuda(index) => index as i64,
        _ => -1,
    };
    DEVICE.store(index, Ordering::Relaxed);
    out
}

/// The rate of one large fp32 matrix product on `device` (2·n³ FLOPs for n = 2048, the best of
/// a few): the device's practical peak for dense arithmetic, against which a phase's rate is
/// read. On the CPU with one libtorch thread, as each trainer thread computes.
fn matmul_rate(device: Device) -> f64 {
    let n = 2048i64;
    let threads = tch::get_num_threads();
    if device == Device::Cpu {
        tch::set_num_threads(1);
    }
    let rate = tch::no_grad(|| {
        let a = Tensor::ones([n, n], (Kind::Float, device));
        let mut best = f64::INFINITY;
        for _ in 0..4 {
            let start = Instant::now();
            let c = a.mm(&a);
            if let Device::Cuda(index) = device {
                tch::Cuda::synchronize(index as i64);
            }
            drop(c);
            best = best.min(start.elapsed().as_secs_f64());
        }
        2.0 * (n as f64).powi(3) / best
    });
    tch::set_num_threads(threads);
    rate
}

/// The phases timed so far, one line each (seconds summed over threads, and how many times
/// each ran); `None` when not profiling.
pub fn profile_report() -> Option<String> {
    if !profiling() {
        return None;
    }
    let mut out = String::from("profile (FEDSIM_PROFILE; seconds summed over threads):\n");
    let computed = FLOPS.iter().any(|f| f.load(Ordering::Relaxed) > 0);
    let device = match DEVICE.load(Ordering::Relaxed) {
        -1 => Device::Cpu,
        index => Device::Cuda(index as usize),
    };
    let peak = computed.then(|| matmul_rate(device));
    for (k, phase) in PHASES.iter().enumerate() {
        let calls = CALLS[k].load(Ordering::Relaxed);
        if calls > 0 {
            let seconds = NANOS[k].load(Ordering::Relaxed) as f64 / 1e9;
            out += &format!("  {:<22} {seconds:10.2} s  ({calls} times)", phase.name());
            let flops = FLOPS[k].load(Ordering::Relaxed) as f64;
            if let (true, Some(peak)) = (flops > 0.0, peak) {
                out += &rate_of(flops, seconds, peak);
            }
            out += "\n";
        }
    }
    if let Some(peak) = peak {
        let on = match device {
            Device::Cpu => "one CPU thread".to_string(),
            Device::Cuda(index) => format!("GPU {index}"),
            _ => "the device".to_string(),
        };
        out += &format!(
            "  (rates per thread-second, against an fp32 2048² matrix product on {on}: \
             {:.1} GFLOP/s)\n",
            peak / 1e9
        );
    }
    out += &crossings_report(&|k| {
        (
            BYTES[k].load(Ordering::Relaxed),
            CROSSED[k].load(Ordering::Relaxed),
        )
    });
    let kept = KEPT.load(Ordering::Relaxed);
    if kept > 0 {
        out += &format!(
            "  {:<22} {:10.1} MB at most (buffers, updates, own models; `training.device_state_gib`)\n",
            "kept on the device",
            kept as f64 / 1e6
        );
    }
    Some(out)
}

/// A phase's arithmetic: `flops` done in `seconds` (summed over threads), its rate, and that
/// rate against `peak` (FLOP/s).
fn rate_of(flops: f64, seconds: f64, peak: f64) -> String {
    let rate = flops / seconds.max(1e-9);
    format!(
        "  {:.1} GFLOP, {:.2} GFLOP/s, {:.1} % of peak",
        flops / 1e9,
        rate / 1e9,
        100.0 * rate / peak
    )
}

/// The crossings' lines of the report, from `(bytes, times)` of each crossing by its index;
/// none where nothing crossed.
fn crossings_report(counts: &dyn Fn(usize) -> (u64, u64)) -> String {
    let mut out = String::new();
    for (k, crossing) in CROSSINGS.iter().enumerate() {
        let (bytes, times) = counts(k);
        if times > 0 {
            if out.is_empty() {
                out += "bytes crossing on the cohort path (summed over threads):\n";
            }
            let mb = bytes as f64 / 1e6;
            out += &format!("  {:<22} {mb:10.1} MB ({times} times)\n", crossing.name());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_listed_in_declaration_order() {
        for (k, &phase) in PHASES.iter().enumerate() {
            assert_eq!(phase as usize, k, "{phase:?}");
        }
        for (k, &crossing) in CROSSINGS.iter().enumerate() {
            assert_eq!(crossing as usize, k, "{crossing:?}");
        }
    }

    #[test]
    fn a_phase_rate_is_its_flops_over_its_seconds_against_the_peak() {
        // 6 GFLOP in 2 s: 3 GFLOP/s, 15 % of 20 GFLOP/s.
        assert_eq!(
            rate_of(6e9, 2.0, 20e9),
            "  6.0 GFLOP, 3.00 GFLOP/s, 15.0 % of peak"
        );
    }

    #[test]
    fn the_crossings_are_reported_in_megabytes_and_left_out_when_none() {
        assert_eq!(crossings_report(&|_| (0, 0)), "");
        let counts = |k: usize| [(2_500_000, 3), (0, 0), (40_000, 2), (0, 0)][k];
        assert_eq!(
            crossings_report(&counts),
            "bytes crossing on the cohort path (summed over threads):\n  \
             vectors host → tensor         2.5 MB (3 times)\n  \
             rows host → tensor            0.0 MB (2 times)\n"
        );
    }
}
