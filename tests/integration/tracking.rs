//! `tracking:`: a run reports to TensorBoard and MLflow as it goes, read back here with the real
//! `tensorboard` (its event accumulator) and `mlflow` (`mlflow.search_runs` on the file store)
//! from PyPI, which `scripts/test.sh` installs into `.venv`.

use crate::common::{f64_column, fedsim, skipped, stderr, u64_column};
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// TensorBoard's scalars and text of one run folder, as JSON.
const READ_TENSORBOARD: &str = r#"
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
print(json.dumps({
    "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
    "text": {t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in tags["tensors"]},
}))
"#;

/// An MLflow file store's runs of one experiment, as JSON.
const READ_MLFLOW: &str = r#"
import os, sys, json
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
import mlflow
from mlflow.tracking import MlflowClient
mlflow.set_tracking_uri("file://" + os.path.abspath(sys.argv[1]))
runs = mlflow.search_runs(experiment_names=[sys.argv[2]], output_format="list")
client = MlflowClient()
print(json.dumps([{
    "name": r.info.run_name,
    "status": r.info.status,
    "params": r.data.params,
    "tags": r.data.tags,
    "metrics": {k: [[m.step, m.value] for m in client.get_metric_history(r.info.run_id, k)]
                for k in r.data.metrics},
} for r in runs]))
"#;

/// `.venv/bin/python` (absolute) where it has `modules`, else `None` after saying why (which
/// fails under CI).
fn python_with(check: &str, modules: &str) -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-W", "ignore", "-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skipped(check, &format!(".venv/bin/python cannot import {modules}"));
        return None;
    }
    Some(python)
}

