//! Hostile but realistic use (issue 36): fedsim never touches what is not its own, keeps one
//! writer per folder, and ends every input in results or a clear error (exit 2), never a
//! panic, an abort, a hang or silently changed meaning.

use crate::common::write_parquet;
use crate::common::{assert_refused, bin, fedsim, names, stderr, write, SMALL};
use polars::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_run_into_the_scenarios_own_folder_never_replaces_the_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("scenario.yaml"), SMALL);
    let o = fedsim(&["run", "scenario.yaml", "--out", ".", "-q"], tmp.path());
    assert_refused(&o, "is an input of this run and also one of its results");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("scenario.yaml")).unwrap(),
        SMALL
    );
    // Even with --force: an input is never an output.
    let o = fedsim(
        &["run", "scenario.yaml", "--out", ".", "-q", "--force"],
        tmp.path(),
    );
    assert_refused(&o, "is an input of this run");
    assert_eq!(names(tmp.path()), ["scenario.yaml"]);
}

#[test]
fn foreign_files_with_result_names_are_refused_or_moved_aside_never_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    write(&out.join("metrics.parquet"), "a user's own data");
    write(&out.join("gossip.parquet"), "unrelated");
    std::fs::create_dir(out.join(".partial-mine")).unwrap();
    std::fs::create_dir(out.join(".partial-99999999")).unwrap();
    let args = ["run", scenario.to_str().unwrap(), "-q", "--out", "out"];
    let o = fedsim(&args, tmp.path());
    assert_refused(
        &o,
        "holds files that fedsim did not write but would replace: metrics.parquet, \
         gossip.parquet; choose another output folder (--out), or pass --force",
    );
    assert_eq!(
        names(&out),
        [
            ".partial-99999999",
            ".partial-mine",
            "gossip.parquet",
            "metrics.parquet"
        ]
    );
    let forced = fedsim(&[&args[..], &["--force"]].concat(), tmp.path());
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(
        stderr(&forced).contains("moved aside to"),
        "{}",
        stderr(&forced)
    );
    for (name, text) in [
        ("metrics.parquet", "a user's own data"),
        ("gossip.parquet", "unrelated"),
    ] {
        let aside = out.join(format!("{name}.before-fedsim"));
        assert_eq!(std::fs::read_to_string(aside).unwrap(), text);
    }
    // The user's folders are still there; the results are fedsim's, so a rerun replaces them.
    assert!(out.join(".partial-mine").is_dir() && out.join(".partial-99999999").is_dir());
    assert!(out.join("summary.csv").is_file());
    let again = fedsim(&args, tmp.path());
    assert!(again.status.success(), "{}", stderr(&again));
}

#[test]
fn a_killed_runs_staging_folder_is_removed_but_only_if_it_is_fedsims() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let out = tmp.path().join("out");
    // What a run killed by -9 leaves: its marked staging folder (its process is gone).
    let stale = out.join(".partial-4000000");
    fedsim::io::folder::make_staging(&stale)
        .unwrap()
        .left_behind();
    write(&stale.join("metrics.parquet"), "half written");
    let o = fedsim(
        &["run", scenario.to_str().unwrap(), "-q", "--out", "out"],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stale.exists());
}

#[test]
fn names_that_would_leave_results_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    for name in ["../escape", "/tmp/abs", "a/b", "..", ".hidden", "''"] {
        let o = fedsim(
            &[
                "run",
                scenario.to_str().unwrap(),
                "-q",
                "--set",
                &format!("name={name}"),
            ],
            tmp.path(),
        );
        assert_refused(&o, "field `name`");
        assert!(stderr(&o).contains("one folder name"), "{}", stderr(&o));
    }
    let sweep = write(
        &tmp.path().join("sweep.yaml"),
        "name: ../../elsewhere\nbase: s.yaml\nseeds: [1]\n",
    );
    let o = fedsim(&["sweep", sweep.to_str().unwrap(), "-q"], tmp.path());
    assert_refused(&o, "field `name`");
    assert!(!tmp.path().join("results").exists());
    assert!(!tmp.path().parent().unwrap().join("elsewhere").exists());
}

/// A scenario that runs long enough to be caught running (about a second or more).
fn slow(name: &str) -> String {
    SMALL
        .replace("name: small", &format!("name: {name}"))
        .replace("rounds: 4", "rounds: 400")
        .replace("clients: 24", "clients: 200")
        .replace("eval_every: 2", "eval_every: 400")
}

