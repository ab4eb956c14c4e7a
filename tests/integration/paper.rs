//! Acceptance against the FedEM authors' own code on the FedEM synthetic benchmark
//! (`scenarios/paper/`): full size, 100 rounds, on the authors' exact data set (numpy seed 12345,
//! labels corrected).

use fedsim::report::Summary;
use fedsim::run::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use std::path::Path;

fn run_paper(file: &str) -> Summary {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = Scenario::load(&root.join(file), &[]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        out_dir: tmp.path().to_path_buf(),
        threads: 2,
        progress: false,
    };
    let r = run_scenario(&s, &opts).unwrap();
    eprintln!(
        "{file}: mean {:.2} bottom decile {:.2} p10 {:.2} ({:.1} s wall)",
        100.0 * r.summary.test.weighted_mean,
        100.0 * r.summary.test.bottom_decile,
        100.0 * r.summary.test.p10,
        r.summary.wall_seconds
    );
    r.summary
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
