//! Byzantine clients (`adversary:`) and robust aggregation (`aggregation:`): the malicious
//! clients are a seeded set that `clients.csv` marks; a large sign flip wrecks FedAvg's mean
//! and not the median; a boosted backdoor on MNIST takes FedAvg and not norm bounding, its
//! success measured on every client's triggered test images; every attack and rule (FedEM per
//! component included) gives the same files with 1, 2 and 4 threads; what cannot work is
//! refused with its fields.

use crate::common::{
    bin, error, f64_column, run_saving, stdout_of, summary_value, u64_column, SMALL,
};
use fedsim::results::{differing_files, read_parquet};
use std::path::Path;

fn accuracy(dir: &Path) -> f64 {
    summary_value(dir, "test_acc_mean")
}

/// A quarter of the 24 clients flip their changes four times over: FedAvg's mean then moves
/// the wrong way and loses more than 20 points; the coordinate-wise median keeps within 3
/// points of the run without attackers. `clients.csv` marks ⌊0.25·24⌋ = 6 clients.
#[test]
fn sign_flipping_wrecks_the_mean_and_not_the_median() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], name: &str| {
        let dir = tmp.path().join(name);
        let mut overrides = vec!["rounds=20", "eval_every=20"];
        overrides.extend_from_slice(extra);
        run_saving(SMALL, &overrides, 2, &dir);
        (accuracy(&dir), dir)
    };
    let attack = "adversary={fraction: 0.25, attack: {kind: sign_flip, scale: 4}}";
    let (clean, _) = run(&[], "clean");
    let (mean, dir) = run(&[attack], "mean");
    let (median, _) = run(&[attack, "aggregation={kind: median}"], "median");
    assert!(mean < clean - 0.2, "FedAvg under attack: {mean} vs {clean}");
    assert!(
        median > clean - 0.03,
        "median under attack: {median} vs {clean}"
    );
    let clients = read_parquet(&dir.join("clients.parquet")).unwrap();
    let marked = clients.column("malicious").unwrap().bool().unwrap();
    assert_eq!(marked.sum(), Some(6));
    let plain = read_parquet(&tmp.path().join("clean/clients.parquet")).unwrap();
    assert!(
        plain.column("malicious").is_err(),
        "no column without `adversary:`"
    );
}

/// A tenth of MNIST over 100 clients, a linear model, 30 rounds of 20 clients.
const MNIST_BACKDOOR: &str = "\
name: mnist_backdoor
seed: 1
rounds: 30
eval_every: 30
data: {kind: mnist, partition: {kind: dirichlet, clients: 100, alpha: 0.4}, fraction: 0.1}
split: {kind: fractions, train: 0.6, val: 0.0, test: 0.4}
model: {kind: linear}
algorithm: {name: fedavg}
training: {local_epochs: 1, batch_size: 16, lr: 0.1}
sampling: {fraction: 0.2}
adversary: {fraction: 0.05, attack: {kind: backdoor, target: 0, boost: 10}}
";