/// Waits until `lock` names a process (its writer has taken it).
fn wait_for_holder(lock: &Path, child: &mut std::process::Child) {
    let start = Instant::now();
    while !std::fs::read_to_string(lock).is_ok_and(|t| t.starts_with("pid ")) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the first writer ended early"
        );
        assert!(start.elapsed() < Duration::from_secs(60), "no lock taken");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_writer_is_refused_naming_the_first_and_a_dead_writers_lock_is_taken_over() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("slow.yaml"), &slow("slow"));
    let out = tmp.path().join("out");
    let args = ["run", scenario.to_str().unwrap(), "-q", "--out", "out"];
    let mut first = bin()
        .args(args)
        .current_dir(tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_holder(&out.join(".fedsim-lock"), &mut first);
    let second = fedsim(&args, tmp.path());
    assert_refused(
        &second,
        &format!(
            "is being written by another fedsim process (pid {}",
            first.id()
        ),
    );
    // kill -9: the lock goes with the process; its staging folder is cleared by the next run.
    first.kill().unwrap();
    first.wait().unwrap();
    let third = fedsim(
        &[
            &args[..],
            &["--set", "rounds=2", "--set", "data.clients=24"],
        ]
        .concat(),
        tmp.path(),
    );
    assert!(third.status.success(), "{}", stderr(&third));
    let staging: Vec<String> = names(&out)
        .into_iter()
        .filter(|n| n.starts_with(".partial-"))
        .collect();
    assert!(staging.is_empty(), "{staging:?}");
}

#[test]
fn two_copies_of_a_sweep_on_one_folder_share_its_cells_and_lose_none() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("slow.yaml"), &slow("slow"));
    let sweep = write(
        &tmp.path().join("sweep.yaml"),
        "name: twice\nbase: slow.yaml\nseeds: [1, 2, 3]\n",
    );
    let args = ["sweep", sweep.to_str().unwrap(), "-q", "--out", "sw"];
    let first = bin()
        .args(args)
        .current_dir(tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let locks = tmp.path().join("sw/.fedsim-locks");
    let start = Instant::now();
    while !locks.is_dir() || names(&locks).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = fedsim(&args, tmp.path());
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(second.status.success(), "{}", stderr(&second));
    let list = fedsim(
        &["sweep", sweep.to_str().unwrap(), "--list", "--out", "sw"],
        tmp.path(),
    );
    let listing = String::from_utf8_lossy(&list.stdout).into_owned();
    assert_eq!(listing.matches("finished").count(), 3, "{listing}");
    // Whatever the second copy met running it left to the first, and said so.
    let said = stderr(&second);
    if said.contains("left to it") {
        assert!(
            said.contains("being run by another fedsim process"),
            "{said}"
        );
    }
}

/// Writes a Parquet file of `cols` (plus nothing else).
fn parquet(path: &Path, cols: Vec<Column>) -> PathBuf {
    let mut df = DataFrame::new_infer_height(cols).unwrap();
    write_parquet(path, &mut df).unwrap();
    path.to_path_buf()
}

fn byod(dir: &Path, data: &Path, model: &str) -> PathBuf {
    write(
        &dir.join("byod.yaml"),
        &format!(
            "name: byod\nrounds: 2\ndata: {{kind: parquet, path: '{}', client_column: c, \
             label_column: y, feature_columns: [x]}}\nsplit: {{kind: fractions, train: 0.5, \
             val: 0.25, test: 0.25}}\nalgorithm: {{name: fedavg}}\nmodel: {model}\n\
             training: {{local_epochs: 1, batch_size: 4, lr: 0.1}}\n",
            data.display()
        ),
    )
}

fn run_byod(dir: &Path, data: &Path) -> Output {
    let s = byod(dir, data, "{kind: linear}");
    fedsim(&["run", s.to_str().unwrap(), "-q", "--out", "out"], dir)
}

