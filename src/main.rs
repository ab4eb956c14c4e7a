//! The `fedsim` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fedsim::report::{differing_files, REPRODUCIBLE_FILES};
use fedsim::run::{default_out_dir, default_threads, run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Deterministic discrete-event simulator for federated learning.
///
/// The same scenario and seed give bit-identical result files, whatever the thread count.
#[derive(Parser)]
#[command(name = "fedsim", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write its results (metrics.parquet, metrics.csv, rounds.parquet,
    /// summary.csv, scenario.yaml) into the output folder.
    Run {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Output folder [default: results/<name>/seed-<seed>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Trainer threads [default: number of cores]. Results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
        /// Afterwards, rerun with one trainer thread and check that every reproducible result
        /// file is byte-identical (exit code 3 if not).
        #[arg(long)]
        check_determinism: bool,
    },
    /// Check a scenario and print it with every default filled in; runs nothing.
    Check {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
    },
}

#[derive(clap::Args)]
struct Overrides {
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Override any field by its dotted path, e.g. --set sampling.fraction=0.1
    /// (repeatable; the value is read as YAML).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
}

impl Overrides {
    fn load(&self, file: &Path) -> Result<Scenario> {
        let mut all = self.set.clone();
        if let Some(seed) = self.seed {
            all.push(format!("seed={seed}"));
        }
        Ok(Scenario::load(file, &all)?)
    }
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().command {
        Command::Check {
            scenario,
            overrides,
        } => {
            let s = overrides.load(&scenario)?;
            println!(
                "# {}: valid (run id {})\n{}",
                scenario.display(),
                s.run_id(),
                s.resolved_yaml
            );
        }
        Command::Run {
            scenario,
            overrides,
            out,
            threads,
            quiet,
            check_determinism,
        } => {
            let s = overrides.load(&scenario)?;
            let opts = RunOptions {
                out_dir: out.unwrap_or_else(|| default_out_dir(&s)),
                threads: threads.unwrap_or_else(default_threads).max(1),
                progress: !quiet && std::io::stderr().is_terminal(),
            };
            let report = run_scenario(&s, &opts)
                .with_context(|| format!("running {}", scenario.display()))?;
            let pct = |v: f64| format!("{:6.2} %", 100.0 * v);
            println!(
                "{} — {} (seed {}, run {})",
                s.name,
                s.run.algorithm.name(),
                s.run.seed,
                s.run_id()
            );
            if let Some(h) = report.headline() {
                println!("  clients evaluated        {}", h.clients);
                println!("  final round              {}", h.final_round);
            }
            for m in &report.summaries {
                let who = if m.unseen { " (unseen clients)" } else { "" };
                println!("  {} model{who}, test data:", m.model);
                println!("    accuracy, weighted     {}", pct(m.test.weighted_mean));
                println!("    bottom decile          {}", pct(m.test.bottom_decile));
                println!("    10th percentile        {}", pct(m.test.p10));
                println!("    worst-10% mean         {}", pct(m.test.worst10_mean));
                if let (Some(target), Some(t)) = (s.target_accuracy, m.time_to_target_s) {
                    println!("    reached {} at        {t:.1} s (simulated)", pct(target));
                }
            }
            println!("  simulated time           {:.1} s", report.sim_seconds);
            println!("  wall time                {:.1} s", report.wall_seconds);
            println!("results in {}/", report.out_dir.display());
            for f in &report.files {
                println!("  {}", f.file_name().unwrap_or_default().to_string_lossy());
            }
            if check_determinism {
                let rerun_dir = opts.out_dir.join(".determinism-check");
                let rerun = RunOptions {
                    out_dir: rerun_dir.clone(),
                    threads: 1,
                    progress: opts.progress,
                };
                run_scenario(&s, &rerun).context("determinism check rerun")?;
                let differing = differing_files(&opts.out_dir, &rerun_dir);
                if differing.is_empty() {
                    std::fs::remove_dir_all(&rerun_dir).ok();
                    println!(
                        "determinism check: {} identical with {} and 1 trainer threads",
                        REPRODUCIBLE_FILES.join(", "),
                        opts.threads
                    );
                } else {
                    eprintln!(
                        "error: determinism check failed: {} differ between {} and {} (kept for inspection)",
                        differing.join(", "),
                        opts.out_dir.display(),
                        rerun_dir.display()
                    );
                    std::process::exit(3);
                }
            }
        }
    }
    Ok(())
}
