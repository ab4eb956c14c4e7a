//! Acceptance against the FedEM authors' own code on the FedEM synthetic benchmark
//! (`scenarios/paper/`): full size, 100 rounds, on the authors' exact data set (numpy seed 12345,
//! labels corrected).

use fedsim::report::Summary;
use fedsim::run::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use std::path::Path;

fn run_paper(file: &str) -> Summary {
    run_paper_with(file, &[])
}

fn run_paper_with(file: &str, overrides: &[String]) -> Summary {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = Scenario::load(&root.join(file), overrides).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        out_dir: tmp.path().to_path_buf(),
        threads: 2,
        progress: false,
    };
    let r = run_scenario(&s, &opts).unwrap();
    eprintln!(
        "{file} {overrides:?}: mean {:.2} bottom decile {:.2} p10 {:.2} ({:.1} s wall)",
        100.0 * r.headline().test.weighted_mean,
        100.0 * r.headline().test.bottom_decile,
        100.0 * r.headline().test.p10,
        r.headline().wall_seconds
    );
    r.headline().clone()
}

#[test]
fn fedavg_matches_the_authors_code() {
    let s = run_paper("scenarios/paper/fedem_synthetic_fedavg.yaml");
    assert_eq!(s.final_round, 100);
    assert_eq!(s.clients, 300);
    let (mean, p10) = (100.0 * s.test.weighted_mean, 100.0 * s.test.p10);
    assert!(
        (mean - 71.7).abs() <= 1.5,
        "FedAvg mean {mean:.2}, authors' code 71.7"
    );
    assert!(
        (p10 - 69.2).abs() <= 1.5,
        "FedAvg p10 {p10:.2}, authors' code 69.2"
    );
}

#[test]
fn local_matches_the_authors_code() {
    let s = run_paper("scenarios/paper/fedem_synthetic_local.yaml");
    let (mean, p10) = (100.0 * s.test.weighted_mean, 100.0 * s.test.p10);
    assert!(
        (mean - 65.3).abs() <= 1.5,
        "Local mean {mean:.2}, authors' code 65.3"
    );
    assert!(
        (p10 - 57.3).abs() <= 1.5,
        "Local p10 {p10:.2}, authors' code 57.3"
    );
}

/// FedEM's outcome depends on where EM starts: on the same data, seeds 1, 2, 3 reach
/// 82.0 / 80.9 / 74.6 mean accuracy. The authors' single run is one draw from that spread, so
/// the comparison is with the mean over seeds 1 to 3.
#[test]
fn fedem_matches_the_authors_code_over_three_seeds() {
    let runs: Vec<Summary> = (1..=3)
        .map(|seed| {
            run_paper_with(
                "scenarios/paper/fedem_synthetic_fedem.yaml",
                &[format!("seed={seed}")],
            )
        })
        .collect();
    let mean =
        |f: &dyn Fn(&Summary) -> f64| 100.0 * runs.iter().map(f).sum::<f64>() / runs.len() as f64;
    let (acc, p10) = (mean(&|s| s.test.weighted_mean), mean(&|s| s.test.p10));
    assert!(
        (acc - 78.6).abs() <= 1.5,
        "FedEM mean over seeds {acc:.2}, authors' code 78.6"
    );
    assert!(
        (p10 - 73.6).abs() <= 1.5,
        "FedEM p10 over seeds {p10:.2}, authors' code 73.6"
    );
    // FedEM's personalisation pays on this benchmark: every seed beats FedAvg's 71.7 / 69.2.
    for s in &runs {
        assert!(
            100.0 * s.test.weighted_mean > 71.7 && 100.0 * s.test.p10 > 69.2,
            "{s:?}"
        );
    }
}