#[test]
fn data_that_cannot_mean_what_it_says_is_refused_with_column_row_and_value() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let c = || Column::new("c".into(), vec![1i64, 1, 2, 2, 2, 1, 2, 1]);
    let x = || Column::new("x".into(), vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]);
    let y = |v: Vec<i64>| Column::new("y".into(), v);
    // No rows at all.
    let empty = parquet(
        &dir.join("empty.parquet"),
        vec![
            Column::new("c".into(), Vec::<i64>::new()),
            Column::new("y".into(), Vec::<i64>::new()),
            Column::new("x".into(), Vec::<f64>::new()),
        ],
    );
    assert_refused(&run_byod(dir, &empty), "the file has no rows");
    // Labels too large to be class ids (with the default class count).
    for big in [1i64 << 31, 1i64 << 62] {
        let f = parquet(
            &dir.join("big.parquet"),
            vec![c(), y(vec![0, 1, 0, 1, big, 0, 1, 0]), x()],
        );
        assert_refused(
            &run_byod(dir, &f),
            &format!("label column `y`, row 4 (client `2`): {big} is not a class id"),
        );
    }
    // A uint64 label past the signed range would have become class 0.
    let f = parquet(
        &dir.join("u64.parquet"),
        vec![
            c(),
            Column::new("y".into(), vec![0u64, 1, 0, u64::MAX, 1, 0, 1, 0]),
            x(),
        ],
    );
    assert_refused(
        &run_byod(dir, &f),
        "label column `y`, row 3: 18446744073709551615 is not a class id",
    );
    // A text feature would have become 0.0.
    let f = parquet(
        &dir.join("text.parquet"),
        vec![
            c(),
            y(vec![0, 1, 0, 1, 0, 1, 0, 1]),
            Column::new("x".into(), vec!["a", "b", "c", "d", "e", "f", "g", "h"]),
        ],
    );
    assert_refused(
        &run_byod(dir, &f),
        "feature column `x` must hold numbers (any float or integer type), it holds str",
    );
    // A float64 past f32's range would have become infinite.
    let f = parquet(
        &dir.join("huge.parquet"),
        vec![
            c(),
            y(vec![0, 1, 0, 1, 0, 1, 0, 1]),
            Column::new(
                "x".into(),
                vec![0.1f64, 0.2, 1e300, 0.4, 0.5, 0.6, 0.7, 0.8],
            ),
        ],
    );
    assert_refused(
        &run_byod(dir, &f),
        "column `x`, row 2: 1e300 does not fit a 32-bit float",
    );
}

#[test]
fn a_model_or_local_work_too_large_for_the_machine_is_refused_not_aborted() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let memory = fedsim::io::machine_memory().expect("Linux reports its memory");
    // Two hidden layers whose middle matrix alone is twice the machine's memory.
    let width = ((memory / 4.0).sqrt() * 1.5) as u64;
    let o = fedsim(
        &[
            "run",
            scenario.to_str().unwrap(),
            "-q",
            "--set",
            &format!("model={{kind: mlp, hidden: [{width}, {width}]}}"),
        ],
        tmp.path(),
    );
    assert_refused(&o, "field `model`: the model (");
    assert!(
        stderr(&o).contains("more than this machine's"),
        "{}",
        stderr(&o)
    );
    let o = fedsim(
        &[
            "run",
            scenario.to_str().unwrap(),
            "-q",
            "--set",
            "training={local_steps: 1000000000, batch_size: 16, lr: 0.1}",
        ],
        tmp.path(),
    );
    assert_refused(&o, "field `training.local_steps`: one client's local work:");
    assert!(
        stderr(&o).contains("more than this machine's"),
        "{}",
        stderr(&o)
    );
    assert!(!tmp.path().join("results/small/seed-7/summary.csv").exists());
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let shell = |redirect: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "'{}' check '{}' {redirect}",
                env!("CARGO_BIN_EXE_fedsim"),
                scenario.display()
            ))
            .output()
            .unwrap()
    };
    assert_refused(
        &shell(">/dev/full"),
        "writing to standard output: No space left on device",
    );
    // A closed standard output is /dev/null to a Rust program (its runtime opens /dev/null
    // there, so no file fedsim opens can take its place): what is printed is dropped.
    let closed = shell(">&-");
    assert_eq!(closed.status.code(), Some(0), "{}", stderr(&closed));
}

