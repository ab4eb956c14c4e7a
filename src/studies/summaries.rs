//! A run's `summary.csv` as reports read it: the columns a report aggregates
//! ([`REPORT_METRICS`]), one [`RunRow`] per row, and what makes a summary readable (and so a
//! run finished). This room reads summaries; it groups nothing and writes nothing.

use crate::io::SizeLimit;
use crate::results::ReportError;
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// A `summary.csv` column a report aggregates, and how tables and plots name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportMetric {
    /// The column of `summary.csv`.
    pub column: &'static str,
    /// Its name in `report.md` and the charts.
    pub title: &'static str,
}

const fn metric(column: &'static str, title: &'static str) -> ReportMetric {
    ReportMetric { column, title }
}

/// The summary columns a report aggregates, in the order of its tables.
pub const REPORT_METRICS: [ReportMetric; 18] = [
    metric("test_acc_mean", "accuracy"),
    metric("test_acc_bottom_decile", "bottom decile"),
    metric("test_acc_p10", "p10"),
    metric("test_acc_worst10_mean", "worst-10% mean"),
    metric("test_acc_std", "std across clients"),
    metric("test_acc_jain", "Jain"),
    metric("test_loss_mean", "loss"),
    metric("time_to_target_s", "time to target (s)"),
    // Not a summary column: read from the run's learning curve where a report asks for it
    // (`fedsim report --target-accuracy`).
    metric("rounds_to_target", "rounds to target"),
    metric("spectral_gap_mean", "spectral gap"),
    metric("consensus_distance_final", "consensus distance"),
    metric("sim_seconds", "simulated s"),
    metric("bytes_up", "MB up"),
    metric("backdoor_success", "backdoor success"),
    metric("novelty_auroc", "novelty AUROC"),
    metric("novelty_ap", "novelty AP"),
    metric("novelty_max_f1", "novelty max-F1"),
    // Differs from machine to machine and rerun to rerun: in a report only on request
    // (`fedsim report --wall-time`).
    metric("wall_seconds", "wall s"),
];

/// One summary row of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// The configuration: `(axis, value)` in axis order (the seed is not part of it).
    pub config: Vec<(String, String)>,
    pub seed: String,
    pub model: String,
    pub unseen: bool,
    /// The run's numbers stopped being finite (`diverged` in its summary).
    pub diverged: bool,
    /// The run ended before its last round, no client being online again (`ended_early`).
    pub ended_early: bool,
    /// Metric values by [`REPORT_METRICS`] name (NaN when missing).
    pub metrics: BTreeMap<String, f64>,
}

/// A column's name and its values as text.
type TextColumn = (String, Vec<Option<String>>);

/// Every column of a CSV file as text.
pub(super) fn read_csv_text(path: &Path) -> Result<Vec<TextColumn>, ReportError> {
    let bytes = read_result_file(path)?;
    csv_text_columns(path, bytes)
}

/// A result file's bytes (bounded: see [`SizeLimit::RESULT`]).
fn read_result_file(path: &Path) -> Result<Vec<u8>, ReportError> {
    crate::io::read_bytes(path, SizeLimit::RESULT).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every column of the CSV text `bytes` (of `path`) as text.
fn csv_text_columns(path: &Path, bytes: Vec<u8>) -> Result<Vec<TextColumn>, ReportError> {
    let err = |source| ReportError::ReadTable {
        path: path.to_path_buf(),
        source,
    };
    let df = CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(Some(0))
        .into_reader_with_file_handle(std::io::Cursor::new(bytes))
        .finish()
        .map_err(err)?;
    df.columns()
        .iter()
        .map(|c| {
            let values = c
                .str()
                .map_err(err)?
                .iter()
                .map(|v| v.map(str::to_string))
                .collect();
            Ok((c.name().to_string(), values))
        })
        .collect()
}

pub(super) fn text_column<'a>(
    cols: &'a [(String, Vec<Option<String>>)],
    name: &str,
) -> Option<&'a [Option<String>]> {
    cols.iter().find(|(n, _)| n == name).map(|(_, v)| &v[..])
}

/// The summary rows of one run folder, each with `config`. A summary cut short (its last line
/// unfinished, or no row under its header) or without its columns is refused, saying so.
pub(super) fn read_summary(
    path: &Path,
    config: &[(String, String)],
    seed: Option<&str>,
) -> Result<Vec<RunRow>, ReportError> {
    let bytes = read_result_file(path)?;
    let corrupt = |message: &str| ReportError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    };
    if bytes.is_empty() {
        return Err(corrupt("the file is empty"));
    }
    if !bytes.ends_with(b"\n") {
        return Err(corrupt(
            "it ends in the middle of a line: the file was cut short (fedsim ends every line)",
        ));
    }
    let cols = csv_text_columns(path, bytes)?;
    check_summary_columns(path, &cols)?;
    if cols.first().is_none_or(|c| c.1.is_empty()) {
        return Err(corrupt(
            "it has a header but no rows: the file was cut short, or the run evaluated no \
             model (a run's summary has a row for each model it evaluated; `algorithm: noop` \
             trains none)",
        ));
    }
    let n = cols.first().map_or(0, |c| c.1.len());
    let text = |name: &str, i: usize| {
        text_column(&cols, name)
            .and_then(|c| c[i].clone())
            .unwrap_or_default()
    };
    Ok((0..n)
        .map(|i| RunRow {
            config: config.to_vec(),
            seed: seed.map_or_else(|| text("seed", i), str::to_string),
            model: text("model", i),
            unseen: text("unseen", i) == "true",
            diverged: text("diverged", i) == "true",
            ended_early: text("ended_early", i) == "true",
            metrics: REPORT_METRICS
                .iter()
                .map(|m| {
                    let value = text(m.column, i).parse().unwrap_or(f64::NAN);
                    (m.column.to_string(), value)
                })
                .collect(),
        })
        .collect())
}

/// The columns every `summary.csv` has; a file without them is not a run's summary.
const SUMMARY_COLUMNS: [&str; 4] = ["run_id", "model", "seed", "test_acc_mean"];

/// Refuses a summary that lacks its columns or holds a figure that is not a number (an empty
/// field is a figure that does not apply).
fn check_summary_columns(path: &Path, cols: &[TextColumn]) -> Result<(), ReportError> {
    let corrupt = |message: String| ReportError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let missing: Vec<&str> = SUMMARY_COLUMNS
        .iter()
        .copied()
        .filter(|c| text_column(cols, c).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(corrupt(format!(
            "not a run's summary: no column {}",
            missing.join(", ")
        )));
    }
    for column in ["run_id", "model", "seed"] {
        let values = text_column(cols, column).unwrap_or_default();
        if let Some(row) = values
            .iter()
            .position(|v| v.as_deref().is_none_or(str::is_empty))
        {
            return Err(corrupt(format!(
                "row {}, column `{column}` is empty: the row was cut short",
                row + 1
            )));
        }
    }
    for ReportMetric { column: metric, .. } in REPORT_METRICS {
        let Some(values) = text_column(cols, metric) else {
            continue;
        };
        for (row, v) in values.iter().enumerate() {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                if v.parse::<f64>().is_err() {
                    return Err(corrupt(format!(
                        "row {}, column `{metric}`: `{v}` is not a number",
                        row + 1
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Whether `path` is a summary that `fedsim report` reads (what makes a run finished).
pub fn summary_is_readable(path: &Path) -> bool {
    path.is_file() && read_summary(path, &[], None).is_ok()
}
