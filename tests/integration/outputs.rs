//! Every command that writes keeps the output-folder promise (issue 75): `export-weights`,
//! `describe --heatmap` and `data fetch` refuse files fedsim did not write (or move them aside
//! under `--force`), never write over an input or a run's own files, and a command that fails
//! for any reason leaves nothing half-written: no staging folder, no folder it made.

use crate::common::{assert_refused, bin, fedsim, names, stderr, write, SMALL};
use std::path::Path;

/// Runs SMALL into `dir/run` and returns the scenario's path.
fn finished_run(dir: &Path) -> std::path::PathBuf {
    let scenario = write(&dir.join("s.yaml"), SMALL);
    let o = fedsim(
        &["run", scenario.to_str().unwrap(), "-q", "--out", "run"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    scenario
}

/// The entries of `dir` that a failed command could have left: staging folders, drafts,
/// temporary files.
fn leftovers(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| {
            n.starts_with(".partial") || n.starts_with(".fedsim-draft") || n.ends_with(".tmp")
        })
        .collect()
}

#[test]
fn export_weights_never_writes_over_a_users_file_an_input_or_a_runs_own_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    finished_run(dir);
    let run_files = |d: &Path| -> Vec<(String, Vec<u8>)> {
        names(&d.join("run"))
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .map(|n| {
                let bytes = std::fs::read(d.join("run").join(&n)).unwrap();
                (n, bytes)
            })
            .collect()
    };
    let before = run_files(dir);
    // A user's file of the name asked for: refused, then moved aside under --force.
    write(&dir.join("mine.safetensors"), "the user's own");
    let o = fedsim(&["export-weights", "run", "--out", "mine.safetensors"], dir);
    assert_refused(
        &o,
        "holds a file that fedsim did not write but would replace",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("mine.safetensors")).unwrap(),
        "the user's own"
    );
    let o = fedsim(
        &[
            "export-weights",
            "run",
            "--out",
            "mine.safetensors",
            "--force",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("moved aside to"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("mine.safetensors.before-fedsim")).unwrap(),
        "the user's own"
    );
    let weights = std::fs::read(dir.join("mine.safetensors")).unwrap();
    assert_eq!(&weights[8..9], b"{", "a safetensors file");
    // fedsim's own file it replaces on the next export.
    let again = fedsim(&["export-weights", "run", "--out", "mine.safetensors"], dir);
    assert!(again.status.success(), "{}", stderr(&again));
    // The run's own files, whatever --force says: never written over.
    for target in [
        "run/scenario.yaml",
        "run/metrics.parquet",
        "run/summary.csv",
    ] {
        for force in [false, true] {
            let mut args = vec!["export-weights", "run", "--out", target];
            if force {
                args.push("--force");
            }
            let o = fedsim(&args, dir);
            assert_refused(&o, "is the name of one of a run's result files");
        }
    }
    assert_eq!(run_files(dir), before, "the run's files are unchanged");
    assert!(leftovers(&dir.join("run")).is_empty());
    // The default: the run's own models.safetensors, as --save-models would have written it.
    let o = fedsim(&["export-weights", "run"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(dir.join("run/models.safetensors")).unwrap(),
        weights
    );
    let o = fedsim(&["export-weights", "run"], dir);
    assert!(String::from_utf8_lossy(&o.stdout).contains("already holds"));
    // A run folder that holds it is still a whole run: a rerun into it replaces it all.
    let o = fedsim(&["run", "s.yaml", "-q", "--out", "run"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn the_heat_map_never_writes_over_a_users_file_or_an_input() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(&dir.join("s.yaml"), SMALL);
    write(&dir.join("map.png"), "a user's picture");
    let o = fedsim(&["describe", "s.yaml", "--heatmap", "map.png"], dir);
    assert_refused(
        &o,
        "holds a file that fedsim did not write but would replace: map.png",
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("map.png")).unwrap(),
        "a user's picture"
    );
    let o = fedsim(
        &["describe", "s.yaml", "--heatmap", "map.png", "--force"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("map.png.before-fedsim")).unwrap(),
        "a user's picture"
    );
    assert_eq!(&std::fs::read(dir.join("map.png")).unwrap()[1..4], b"PNG");
    // The scenario is an input of the command: never replaced, --force or not.
    for force in [false, true] {
        let mut args = vec!["describe", "s.yaml", "--heatmap", "s.yaml"];
        if force {
            args.push("--force");
        }
        assert_refused(&fedsim(&args, dir), "is an input of this run");
    }
    assert_eq!(std::fs::read_to_string(dir.join("s.yaml")).unwrap(), SMALL);
    assert!(leftovers(dir).is_empty(), "{:?}", names(dir));
}

/// A small Parquet data set and a scenario on it, in `dir`.
fn parquet_run(dir: &Path) -> std::path::PathBuf {
    use polars::prelude::*;
    let rows = 40;
    let mut df = DataFrame::new_infer_height(vec![
        Column::new("c".into(), (0..rows).map(|r| r % 4).collect::<Vec<i64>>()),
        Column::new(
            "y".into(),
            (0..rows).map(|r| (r / 3) % 2).collect::<Vec<i64>>(),
        ),
        Column::new(
            "x".into(),
            (0..rows).map(|r| r as f64 / 10.0).collect::<Vec<f64>>(),
        ),
    ])
    .unwrap();
    crate::common::write_parquet(&dir.join("data.parquet"), &mut df).unwrap();
    write(
        &dir.join("p.yaml"),
        "name: p\nrounds: 2\ndata: {kind: parquet, path: data.parquet, client_column: c, \
         label_column: y, feature_columns: [x]}\nalgorithm: {name: fedavg}\n\
         training: {local_epochs: 1, batch_size: 4, lr: 0.1}\n",
    )
}

#[test]
fn a_failed_export_leaves_nothing_in_the_run_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = parquet_run(dir);
    let o = fedsim(
        &["run", scenario.to_str().unwrap(), "-q", "--out", "run"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let before = names(&dir.join("run"));
    // The re-run cannot read its data any more: it fails, and its folder goes with it.
    std::fs::remove_file(dir.join("data.parquet")).unwrap();
    let o = fedsim(&["export-weights", "run"], dir);
    assert_refused(&o, "data.parquet");
    assert_eq!(names(&dir.join("run")), before);
}

#[test]
fn failed_sweep_cells_leave_no_partial_folder_and_reruns_add_none() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    parquet_run(dir);
    write(
        &dir.join("sweep.yaml"),
        "name: sw\nbase: p.yaml\ngrid:\n  training.lr: [0.1, 0.2]\n",
    );
    // The data goes bad after the pre-flight could look at it: both cells fail as they run.
    std::fs::write(dir.join("data.parquet"), "not Parquet").unwrap();
    for _ in 0..2 {
        let o = fedsim(&["sweep", "sweep.yaml", "-q", "--out", "sw"], dir);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("not a readable Parquet file"),
            "{}",
            stderr(&o)
        );
        let left: Vec<String> = names(&dir.join("sw"))
            .into_iter()
            .filter(|n| n.starts_with(".partial") || n.starts_with("cell="))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn too_many_threads_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    finished_run(dir);
    let before = names(&dir.join("run"));
    let o = fedsim(
        &["run", "s.yaml", "-q", "--out", "many", "--threads", "20000"],
        dir,
    );
    assert_refused(&o, "--threads 20000: at most");
    assert!(!dir.join("many").exists());
    // export-weights' re-run is refused the same way, and leaves nothing in the run.
    let o = fedsim(&["export-weights", "run", "--threads", "20000"], dir);
    assert_refused(&o, "--threads 20000: at most");
    assert_eq!(names(&dir.join("run")), before);
    write(
        &dir.join("sweep.yaml"),
        "name: sw\nbase: s.yaml\nseeds: [1, 2]\n",
    );
    let o = fedsim(
        &[
            "sweep",
            "sweep.yaml",
            "-q",
            "--out",
            "sw",
            "--jobs",
            "20000",
        ],
        dir,
    );
    assert_refused(&o, "--jobs 20000: at most");
    assert!(!dir.join("sw").exists());
}

#[test]
fn a_run_that_fails_before_it_begins_leaves_no_folder_and_the_earlier_results_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = parquet_run(dir);
    let arg = scenario.to_str().unwrap();
    let o = fedsim(&["run", arg, "-q", "--out", "run"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let before: Vec<Vec<u8>> = ["metrics.parquet", "summary.csv"]
        .iter()
        .map(|f| std::fs::read(dir.join("run").join(f)).unwrap())
        .collect();
    std::fs::write(dir.join("data.parquet"), "not Parquet").unwrap();
    // Into a new folder: none is left behind.
    assert_refused(
        &fedsim(&["run", arg, "-q", "--out", "new"], dir),
        "not a readable Parquet file",
    );
    assert!(!dir.join("new").exists(), "{:?}", names(dir));
    // Into the earlier run's folder: its results are as they were.
    assert_refused(
        &fedsim(&["run", arg, "-q", "--out", "run"], dir),
        "not a readable Parquet file",
    );
    let after: Vec<Vec<u8>> = ["metrics.parquet", "summary.csv"]
        .iter()
        .map(|f| std::fs::read(dir.join("run").join(f)).unwrap())
        .collect();
    assert_eq!(before, after);
    assert!(leftovers(&dir.join("run")).is_empty());
}

#[test]
fn data_fetch_never_replaces_a_file_it_did_not_write() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("data");
    std::fs::create_dir_all(cache.join("mnist")).unwrap();
    let mine = cache.join("mnist/t10k-labels-idx1-ubyte");
    std::fs::write(&mine, "a user's labels").unwrap();
    // Refused before anything is downloaded.
    let o = bin()
        .args(["data", "fetch", "mnist"])
        .env("FEDSIM_DATA", &cache)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_refused(
        &o,
        "fedsim did not write (or that changed since): t10k-labels-idx1-ubyte; run `fedsim \
         data fetch mnist --force` to move them aside",
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "a user's labels");
    assert_eq!(
        names(&cache.join("mnist")),
        ["t10k-labels-idx1-ubyte"],
        "nothing of fedsim's is left"
    );
}
