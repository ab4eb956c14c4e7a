//! The Python package (`python/`): `import fedsim` runs a scenario as the command line does, with
//! the same files, errors with the command line's text, and the GIL released while it runs.
//! Its extension module is the workspace's `fedsim-python` crate, which `scripts/test.sh` builds
//! (`cargo build --release -p fedsim-python`); here it is loaded from the build folder beside
//! the `fedsim` binary, with the package's Python files from `python/fedsim/`.

use crate::common::{fedsim, skipped, stderr};
use std::path::{Path, PathBuf};

/// The package as `pip install ./python` lays it out: `fedsim/__init__.py` and the extension
/// module `fedsim/_native.abi3.so`, in a folder to put on `PYTHONPATH`; `None` after saying why
/// it cannot be made here (which fails under CI).
fn package(check: &str, into: &Path) -> Option<PathBuf> {
    let build = Path::new(env!("CARGO_BIN_EXE_fedsim")).parent().unwrap();
    let module = build.join("lib_native.so");
    if !module.is_file() {
        skipped(
            check,
            &format!(
                "{} is not built (cargo build --release -p fedsim-python)",
                module.display()
            ),
        );
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package = into.join("fedsim");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::copy(
        root.join("python/fedsim/__init__.py"),
        package.join("__init__.py"),
    )
    .unwrap();
    std::fs::copy(&module, package.join("_native.abi3.so")).unwrap();
    Some(into.to_path_buf())
}

fn python_with_polars(check: &str) -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import polars"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skipped(check, ".venv/bin/python cannot import polars");
        return None;
    }
    Some(python)
}

const SCRIPT: &str = r#"
import json, sys, threading, time
import fedsim, polars
quickstart = sys.argv[1]
s = fedsim.Scenario.from_file(quickstart).set("rounds", 3).set("eval_every", 1)
ticks = []
stop = threading.Event()
def tick():
    while not stop.is_set():
        ticks.append(1)
        time.sleep(0.0005)
t = threading.Thread(target=tick)
t.start()
before = len(ticks)
evaluations = []
run = fedsim.run(s, out="py", threads=2, on_evaluation=evaluations.append)
during = len(ticks) - before
stop.set(); t.join()
out = {
    "run_id": s.run_id,
    "resolved": s.resolved_yaml,
    "metrics": [run.metrics.height, run.metrics.columns],
    "summary_mean": run.summary["test_acc_mean"][0],
    "same_frame": run.metrics.equals(polars.read_parquet("cli/metrics.parquet")),
    "rounds": run.rounds["round"].to_list(),
    "read_back": fedsim.read("py").clients.height,
    "dict_id": fedsim.Scenario.from_dict({"name": "d", "rounds": 1, "data": {"kind": "blobs"},
        "algorithm": {"name": "fedavg"}}).name,
    "schema_title": "properties" in fedsim.schema(),
    "evaluations": [[e["round"], e["test/global/accuracy"]] for e in evaluations],
}
d = fedsim.describe(s)
out["describe"] = [str(d), d.clients, d.features, d.splits["split"].to_list(),
    d.splits["rows"].to_list(), d.notes]
swept = fedsim.sweep("sweep.yaml", out="swept", jobs=2)
out["sweep"] = [list(swept.runs), swept.summary.height, sorted(swept.summary["cell"].to_list())]
def fails(evaluation):
    raise ValueError("from the callback")
try:
    fedsim.run(s, out="raised", threads=1, on_evaluation=fails)
except ValueError as e:
    out["raised"] = [str(e), fedsim.read("raised").rounds.height]
try:
    fedsim.Scenario.from_file(quickstart).set("sampling.fraction", 2)
except fedsim.ScenarioError as e:
    out["error"] = str(e)
    out["is_fedsim_error"] = isinstance(e, fedsim.FedsimError)
print(json.dumps(out))
print(during, file=sys.stderr)
"#;

