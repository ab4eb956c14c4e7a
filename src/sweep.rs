//! Running a sweep: its cells (or one shard of them) into `OUT/cell=<id>/`, several at once,
//! skipping finished cells.
//!
//! A cell runs into `OUT/.partial-cell=<id>-<pid>/` and is renamed to `OUT/cell=<id>/` once
//! every result file is written, so a `cell=` folder is always complete: killing a sweep at any
//! moment loses only the cells that were running, and the next run redoes exactly those (and
//! removes their partial folders). `OUT/cells.csv` lists every cell of the sweep with its axis
//! values, so that the whole sweep reads as one table (hive partitioning on `cell`, joined with
//! `cells.csv` on `run_id = cell`).

use crate::report::{write_text_table, ReportError};
use crate::run::{default_threads, run_scenario_with_bar, RunError, RunOptions};
use crate::scenario::{compact, Cell, Sweep};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub out: PathBuf,
    /// Cells run at once; each gets `max(1, cores / jobs)` trainer threads.
    pub jobs: usize,
    /// `(index, count)`: run every `count`-th cell in id order from the `index`-th.
    pub shard: (usize, usize),
    /// Draw progress bars on stderr.
    pub progress: bool,
}

#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Cells of this shard.
    pub cells: usize,
    /// Already finished before this run.
    pub skipped: usize,
    pub ran: usize,
    /// The cells that failed, with their errors.
    pub failed: Vec<CellNote>,
    /// The cells run now whose numbers stopped being finite, with what diverged (they are
    /// finished: their results say so).
    pub diverged: Vec<CellNote>,
    /// The cells run now that ended before their last round because no client would be
    /// online again, with when (finished too: their results say so).
    pub ended_early: Vec<CellNote>,
}

/// A cell (by its label) and what happened to it, in words.
#[derive(Clone, Debug)]
pub struct CellNote {
    pub cell: String,
    pub what: String,
}

/// How a finished cell's run went, beyond its results: each `None` if it did not happen.
#[derive(Clone, Debug, Default)]
struct CellRemarks {
    diverged: Option<String>,
    ended_early: Option<String>,
}

/// Where a cell's results live.
pub fn cell_dir(out: &Path, cell: &Cell) -> PathBuf {
    out.join(format!("cell={}", cell.id()))
}

/// Whether `dir` holds the finished results of `cell` (its summary, and its resolved scenario
/// with the cell's content hash).
pub fn is_finished(dir: &Path, cell: &Cell) -> bool {
    let scenario = std::fs::read_to_string(dir.join("scenario.yaml")).unwrap_or_default();
    dir.join("summary.csv").exists()
        && scenario
            .lines()
            .next()
            .is_some_and(|l| l.contains(&cell.scenario.content_hash))
}

/// Writes `OUT/cells.csv`: `cell, seed`, then one column per axis (values on one line).
fn write_cells(out: &Path, sweep: &Sweep) -> Result<(), ReportError> {
    let mut columns = vec![
        (
            "cell".to_string(),
            sweep.cells.iter().map(|c| c.id().to_string()).collect(),
        ),
        (
            "seed".to_string(),
            sweep.cells.iter().map(|c| c.seed.to_string()).collect(),
        ),
    ];
    for (i, path) in sweep.axis_paths.iter().enumerate() {
        columns.push((
            path.clone(),
            sweep.cells.iter().map(|c| compact(&c.axes[i].1)).collect(),
        ));
    }
    write_text_table(&out.join("cells.csv"), &columns)
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> RunError + '_ {
    move |source| RunError::OutDir {
        path: path.to_path_buf(),
        source,
    }
}

/// Removes partial folders a killed run left for `cell`.
fn clear_partials(out: &Path, cell: &Cell) -> Result<(), RunError> {
    let prefix = format!(".partial-cell={}-", cell.id());
    for entry in std::fs::read_dir(out).map_err(io_error(out))?.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path()).map_err(io_error(&entry.path()))?;
        }
    }
    Ok(())
}

/// Runs one cell; the remarks say whether (and where) it diverged or ended early.
fn run_cell(
    out: &Path,
    cell: &Cell,
    threads: usize,
    bar: ProgressBar,
) -> Result<CellRemarks, RunError> {
    clear_partials(out, cell)?;
    let partial = out.join(format!(
        ".partial-cell={}-{}",
        cell.id(),
        std::process::id()
    ));
    let opts = RunOptions {
        out_dir: partial.clone(),
        threads,
        progress: false,
    };
    let report = run_scenario_with_bar(&cell.scenario, &opts, bar)?;
    let done = cell_dir(out, cell);
    if done.exists() {
        std::fs::remove_dir_all(&done).map_err(io_error(&done))?;
    }
    std::fs::rename(&partial, &done).map_err(io_error(&done))?;
    Ok(CellRemarks {
        diverged: report.divergence.map(|d| d.describe()),
        ended_early: report.ended_early.map(|e| e.describe()),
    })
}

/// Runs this shard's unfinished cells of `sweep`.
pub fn run_sweep(sweep: &Sweep, opts: &SweepOptions) -> Result<SweepOutcome, RunError> {
    std::fs::create_dir_all(&opts.out).map_err(io_error(&opts.out))?;
    write_cells(&opts.out, sweep)?;
    let mine = sweep.shard(opts.shard.0, opts.shard.1);
    let todo: Vec<&Cell> = mine
        .iter()
        .copied()
        .filter(|c| !is_finished(&cell_dir(&opts.out, c), c))
        .collect();
    let mut outcome = SweepOutcome {
        cells: mine.len(),
        skipped: mine.len() - todo.len(),
        ..Default::default()
    };
    let multi = MultiProgress::with_draw_target(if opts.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let overall = multi.add(ProgressBar::new(mine.len() as u64));
    overall.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] cells {pos}/{len} {elapsed_precise} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    overall.set_prefix(sweep.name.clone());
    overall.set_position(outcome.skipped as u64);
    let jobs = opts.jobs.max(1);
    let threads = (default_threads() / jobs).max(1);
    let next = AtomicUsize::new(0);
    // Per cell run: its index in `todo`, and what `run_cell` said (the error as text).
    type CellResult = (usize, Result<CellRemarks, String>);
    let results: Mutex<Vec<CellResult>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(todo.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(cell) = todo.get(i) else { break };
                let bar = multi.add(ProgressBar::new(0));
                bar.set_prefix(cell.label());
                let result = run_cell(&opts.out, cell, threads, bar.clone())
                    .map_err(|e| crate::error_chain(&e));
                bar.finish_and_clear();
                multi.remove(&bar);
                overall.inc(1);
                results
                    .lock()
                    .expect("no panics while held")
                    .push((i, result));
            });
        }
    });
    overall.finish_and_clear();
    let mut results = results.into_inner().expect("workers joined");
    results.sort_by_key(|(i, _)| *i);
    for (i, r) in results {
        let note = |what: String| CellNote {
            cell: todo[i].label(),
            what,
        };
        match r {
            Ok(remarks) => {
                outcome.ran += 1;
                outcome.diverged.extend(remarks.diverged.map(note));
                outcome.ended_early.extend(remarks.ended_early.map(note));
            }
            Err(e) => outcome.failed.push(note(e)),
        }
    }
    Ok(outcome)
}
