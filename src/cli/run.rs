//! `fedsim run`: one scenario, its result files, and optionally the determinism check.

use crate::{finish, Overrides, EXIT_DIVERGED, EXIT_NOT_DETERMINISTIC};
use anyhow::{Context, Result};
use fedsim::results::{compared_files, differing_files};
use fedsim::results::{default_out_dir, default_threads, run_scenario, RunOptions};
use fedsim::results::{CheckpointEvery, CheckpointOptions};
use std::io::IsTerminal;
use std::path::PathBuf;

/// The arguments of `fedsim run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
    /// Output folder [default: results/<name>/seed-<seed>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Trainer threads [default: number of cores]. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Afterwards, rerun with one trainer thread and check that every reproducible result
    /// file is byte-identical (exit code 3 if not).
    #[arg(long)]
    pub check_determinism: bool,
    /// Write into an output folder that holds files with result names that fedsim did not
    /// write: they are moved aside (renamed to NAME.before-fedsim), never deleted.
    #[arg(long)]
    pub force: bool,
    /// Also write the final global models as models.safetensors (tensor names as
    /// `model.init` reads them, so a run can start from another's models).
    #[arg(long)]
    pub save_models: bool,
    /// Also write each client's own models (personalized, local, cluster; a peer's copy;
    /// FedEM's mixture weights) at its last evaluation as client_models.safetensors. Keeps a
    /// copy of every client's models in memory until the run ends.
    #[arg(long)]
    pub save_client_models: bool,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
}

/// How `fedsim run` and `fedsim sweep` take checkpoints.
#[derive(clap::Args)]
pub struct CheckpointArgs {
    /// Save a checkpoint this often: a number of rounds (`10`), a wall-clock time (`90s`,
    /// `5m`, `1h`) or `off` [default: the scenario's `checkpoint:`, else 1m]. Taken where a
    /// synchronous round starts with nothing else left to happen. The same command, run again
    /// after a kill, resumes from the last one and writes the files an uninterrupted run
    /// writes.
    #[arg(long, value_name = "EVERY")]
    pub checkpoint_every: Option<CheckpointEvery>,
    /// Discard a checkpoint the run finds (of another scenario, another fedsim, or damaged)
    /// and run from the start.
    #[arg(long)]
    pub restart: bool,
}

impl CheckpointArgs {
    pub fn options(&self) -> CheckpointOptions {
        CheckpointOptions {
            every: self.checkpoint_every,
            restart: self.restart,
        }
    }
}