#[test]
fn python_runs_a_scenario_as_the_command_line_does() {
    let check = "python::python_runs_a_scenario_as_the_command_line_does";
    let Some(python) = python_with_polars(check) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some(path) = package(check, &dir.join("site")) else {
        return;
    };
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let quickstart = quickstart.to_str().unwrap();
    let cli = fedsim(
        &[
            "run",
            quickstart,
            "--set",
            "rounds=3",
            "--set",
            "eval_every=1",
            "--out",
            "cli",
            "--threads",
            "1",
            "-q",
        ],
        dir,
    );
    assert!(cli.status.success(), "{}", stderr(&cli));
    let sweep = format!(
        "name: swept\nbase: {quickstart}\nset: {{rounds: 2}}\ngrid:\n  training.lr: [0.05, 0.1]\n"
    );
    crate::common::write(&dir.join("sweep.yaml"), &sweep);
    let out = std::process::Command::new(&python)
        .args(["-c", SCRIPT, quickstart])
        .env("PYTHONPATH", &path)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // The same files as `fedsim run` (on 2 threads against 1), the same frames.
    for file in fedsim::results::REPRODUCIBLE_FILES {
        assert_eq!(
            std::fs::read(dir.join("py").join(file)).unwrap(),
            std::fs::read(dir.join("cli").join(file)).unwrap(),
            "{file}"
        );
    }
    assert_eq!(got["same_frame"], true);
    assert_eq!(got["rounds"], serde_json::json!([1, 2, 3]));
    let mean = crate::common::summary_value(&dir.join("cli"), "test_acc_mean");
    assert_eq!(got["summary_mean"].as_f64().unwrap(), mean);
    assert_eq!(got["read_back"], 100);
    let scenario_yaml = std::fs::read_to_string(dir.join("cli/scenario.yaml")).unwrap();
    assert!(scenario_yaml.ends_with(got["resolved"].as_str().unwrap()));
    assert!(scenario_yaml.contains(got["run_id"].as_str().unwrap()));
    assert_eq!(got["dict_id"], "d");
    assert_eq!(got["schema_title"], true);

    // Each evaluation handed to Python as it was made: its round and figures, which
    // metrics.parquet holds too.
    let test = crate::tracking::weighted_test_accuracy(&dir.join("cli"));
    let evaluations = got["evaluations"].as_array().unwrap();
    assert_eq!(evaluations.len(), 3);
    for (e, (round, accuracy)) in evaluations.iter().zip(&test) {
        assert_eq!(e[0].as_u64().unwrap(), *round);
        assert!((e[1].as_f64().unwrap() - accuracy).abs() < 1e-12);
    }
    // A sweep from Python: its cells' runs by label, their summaries in one frame.
    let labels = serde_json::json!(["training.lr=0.05, seed=1", "training.lr=0.1, seed=1"]);
    assert_eq!(got["sweep"], serde_json::json!([labels, 2, labels]));
    // A callback's exception is raised once the run has ended, its files written.
    assert_eq!(got["raised"], serde_json::json!(["from the callback", 3]));

    // The command line's error, as a Python exception.
    let refused = fedsim(&["check", quickstart, "--set", "sampling.fraction=2"], dir);
    let error = got["error"].as_str().unwrap();
    assert!(error.contains("field `sampling.fraction`"), "{error}");
    assert!(
        stderr(&refused).contains(error),
        "{} vs {error}",
        stderr(&refused)
    );
    assert_eq!(got["is_fedsim_error"], true);

    // `describe` from Python: the command's text, and the data's figures.
    let described = fedsim(
        &[
            "describe",
            quickstart,
            "--set",
            "rounds=3",
            "--set",
            "eval_every=1",
        ],
        dir,
    );
    assert!(described.status.success(), "{}", stderr(&described));
    let text = String::from_utf8(described.stdout).unwrap();
    assert_eq!(got["describe"][0].as_str().unwrap(), text);
    assert_eq!(got["describe"][1], 100);
    assert_eq!(got["describe"][2], 150);
    assert_eq!(got["describe"][3], serde_json::json!(["train", "test"]));
    assert!(
        text.contains(&format!("train   {}", got["describe"][4][0])),
        "{text}"
    );
    assert_eq!(got["describe"][5], serde_json::json!([]));

    // Another Python thread went on while the run ran (the GIL was released).
    let during: u64 = stderr(&out).trim().lines().last().unwrap().parse().unwrap();
    assert!(during > 0, "no other thread ran during the run");
}