#[cfg(unix)]
#[test]
fn a_scenario_or_data_file_that_is_not_a_regular_file_is_refused_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut child = bin()
        .args(["check", fifo.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("fedsim blocked on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_refused(
        &child.wait_with_output().unwrap(),
        "it is a named pipe (FIFO), not a regular file",
    );
    let o = run_byod(tmp.path(), &fifo);
    assert_refused(&o, "not a regular file");
}

#[test]
fn empty_and_section_replacing_overrides_say_what_they_do() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let s = scenario.to_str().unwrap();
    let o = fedsim(&["check", s, "--set", "sampling.fraction="], tmp.path());
    assert_refused(&o, "--set sampling.fraction=: the value is empty");
    let o = fedsim(&["check", s, "--set", "training={lr: 0.2}"], tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "replaced the whole `training` section, so local_epochs, batch_size, momentum, \
             weight_decay went back to their default"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn milestones_past_the_last_round_are_noted_in_runs_and_sweeps() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = write(&tmp.path().join("s.yaml"), SMALL);
    let s = scenario.to_str().unwrap();
    let schedule = "training.lr_schedule={kind: multi_step, milestones: [1, 3, 4]}";
    let note = "training.lr_schedule.milestones: milestones 3, 4 are at or past the last round \
                (3), so they never apply (round r decays once for every milestone below r)";
    let o = fedsim(
        &["check", s, "--set", schedule, "--set", "rounds=3"],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(note), "{}", stderr(&o));
    let o = fedsim(
        &["check", s, "--set", schedule, "--set", "rounds=4"],
        tmp.path(),
    );
    assert!(
        stderr(&o).contains("milestone 4 is at or past the last round (4), so it never applies"),
        "{}",
        stderr(&o)
    );
    let o = fedsim(
        &["check", s, "--set", schedule, "--set", "rounds=5"],
        tmp.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("lr_schedule"), "{}", stderr(&o));
    // A sweep says each note once, naming the first cell that has it.
    let sweep = write(
        &tmp.path().join("sweep.yaml"),
        "name: sw\nbase: s.yaml\nseeds: [1, 2]\n\
         set: {training.lr_schedule: {kind: multi_step, milestones: [1, 3, 4]}}\n\
         grid:\n  rounds: [3, 5]\n",
    );
    let o = fedsim(&["sweep", sweep.to_str().unwrap(), "--list"], tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let said = format!("note: cell rounds=3, seed=1 (and 1 more): {note}");
    assert!(stderr(&o).contains(&said), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).matches("lr_schedule").count(),
        1,
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_corrupt_or_empty_summary_is_never_a_finished_run_nor_silently_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("s.yaml"), SMALL);
    let sweep = write(
        &tmp.path().join("sweep.yaml"),
        "name: two\nbase: s.yaml\nseeds: [1, 2]\n",
    );
    let args = ["sweep", sweep.to_str().unwrap(), "-q", "--out", "sw"];
    assert!(fedsim(&args, tmp.path()).status.success());
    let mut cells: Vec<PathBuf> = names(&tmp.path().join("sw"))
        .into_iter()
        .filter(|n| n.starts_with("cell="))
        .map(|n| tmp.path().join("sw").join(n))
        .collect();
    cells.sort();
    let good = std::fs::read_to_string(cells[0].join("summary.csv")).unwrap();
    std::fs::write(cells[0].join("summary.csv"), "garbage\n").unwrap();
    let o = fedsim(&["report", "sw"], tmp.path());
    assert_refused(&o, "1 runs could not be read");
    assert!(stderr(&o).contains("not a run's summary"), "{}", stderr(&o));
    let o = fedsim(&["report", "sw", "--skip-unreadable"], tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("left out:"), "{}", stderr(&o));
    // An empty summary is not finished: resuming the sweep repairs both cells.
    std::fs::write(cells[1].join("summary.csv"), "").unwrap();
    let o = fedsim(&args, tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2 cells, 0 already finished, 2 run"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let repaired = std::fs::read_to_string(cells[0].join("summary.csv")).unwrap();
    assert_eq!(repaired.lines().count(), good.lines().count());
    // The changed summaries were not fedsim's to delete: each earlier folder is kept aside.
    assert!(stderr(&o).contains("moved aside to"), "{}", stderr(&o));
    let aside = PathBuf::from(format!("{}.before-fedsim", cells[0].display()));
    assert_eq!(
        std::fs::read_to_string(aside.join("summary.csv")).unwrap(),
        "garbage\n"
    );
    assert!(fedsim(&["report", "sw"], tmp.path()).status.success());
}
