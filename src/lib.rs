//! fedsim: a deterministic discrete-event simulator for federated learning research.
//!
//! Rooms, from the bottom up:
//! - [`sim`]: virtual time, the event queue, the seed tree and the scheduler actor.
//! - [`io`]: input files that are regular files; output folders fedsim shares with its users
//!   (what it may replace, one writer at a time).
//! - [`data`]: data sets held in contiguous buffers, clients as index ranges.
//! - [`models`]: tch models, local SGD and evaluation, flat parameters.
//! - [`system`]: devices, links and availability that turn work into simulated durations.
//! - [`topology`]: communication graphs and mixing matrices of decentralized runs.
//! - [`algorithms`]: federated algorithms behind one trait.
//! - [`actors`]: the server, the clients, the peers and the trainer pool as actix actors.
//! - [`scenario`]: YAML scenarios, overrides and validation; sweep files expanded into cells.
//! - [`report`]: polars frames, Parquet/CSV writers, summaries and reports over many runs.
//! - [`run`]: one scenario end to end.
//! - [`sweep`]: a sweep's cells, in parallel, resumable and shardable.

pub mod actors;
pub mod algorithms;
pub mod data;
pub mod io;
pub mod models;
pub mod report;
pub mod run;
pub mod scenario;
pub mod sim;
pub mod sweep;
pub mod system;
pub mod topology;

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

/// A problem with one field of a scenario section: the dotted path below the section that
/// holds it, and what is wrong and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{path}`: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: String, message: String) -> Self {
        FieldError { path, message }
    }

    /// The same error, found inside the section `prefix`: its path then starts there.
    pub fn within(self, prefix: &str) -> FieldError {
        let path = if self.path.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        FieldError { path, ..self }
    }
}
