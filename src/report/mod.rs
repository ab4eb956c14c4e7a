//! Results: records from the simulation → polars frames → Parquet and CSV, written atomically
//! (temporary file, then rename), plus the run summary (fairness figures included).
//!
//! This is the only room that uses polars. It does not simulate and does not decide what is
//! measured, only how it is tabulated and stored.

mod describe;
mod frames;
mod novelty;
mod plots;
mod records;
mod study;
mod summary;
mod tables;

pub use describe::{client_label_shares, DataDescription, SplitSizes};
pub use frames::{
    clients_frame, extras_frame, gossip_frame, jobs_frame, metrics_frame, mixtures_frame,
    read_parquet, rounds_frame, summary_frame, RunMeta,
};
pub use novelty::{novelty_frame, NoveltyFigures};
pub use plots::{write_chart, write_label_heatmap, Chart, Series};
pub use records::{
    DeviceRecord, DivergenceRecord, DivergenceStage, EvalRecord, ExtraRecord, GossipRecord,
    JobOutcome, JobRecord, MixtureRecord, NoveltyRecord, Record, RoundRecord,
};
pub use study::{
    aggregate, markdown, mean_std, read_curve, read_curves, read_runs, report_frame, write_plots,
    write_report, write_text_table, CurvePoint, ReportRow, RunCurve, RunRow, REPORT_METRICS,
};
pub use summary::{percentile, time_to_accuracy, Fairness, Summary};
pub use tables::{read_client_table, ClientTable, FeatureColumns, TableColumns, TableError};

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
    #[error("drawing {}: {message}", path.display())]
    Plot { path: PathBuf, message: String },
}

/// Writes `path` through a temporary file in the same folder and a rename, so that a reader
/// (or a killed run) never sees a half-written file.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<(), PolarsError>,
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
        let mut file = File::create(&tmp).map_err(io)?;
        write(&mut file).map_err(|source| ReportError::Polars {
            path: path.to_path_buf(),
            source,
        })?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<(), ReportError> {
    write_atomic(path, |f| ParquetWriter::new(f).finish(df).map(|_| ()))
}

pub fn write_csv(path: &Path, df: &mut DataFrame) -> Result<(), ReportError> {
    write_atomic(path, |f| CsvWriter::new(f).finish(df))
}

/// The result files that must be identical between two runs of the same scenario and seed
/// (`summary.csv` is not among them: it holds the wall time).
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
/// `novelty.parquet`: data sets with novel rows).
pub const OPTIONAL_REPRODUCIBLE_FILES: [&str; 4] = [
    "gossip.parquet",
    "mixtures.parquet",
    "extras.parquet",
    "novelty.parquet",
];

/// The reproducible files that differ (or are missing) between two result folders; an optional
/// file counts when either folder has it.
pub fn differing_files(a: &Path, b: &Path) -> Vec<String> {
    let optional = OPTIONAL_REPRODUCIBLE_FILES
        .iter()
        .filter(|f| a.join(f).exists() || b.join(f).exists());
    REPRODUCIBLE_FILES
        .iter()
        .chain(optional)
        .filter(
            |f| match (std::fs::read(a.join(f)), std::fs::read(b.join(f))) {
                (Ok(x), Ok(y)) => x != y,
                _ => true,
            },
        )
        .map(|f| f.to_string())
        .collect()
}

