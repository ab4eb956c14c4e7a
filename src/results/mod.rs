//! One run's results: the scenario run end to end ([`run_scenario`]), its records → polars
//! frames → Parquet and CSV written atomically (temporary file, then rename) into a folder
//! published whole, and its summary (fairness figures included); [`DataDescription`] is the
//! same view of a data set before anything trains.
//!
//! This room does not decide what is measured, only how it is tabulated and stored; reading
//! many runs back is `studies`' business.

mod checkpoint;
mod describe;
mod frames;
mod machine;
mod mlflow;
mod novelty;
mod run;
mod run_files;
mod scenario_description;
mod summary;
mod tensorboard;
mod tracking;

pub use crate::settings::CheckpointEvery;
pub use checkpoint::{CheckpointError, CheckpointOptions, CHECKPOINT_FILE};
pub use describe::{client_label_shares, DataDescription, SplitStats};
pub use frames::{
    clients_frame, column, extras_frame, gossip_frame, jobs_frame, metrics_frame, mixtures_frame,
    read_parquet, rounds_frame, summary_frame, ClientsFileRows, RunMeta,
};
pub use machine::{Machine, MACHINE_FILE};
pub use novelty::{novelty_frame, NoveltyFigures};
pub use run::{
    check_threads, default_out_dir, default_threads, max_threads, observe_scenario, run_scenario,
    run_scenario_reporting, run_scenario_with_bar, simulate_scenario, style_run_bar, RunError,
    RunOptions, RunReport,
};
pub use run_files::{RunFiles, BUFFER_BYTES, CLIENT_MODELS_FILE, MODELS_FILE, ROW_GROUP};
pub use scenario_description::{describe_scenario, DescribeError, Said, ScenarioDescription};
pub use summary::{percentile, time_to_accuracy, Fairness, RunIdentity, Summary, SummaryInputs};
pub use tracking::{Evaluation, OnEvaluation};

