//! `fedsim export-weights`: a finished run's final global models as safetensors.
//!
//! A run that wrote them (`fedsim run --save-models`) is copied; any other is re-run from its
//! resolved `scenario.yaml` beside it, and the models are written only if every reproducible
//! result file of the re-run equals the run's (the same run, bit for bit).

use crate::finish;
use anyhow::{bail, Context, Result};
use fedsim::results::{default_threads, differing_files, run_scenario, write_atomic, RunOptions};
use fedsim::scenario::Scenario;
use std::io::IsTerminal;
use std::path::PathBuf;

/// The arguments of `fedsim export-weights`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// A run's output folder (with its scenario.yaml).
    pub run_dir: PathBuf,
    /// The file to write [default: RUN_DIR/models.safetensors].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Trainer threads for a re-run [default: number of cores]. Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn export_weights(args: ExportArgs) -> Result<i32> {
    let ExportArgs {
        run_dir,
        out,
        threads,
    } = args;
    let scenario_file = run_dir.join("scenario.yaml");
    if !scenario_file.is_file() {
        bail!(
            "{}: no scenario.yaml here; give the output folder of a finished run",
            run_dir.display()
        );
    }
    let saved = run_dir.join("models.safetensors");
    let out = out.unwrap_or_else(|| saved.clone());
    let bytes = if saved.is_file() {
        if out == saved {
            outln!("{} already holds the run's final models", saved.display());
            return finish(0);
        }
        std::fs::read(&saved).with_context(|| format!("reading {}", saved.display()))?
    } else {
        let s = Scenario::load(&scenario_file, &[])?;
        let rerun_dir = run_dir.join(".export-weights");
        errln!(
            "{} has no models.safetensors: re-running its scenario into {}",
            run_dir.display(),
            rerun_dir.display()
        );
        let opts = RunOptions {
            out_dir: rerun_dir.clone(),
            threads: threads.unwrap_or_else(default_threads).max(1),
            progress: std::io::stderr().is_terminal(),
            force: false,
            save_models: true,
        };
        run_scenario(&s, &opts)
            .with_context(|| format!("re-running {}", scenario_file.display()))?;
        // The run has no models file and the re-run has: that difference is the point.
        let mut differing = differing_files(&run_dir, &rerun_dir);
        differing.retain(|f| f != "models.safetensors");
        if !differing.is_empty() {
            bail!(
                "the re-run's {} differ from {}'s (another fedsim version, GPU model or input \
                 file?); nothing written, the re-run kept in {}",
                differing.join(", "),
                run_dir.display(),
                rerun_dir.display()
            );
        }
        let bytes = std::fs::read(rerun_dir.join("models.safetensors"))
            .context("reading the re-run's models")?;
        fedsim::io::remove_owned_folder(&rerun_dir).context("removing the re-run")?;
        bytes
    };
    write_atomic(&out, |f| {
        use std::io::Write;
        f.write_all(&bytes)?;
        Ok(())
    })
    .with_context(|| format!("writing {}", out.display()))?;
    outln!(
        "{}: the final models of the run in {} (tensor names as `model.init` reads them)",
        out.display(),
        run_dir.display()
    );
    finish(0)
}
