//! Running a sweep: its cells (or one shard of them) into `OUT/cell=<id>/`, several at once,
//! skipping finished cells.
//!
//! A cell runs into `OUT/.partial-cell=<id>-<pid>/` and is renamed to `OUT/cell=<id>/` once
//! every result file is written, so a `cell=` folder is always complete: killing a sweep at any
//! moment loses only the cells that were running, and the next run redoes exactly those (and
//! removes their partial folders). A cell that fails removes its partial folder itself. A cell is finished when its manifest's files are all there
//! unchanged and its `summary.csv` reads (see [`is_finished`]).
//!
//! One writer per cell: a process runs a cell only while it holds the cell's lock
//! (`OUT/.fedsim-locks/cell=<id>`), so shards, `--jobs` and a second copy of the same sweep
//! share the cells instead of destroying each other's work; a cell another process holds is
//! left to it and named. `cells.csv` is written under the folder's lock, and like every file
//! fedsim writes it is replaced only while fedsim's manifest proves it wrote it. `OUT/cells.csv` lists every cell of the sweep with its axis
//! values, so that the whole sweep reads as one table (hive partitioning on `cell`, joined with
//! `cells.csv` on `run_id = cell`).

use crate::io::{
    folder::{clear_staging, make_staging},
    publish_folder, take_named_lock, FolderError, Manifest, OutputFolder, OutputRules, SizeLimit,
};
use crate::results::ReportError;
use crate::results::{
    check_threads, default_threads, max_threads, run_scenario_with_bar, CheckpointOptions,
    RunError, RunOptions,
};
use crate::settings::compact;
use crate::studies::text_table_csv;
use crate::studies::{Cell, Sweep};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub out: PathBuf,
    /// Cells run at once; each gets `max(1, cores / jobs)` trainer threads.
    pub jobs: usize,
    /// `(index, count)`: run every `count`-th cell in id order from the `index`-th.
    pub shard: (usize, usize),
    /// Draw progress bars on stderr.
    pub progress: bool,
    /// Move foreign files with result names aside instead of refusing (see [`RunOptions`]).
    pub force: bool,
    /// How each cell takes checkpoints; a cell killed mid-run resumes from its own.
    pub checkpoint: CheckpointOptions,
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
    /// The cells another process was running (left to it), with that process.
    pub busy: Vec<CellNote>,
    /// What claiming the folder did beyond writing (files moved aside).
    pub notes: Vec<String>,
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
    /// The cell's earlier folder, moved aside (what and where).
    moved_aside: Option<String>,
    /// The round at whose start it resumed from its checkpoint.
    resumed_at: Option<u32>,
    /// What the run said besides (a tracker that stopped part way).
    run_notes: Vec<String>,
}

/// Where a cell's results live.
pub fn cell_dir(out: &Path, cell: &Cell) -> PathBuf {
    out.join(format!("cell={}", cell.id()))
}

/// Whether `dir` holds the finished results of `cell`: its resolved scenario with the
/// cell's content hash, a `summary.csv` with at least one readable row, and every file its
/// manifest lists there unchanged (folders written before manifests have none, and count
/// without it).
pub fn is_finished(dir: &Path, cell: &Cell) -> bool {
    let scenario =
        crate::io::read_text(&dir.join("scenario.yaml"), SizeLimit::RESULT).unwrap_or_default();
    let intact = !Manifest::exists_in(dir) || Manifest::read(dir).is_intact(dir);
    intact
        && scenario
            .lines()
            .next()
            .is_some_and(|l| l.contains(&cell.scenario.content_hash))
        && crate::studies::summary_is_readable(&dir.join("summary.csv"))
}

/// Writes `OUT/cells.csv`: `cell, seed`, then one column per axis (values on one line). Shards
/// of one sweep write the same table, one at a time under the folder's lock; a `cells.csv`
/// fedsim did not write is refused (or moved aside under `rules.force`: the notes say so).
fn write_cells(out: &Path, sweep: &Sweep, rules: &OutputRules) -> Result<Vec<String>, ReportError> {
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
    let (mut folder, notes) =
        OutputFolder::claim_within(out, &["cells.csv"], rules, Duration::from_secs(30))?;
    let bytes = text_table_csv(&out.join("cells.csv"), &columns)?;
    folder.write_file("cells.csv", &bytes)?;
    Ok(notes)
}

/// The name of a cell's staging folder after [`partial_prefix`]: kept by a killed process,
/// taken up by the next (older sweeps named theirs by process id).
const RESUMABLE: &str = "resumable";

/// The staging folders of `cell` start with this, then the process id.
fn partial_prefix(cell: &Cell) -> String {
    format!(".partial-cell={}-", cell.id())
}

