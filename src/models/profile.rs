//! Where the wall time of cohort training and evaluation goes, for performance work: opt in
//! with the environment variable `FEDSIM_PROFILE=1`, and `fedsim run` prints each phase's
//! seconds (summed over threads) at its end. On a GPU each phase waits for the device before
//! its clock stops, so a phase holds the kernels it launched.
//!
//! A profile is never written to a result file, and reading the clock decides nothing: a
//! profiled run's results are those of the same run unprofiled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;
use tch::Device;

/// The phases timed, in the order they happen in a round (and in declaration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Clients' values read back from spill files into memory.
    Restore,
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
}

/// Every phase, in declaration order: `phase as usize` is its index here.
const PHASES: [Phase; 10] = [
    Phase::Restore,
    Phase::Begin,
    Phase::UploadRows,
    Phase::Stack,
    Phase::Gather,
    Phase::Gradients,
    Phase::Update,
    Phase::Unstack,
    Phase::Finish,
    Phase::Evaluate,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Restore => "restore from spill",
            Phase::Begin => "begin updates",
            Phase::UploadRows => "upload rows",
            Phase::Stack => "stack parameters",
            Phase::Gather => "gather minibatches",
            Phase::Gradients => "forward + backward",
            Phase::Update => "parameter update",
            Phase::Unstack => "unstack parameters",
            Phase::Finish => "finish updates",
            Phase::Evaluate => "evaluate",
        }
    }
}

static NANOS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
static CALLS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];

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
    out
}

/// The phases timed so far, one line each (seconds summed over threads, and how many times
/// each ran); `None` when not profiling.
pub fn profile_report() -> Option<String> {
    if !profiling() {
        return None;
    }
    let mut out = String::from("profile (FEDSIM_PROFILE; seconds summed over threads):\n");
    for (k, phase) in PHASES.iter().enumerate() {
        let calls = CALLS[k].load(Ordering::Relaxed);
        if calls > 0 {
            let seconds = NANOS[k].load(Ordering::Relaxed) as f64 / 1e9;
            out += &format!("  {:<22} {seconds:10.2} s  ({calls} times)\n", phase.name());
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_listed_in_declaration_order() {
        for (k, &phase) in PHASES.iter().enumerate() {
            assert_eq!(phase as usize, k, "{phase:?}");
        }
    }
}