/// Writes a run's result files into `out` (which must exist) as one unit and returns their
/// final paths. They are first written into the staging folder `out/.partial-<pid>/`, then the
/// old `summary.csv` and the other result files of an earlier run are removed, and the new
/// files are moved in with `summary.csv` last. So whenever `out` has a `summary.csv`, its result
/// files are one run's complete set; a failed write (a full or read-only disk) removes the
/// staging folder and leaves no `summary.csv`, and a killed run leaves either the old complete
/// set or no `summary.csv`. Staging folders of earlier killed runs are removed first.
pub fn write_run_atomically(
    out: &Path,
    meta: &RunMeta,
    records: &[Record],
    summaries: &[Summary],
    resolved_yaml: &str,
) -> Result<Vec<PathBuf>, ReportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io { path, source }
    };
    let staging = out.join(format!("{STAGING_PREFIX}{}", std::process::id()));
    for entry in std::fs::read_dir(out).map_err(io(out))?.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(STAGING_PREFIX)
        {
            std::fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
        }
    }
    std::fs::create_dir(&staging).map_err(io(&staging))?;
    let written = write_run(&staging, meta, records, summaries, resolved_yaml);
    let publish = |staged: Vec<PathBuf>| -> Result<Vec<PathBuf>, ReportError> {
        let summary = out.join("summary.csv");
        if summary.exists() {
            std::fs::remove_file(&summary).map_err(io(&summary))?;
        }
        for name in REPRODUCIBLE_FILES
            .iter()
            .chain(&OPTIONAL_REPRODUCIBLE_FILES)
        {
            let old = out.join(name);
            if old.exists() {
                std::fs::remove_file(&old).map_err(io(&old))?;
            }
        }
        // `write_run` returns summary.csv last.
        let mut published = Vec::with_capacity(staged.len());
        for file in staged {
            let to = out.join(file.file_name().expect("a result file"));
            std::fs::rename(&file, &to).map_err(io(&to))?;
            published.push(to);
        }
        Ok(published)
    };
    let result = written.and_then(publish);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// The name of a staging folder inside a run's output folder, before the process id.
const STAGING_PREFIX: &str = ".partial-";

/// Writes a run's result files into `dir` (which must exist) and returns their paths.
/// `summary.csv` is written last: its presence marks a complete run.
fn write_run(
    dir: &Path,
    meta: &RunMeta,
    records: &[Record],
    summaries: &[Summary],
    resolved_yaml: &str,
) -> Result<Vec<PathBuf>, ReportError> {
    let mut files = Vec::new();
    let scenario = dir.join("scenario.yaml");
    let header = format!(
        "# Resolved scenario of run {} (content hash sha256:{}).\n",
        meta.run_id, meta.content_hash
    );
    write_atomic(&scenario, |f| {
        use std::io::Write;
        f.write_all(header.as_bytes())?;
        f.write_all(resolved_yaml.as_bytes())?;
        Ok(())
    })?;
    files.push(scenario);
    let mut metrics = metrics_frame(meta, records).map_err(|source| ReportError::Polars {
        path: dir.join("metrics.parquet"),
        source,
    })?;
    for (name, csv) in [("metrics.parquet", false), ("metrics.csv", true)] {
        let p = dir.join(name);
        if csv {
            write_csv(&p, &mut metrics)?
        } else {
            write_parquet(&p, &mut metrics)?
        }
        files.push(p);
    }
    type Frame = fn(&RunMeta, &[Record]) -> PolarsResult<DataFrame>;
    let tables: [(&str, Frame, bool); 4] = [
        ("rounds.parquet", rounds_frame, false),
        ("jobs.parquet", jobs_frame, false),
        ("clients.parquet", clients_frame, false),
        ("clients.csv", clients_frame, true),
    ];
    for (name, frame, csv) in tables {
        let p = dir.join(name);
        let mut df = frame(meta, records).map_err(|source| ReportError::Polars {
            path: p.clone(),
            source,
        })?;
        if csv {
            write_csv(&p, &mut df)?
        } else {
            write_parquet(&p, &mut df)?
        }
        files.push(p);
    }
    type Optional<'a> = (&'a str, Frame, fn(&Record) -> bool);
    let optional: [Optional; 4] = [
        ("gossip.parquet", gossip_frame, |r| {
            matches!(r, Record::Gossip(_))
        }),
        ("mixtures.parquet", mixtures_frame, |r| {
            matches!(r, Record::Mixture(_))
        }),
        ("extras.parquet", extras_frame, |r| {
            matches!(r, Record::Extra(_))
        }),
        ("novelty.parquet", novelty_frame, |r| {
            matches!(r, Record::Novelty(_))
        }),
    ];
    for (name, frame, present) in optional {
        if !records.iter().any(present) {
            continue;
        }
        let p = dir.join(name);
        let mut df = frame(meta, records).map_err(|source| ReportError::Polars {
            path: p.clone(),
            source,
        })?;
        write_parquet(&p, &mut df)?;
        files.push(p);
    }
    let mut s = summary_frame(summaries).map_err(|source| ReportError::Polars {
        path: dir.join("summary.csv"),
        source,
    })?;
    let p = dir.join("summary.csv");
    write_csv(&p, &mut s)?;
    files.push(p);
    Ok(files)
}