const INTERRUPTED: &str = r#"
import glob, os, signal, sys, threading
import fedsim
s = (fedsim.Scenario.from_file(sys.argv[1]).set("rounds", 3000).set("eval_every", 500)
     .set("checkpoint", {"every_rounds": 20}))
# Ctrl-C, as a notebook's interrupt button sends it, once `pattern` (a checkpoint) exists.
def press_ctrl_c(pattern):
    def press():
        while not glob.glob(pattern):
            threading.Event().wait(0.01)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=press, daemon=True).start()
press_ctrl_c("stopped/checkpoint.fedsim")
try:
    fedsim.run(s, out="stopped", threads=2)
    print("finished")
except KeyboardInterrupt:
    print("interrupted")
print(os.path.exists("stopped/summary.csv"), os.path.exists("stopped/checkpoint.fedsim"))
fedsim.run(s, out="stopped", threads=2)
print("resumed")
# A sweep's cell keeps its checkpoint in its staging folder, and the next sweep resumes it.
cell_checkpoint = "swept/.partial-cell=*-resumable/checkpoint.fedsim"
press_ctrl_c(cell_checkpoint)
try:
    fedsim.sweep("sweep.yaml", out="swept")
    print("finished")
except KeyboardInterrupt:
    print("interrupted")
print(len(glob.glob(cell_checkpoint)), len(glob.glob("swept/cell=*/summary.csv")))
swept = fedsim.sweep("sweep.yaml", out="swept")
print(len(swept.runs))
"#;

/// Ctrl-C in Python stops a run (or a sweep's cell) at its next event and raises
/// `KeyboardInterrupt`; the run publishes nothing, keeps its checkpoint, and the same call
/// again resumes and ends with the files of a run (or sweep) that never stopped.
#[test]
fn ctrl_c_in_python_stops_a_run_that_then_resumes() {
    let check = "python::ctrl_c_in_python_stops_a_run_that_then_resumes";
    let Some(python) = python_with_polars(check) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some(path) = package(check, &dir.join("site")) else {
        return;
    };
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let quickstart = quickstart.to_str().unwrap();
    let sweep = format!(
        "name: swept\nbase: {quickstart}\nset: {{rounds: 1500, eval_every: 500, checkpoint: \
         {{every_rounds: 20}}}}\ngrid:\n  training.lr: [0.05, 0.1]\n"
    );
    crate::common::write(&dir.join("sweep.yaml"), &sweep);
    let out = std::process::Command::new(&python)
        .args(["-c", INTERRUPTED, quickstart])
        .env("PYTHONPATH", &path)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(
        said,
        "interrupted\nFalse True\nresumed\ninterrupted\n1 0\n2\n",
        "{}",
        stderr(&out)
    );
    let sets = ["rounds=3000", "eval_every=500"]
        .map(|s| ["--set", s])
        .concat();
    let whole = fedsim(
        &[&["run", quickstart, "--out", "whole", "-q"][..], &sets].concat(),
        dir,
    );
    assert!(whole.status.success(), "{}", stderr(&whole));
    let differ = fedsim::results::differing_files(&dir.join("whole"), &dir.join("stopped"));
    assert!(differ.is_empty(), "{differ:?} differ after Ctrl-C");
    let whole = fedsim(&["sweep", "sweep.yaml", "--out", "whole-sweep", "-q"], dir);
    assert!(whole.status.success(), "{}", stderr(&whole));
    for cell in std::fs::read_dir(dir.join("whole-sweep")).unwrap() {
        let cell = cell.unwrap().file_name();
        if cell.to_string_lossy().starts_with("cell=") {
            let (a, b) = (
                dir.join("whole-sweep").join(&cell),
                dir.join("swept").join(&cell),
            );
            let differ = fedsim::results::differing_files(&a, &b);
            assert!(
                differ.is_empty(),
                "{cell:?}: {differ:?} differ after Ctrl-C"
            );
        }
    }
}