/// What became of a cell this process tried to run.
enum CellRun {
    Ran(CellRemarks),
    /// Another process holds the cell's lock (its holder, in words).
    Busy(String),
    /// Another process finished it after this one listed it.
    FinishedMeanwhile,
}

/// Runs one cell while holding its lock; the remarks say whether (and where) it diverged or
/// ended early.
fn run_cell(
    out: &Path,
    cell: &Cell,
    threads: usize,
    opts: &SweepOptions,
    bar: ProgressBar,
) -> Result<CellRun, RunError> {
    let done = cell_dir(out, cell);
    let name = format!("cell={}", cell.id());
    let _lock = match take_named_lock(out, &name, &done) {
        Ok(lock) => lock,
        Err(FolderError::Busy { holder, .. }) => return Ok(CellRun::Busy(holder)),
        Err(e) => return Err(RunError::Report(e.into())),
    };
    if is_finished(&done, cell) {
        return Ok(CellRun::FinishedMeanwhile);
    }
    // Staging folders of processes killed before cells kept theirs (`prefix<pid>`).
    clear_staging(out, &partial_prefix(cell)).map_err(|e| RunError::Report(e.into()))?;
    // The cell's own staging folder, which a killed process leaves with the cell's checkpoint
    // for the next to resume from (its lock says who runs the cell), and so does an
    // interrupted one. Removed with all it holds when this returns early otherwise: a failed
    // cell leaves nothing.
    let partial = make_staging(&out.join(format!("{}{RESUMABLE}", partial_prefix(cell))))
        .map_err(|e| RunError::Report(e.into()))?;
    let run = RunOptions {
        out_dir: partial.dir().to_path_buf(),
        threads,
        progress: false,
        force: opts.force,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: opts.checkpoint.clone(),
    };
    let report = match run_scenario_with_bar(&cell.scenario, &run, bar) {
        Ok(report) => report,
        Err(e) if e.is_interrupted() => {
            partial.left_behind();
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let moved_aside =
        publish_folder(out, partial, &name).map_err(|e| RunError::Report(e.into()))?;
    Ok(CellRun::Ran(CellRemarks {
        diverged: report.divergence.map(|d| d.describe()),
        ended_early: report.ended_early.map(|e| e.describe()),
        moved_aside,
        resumed_at: report.resumed_at,
        run_notes: report.notes,
    }))
}

/// Runs this shard's unfinished cells of `sweep`.
pub fn run_sweep(sweep: &Sweep, opts: &SweepOptions) -> Result<SweepOutcome, RunError> {
    if opts.jobs > max_threads() {
        return Err(RunError::Jobs {
            asked: opts.jobs,
            most: max_threads(),
        });
    }
    check_threads((default_threads() / opts.jobs.max(1)).max(1))?;
    let rules = OutputRules {
        force: opts.force,
        inputs: Vec::new(),
    };
    let notes = write_cells(&opts.out, sweep, &rules)?;
    let mine = sweep.shard(opts.shard.0, opts.shard.1);
    let todo: Vec<&Cell> = mine
        .iter()
        .copied()
        .filter(|c| !is_finished(&cell_dir(&opts.out, c), c))
        .collect();
    let mut outcome = SweepOutcome {
        cells: mine.len(),
        skipped: mine.len() - todo.len(),
        notes,
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
    type CellResult = (usize, Result<CellRun, String>);
    let results: Mutex<Vec<CellResult>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(todo.len()) {
            scope.spawn(|| loop {
                // Interrupted (Ctrl-C in Python): no cell starts any more.
                if crate::sim::interrupted() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(cell) = todo.get(i) else { break };
                let bar = multi.add(ProgressBar::new(0));
                bar.set_prefix(cell.label());
                let result = run_cell(&opts.out, cell, threads, opts, bar.clone())
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
            Ok(CellRun::Ran(remarks)) => {
                outcome.ran += 1;
                outcome.diverged.extend(remarks.diverged.map(note));
                outcome.ended_early.extend(remarks.ended_early.map(note));
                let resumed = (remarks.resumed_at)
                    .map(|r| format!("resumed from its checkpoint at round {r}"));
                outcome.notes.extend(
                    (resumed.into_iter().chain(remarks.moved_aside))
                        .chain(remarks.run_notes)
                        .map(|m| format!("cell {}: {m}", todo[i].label())),
                );
            }
            Ok(CellRun::Busy(holder)) => outcome.busy.push(note(holder)),
            Ok(CellRun::FinishedMeanwhile) => outcome.skipped += 1,
            Err(e) => outcome.failed.push(note(e)),
        }
    }
    Ok(outcome)
}
