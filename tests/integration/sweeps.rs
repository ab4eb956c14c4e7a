//! Sweeps: expansion (grid, zip, seeds, dotted paths), stable cell ids, errors, resume after a
//! crash, shards that partition the sweep, and reports on hand-made result folders.

use crate::common::{bin, SMALL};
use fedsim::studies::{aggregate, Runs, UnfinishedSweep};
use fedsim::studies::{cell_dir, is_finished, run_sweep, SweepOptions};
use fedsim::studies::{parse_shard, Sweep};
use std::path::Path;

/// A sweep file over `SMALL` (written next to it) with the given body.
fn sweep(dir: &Path, body: &str) -> Sweep {
    std::fs::write(dir.join("small.yaml"), SMALL).unwrap();
    let file = dir.join("sweep.yaml");
    std::fs::write(&file, format!("name: tiny\nbase: small.yaml\n{body}")).unwrap();
    Sweep::load(&file).unwrap()
}

fn sweep_error(dir: &Path, body: &str) -> String {
    std::fs::write(dir.join("small.yaml"), SMALL).unwrap();
    let file = dir.join("bad_sweep.yaml");
    std::fs::write(&file, format!("base: small.yaml\n{body}")).unwrap();
    fedsim::error_chain(&Sweep::load(&file).unwrap_err())
}

const GRID: &str = "\
set: {rounds: 2}
grid:
  algorithm: [{name: fedavg}, {name: fedem, components: 2}]
  sampling.fraction: [0.25, 0.5]
zip:
  training.lr: [0.1, 0.05]
  training.batch_size: [16, 8]
seeds: [1, 2]
";

#[test]
fn expansion_covers_grid_zip_and_seeds_with_stable_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(tmp.path(), GRID);
    // 2 algorithms × 2 fractions × 2 zip entries × 2 seeds.
    assert_eq!(s.cells.len(), 16);
    assert_eq!(
        s.axis_paths,
        [
            "algorithm",
            "sampling.fraction",
            "training.lr",
            "training.batch_size"
        ]
    );
    let first = &s.cells[0];
    assert_eq!(first.label(), "algorithm={name: fedavg}, sampling.fraction=0.25, training.lr=0.1, training.batch_size=16, seed=1");
    assert_eq!(first.scenario.run.rounds, 2);
    assert_eq!(first.scenario.name, "tiny");
    // Zip axes move together: lr 0.05 always comes with batch 8.
    for c in &s.cells {
        let lr = c.scenario.run.training.lr;
        let batch = c.scenario.run.training.plan.batch_size;
        assert!(
            (lr, batch) == (0.1, 16) || (lr, batch) == (0.05, 8),
            "{}",
            c.label()
        );
        assert_eq!(c.seed, c.scenario.run.seed);
    }
    let fedem = s
        .cells
        .iter()
        .find(|c| c.label().contains("fedem"))
        .unwrap();
    assert_eq!(fedem.scenario.run.algorithm.name(), "fedem");
    // Ids are the hash of the resolved scenario: unique, and the same when the axes are
    // written in another order or the sweep has other cells.
    let mut ids: Vec<&str> = s.cells.iter().map(|c| c.id()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 16);
    let reordered = sweep(
        tmp.path(),
        "set: {rounds: 2}\ngrid:\n  sampling.fraction: [0.5, 0.25]\n  algorithm: [{name: fedavg}]\nzip:\n  training.batch_size: [16]\n  training.lr: [0.1]\nseeds: [1]\n",
    );
    assert_eq!(reordered.cells.len(), 2);
    for c in &reordered.cells {
        let same = s
            .cells
            .iter()
            .find(|d| d.id() == c.id())
            .expect("same cell, same id");
        assert_eq!(same.scenario.resolved_yaml, c.scenario.resolved_yaml);
    }
}