/// Five of the 100 clients plant a 4-pixel backdoor (label 0) and boost their changes tenfold
/// (model replacement): under FedAvg more than 80 % of the triggered test images of other
/// digits are read as 0 (93 % when written); bounding every change's norm by 0.3 cuts that
/// below 30 % (6.5 %). `backdoor_success` is the pooled accuracy of the `backdoor` rows of
/// `metrics.parquet`, each client's stamped test images of other labels (about nine in ten
/// of its test images). The norm-bounded run gives the same files with 1, 2 and 4 threads.
#[test]
fn a_boosted_backdoor_takes_fedavg_and_not_norm_bounding() {
    let cache = crate::real_data::fetched("mnist");
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("backdoor.yaml");
    std::fs::write(&scenario, MNIST_BACKDOOR).unwrap();
    let run = |name: &str, threads: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        let mut command = bin();
        command.arg("run").arg(&scenario).arg("--out").arg(&dir);
        command.args(["--quiet", "--threads", threads]);
        extra.iter().for_each(|set| {
            command.args(["--set", set]);
        });
        stdout_of(command.env("FEDSIM_DATA", &cache));
        let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        let mut lines = summary.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        let at = head.iter().position(|h| *h == "backdoor_success").unwrap();
        (row[at].parse::<f64>().unwrap(), dir)
    };
    let (fedavg, dir) = run("fedavg", "2", &[]);
    let bounded = ["aggregation={kind: norm_bounding, bound: 0.3}"];
    let (norm_bounded, _) = run("bounded-1", "1", &bounded);
    assert!(fedavg > 0.8, "FedAvg's backdoor success {fedavg}");
    assert!(norm_bounded < 0.3, "norm bounding's {norm_bounded}");
    for threads in ["2", "4"] {
        let (_, other) = run(&format!("bounded-{threads}"), threads, &bounded);
        let differ = differing_files(&tmp.path().join("bounded-1"), &other);
        assert!(differ.is_empty(), "1 vs {threads} threads: {differ:?}");
    }
    // The success rate is the pooled accuracy on the last evaluation's backdoor rows.
    let metrics = read_parquet(&dir.join("metrics.parquet")).unwrap();
    let split = metrics.column("split").unwrap().str().unwrap();
    let (n, accuracy) = (
        u64_column(&metrics, "n_samples"),
        f64_column(&metrics, "accuracy"),
    );
    let rows = |name: &str| {
        (0..n.len())
            .filter(|&i| split.get(i) == Some(name))
            .collect::<Vec<_>>()
    };
    let (backdoor, test) = (rows("backdoor"), rows("test"));
    assert_eq!(backdoor.len(), 100, "one backdoor row per client");
    let total = |rows: &[usize]| rows.iter().map(|&i| n[i]).sum::<u64>() as f64;
    let pooled = backdoor
        .iter()
        .map(|&i| accuracy[i] * n[i] as f64)
        .sum::<f64>()
        / total(&backdoor);
    assert!((pooled - fedavg).abs() < 1e-12, "{pooled} vs {fedavg}");
    let share = total(&backdoor) / total(&test);
    assert!(
        (0.85..0.95).contains(&share),
        "test images of other digits: {share}"
    );
    let clients = read_parquet(&dir.join("clients.parquet")).unwrap();
    let marked = clients.column("malicious").unwrap().bool().unwrap();
    assert_eq!(marked.sum(), Some(5), "⌊0.05·100⌋ malicious clients");
}

/// Every attack against a rule that resists it, FedEM per component, and local privacy with
/// compression in the pipeline: identical files with 1, 2 and 4 threads.
#[test]
fn byzantine_runs_are_deterministic_across_threads() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, extra) in [
        (
            "gaussian_geometric_median",
            vec![
                "adversary={fraction: 0.2, attack: {kind: gaussian, std: 3}}",
                "aggregation={kind: geometric_median}",
            ],
        ),
        (
            "alie_multi_krum",
            vec![
                "adversary={fraction: 0.2, attack: {kind: alie}}",
                "aggregation={kind: krum, byzantine: 2, multi: 3}",
            ],
        ),
        (
            "ipm_trimmed_mean",
            vec![
                "adversary={fraction: 0.2, attack: {kind: ipm}}",
                "aggregation={kind: trimmed_mean, trim: 0.2}",
            ],
        ),
        (
            "fedem_sign_flip_bulyan",
            vec![
                "algorithm={name: fedem, components: 3}",
                "adversary={fraction: 0.2, attack: {kind: sign_flip}}",
                "aggregation={kind: bulyan, byzantine: 2}",
            ],
        ),
        (
            "label_flip_median",
            vec![
                "adversary={fraction: 0.3, attack: {kind: label_flip}}",
                "aggregation={kind: median}",
            ],
        ),
        (
            "scaled_centered_clipping_local_privacy_compressed",
            vec![
                "adversary={fraction: 0.2, attack: {kind: scaled, factor: 10}}",
                "aggregation={kind: centered_clipping, radius: 0.5, iterations: 3}",
                "privacy={mechanism: local, clip: 1, noise_multiplier: 0.1}",
                "compression={uplink: {kind: qsgd, levels: 7}}",
            ],
        ),
    ] {
        let dir = |t: &str| tmp.path().join(format!("{name}-{t}"));
        for (label, threads) in [("1", 1), ("2", 2), ("4", 4)] {
            let mut overrides = extra.clone();
            overrides.push("rounds=5");
            run_saving(SMALL, &overrides, threads, &dir(label));
        }
        for other in ["2", "4"] {
            let differ = differing_files(&dir("1"), &dir(other));
            assert!(differ.is_empty(), "{name}: 1 vs {other}: {differ:?}");
        }
    }
}

