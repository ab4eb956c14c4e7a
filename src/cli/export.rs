//! `fedsim export-weights`: a finished run's final global models, or with `--clients` its
//! clients' own models, as safetensors.
//!
//! A run that wrote them (`fedsim run --save-models` / `--save-client-models`) is copied; any
//! other is re-run from its resolved `scenario.yaml` beside it, and the models are written only
//! if every reproducible result file of the re-run equals the run's (the same run, bit for
//! bit).

use crate::finish;
use anyhow::{bail, Context, Result};
use fedsim::results::{
    default_threads, differing_files, run_scenario, write_atomic, RunOptions, CLIENT_MODELS_FILE,
    MODELS_FILE,
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
    /// RUN_DIR/client_models.safetensors].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The clients' own models at their last evaluation instead (personalized, local and
    /// cluster models, a peer's copy, mixture weights), under `CLIENT.KIND.` before each name.
    #[arg(long)]
    pub clients: bool,
    /// Trainer threads for a re-run [default: number of cores]. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn export_weights(args: ExportArgs) -> Result<i32> {
    let ExportArgs {
        run_dir,
        out,
        clients,
        threads,
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
    let out = out.unwrap_or_else(|| saved.clone());
    let bytes = if saved.is_file() {
        if out == saved {
            outln!("{} already holds the run's {what}", saved.display());
            return finish(0);
        }
        std::fs::read(&saved).with_context(|| format!("reading {}", saved.display()))?
    } else {
        let s = Scenario::load(&scenario_file, &[])?;
        let rerun_dir = run_dir.join(".export-weights");
        errln!(
            "{} has no {name}: re-running its scenario into {}",
            run_dir.display(),
            rerun_dir.display()
        );
        let opts = RunOptions {
            out_dir: rerun_dir.clone(),
            threads: threads.unwrap_or_else(default_threads).max(1),
            progress: std::io::stderr().is_terminal(),
            force: false,
            save_models: !clients,
            save_client_models: clients,
        };
        run_scenario(&s, &opts)
            .with_context(|| format!("re-running {}", scenario_file.display()))?;
        // The run lacks the file the re-run writes (that difference is the point), and may
        // have the other one.
        let mut differing = differing_files(&run_dir, &rerun_dir);
        differing.retain(|f| f != MODELS_FILE && f != CLIENT_MODELS_FILE);
        if !differing.is_empty() {
            bail!(
                "the re-run's {} differ from {}'s (another fedsim version, GPU model or input \
                 file?); nothing written, the re-run kept in {}",
                differing.join(", "),
                run_dir.display(),
                rerun_dir.display()
            );
        }
        let rerun_file = rerun_dir.join(name);
        let bytes = if rerun_file.is_file() {
            Some(std::fs::read(&rerun_file).context("reading the re-run's models")?)
        } else {
            None
        };
        fedsim::io::remove_owned_folder(&rerun_dir).context("removing the re-run")?;
        let Some(bytes) = bytes else {
            bail!(
                "the clients of the run in {} have no models of their own (its algorithm tests \
                 every client with the server's models, and it has no mixture weights); the \
                 server's models are what `fedsim export-weights` without --clients writes",
                run_dir.display()
            );
        };
        bytes
    };
    write_atomic(&out, |f| {
        use std::io::Write;
        f.write_all(&bytes)?;
        Ok(())
    })
    .with_context(|| format!("writing {}", out.display()))?;
    let names = if clients {
        "`CLIENT.KIND.` before the names `model.init` reads"
    } else {
        "tensor names as `model.init` reads them"
    };
    outln!(
        "{}: the {what} of the run in {} ({names})",
        out.display(),
        run_dir.display()
    );
    finish(0)
}