#[test]
fn bad_sweeps_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let e = sweep_error(tmp.path(), "grid:\n  sampling.fractoin: [0.1]\n");
    assert!(
        e.contains("bad_sweep.yaml")
            && e.contains("sampling.fractoin=0.1")
            && e.contains("unknown field `fractoin`"),
        "{e}"
    );
    let e = sweep_error(tmp.path(), "grid:\n  sampling.fraction: [0.1, 7]\n");
    assert!(
        e.contains("sampling.fraction=7") && e.contains("must be in (0, 1]"),
        "{e}"
    );
    let e = sweep_error(
        tmp.path(),
        "zip:\n  training.lr: [0.1, 0.2]\n  training.batch_size: [8]\n",
    );
    assert!(
        e.contains("equal lengths") && e.contains("training.batch_size"),
        "{e}"
    );
    let e = sweep_error(tmp.path(), "grid:\n  rounds: 3\n");
    assert!(
        e.contains("grid.rounds") && e.contains("non-empty list"),
        "{e}"
    );
    let e = sweep_error(tmp.path(), "grids: {}\n");
    assert!(e.contains("unknown field `grids`"), "{e}");
    let e = sweep_error(tmp.path(), "grid:\n  rounds: [3, 3]\n");
    assert!(e.contains("are the same scenario"), "{e}");
    let e = sweep_error(tmp.path(), "grid:\n  seed: [3, 4]\n");
    assert!(e.contains("`grid.seed`: the seed is not an axis"), "{e}");
    let e = Sweep::load(&tmp.path().join("none.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.yaml"), "{e}");
    // A scenario given as a sweep, and a sweep given as a scenario, say which command to use.
    let e = fedsim::error_chain(&Sweep::load(&tmp.path().join("small.yaml")).unwrap_err());
    assert!(
        e.contains("small.yaml: this file is a scenario, not a sweep: run it with `fedsim run"),
        "{e}"
    );
    let sweep_file = tmp.path().join("bad_sweep.yaml");
    let e = fedsim::scenario::Scenario::load(&sweep_file, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad_sweep.yaml:1: field `base`: this file is a sweep")
            && e.contains("`fedsim sweep FILE`"),
        "{e}"
    );
}

#[test]
fn shards_partition_the_sweep_and_read_the_scheduler_index() {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(tmp.path(), GRID);
    let mut union: Vec<&str> = (0..3).flat_map(|i| s.shard(i, 3)).map(|c| c.id()).collect();
    union.sort();
    let mut all: Vec<&str> = s.cells.iter().map(|c| c.id()).collect();
    all.sort();
    assert_eq!(union, all);
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(parse_shard("1/4", env(&[])), Ok((1, 4)));
    assert_eq!(
        parse_shard(
            "auto",
            env(&[
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ])
        ),
        Ok((3, 4))
    );
    assert_eq!(
        parse_shard(
            "auto",
            env(&[
                ("SLURM_ARRAY_TASK_ID", "5"),
                ("SLURM_ARRAY_TASK_MIN", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "2")
            ])
        ),
        Ok((1, 2))
    );
    assert_eq!(
        parse_shard("auto/8", env(&[("JOB_COMPLETION_INDEX", "7")])),
        Ok((7, 8))
    );
    assert!(parse_shard("auto", env(&[("JOB_COMPLETION_INDEX", "7")]))
        .unwrap_err()
        .contains("auto/N"));
    assert!(parse_shard("4/4", env(&[])).is_err());
    assert!(parse_shard("auto", env(&[]))
        .unwrap_err()
        .contains("SLURM_ARRAY_TASK_ID"));
}

