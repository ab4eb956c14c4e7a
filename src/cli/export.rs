//! `fedsim export-weights`: a finished run's final global models, or with `--clients` its
//! clients' own models, as safetensors.
//!
//! A run that wrote them (`fedsim run --save-models` / `--save-client-models`) is copied; any
//! other is re-run from its resolved `scenario.yaml` beside it (in a staging folder that goes
//! whatever happens), and the models are written only if every reproducible result file of the
//! re-run equals the run's (the same run, bit for bit). The file written follows the
//! output-folder rules: never one of the run's files, never a file fedsim did not write.

use crate::finish;
use anyhow::{bail, Context, Result};
use fedsim::io::{OutputRules, SizeLimit};
use fedsim::results::{
    claim_single_file, default_threads, differing_files, result_files, run_scenario, RunOptions,
    CLIENT_MODELS_FILE, MODELS_FILE,
};
use fedsim::scenario::Scenario;
use std::io::IsTerminal;
use std::path::PathBuf;

/// The arguments of `fedsim export-weights`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// A run's output folder (with its scenario.yaml).
    pub run_dir: PathBuf,
    /// The file to write [default: RUN_DIR/models.safetensors, or with --clients
    /// RUN_DIR/client_models.safetensors]. Never one of the run's own files, nor a file fedsim
    /// did not write (see --force).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The clients' own models at their last evaluation instead (personalized, local and
    /// cluster models, a peer's copy, mixture weights), under `CLIENT.KIND.` before each name.
    #[arg(long)]
    pub clients: bool,
    /// Trainer threads for a re-run [default: number of cores]. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write over a file of --out's name that fedsim did not write: it is moved aside (renamed
    /// to NAME.before-fedsim), never deleted.
    #[arg(long)]
    pub force: bool,
}

pub fn export_weights(args: ExportArgs) -> Result<i32> {
    let ExportArgs {
        run_dir,
        out,
        clients,
        threads,
        force,
    } = args;
    let scenario_file = run_dir.join("scenario.yaml");
    if !scenario_file.is_file() {
        bail!(
            "{}: no scenario.yaml here; give the output folder of a finished run",
            run_dir.display()
        );
    }
    let (name, what) = if clients {
        (CLIENT_MODELS_FILE, "clients' own models")
    } else {
        (MODELS_FILE, "final models")
    };
    let saved = run_dir.join(name);
    if saved.is_file() && out.as_ref().is_none_or(|o| same_file(o, &saved)) {
        outln!("{} already holds the run's {what}", saved.display());
        return finish(0);
    }
    let out = out.unwrap_or_else(|| saved.clone());
    // The run's own files are inputs: never written over, --force or not.
    let rules = OutputRules {
        force,
        inputs: result_files()
            .into_iter()
            .map(|f| run_dir.join(f))
            .filter(|p| p.exists())
            .collect(),
    };
    // The output is claimed first, so that a refused one costs no re-run.
    let (mut folder, file, notes) = claim_single_file(&out, &rules, Some(&saved))?;
    for n in notes {
        errln!("note: {n}");
    }
    let bytes = if saved.is_file() {
        fedsim::io::read_bytes(&saved, SizeLimit::memory("a weights file (held in memory)"))
            .with_context(|| format!("reading {}", saved.display()))?
    } else {
        let s = Scenario::load(&scenario_file, &[])?;
        // The re-run's folder goes when this returns, whatever happens.
        let staging = folder.staging(".partial-export-")?;
        errln!(
            "{} has no {name}: re-running its scenario into {}",
            run_dir.display(),
            staging.dir().display()
        );
        let opts = RunOptions {
            out_dir: staging.dir().join("run"),
            threads: threads.unwrap_or_else(default_threads).max(1),
            progress: std::io::stderr().is_terminal(),
            force: false,
            save_models: !clients,
            save_client_models: clients,
            keep_unfinished: false,
            checkpoint: fedsim::results::CheckpointOptions::none(),
        };
        run_scenario(&s, &opts)
            .with_context(|| format!("re-running {}", scenario_file.display()))?;
        // The run lacks the file the re-run writes (that difference is the point), and may
        // have the other one.
        let mut differing = differing_files(&run_dir, &opts.out_dir);
        differing.retain(|f| f != MODELS_FILE && f != CLIENT_MODELS_FILE);
        if !differing.is_empty() {
            bail!(
                "the re-run's {} differ from {}'s (another fedsim version, GPU model or input \
                 file?); nothing written (to look at a re-run: fedsim run {} --out DIR)",
                differing.join(", "),
                run_dir.display(),
                scenario_file.display()
            );
        }
        let rerun_file = opts.out_dir.join(name);
        if !rerun_file.is_file() {
            bail!(
                "the clients of the run in {} have no models of their own (its algorithm tests \
                 every client with the server's models, and it has no mixture weights); the \
                 server's models are what `fedsim export-weights` without --clients writes",
                run_dir.display()
            );
        }
        fedsim::io::read_bytes(
            &rerun_file,
            SizeLimit::memory("a weights file (held in memory)"),
        )
        .context("reading the re-run's models")?
    };
    let written = folder
        .write_file(&file, &bytes)
        .with_context(|| format!("writing {}", out.display()))?;
    let names = if clients {
        "`CLIENT.KIND.` before the names `model.init` reads"
    } else {
        "tensor names as `model.init` reads them"
    };
    outln!(
        "{}: the {what} of the run in {} ({names})",
        written.display(),
        run_dir.display()
    );
    finish(0)
}

/// Whether two paths name the same file (by their canonical forms, where both exist).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