fn python_json(python: &Path, script: &str, args: &[&Path], cwd: &Path) -> serde_json::Value {
    let out = std::process::Command::new(python)
        .args(["-W", "ignore", "-c", script])
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Per evaluated round, the test accuracy of the global model weighted by test rows, from
/// `metrics.parquet`.
pub(crate) fn weighted_test_accuracy(run: &Path) -> BTreeMap<u64, f64> {
    let df = fedsim::results::read_parquet(&run.join("metrics.parquet")).unwrap();
    let text = |name: &str| -> Vec<String> {
        let c = df.column(name).unwrap().cast(&DataType::String).unwrap();
        let c = c.str().unwrap();
        c.iter()
            .map(|v| v.unwrap_or_default().to_string())
            .collect()
    };
    let (split, model) = (text("split"), text("model"));
    let (rounds, n) = (u64_column(&df, "round"), u64_column(&df, "n_samples"));
    let accuracy = f64_column(&df, "accuracy");
    let mut sums: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for i in (0..rounds.len()).filter(|&i| split[i] == "test" && model[i] == "global") {
        let s = sums.entry(rounds[i]).or_default();
        s.0 += accuracy[i] * n[i] as f64;
        s.1 += n[i] as f64;
    }
    sums.into_iter().map(|(r, (a, n))| (r, a / n)).collect()
}

fn series(value: &serde_json::Value) -> Vec<(u64, f64)> {
    (value.as_array().unwrap().iter())
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_run_reports_to_tensorboard_and_mlflow_as_their_own_readers_read_them() {
    let check = "tracking::a_run_reports_to_tensorboard_and_mlflow";
    let Some(python) = python_with(check, "tensorboard, mlflow") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let run = |out: &str, threads: &str| {
        let o = fedsim(
            &[
                "run",
                scenario.to_str().unwrap(),
                "--set",
                "rounds=4",
                "--set",
                "eval_every=2",
                "--set",
                "tracking={tensorboard: tb, mlflow: ml}",
                "--out",
                out,
                "--threads",
                threads,
                "-q",
            ],
            dir,
        );
        assert!(o.status.success(), "{}", stderr(&o));
    };
    run("first", "2");
    let first = dir.join("first");
    let run_id = std::fs::read_to_string(first.join("summary.csv")).unwrap();
    let run_id = run_id
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    let expected = weighted_test_accuracy(&first);
    assert_eq!(expected.keys().copied().collect::<Vec<_>>(), [2, 4]);

    // TensorBoard: the configuration as text, each evaluation's accuracy (as float32), each
    // round's counts, and the summary at the last round.
    let folder = dir.join(format!("tb/quickstart/quickstart-{run_id}"));
    let tb = python_json(&python, READ_TENSORBOARD, &[&folder], dir);
    // scenario.yaml less its first line, a comment naming the run.
    let scenario_yaml = std::fs::read_to_string(first.join("scenario.yaml")).unwrap();
    let (comment, scenario_yaml) = scenario_yaml.split_once('\n').unwrap();
    assert!(comment.starts_with("# Resolved scenario of run"));
    assert_eq!(
        tb["text"]["scenario"].as_str().unwrap(),
        format!("```yaml\n{scenario_yaml}```")
    );
    let accuracy = series(&tb["scalars"]["test/global/accuracy"]);
    assert_eq!(accuracy.len(), 2);
    for (step, value) in &accuracy {
        assert_eq!(*value as f32, expected[step] as f32, "round {step}");
    }
    let rounds = fedsim::results::read_parquet(&first.join("rounds.parquet")).unwrap();
    let completed: Vec<(u64, f64)> = (u64_column(&rounds, "round").into_iter())
        .zip(u64_column(&rounds, "completed"))
        .map(|(r, c)| (r, c as f64))
        .collect();
    assert_eq!(series(&tb["scalars"]["round/completed"]), completed);
    let mean = crate::common::summary_value(&first, "test_acc_mean");
    let summary = series(&tb["scalars"]["summary/global/test_acc_mean"]);
    assert_eq!(summary.len(), 1);
    assert_eq!((summary[0].0, summary[0].1 as f32), (4, mean as f32));

    // MLflow: one finished run in experiment `quickstart`, the resolved scenario as
    // parameters, every metric's history at full precision.
    let ml = python_json(
        &python,
        READ_MLFLOW,
        &[Path::new("ml"), Path::new("quickstart")],
        dir,
    );
    let runs = ml.as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r["status"], "FINISHED");
    assert_eq!(r["name"], format!("quickstart-{run_id}"));
    assert_eq!(r["params"]["rounds"], "4");
    assert_eq!(r["params"]["model.kind"], "linear");
    assert_eq!(r["tags"]["fedsim.run_id"], run_id.as_str());
    let history = series(&r["metrics"]["test/global/accuracy"]);
    let want: Vec<(u64, f64)> = expected.iter().map(|(r, a)| (*r, *a)).collect();
    assert_eq!(history.len(), want.len());
    for ((step, value), (want_step, want_value)) in history.iter().zip(&want) {
        assert_eq!(step, want_step);
        assert!(
            (value - want_value).abs() < 1e-12,
            "{value} vs {want_value}"
        );
    }
    assert_eq!(
        series(&r["metrics"]["summary/global/test_acc_mean"]),
        [(4, mean)]
    );

    // The same run again, on 1 trainer thread against 2: new files beside the old, which
    // stay as they were. The event files are byte for byte the same (their times are the
    // simulated clock's).
    let events = folder.join("events.out.tfevents.0000000000.fedsim");
    let before = std::fs::read(&events).unwrap();
    run("second", "1");
    assert_eq!(std::fs::read(&events).unwrap(), before);
    let again = std::fs::read(folder.join("events.out.tfevents.0000000001.fedsim")).unwrap();
    assert_eq!(again, before);
    let ml = python_json(
        &python,
        READ_MLFLOW,
        &[Path::new("ml"), Path::new("quickstart")],
        dir,
    );
    assert_eq!(ml.as_array().unwrap().len(), 2);
}

#[test]
fn tracking_changes_no_result_file_and_a_bad_section_is_refused_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let scenario = scenario.to_str().unwrap();
    let plain = fedsim(
        &["run", scenario, "--set", "rounds=2", "--out", "a", "-q"],
        dir,
    );
    assert!(plain.status.success(), "{}", stderr(&plain));
    let tracked = fedsim(
        &[
            "run",
            scenario,
            "--set",
            "rounds=2",
            "--set",
            "tracking={tensorboard: tb, experiment: mine}",
            "--out",
            "b",
            "-q",
        ],
        dir,
    );
    assert!(tracked.status.success(), "{}", stderr(&tracked));
    for file in fedsim::results::REPRODUCIBLE_FILES {
        assert_eq!(
            std::fs::read(dir.join("a").join(file)).unwrap(),
            std::fs::read(dir.join("b").join(file)).unwrap(),
            "{file}"
        );
    }
    assert!(dir.join("tb/mine").is_dir());
    let bad = fedsim(
        &["check", scenario, "--set", "tracking={tensorbord: tb}"],
        dir,
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("tracking"), "{}", stderr(&bad));
    let empty = fedsim(&["check", scenario, "--set", "tracking={}"], dir);
    crate::common::assert_refused(&empty, "field `tracking.tensorboard`");
}

/// A sweep's cells are one MLflow run each, in the experiment named after the sweep, and one
/// TensorBoard run folder each under the sweep's name, also when cells run at once.
#[test]
fn a_sweeps_cells_are_runs_of_one_experiment() {
    let check = "tracking::a_sweeps_cells_are_runs_of_one_experiment";
    let Some(python) = python_with(check, "mlflow") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let sweep = format!(
        "name: tracked\nbase: {}\nset: {{rounds: 2, tracking: {{tensorboard: tb, mlflow: ml}}}}\n\
         grid:\n  training.lr: [0.05, 0.1, 0.2]\n",
        base.display()
    );
    crate::common::write(&dir.join("sweep.yaml"), &sweep);
    let o = fedsim(
        &["sweep", "sweep.yaml", "--jobs", "2", "-q", "--out", "out"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ml = python_json(
        &python,
        READ_MLFLOW,
        &[Path::new("ml"), Path::new("tracked")],
        dir,
    );
    let runs = ml.as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let mut lrs: Vec<&str> = runs
        .iter()
        .map(|r| r["params"]["training.lr"].as_str().unwrap())
        .collect();
    lrs.sort();
    assert_eq!(lrs, ["0.05", "0.1", "0.2"]);
    assert!(runs.iter().all(|r| r["status"] == "FINISHED"));
    assert_eq!(crate::common::names(&dir.join("tb/tracked")).len(), 3);
}