#[test]
fn a_killed_sweep_resumes_and_shards_give_the_same_files() {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(
        tmp.path(),
        "set: {rounds: 2}\ngrid:\n  algorithm: [{name: fedavg}, {name: local}]\nseeds: [1, 2]\n",
    );
    let whole = tmp.path().join("whole");
    let opts = |out: &Path, shard| SweepOptions {
        force: false,
        out: out.to_path_buf(),
        jobs: 2,
        shard,
        progress: false,
        checkpoint: Default::default(),
    };
    let first = run_sweep(&s, &opts(&whole, (0, 1))).unwrap();
    assert_eq!(
        (first.cells, first.skipped, first.ran, first.failed.len()),
        (4, 0, 4, 0)
    );
    // Simulate a crash: one cell never finished (no folder), another killed while writing
    // (a partial folder without its summary).
    let (a, b) = (&s.cells[0], &s.cells[1]);
    std::fs::remove_dir_all(cell_dir(&whole, a)).unwrap();
    let partial = whole.join(format!(".partial-cell={}-99999", b.id()));
    std::fs::rename(cell_dir(&whole, b), &partial).unwrap();
    std::fs::remove_file(partial.join("summary.csv")).unwrap();
    // fedsim's own staging folders carry its marker (only those are ever removed).
    std::fs::write(partial.join(fedsim::io::STAGING_MARKER), "").unwrap();
    let untouched = std::fs::metadata(cell_dir(&whole, &s.cells[2]).join("summary.csv"))
        .unwrap()
        .modified()
        .unwrap();
    let again = run_sweep(&s, &opts(&whole, (0, 1))).unwrap();
    assert_eq!((again.skipped, again.ran), (2, 2));
    assert!(!partial.exists(), "the partial folder is cleaned up");
    for c in &s.cells {
        assert!(is_finished(&cell_dir(&whole, c), c));
    }
    let later = std::fs::metadata(cell_dir(&whole, &s.cells[2]).join("summary.csv"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(untouched, later, "finished cells are not rerun");
    // Two shards into another folder: the same cells, byte for byte.
    let sharded = tmp.path().join("sharded");
    let n: usize = (0..2)
        .map(|i| run_sweep(&s, &opts(&sharded, (i, 2))).unwrap().ran)
        .sum();
    assert_eq!(n, 4);
    for c in &s.cells {
        for f in fedsim::results::REPRODUCIBLE_FILES {
            assert_eq!(
                std::fs::read(cell_dir(&whole, c).join(f)).unwrap(),
                std::fs::read(cell_dir(&sharded, c).join(f)).unwrap(),
                "{f} of {} differs",
                c.label()
            );
        }
    }
    // The report sees every cell, grouped over the two seeds.
    let runs = Runs::find(std::slice::from_ref(&whole)).unwrap();
    assert!(runs.unfinished.is_empty());
    let (rows, unreadable) = fedsim::studies::report_rows(&runs, &Default::default());
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let report = aggregate(&rows);
    assert_eq!(report.len(), 2);
    assert!(report.iter().all(|r| r.seeds == 2));
}

#[test]
fn report_numbers_on_hand_made_results() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("cells.csv"),
        "cell,seed,sampling.fraction\naaa,1,0.1\nbbb,2,0.1\nccc,1,0.5\nddd,1,1.0\n",
    )
    .unwrap();
    let summary = |acc: f64, p10: f64| {
        format!("run_id,model,unseen,seed,test_acc_mean,test_acc_p10,test_acc_jain,time_to_target_s\nx,global,false,9,{acc},{p10},0.99,\n")
    };
    for (cell, acc, p10) in [("aaa", 0.6, 0.5), ("bbb", 0.8, 0.7), ("ccc", 0.9, 0.8)] {
        std::fs::create_dir_all(dir.join(format!("cell={cell}"))).unwrap();
        std::fs::write(
            dir.join(format!("cell={cell}/summary.csv")),
            summary(acc, p10),
        )
        .unwrap();
    }
    // `ddd` has no results yet.
    let runs = Runs::find(&[dir.to_path_buf()]).unwrap();
    let (rows, unreadable) = fedsim::studies::report_rows(&runs, &Default::default());
    assert!(unreadable.is_empty(), "{unreadable:?}");
    assert_eq!(rows.len(), 3);
    assert_eq!(
        runs.unfinished,
        [UnfinishedSweep {
            path: dir.to_path_buf(),
            cells: 1
        }]
    );
    assert_eq!(rows[1].seed, "2", "the seed comes from cells.csv");
    let report = aggregate(&rows);
    assert_eq!(report.len(), 2);
    let (m, s) = report[0].stats["test_acc_mean"];
    assert!(
        (m - 0.7).abs() < 1e-12 && (s - 0.2f64.hypot(0.0) / 2f64.sqrt()).abs() < 1e-12,
        "{m} {s}"
    );
    assert!(report[0].stats["time_to_target_s"].0.is_nan());
    // Through the command line: a table, CSV and Markdown files, and plots.
    let out = bin()
        .args(["report", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Metrics no run has (here the bottom decile and time to target) are left out.
    assert!(
        stdout.contains("| 0.1 | global | training | 2 | 70.00 ± 14.14 | 60.00 ± 14.14 |"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("bottom decile") && !stdout.contains("time to target"),
        "{stdout}"
    );
    for f in [
        "report.csv",
        "report.md",
        "accuracy_vs_sampling_fraction.png",
        "accuracy_vs_sampling_fraction.svg",
    ] {
        assert!(dir.join("report").join(f).exists(), "{f} missing");
    }
}

#[test]
fn a_report_over_a_folder_of_runs_groups_the_seeds_of_each_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("small.yaml");
    std::fs::write(&file, crate::common::SMALL).unwrap();
    let results = tmp.path().join("results");
    // Two seeds at one learning rate, one at another, in nested folders as a recipe makes.
    for (dir, seed, lr) in [
        ("lr1/seed-1", "1", "0.1"),
        ("lr1/seed-2", "2", "0.1"),
        ("lr05/seed-1", "1", "0.05"),
    ] {
        let out = bin()
            .args(["run", file.to_str().unwrap(), "--quiet", "--seed", seed])
            .args(["--set", &format!("training.lr={lr}"), "--out"])
            .arg(results.join(dir))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = Runs::find(std::slice::from_ref(&results)).unwrap();
    let (rows, unreadable) = fedsim::studies::report_rows(&runs, &Default::default());
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let lr = |r: &fedsim::studies::RunRow| r.config.clone();
    assert_eq!(
        rows.iter().map(lr).collect::<Vec<_>>(),
        [
            vec![("training.lr".to_string(), "0.05".to_string())],
            vec![("training.lr".to_string(), "0.1".to_string())],
            vec![("training.lr".to_string(), "0.1".to_string())],
        ],
        "the learning rate is what differs; the seed is not a configuration"
    );
    let report = aggregate(&rows);
    assert_eq!(report.iter().map(|r| r.seeds).collect::<Vec<_>>(), [1, 2]);
    let mean = (rows[1].metrics["test_acc_mean"] + rows[2].metrics["test_acc_mean"]) / 2.0;
    assert!((report[1].stats["test_acc_mean"].0 - mean).abs() < 1e-12);
    assert_ne!(rows[1].seed, rows[2].seed);
    // Through the command line.
    let out = bin().arg("report").arg(&results).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("| training.lr | model | clients | seeds |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| 0.1 | global | training | 2 |"),
        "{stdout}"
    );
    // A folder with no runs below it is named in the error.
    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let out = bin()
        .arg("report")
        .arg(tmp.path().join("empty"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("empty: no runs to report on: it is not a sweep folder"),
        "{stderr}"
    );
}

#[test]
fn kill_minus_nine_leaves_only_finished_cells_and_a_rerun_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = sweep(tmp.path(), "set: {rounds: 40, eval_every: 10}\ngrid:\n  sampling.fraction: [0.25, 0.5, 1.0]\nseeds: [1, 2, 3]\n");
    let file = tmp.path().join("sweep.yaml");
    let out = tmp.path().join("out");
    let mut child = bin()
        .args([
            "sweep",
            file.to_str().unwrap(),
            "--quiet",
            "--jobs",
            "2",
            "--out",
            out.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    // Kill it (SIGKILL) once some cell has finished, or after a while.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(20)
        && !s.cells.iter().any(|c| cell_dir(&out, c).exists())
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let finished = s
        .cells
        .iter()
        .filter(|c| cell_dir(&out, c).exists())
        .count();
    for c in &s.cells {
        let d = cell_dir(&out, c);
        assert!(
            !d.exists() || is_finished(&d, c),
            "half-written {}",
            d.display()
        );
    }
    let rerun = bin()
        .args([
            "sweep",
            file.to_str().unwrap(),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "9 cells, {finished} already finished, {} run (0 diverged), 0 failed",
            9 - finished
        )),
        "{stdout}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "partial folders left: {leftovers:?}");
}

#[test]
fn the_table2_sweep_is_exactly_the_per_method_scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = Sweep::load(&root.join("scenarios/paper/fedem_table2_synthetic.yaml")).unwrap();
    assert_eq!(s.cells.len(), 30);
    for method in [
        "local",
        "fedavg",
        "fedprox",
        "fedavg_plus",
        "clustered",
        "pfedme",
        "apfl",
        "per_fedavg",
        "ditto",
        "fedem",
    ] {
        for seed in 1..=3 {
            let file = root.join(format!("scenarios/paper/fedem_synthetic_{method}.yaml"));
            let args = [
                "name=fedem_table2_synthetic".to_string(),
                format!("seed={seed}"),
            ];
            let own = fedsim::scenario::Scenario::load(&file, &args).unwrap();
            assert!(
                s.cells.iter().any(
                    |c| c.id() == own.run_id() && c.scenario.resolved_yaml == own.resolved_yaml
                ),
                "no cell is {method} seed {seed}"
            );
        }
    }
}

#[test]
fn every_shipped_scenario_and_sweep_is_valid() {
    let mut checked = 0;
    for file in crate::common::shipped_scenario_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        if text.lines().any(|l| l.starts_with("base:")) {
            let s = Sweep::load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(!s.cells.is_empty(), "{}", file.display());
        } else {
            fedsim::scenario::Scenario::load(&file, &[]).unwrap_or_else(|e| panic!("{e}"));
        }
        checked += 1;
    }
    assert!(checked >= 19, "only {checked} files");
}
