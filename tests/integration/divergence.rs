//! Diverged runs: NaN or infinite numbers are noticed when they first appear, the run stops
//! there (or runs on), the results so far say so, and the command line exits with code 4.

use crate::common::{bin, scenario, SMALL};
use fedsim::records::{DivergenceRecord, DivergenceStage, Record};
use fedsim::results::{differing_files, read_parquet};
use fedsim::results::{run_scenario, simulate_scenario, RunOptions};

/// What `summary.csv` says of the divergence: (diverged, round, stage, client) per row.
fn summary_divergence(dir: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let cols = [
        at("diverged"),
        at("diverged_round"),
        at("diverged_stage"),
        at("diverged_client"),
    ];
    lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            cols.map(|c| v[c]).join(" ")
        })
        .collect()
}

#[test]
fn a_huge_learning_rate_stops_the_run_with_exit_code_4() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, SMALL).unwrap();
    let out_dir = tmp.path().join("out");
    let out = bin()
        .args(["run", file.to_str().unwrap(), "--quiet", "--set"])
        .args(["training.lr=1e9", "--out", out_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.starts_with("warning: the run diverged at round 1, client ")
            && stderr.contains(
                ": local training produced NaN or infinite parameters; it stopped there \
                 (on_divergence: stop); summary.csv says diverged = true"
            )
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    let rows = summary_divergence(&out_dir);
    assert_eq!(rows.len(), 1, "stopped before any evaluation: one row");
    assert!(rows[0].starts_with("true 1 training "), "{rows:?}");
    // Nothing after round 1 ran: no round was aggregated.
    assert_eq!(
        read_parquet(&out_dir.join("rounds.parquet"))
            .unwrap()
            .height(),
        0
    );
}

#[test]
fn on_divergence_continue_runs_every_round_and_still_says_when() {
    let s = scenario(SMALL, &["training.lr=1e9", "on_divergence=continue"]);
    let tmp = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        out_dir: tmp.path().join("out"),
        threads: 2,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    let report = run_scenario(&s, &opts).unwrap();
    let d = report.divergence.clone().expect("diverged");
    assert_eq!((d.round, d.stage), (1, DivergenceStage::Training));
    let h = report.headline().unwrap();
    assert_eq!(h.final_round, 4, "ran on to the last round");
    assert!(h.test_loss_mean.is_nan());
    let rows = summary_divergence(&opts.out_dir);
    assert!(
        rows.iter().all(|r| r.starts_with("true 1 training ")),
        "{rows:?}"
    );
    // The scenario states the non-default setting, so its run id differs from the default's.
    assert!(s.resolved_yaml.contains("on_divergence: continue"));
}

/// Every server algorithm, with small settings.
const ALGORITHMS: [&str; 11] = [
    "{name: fedavg}",
    "{name: fedprox, mu: 0.1}",
    "{name: fedavg_plus, finetune_epochs: 1}",
    "{name: local}",
    "{name: fedem, components: 2}",
    "{name: pfedme, lambda: 1.0, inner_steps: 5, personal_lr: 0.1}",
    "{name: clustered, tol1: 0.4, tol2: 1.6}",
    "{name: apfl, alpha: 0.5}",
    "{name: per_fedavg, inner_lr: 0.1}",
    "{name: ditto, lambda: 1.0}",
    "{name: fedgmm, gaussians: 2, classifiers: 2}",
];

#[test]
fn every_algorithm_notices_divergence_in_the_first_round() {
    for alg in ALGORITHMS {
        let s = scenario(SMALL, &["training.lr=1e9", &format!("algorithm={alg}")]);
        let out = simulate_scenario(&s, 2, |_| {}).unwrap();
        let d = DivergenceRecord::first(&out.records)
            .unwrap_or_else(|| panic!("{alg}: divergence not noticed"));
        assert_eq!(d.round, 1, "{alg}: {d:?}");
        // Stopped: nothing is recorded after the divergence but what the same event made.
        let rounds = out
            .records
            .iter()
            .filter(|r| matches!(r, Record::Round(_)))
            .count();
        assert!(rounds <= 1, "{alg}: {rounds} rounds after diverging");
    }
}

#[test]
fn every_algorithm_runs_on_after_diverging() {
    // NaN models must evaluate to NaN losses, not fail a job (FedEM's binary mixture did).
    for alg in ALGORITHMS {
        let s = scenario(
            SMALL,
            &[
                "training.lr=1e9",
                "on_divergence=continue",
                &format!("algorithm={alg}"),
            ],
        );
        let out = simulate_scenario(&s, 2, |_| {}).unwrap_or_else(|e| {
            panic!("{alg}: {}", fedsim::error_chain(&e));
        });
        let rounds = out
            .records
            .iter()
            .filter(|r| matches!(r, Record::Round(_)))
            .count();
        assert_eq!(rounds, 4, "{alg}: ran every round");
        assert!(DivergenceRecord::first(&out.records).is_some(), "{alg}");
    }
}

#[test]
fn a_diverging_decentralized_run_stops_too() {
    let s = scenario(
        SMALL,
        &[
            "training.lr=1e9",
            "sampling=null",
            "algorithm={name: d_psgd}",
            "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}",
        ],
    );
    let out = simulate_scenario(&s, 2, |_| {}).unwrap();
    let d = DivergenceRecord::first(&out.records).expect("diverged");
    assert_eq!((d.round, d.stage), (1, DivergenceStage::Training));
    assert!(!out.records.iter().any(|r| matches!(r, Record::Gossip(_))));
}

#[test]
fn where_a_run_diverges_does_not_depend_on_threads() {
    // Diverges in round 3, after the evaluation of round 2.
    let s = scenario(SMALL, &["training.lr=1e4"]);
    let tmp = tempfile::tempdir().unwrap();
    let run = |threads: usize| {
        let opts = RunOptions {
            out_dir: tmp.path().join(format!("t{threads}")),
            threads,
            progress: false,
            force: false,
            save_models: false,
            save_client_models: false,
            keep_unfinished: false,
            checkpoint: Default::default(),
        };
        run_scenario(&s, &opts).unwrap();
        opts.out_dir
    };
    let (one, four) = (run(1), run(4));
    assert!(differing_files(&one, &four).is_empty());
    let rows = summary_divergence(&one);
    assert!(rows[0].starts_with("true 3 training "), "{rows:?}");
    assert_eq!(rows, summary_divergence(&four));
}

#[test]
fn a_sweep_records_diverged_cells_and_goes_on_and_the_report_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("small.yaml"), SMALL).unwrap();
    let file = tmp.path().join("sweep.yaml");
    std::fs::write(
        &file,
        "name: lr\nbase: small.yaml\ngrid:\n  training.lr: [0.1, 1.0e9]\nseeds: [1, 2]\n",
    )
    .unwrap();
    let out_dir = tmp.path().join("out");
    let out = bin()
        .args(["sweep", file.to_str().unwrap(), "--quiet", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("4 cells, 0 already finished, 4 run (2 diverged), 0 failed"),
        "{stdout}"
    );
    assert_eq!(
        stderr
            .matches("warning: cell training.lr=1000000000.0, seed=")
            .count(),
        2,
        "{stderr}"
    );
    let report = bin().arg("report").arg(&out_dir).output().unwrap();
    let md = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(md.contains("| seeds | diverged |"), "{md}");
    assert!(
        md.contains("| 1000000000.0 | none | training | 2 | 2 | diverged |"),
        "{md}"
    );
    assert!(md.contains("| 0.1 | global | training | 2 | 0 | "), "{md}");
}
