//! `fedsim report`: tables and plots over runs and sweeps.

use crate::finish;
use anyhow::{Context, Result};
use fedsim::studies::{
    aggregate, markdown, publish_report, read_curves, report_rows, ReportOptions, Runs,
};
use std::path::PathBuf;

/// The arguments of `fedsim report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Sweep folders (with cells.csv) or run folders (with summary.csv).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Where to write report.csv and report.md [default: <first folder>/report].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Report on the runs that can be read, leaving out (and naming) those whose results
    /// cannot; without it such runs are an error (exit code 2).
    #[arg(long)]
    pub skip_unreadable: bool,
    /// Move report files that fedsim did not write aside (NAME.before-fedsim) instead of
    /// refusing the folder; nothing is deleted.
    #[arg(long)]
    pub force: bool,
    /// Add "rounds to target": the first evaluated round at which each run's weighted mean
    /// test accuracy reaches this (a fraction, e.g. 0.8), over the seeds that reach it.
    #[arg(long, value_name = "FRACTION", value_parser = target_accuracy)]
    pub target_accuracy: Option<f64>,
    /// Add each configuration's wall-clock seconds (`wall s`). They differ from machine to
    /// machine and rerun to rerun, so the report is no longer reproducible.
    #[arg(long)]
    pub wall_time: bool,
}

/// A target accuracy: a fraction in (0, 1].
fn target_accuracy(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 1.0 => Ok(t),
        _ => Err(format!(
            "`{text}` is not an accuracy: give a fraction in (0, 1], e.g. 0.8 for 80 %"
        )),
    }
}

pub fn report(args: ReportArgs) -> Result<i32> {
    let ReportArgs {
        dirs,
        out,
        skip_unreadable,
        force,
        target_accuracy,
        wall_time,
    } = args;
    let options = ReportOptions {
        target_accuracy,
        wall_time,
    };
    let mut runs = Runs::find(&dirs)?;
    for u in &runs.unfinished {
        errln!(
            "note: {}: {} cells have no results yet",
            u.path.display(),
            u.cells
        );
    }
    let (rows, unreadable) = report_rows(&runs, &options);
    for u in &unreadable {
        let what = if skip_unreadable { "left out" } else { "error" };
        errln!(
            "{what}: {}: {}",
            u.path.display(),
            fedsim::error_chain(&u.error)
        );
    }
    if !unreadable.is_empty() && !skip_unreadable {
        anyhow::bail!(
            "{} runs could not be read (named above); fix or remove them, or pass \
             --skip-unreadable to report on the others",
            unreadable.len()
        );
    }
    runs.skip(&unreadable);
    anyhow::ensure!(!rows.is_empty(), "no finished runs under {:?}", dirs);
    let report = aggregate(&rows);
    out!("{}", markdown(&report));
    let out = out.unwrap_or_else(|| dirs[0].join("report"));
    let curves = read_curves(&runs)?;
    let (files, notes) = publish_report(&out, &report, &curves, force)?;
    for n in notes {
        errln!("note: {n}");
    }
    for f in files {
        outln!("wrote {}", f.display());
    }
    finish(0)
}
