//! One run's results: the scenario run end to end ([`run_scenario`]), its records → polars
//! frames → Parquet and CSV written atomically (temporary file, then rename) into a folder
//! published whole, and its summary (fairness figures included); [`DataDescription`] is the
//! same view of a data set before anything trains.
//!
//! This room does not decide what is measured, only how it is tabulated and stored; reading
//! many runs back is `studies`' business.

mod describe;
mod frames;
mod machine;
mod novelty;
mod preflight;
mod run;
mod run_files;
mod summary;

pub use describe::{client_label_shares, DataDescription, SplitStats};
pub use frames::{
    clients_frame, column, extras_frame, gossip_frame, jobs_frame, metrics_frame, mixtures_frame,
    read_parquet, rounds_frame, summary_frame, ClientsFileRows, RunMeta,
};
pub use machine::{Machine, MACHINE_FILE};
pub use novelty::{novelty_frame, NoveltyFigures};
pub use preflight::{
    check_run_fits, check_terms, human_bytes, least_bytes, machine_memory, peak_memory, preflight,
    run_terms, DataShape, MemoryTerm,
};
pub use run::{
    default_out_dir, default_threads, observe_scenario, run_scenario, run_scenario_with_bar,
    simulate_scenario, style_run_bar, RunError, RunOptions, RunReport,
};
pub use run_files::{RunFiles, BUFFER_BYTES, CLIENT_MODELS_FILE, MODELS_FILE, ROW_GROUP};
pub use summary::{percentile, time_to_accuracy, Fairness, RunIdentity, Summary, SummaryInputs};

use polars::prelude::*;
use std::fs::File;
use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests {
    use super::*;

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
}

/// Writes `path` through a temporary file in the same folder and a rename, so that a reader
/// (or a killed run) never sees a half-written file.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut DiskFile) -> Result<(), PolarsError>,
) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("result");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = DiskFile::new(File::create(&tmp).map_err(io)?);
        let written = write(&mut file);
        written.map_err(|source| file.error_of(path, source))?;
        file.file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A file being written that remembers the first error the disk gave: polars reports some of
/// them (a full disk while writing Parquet) as errors of its own ("Invalid thrift: transport
/// error"), and the disk's own error is what a user must read.
pub struct DiskFile {
    file: File,
    error: std::sync::Arc<std::sync::Mutex<Option<(std::io::ErrorKind, String)>>>,
}

impl DiskFile {
    pub fn new(file: File) -> DiskFile {
        DiskFile {
            file,
            error: Default::default(),
        }
    }

    /// A second handle on the same file that records into the same place (for writers that
    /// take their file by value).
    pub fn try_clone(&self) -> std::io::Result<DiskFile> {
        Ok(DiskFile {
            file: self.file.try_clone()?,
            error: self.error.clone(),
        })
    }

    pub fn sync_all(&self) -> std::io::Result<()> {
        self.file.sync_all()
    }

    /// The error to report for a failed write of `path`: the disk's, where it gave one.
    pub fn error_of(&self, path: &Path, source: PolarsError) -> ReportError {
        match self.error.lock().ok().and_then(|e| e.clone()) {
            Some((kind, text)) => ReportError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(kind, text),
            },
            None => ReportError::Polars {
                path: path.to_path_buf(),
                source,
            },
        }
    }

    fn keep<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert_with(|| (e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl std::io::Write for DiskFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.file.write(buf);
        self.keep(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.file.flush();
        self.keep(r)
    }
}

impl std::io::Seek for DiskFile {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        let r = self.file.seek(pos);
        self.keep(r)
    }
}

pub fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<(), ReportError> {
    write_atomic(path, |f| ParquetWriter::new(f).finish(df).map(|_| ()))
}

pub fn write_csv(path: &Path, df: &mut DataFrame) -> Result<(), ReportError> {
    write_atomic(path, |f| CsvWriter::new(f).finish(df))
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

/// The reproducible files that differ (or are missing) between two result folders
/// ([`compared_files`]).
pub fn differing_files(a: &Path, b: &Path) -> Vec<String> {
    compared_files(a, b)
        .into_iter()
        .filter(
            |f| match (std::fs::read(a.join(f)), std::fs::read(b.join(f))) {
                (Ok(x), Ok(y)) => x != y,
                _ => true,
            },
        )
        .map(|f| f.to_string())
        .collect()
}
