//! fedsim: a deterministic discrete-event simulator for federated learning research.
//!
//! # Layers
//!
//! The modules form layers, declared in [`LAYERS`]; a module imports only from its own layer
//! and the layers below it, and no two modules import each other (a unit test reads the
//! sources and fails on any climbing import or cycle). The first three layers are crates of
//! their own (`crates/kernel`, `crates/world`, `crates/algorithms`), re-exported here, so that
//! a change recompiles only its crate and those above it, and the compiler holds the crate
//! boundaries; the test holds the order within them. From the bottom up:
//!
//! 1. The kernel and what everything shares, importing nothing above (`fedsim-kernel`):
//!    - [`sim`]: virtual time, the event queue, the seed tree and the scheduler actor.
//!    - [`settings`]: the run settings that belong to no catalogue (evaluation, divergence,
//!      how clients train on the machine), the catalogue glue and [`settings::FieldError`];
//!      pure validation, no host.
//!    - [`io`]: input files that are regular files, the readers of data tables and
//!      per-client files, and output folders fedsim shares with its users.
//!    - [`records`]: what the entities emit, in event order.
//! 2. The catalogues of the world a run simulates (`fedsim-world`):
//!    - [`data`]: data sets held in contiguous buffers, clients as index ranges.
//!    - [`models`]: tch models, local SGD and evaluation, flat parameters.
//!    - [`topology`]: communication graphs and mixing matrices of decentralized runs.
//!    - [`system`]: devices, links and availability that turn work into simulated durations.
//!    - [`privacy`]: differential privacy: clipping and noise of clients' updates, and the
//!      accountant (ε spent at δ, noise calibration).
//!    - [`compression`]: compressors of clients' updates and the bytes they put on the wire.
//!    - [`robust`]: Byzantine clients' attacks and robust aggregation rules.
//!    - [`sampling`]: who a round selects: the sampling strategies and their draws.
//!    - [`server_optimizer`]: how the server steps the global model along a round's combined
//!      change (FedAvgM, FedAdam, FedYogi, FedAdagrad).
//!    - [`policy`]: the round policies (synchronous, FedBuff): their settings and what they
//!      declare; their behaviour is the server's.
//! 3. [`algorithms`]: federated algorithms behind one trait, and their registry
//!    (`fedsim-algorithms`).
//! 4. [`scenario`]: a YAML scenario read, overridden and validated into a run's settings.
//! 5. [`plan`]: a run decided before it runs: its settings, built data and this machine
//!    checked into one immutable [`plan::RunPlan`], the algorithm built as its own type.
//! 6. [`actors`]: the server, the clients, the peers and the trainer pool as actix actors,
//!    assembled from a plan; they cannot fail on input.
//! 7. [`results`]: one run end to end, its pre-flight, its result files and summary.
//! 8. [`studies`]: sweeps (resumable, shardable) and reports over many runs, with plots.
//!
//! The command line (`src/main.rs`) sits on top and uses only the library's public items.

/// The layers, bottom first: a module may import from its own layer and the ones below.
pub const LAYERS: &[&[&str]] = &[
    &["sim", "settings", "io", "records"],
    &[
        "data",
        "models",
        "topology",
        "system",
        "privacy",
        "compression",
        "robust",
        "sampling",
        "server_optimizer",
        "policy",
    ],
    &["algorithms"],
    &["scenario"],
    &["plan"],
    &["actors"],
    &["results"],
    &["studies"],
];

#[cfg(test)]
mod layering;

pub use fedsim_algorithms::algorithms;
pub use fedsim_kernel::{io, records, settings, sim};
pub use fedsim_world::{
    compression, data, models, policy, privacy, robust, sampling, server_optimizer, system,
    topology,
};

pub mod actors;
pub mod plan;
pub mod results;
pub mod scenario;
pub mod studies;

/// The message of `e` and of each of its sources, joined by ": " (what anyhow's `{:#}` prints).
/// fedsim's errors never repeat their source in their own message, so each part appears once.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Keeps large freed blocks in the process instead of handing them back to the system at
/// once (glibc: blocks under 32 MiB come from the heap, whose top is trimmed only past
/// 256 MiB). Training allocates and frees megabyte tensors thousands of times a second; with
/// glibc's defaults each one costs fresh zeroed pages (FedGMM's Gaussian algebra spent a
/// third of its time in page faults). Only speed changes, never a result. Call it once, first.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's thresholds; valid at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
