//! Helpers shared by the integration tests.

use fedsim::results::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use std::path::Path;

/// A small FedAvg scenario that runs in well under a second.
pub const SMALL: &str = "\
name: small
seed: 7
rounds: 4
eval_every: 2
data: {kind: fedem_synthetic, clients: 24, dim: 20, components: 3}
split: {kind: fractions, train: 0.6, val: 0.2, test: 0.2}
algorithm: {name: fedavg}
training: {local_epochs: 1, batch_size: 16, lr: 0.1, momentum: 0.9, weight_decay: 5.0e-4}
sampling: {fraction: 0.5}
";

/// The folders of `scenarios/` that hold shipped scenarios and sweeps (`""`: the folder
/// itself, the quickstart).
pub const SCENARIO_FOLDERS: [&str; 4] = ["", "paper", "studies", "baselines"];

/// Every shipped scenario and sweep file (`scenarios/<folder>/*.yaml`), in path order.
pub fn shipped_scenario_files() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files: Vec<_> = SCENARIO_FOLDERS
        .iter()
        .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// A registered algorithm's example as overrides: `algorithm={...}` with its example settings,
/// then the other settings its example needs (`EXAMPLE_SETTINGS`: a model of its own for a
/// split of the layers, FedRep's local epochs).
pub fn algorithm_example(r: &fedsim::algorithms::registry::Registration) -> Vec<String> {
    let mut overrides = vec![format!("algorithm={}", r.example_section())];
    overrides.extend(r.declared.example_settings.iter().map(|s| s.to_string()));
    overrides
}

pub fn scenario(text: &str, overrides: &[&str]) -> Scenario {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(text, Path::new("test.yaml"), &o).expect("valid scenario")
}

/// The message of the error `text` with `overrides` is refused with (as file `bad.yaml`).
pub fn error(text: &str, overrides: &[&str]) -> String {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    match Scenario::from_yaml(text, Path::new("bad.yaml"), &o) {
        Ok(_) => panic!("scenario should be rejected:\n{text}\nwith {overrides:?}"),
        Err(e) => e.to_string(),
    }
}

/// The message the pre-flight (this machine's memory and devices) refuses `text` with; the
/// scenario itself validates, as it does on any machine.
pub fn preflight_error(text: &str, overrides: &[&str]) -> String {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(text, Path::new("bad.yaml"), &o)
        .unwrap_or_else(|e| panic!("valid on any machine, but: {e}"));
    match fedsim::plan::preflight(&s) {
        Ok(()) => panic!("the pre-flight should refuse:\n{text}\nwith {overrides:?}"),
        Err(e) => e.to_string(),
    }
}

pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_fedsim"))
}

/// What `command` prints on stdout; it must succeed (else its stderr is the failure).
pub fn stdout_of(command: &mut std::process::Command) -> String {
    let out = command.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Parquet frame's column as f64 values (no nulls).
pub fn f64_column(df: &polars::prelude::DataFrame, name: &str) -> Vec<f64> {
    let column = df.column(name).unwrap().f64().unwrap();
    column.into_no_null_iter().collect()
}

/// A Parquet frame's integer column as u64 values (no nulls).
pub fn u64_column(df: &polars::prelude::DataFrame, name: &str) -> Vec<u64> {
    let column = df
        .column(name)
        .unwrap()
        .cast(&polars::prelude::DataType::UInt64);
    column.unwrap().u64().unwrap().into_no_null_iter().collect()
}

/// A frame's column names, in order.
pub fn column_names(df: &polars::prelude::DataFrame) -> Vec<String> {
    df.get_column_names()
        .iter()
        .map(|c| c.to_string())
        .collect()
}

/// Says that a check cannot run here and why: printed, and counted in
/// `target/tmp/skipped.txt`, which `scripts/test.sh` reports at the end. Under CI (which runs as
/// root, with `../shared` beside the clone) nothing may be skipped, so it fails instead.
pub fn skipped(check: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{check} cannot run under CI: {why}"
    );
    eprintln!("SKIPPED {check}: {why}");
    let list = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    let _ = std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR"));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(list)
    {
        use std::io::Write;
        let _ = writeln!(f, "{check}: {why}");
    }
}

/// Column `name` of the run's one-row `summary.csv` in `dir`, as a number.
pub fn summary_value(dir: &Path, name: &str) -> f64 {
    let text = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = (head.iter().position(|h| *h == name))
        .unwrap_or_else(|| panic!("summary.csv has no column {name}"));
    row[at].parse().unwrap()
}

/// The error chain a run of `scenario` into `dir` is refused with (checks that need the data
/// or the model, made when the run starts).
pub fn run_error(scenario: &Scenario, dir: &Path) -> String {
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads: 1,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    match run_scenario(scenario, &opts) {
        Ok(_) => panic!("the run should be refused"),
        Err(e) => fedsim::error_chain(&e),
    }
}

/// Runs `text` with `overrides` on `threads` threads into `dir`, saving the final models and
/// the clients' own (`--save-models --save-client-models`).
pub fn run_saving(text: &str, overrides: &[&str], threads: usize, dir: &Path) {
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads,
        progress: false,
        force: false,
        save_models: true,
        save_client_models: true,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(&scenario(text, overrides), &opts).expect("run succeeds");
}

/// Runs `text` with `overrides` on 1, 2 and 4 trainer threads, into folders named `what` under
/// `dir`, and asserts every reproducible result file identical (`what` names the case).
pub fn assert_identical_on_1_2_4_threads(what: &str, text: &str, overrides: &[&str], dir: &Path) {
    let dirs = [1, 2, 4].map(|t| dir.join(format!("{what}-{t}")));
    for (threads, out) in [1, 2, 4].iter().zip(&dirs) {
        run_saving(text, overrides, *threads, out);
    }
    for other in &dirs[1..] {
        let differ = fedsim::results::differing_files(&dirs[0], other);
        assert!(differ.is_empty(), "{what} {other:?}: {differ:?} differ");
    }
}

/// Writes `df` as a Parquet file (the tests' own fixtures; fedsim writes results only through
/// its output folders).
pub fn write_parquet(
    path: &Path,
    df: &mut polars::prelude::DataFrame,
) -> polars::prelude::PolarsResult<()> {
    let file = std::fs::File::create(path)?;
    polars::prelude::ParquetWriter::new(file).finish(df)?;
    Ok(())
}

/// Writes `text` to `path`; returns the path.
pub fn write(path: &Path, text: &str) -> std::path::PathBuf {
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Runs `fedsim ARGS` in `cwd` to its end.
pub fn fedsim(args: &[&str], cwd: &Path) -> std::process::Output {
    bin().args(args).current_dir(cwd).output().unwrap()
}

pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code 2 (a clear error, no panic: a panic exits 101, an abort by signal) with `text`
/// in the message.
pub fn assert_refused(o: &std::process::Output, text: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(text), "expected `{text}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The names in `dir`, sorted (hidden ones too).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