use crate::io::{DiskFile, Staging};
use polars::prelude::*;
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests {
    use super::*;

    /// The pre-flight counts what the result files keep of each evaluated client: the size of
    /// its row of `clients.parquet` and of its last evaluation.
    #[test]
    fn the_preflight_counts_what_a_client_row_keeps() {
        assert_eq!(
            ClientsFileRows::ROW_BYTES + std::mem::size_of::<crate::records::EvalRecord>(),
            crate::plan::RESULT_BYTES_PER_EVALUATED_CLIENT,
            "update `plan::RESULT_BYTES_PER_EVALUATED_CLIENT`"
        );
    }

    #[test]
    fn differing_files_names_what_changed() {
        let tmp = std::env::temp_dir().join(format!("fedsim-diff-{}", std::process::id()));
        let (a, b) = (tmp.join("a"), tmp.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).unwrap();
            for f in REPRODUCIBLE_FILES {
                std::fs::write(d.join(f), f).unwrap();
            }
        }
        assert!(differing_files(&a, &b).is_empty());
        assert_eq!(compared_files(&a, &b), REPRODUCIBLE_FILES);
        // An optional file counts where either folder has it.
        std::fs::write(a.join("novelty.parquet"), "scores").unwrap();
        let mut with_novelty = REPRODUCIBLE_FILES.to_vec();
        with_novelty.push("novelty.parquet");
        assert_eq!(compared_files(&a, &b), with_novelty);
        assert_eq!(differing_files(&a, &b), ["novelty.parquet"]);
        std::fs::write(b.join("novelty.parquet"), "scores").unwrap();
        std::fs::write(b.join("metrics.csv"), "changed").unwrap();
        std::fs::remove_file(b.join("rounds.parquet")).unwrap();
        assert_eq!(differing_files(&a, &b), ["metrics.csv", "rounds.parquet"]);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing {}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {}", path.display())]
    Polars { path: PathBuf, source: PolarsError },
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {}", path.display())]
    ReadTable { path: PathBuf, source: PolarsError },
    #[error("{}: not a valid scenario file: {message}", path.display())]
    Scenario { path: PathBuf, message: String },
    #[error("{}: no runs to report on: {why}", path.display())]
    NoRuns { path: PathBuf, why: String },
    #[error("drawing {}: {message}", path.display())]
    Plot { path: PathBuf, message: String },
    #[error(transparent)]
    Folder(#[from] crate::io::FolderError),
    #[error("reading {}: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    OutputName { path: PathBuf, message: String },
}

/// Claims the folder of `path` for the one file `path` (`fedsim export-weights --out`,
/// `fedsim describe --heatmap`) by the output-folder rules of [`crate::io::folder`]: a file
/// fedsim did not write there is refused, or moved aside under `rules.force`, and an input is
/// never replaced. The name may not be one of a run's result files ([`result_files`]), which
/// would break the run it belongs to, unless it is `allowed` (a run's own
/// `models.safetensors`, written by `export-weights` as `--save-models` would have). Returns
/// the folder, the file's name in it and what `force` moved aside.
pub fn claim_single_file(
    path: &Path,
    rules: &crate::io::OutputRules,
    allowed: Option<&Path>,
) -> Result<(crate::io::OutputFolder, String, Vec<String>), ReportError> {
    let refuse = |message: String| ReportError::OutputName {
        path: path.to_path_buf(),
        message,
    };
    let name = (path.file_name().and_then(|n| n.to_str()))
        .filter(|n| !n.starts_with(".fedsim"))
        .ok_or_else(|| refuse("give a file name to write (a folder or `..` is not one)".into()))?
        .to_string();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let is_allowed = allowed.is_some_and(|a| {
        a.file_name().and_then(|n| n.to_str()) == Some(name.as_str())
            && same(a.parent().unwrap_or(Path::new(".")), &dir)
    });
    if result_files().contains(&name.as_str()) && !is_allowed {
        return Err(refuse(format!(
            "`{name}` is the name of one of a run's result files, which this file would break; \
             give it another name"
        )));
    }
    let (folder, notes) = crate::io::OutputFolder::claim(&dir, &[&name], rules)?;
    Ok((folder, name, notes))
}

/// The error of a failed write of `path` into `file`: the disk's own, where it gave one (a
/// full disk, which polars may report as an error of its own), else polars'.
pub fn write_error(file: &DiskFile, path: &Path, source: PolarsError) -> ReportError {
    match file.disk_error() {
        Some(source) => ReportError::Io {
            path: path.to_path_buf(),
            source,
        },
        None => ReportError::Polars {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// Writes `df` as the Parquet file `name` of a staging folder; returns its path.
pub fn stage_parquet(
    staging: &Staging,
    name: &str,
    df: &mut DataFrame,
) -> Result<PathBuf, ReportError> {
    stage_with(staging, name, |f| {
        ParquetWriter::new(f).finish(df).map(|_| ())
    })
}

/// Writes `df` as the CSV file `name` of a staging folder; returns its path.
pub fn stage_csv(
    staging: &Staging,
    name: &str,
    df: &mut DataFrame,
) -> Result<PathBuf, ReportError> {
    stage_with(staging, name, |f| CsvWriter::new(f).finish(df))
}

/// Writes the file `name` of a staging folder with `write`, then syncs it.
fn stage_with(
    staging: &Staging,
    name: &str,
    write: impl FnOnce(&mut DiskFile) -> Result<(), PolarsError>,
) -> Result<PathBuf, ReportError> {
    let path = staging.path(name);
    let mut file = staging.create(name)?;
    write(&mut file).map_err(|source| write_error(&file, &path, source))?;
    file.sync_all().map_err(|source| ReportError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// `df` as CSV text (for small tables written whole: a sweep's `cells.csv`).
pub fn csv_bytes(df: &mut DataFrame) -> Result<Vec<u8>, PolarsError> {
    let mut bytes = Vec::new();
    CsvWriter::new(&mut bytes).finish(df)?;
    Ok(bytes)
}

/// The result files that must be identical between two runs of the same scenario and seed
/// (`summary.csv` is not among them: it holds the wall time; nor is `machine.yaml`, which says
/// what ran the run).
pub const REPRODUCIBLE_FILES: [&str; 7] = [
    "scenario.yaml",
    "metrics.parquet",
    "metrics.csv",
    "rounds.parquet",
    "jobs.parquet",
    "clients.parquet",
    "clients.csv",
];

/// Reproducible files that only some runs write (`gossip.parquet`: decentralized runs;
/// `mixtures.parquet`: mixture models; `extras.parquet`: what an algorithm reports by name;
/// `novelty.parquet`: data sets with novel rows; `models.safetensors` and
/// `client_models.safetensors`: runs asked to save their final models, or their clients').
pub const OPTIONAL_REPRODUCIBLE_FILES: [&str; 6] = [
    "gossip.parquet",
    "mixtures.parquet",
    "extras.parquet",
    "novelty.parquet",
    run_files::MODELS_FILE,
    run_files::CLIENT_MODELS_FILE,
];

/// Every file a run may write into its folder, `summary.csv` first (the order in which an
/// earlier run's files are removed: without its summary a folder holds no complete run).
pub fn result_files() -> Vec<&'static str> {
    std::iter::once("summary.csv")
        .chain(REPRODUCIBLE_FILES)
        .chain(OPTIONAL_REPRODUCIBLE_FILES)
        .chain([MACHINE_FILE])
        .collect()
}

/// The reproducible files two result folders are compared on: every one a run writes, and each
/// optional one either folder has.
pub fn compared_files(a: &Path, b: &Path) -> Vec<&'static str> {
    let optional = OPTIONAL_REPRODUCIBLE_FILES
        .iter()
        .filter(|f| a.join(f).exists() || b.join(f).exists());
    REPRODUCIBLE_FILES.iter().chain(optional).copied().collect()
}

/// A result file's bytes, to compare.
fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::io::read_bytes(
        path,
        crate::io::SizeLimit::memory("a result file compared whole"),
    )
}

/// The reproducible files that differ (or are missing) between two result folders
/// ([`compared_files`]).
pub fn differing_files(a: &Path, b: &Path) -> Vec<String> {
    compared_files(a, b)
        .into_iter()
        .filter(|f| match (read_whole(&a.join(f)), read_whole(&b.join(f))) {
            (Ok(x), Ok(y)) => x != y,
            _ => true,
        })
        .map(|f| f.to_string())
        .collect()
}