pub fn run(args: RunArgs) -> Result<i32> {
    let RunArgs {
        scenario,
        overrides,
        out,
        threads,
        quiet,
        check_determinism,
        force,
        save_models,
        save_client_models,
        checkpoints,
    } = args;
    let s = overrides.load(&scenario)?;
    let opts = RunOptions {
        out_dir: out.unwrap_or_else(|| default_out_dir(&s)),
        threads: threads.unwrap_or_else(default_threads).max(1),
        progress: !quiet && std::io::stderr().is_terminal(),
        force,
        save_models,
        save_client_models,
        keep_unfinished: true,
        checkpoint: checkpoints.options(),
    };
    let report =
        run_scenario(&s, &opts).with_context(|| format!("running {}", scenario.display()))?;
    for n in &report.notes {
        errln!("note: {n}");
    }
    if let Some(round) = report.resumed_at {
        errln!(
            "note: resumed from the checkpoint in {} at round {round}",
            opts.out_dir.display()
        );
    }
    let pct = |v: f64| format!("{:6.2} %", 100.0 * v);
    outln!(
        "{} — {} (seed {}, run {})",
        s.name,
        s.run.algorithm.name(),
        s.run.seed,
        s.run_id()
    );
    let placement = s.run.training.device.resolve_here().unwrap_or_default();
    let devices = placement.devices();
    if devices.iter().any(|d| d.is_cuda()) {
        // CUDA results are reproducible on the same GPU model: say which devices.
        outln!("  cohorts trained on       {devices:?}");
    }
    if let Some(h) = report.headline() {
        outln!("  clients evaluated        {}", h.clients);
        outln!("  final round              {}", h.final_round);
    }
    for m in &report.summaries {
        let who = if m.unseen { " (unseen clients)" } else { "" };
        outln!("  {} model{who}, test data:", m.model);
        outln!("    accuracy, weighted     {}", pct(m.test.weighted_mean));
        outln!("    bottom decile          {}", pct(m.test.bottom_decile));
        outln!("    10th percentile        {}", pct(m.test.p10));
        outln!("    worst-10% mean         {}", pct(m.test.worst10_mean));
        if let (Some(target), Some(t)) = (s.target_accuracy, m.time_to_target_s) {
            outln!("    reached {} at        {t:.1} s (simulated)", pct(target));
        }
    }
    if let (Some(spec), Some(p)) = (
        &s.run.privacy,
        report.summaries.first().and_then(|m| m.privacy),
    ) {
        let solved = match spec.target_epsilon {
            Some(target) => format!(", solved for ε = {target}"),
            None => String::new(),
        };
        let whose = match spec.mechanism {
            fedsim::privacy::Mechanism::DpSgd => " (the most any client's records spent)",
            fedsim::privacy::Mechanism::DpFtrl => " (the most any client spent)",
            _ => "",
        };
        outln!(
            "  privacy spent            ε = {:.4} at δ = {:e}{whose}",
            p.epsilon,
            spec.delta
        );
        outln!(
            "  noise multiplier         σ = {:.4}{solved}",
            p.noise_multiplier
        );
        if let Some(a) = p.adaptive {
            outln!("  adaptive clip, last round C = {:.4}", a.clip);
        }
        // A target more than the least noise spends: σ stopped at the smallest tried.
        if let Some(target) = spec.target_epsilon {
            let solved = fedsim::privacy::Calibrated {
                sigma: p.noise_multiplier,
                epsilon: p.epsilon,
            };
            if p.noise_multiplier <= fedsim::privacy::SMALLEST_SIGMA {
                if let Some(note) = solved.shortfall(target) {
                    errln!("note: {note}");
                }
            }
        }
    }
    outln!("  simulated time           {:.1} s", report.sim_seconds);
    outln!("  wall time                {:.1} s", report.wall_seconds);
    if let Some(bytes) = fedsim::io::peak_memory() {
        outln!("  peak memory              {:.2} GB", bytes / 1e9);
    }
    if let Some(profile) = fedsim::models::profile::profile_report() {
        errln!("{}", profile.trim_end());
    }
    outln!("results in {}/", report.out_dir.display());
    for f in &report.files {
        outln!("  {}", f.file_name().unwrap_or_default().to_string_lossy());
    }
    if let Some(d) = &report.divergence {
        let then = match s.run.on_divergence.is_stop() {
            true => "stopped there (on_divergence: stop)",
            false => "ran on (on_divergence: continue)",
        };
        errln!(
            "warning: the run diverged at {}; it {then}; summary.csv says diverged = true",
            d.describe()
        );
    }
    if let Some(e) = &report.ended_early {
        errln!(
            "warning: the run ended early, {}; its results are those of round {} \
             (summary.csv says ended_early = true)",
            e.describe(),
            e.round
        );
    }
    if check_determinism {
        let rerun_dir = opts.out_dir.join(".determinism-check");
        let rerun = RunOptions {
            out_dir: rerun_dir.clone(),
            threads: 1,
            progress: opts.progress,
            force: false,
            save_models,
            save_client_models,
            keep_unfinished: false,
            checkpoint: CheckpointOptions::none(),
        };
        // A throwaway rerun reports to no tracker.
        let untracked = fedsim::scenario::Scenario {
            tracking: None,
            ..s.clone()
        };
        if let Err(e) = run_scenario(&untracked, &rerun) {
            // Nothing of a failed re-run stays (its folder holds only fedsim's bookkeeping).
            let _ = fedsim::io::remove_owned_folder(&rerun_dir);
            return Err(e).context("determinism check rerun");
        }
        let compared = compared_files(&opts.out_dir, &rerun_dir);
        let differing = differing_files(&opts.out_dir, &rerun_dir);
        if differing.is_empty() {
            fedsim::io::remove_owned_folder(&rerun_dir)
                .context("removing the determinism check's rerun")?;
            outln!(
                "determinism check: {} identical with {} and 1 trainer threads",
                compared.join(", "),
                opts.threads
            );
        } else {
            errln!(
                "error: determinism check failed: {} differ between {} and {} (kept for inspection)",
                differing.join(", "),
                opts.out_dir.display(),
                rerun_dir.display()
            );
            return finish(EXIT_NOT_DETERMINISTIC);
        }
    }
    if report.divergence.is_some() {
        return finish(EXIT_DIVERGED);
    }
    finish(0)
}