#[test]
fn byzantine_settings_that_cannot_work_are_refused_with_their_fields() {
    let sign = "adversary={fraction: 0.2, attack: {kind: sign_flip}}";
    for (overrides, expected) in [
        (
            vec!["adversary={fraction: 1, attack: {kind: sign_flip}}"],
            "`adversary.fraction`: must be in (0, 1)",
        ),
        (
            vec!["adversary={fraction: 0.2, attack: {kind: gaussian, std: 0}}"],
            "`adversary.attack.std`",
        ),
        (
            vec![sign, "algorithm={name: pfedme}"],
            "`adversary`: attacks through the updates clients send to a server; `pfedme`",
        ),
        (
            vec!["aggregation={kind: median}", "algorithm={name: clustered}"],
            "`aggregation`: combines the updates clients send to a server",
        ),
        (
            vec!["aggregation={kind: trimmed_mean, trim: 0.6}"],
            "`aggregation.trim`: must be in [0, 0.5)",
        ),
        (
            // A field of another rule is refused, not ignored.
            vec!["aggregation={kind: median, trim: 0.1}"],
            "`aggregation`: unknown field `trim`, there are no fields",
        ),
        (
            vec!["aggregation={kind: medain}"],
            "`aggregation.kind`: unknown variant `medain`, expected one of `median`",
        ),
        (
            // 24 clients, half a round: 12 < 2·5 + 3.
            vec!["aggregation={kind: krum, byzantine: 5}"],
            "Krum with byzantine: 5 needs 2f + 3 updates a round (and at least multi: 1), and \
             `sampling` draws 12 a round",
        ),
        (
            vec!["aggregation={kind: bulyan, byzantine: 3}"],
            "Bulyan with byzantine: 3 needs 4f + 3 updates a round",
        ),
        (
            vec![
                "aggregation={kind: median}",
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
                "sampling={}",
            ],
            "a robust rule combines one synchronous round's fresh updates",
        ),
        (
            vec!["aggregation={kind: median}", "secure_aggregation={}"],
            "secure aggregation shows the server only their sum",
        ),
        (
            vec![
                "aggregation={kind: median}",
                "privacy={clip: 1, noise_multiplier: 1}",
            ],
            "server-side privacy noise is sized for a sum of clipped updates",
        ),
        (
            vec![
                "adversary={fraction: 0.2, attack: {kind: alie}}",
                "secure_aggregation={}",
            ],
            "`adversary.attack`: `alie` and `ipm` are crafted from the honest updates",
        ),
    ] {
        let e = error(SMALL, &overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
    // Label flipping poisons rows held in memory; rows made on demand are refused when the
    // run starts.
    let lazy = crate::common::scenario(
        SMALL,
        &[
            "data.on_demand=true",
            "adversary={fraction: 0.2, attack: {kind: label_flip}}",
        ],
    );
    let Err(e) = fedsim::results::simulate_scenario(&lazy, 1, |_| {}) else {
        panic!("label flipping on rows made on demand ran");
    };
    let e = fedsim::error_chain(&e);
    assert!(
        e.contains("adversary.attack") && e.contains("`label_flip` poisons"),
        "{e}"
    );
    // When the run starts: a backdoor on data that are not images, and a fraction of the 24
    // clients that is no client.
    for (overrides, expected) in [
        (
            "adversary={fraction: 0.2, attack: {kind: backdoor, target: 0}}",
            "`adversary.attack`: `backdoor` stamps a trigger on images, and this data set's \
             rows are not images",
        ),
        (
            "adversary={fraction: 0.01, attack: {kind: sign_flip}}",
            "`adversary.fraction`: 0.01 of this run's participants is no client",
        ),
    ] {
        let s = crate::common::scenario(SMALL, &[overrides]);
        let Err(e) = fedsim::results::simulate_scenario(&s, 1, |_| {}) else {
            panic!("{overrides} ran");
        };
        let e = fedsim::error_chain(&e);
        assert!(e.contains(expected), "{overrides}: {e}");
    }
}
