//! The baselines' defining claims on real runs: on Synthetic(1, 1) with 10 % participation and
//! 20 local steps (`scenarios/studies/drift_synthetic.yaml`), SCAFFOLD and FedDyn reach FedAvg's
//! final training loss in fewer rounds than FedAvg needs. AFL reports its mixture weights. The
//! fixed points on quadratics are worked by hand in each algorithm's unit tests.

use crate::common::{f64_column, u64_column};
use fedsim::results::read_parquet;
use std::collections::BTreeMap;
use std::path::Path;

/// The weighted mean training loss of the participants at each evaluated round of the run of
/// `scenario` with `algorithm` (written into `dir`).
fn training_losses(scenario: &Path, algorithm: &str, dir: &Path) -> BTreeMap<u32, f64> {
    let text = std::fs::read_to_string(scenario).unwrap();
    crate::common::run_saving(&text, &[&format!("algorithm={algorithm}")], 2, dir);
    let metrics = read_parquet(&dir.join("metrics.parquet")).unwrap();
    let split = metrics.column("split").unwrap().str().unwrap();
    let (round, n) = (
        u64_column(&metrics, "round"),
        u64_column(&metrics, "n_samples"),
    );
    let loss = f64_column(&metrics, "loss");
    let mut sums: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for i in (0..n.len()).filter(|&i| split.get(i) == Some("train")) {
        let sum = sums.entry(round[i] as u32).or_default();
        sum.0 += loss[i] * n[i] as f64;
        sum.1 += n[i] as f64;
    }
    sums.into_iter().map(|(r, (l, n))| (r, l / n)).collect()
}

/// FedAvg's final training loss after 200 rounds (0.625 when written) is reached by SCAFFOLD
/// (round 140) and FedDyn with α = 0.01 (round 140) by round 160 at the latest.
#[test]
fn scaffold_and_feddyn_reach_fedavgs_final_training_loss_in_fewer_rounds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenario = root.join("scenarios/studies/drift_synthetic.yaml");
    let tmp = tempfile::tempdir().unwrap();
    let fedavg = training_losses(&scenario, "{name: fedavg}", &tmp.path().join("fedavg"));
    let (&last, &target) = fedavg.last_key_value().unwrap();
    assert_eq!(last, 200);
    for algorithm in ["{name: scaffold}", "{name: feddyn, alpha: 0.01}"] {
        let name = algorithm.replace(|c: char| !c.is_alphanumeric(), "");
        let losses = training_losses(&scenario, algorithm, &tmp.path().join(name));
        let reached = losses.iter().find(|(_, &l)| l <= target).map(|(&r, _)| r);
        assert!(
            reached.is_some_and(|r| r <= 160),
            "{algorithm} reached FedAvg's final {target:.3} at {reached:?}: {losses:?}"
        );
    }
}

/// AFL's mixture weights, as every evaluated client reports its own (`afl_weight` in
/// `extras.parquet`): on the simplex at every evaluation (each in [0, 1], summing to 1 over
/// the 24 clients), uniform (1/24) before any client weighed more, and not uniform after.
#[test]
fn afl_reports_mixture_weights_on_the_simplex() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("afl");
    let overrides = ["algorithm={name: afl, lambda_lr: 0.1}", "eval_every=1"];
    crate::common::run_saving(crate::common::SMALL, &overrides, 2, &dir);
    let extras = read_parquet(&dir.join("extras.parquet")).unwrap();
    let name = extras.column("name").unwrap().str().unwrap();
    let (round, value) = (u64_column(&extras, "round"), f64_column(&extras, "value"));
    let mut by_round: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for i in (0..value.len()).filter(|&i| name.get(i) == Some("afl_weight")) {
        by_round.entry(round[i]).or_default().push(value[i]);
    }
    assert_eq!(by_round.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
    for (round, weights) in &by_round {
        assert_eq!(weights.len(), 24, "round {round}");
        assert!(
            weights.iter().all(|w| (0.0..=1.0).contains(w)),
            "{weights:?}"
        );
        let sum: f64 = weights.iter().sum();
        assert!((sum - 1.0).abs() < 1e-9, "round {round}: {sum}");
        let uniform = weights.iter().all(|w| (w - 1.0 / 24.0).abs() < 1e-12);
        assert!(
            !uniform,
            "round {round}: the round's clients weigh more: {weights:?}"
        );
    }
}
