//! `fedsim sweep`: a sweep's cells, resumable and shardable.

use crate::{finish, EXIT_SWEEP_FAILED};
use anyhow::{Context, Result};
use fedsim::studies::{cell_dir, is_finished, run_sweep, SweepOptions};
use fedsim::studies::{parse_shard, Sweep};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// The arguments of `fedsim sweep`.
#[derive(clap::Args)]
pub struct SweepArgs {
    /// The sweep file (YAML).
    pub sweep: PathBuf,
    /// Output folder [default: results/<sweep name>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Cells run at once (each gets cores / jobs trainer threads).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Run one shard: I/N (0-based), or `auto` / `auto/N` to take I from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (N from SLURM_ARRAY_TASK_COUNT).
    #[arg(long)]
    pub shard: Option<String>,
    /// List the cells (id, finished or not, axis values) and run nothing.
    #[arg(long)]
    pub list: bool,
    /// With `--list`: print only how many cells there are (of the shard), e.g. for a job
    /// array's size.
    #[arg(long, requires = "list")]
    pub count: bool,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
    /// Move a `cells.csv` (or cell results) that fedsim did not write aside
    /// (NAME.before-fedsim) instead of refusing the folder; nothing is deleted.
    #[arg(long)]
    pub force: bool,
    /// A cell killed mid-run resumes from its checkpoint when the sweep runs again.
    #[command(flatten)]
    pub checkpoints: super::run::CheckpointArgs,
}

pub fn sweep(args: SweepArgs) -> Result<i32> {
    let SweepArgs {
        sweep,
        out,
        jobs,
        shard,
        list,
        count,
        quiet,
        force,
        checkpoints,
    } = args;
    let plan = Sweep::load(&sweep)?;
    for n in plan.notes() {
        errln!("note: {n}");
    }
    if !list {
        for cell in &plan.cells {
            fedsim::plan::preflight(&cell.scenario)?;
        }
    }
    let out = out.unwrap_or_else(|| Path::new("results").join(&plan.name));
    let shard = match shard {
        Some(arg) => parse_shard(&arg, |k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?,
        None => (0, 1),
    };
    if count {
        outln!("{}", plan.shard(shard.0, shard.1).len());
        return finish(0);
    }
    if list {
        for cell in plan.shard(shard.0, shard.1) {
            let done = is_finished(&cell_dir(&out, cell), cell);
            outln!(
                "{}  {}  {}",
                cell.id(),
                if done { "finished" } else { "to run  " },
                cell.label()
            );
        }
        return finish(0);
    }
    let opts = SweepOptions {
        out: out.clone(),
        jobs,
        shard,
        progress: !quiet && std::io::stderr().is_terminal(),
        force,
        checkpoint: checkpoints.options(),
    };
    let outcome = run_sweep(&plan, &opts).with_context(|| format!("sweep {}", sweep.display()))?;
    for n in &outcome.notes {
        errln!("note: {n}");
    }
    outln!(
        "{}: shard {}/{}: {} cells, {} already finished, {} run ({} diverged), {} failed, \
         {} left to another process; results in {}/",
        plan.name,
        shard.0,
        shard.1,
        outcome.cells,
        outcome.skipped,
        outcome.ran,
        outcome.diverged.len(),
        outcome.failed.len(),
        outcome.busy.len(),
        out.display()
    );
    for n in &outcome.diverged {
        errln!("warning: cell {} diverged: {}", n.cell, n.what);
    }
    for n in &outcome.ended_early {
        errln!("warning: cell {} ended early, {}", n.cell, n.what);
    }
    for n in &outcome.busy {
        errln!(
            "note: cell {} is being run by another fedsim process ({}); left to it \
             (run this command again after it ends to pick up what it leaves)",
            n.cell,
            n.what
        );
    }
    if !outcome.failed.is_empty() {
        for n in &outcome.failed {
            errln!("error: cell {}: {}", n.cell, n.what);
        }
        return finish(EXIT_SWEEP_FAILED);
    }
    finish(0)
}
