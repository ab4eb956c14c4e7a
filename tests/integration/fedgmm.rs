//! FedGMM (Wu et al. 2023) end to end: its data, novel-sample detection, unseen clients, what
//! it refuses, and the ordering of the paper's synthetic table on a small setting.

use crate::common::{column_names, scenario, SMALL};
use fedsim::results::read_parquet;
use fedsim::results::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// A small FedGMM synthetic setting: 30 clients of 300 rows (80/20), 50 novel rows each.
pub const GMM_DATA: &str =
    "data={kind: fedgmm_synthetic, clients: 30, samples: 300, novel_samples: 50}";

fn gmm(algorithm: &str, rounds: u32, seed: u64) -> Scenario {
    scenario(
        SMALL,
        &[
            GMM_DATA,
            "split={kind: fractions, train: 0.8, val: 0.0, test: 0.2}",
            &format!("algorithm={algorithm}"),
            &format!("rounds={rounds}"),
            &format!("eval_every={rounds}"),
            &format!("seed={seed}"),
            "sampling={fraction: 1.0}",
            "training={local_epochs: 1, batch_size: 128, lr: 0.1}",
        ],
    )
}

fn run(s: &Scenario, dir: &Path) -> DataFrame {
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads: 2,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(s, &opts).expect("run succeeds");
    CsvReadOptions::default()
        .try_into_reader_with_file_path(Some(dir.join("summary.csv")))
        .unwrap()
        .finish()
        .unwrap()
}

/// Σ `value` per (`keys`..., `name`), keyed "k1/k2/name".
fn sums_by(df: &DataFrame, keys: &[&str], name: &str, value: &str) -> BTreeMap<String, f64> {
    let key_cols: Vec<&UInt32Chunked> = keys
        .iter()
        .map(|k| df.column(k).unwrap().u32().unwrap())
        .collect();
    let names = df.column(name).unwrap().str().unwrap();
    let values = df.column(value).unwrap().f64().unwrap();
    let mut out = BTreeMap::new();
    for i in 0..df.height() {
        let mut key: Vec<String> = key_cols
            .iter()
            .map(|c| c.get(i).unwrap().to_string())
            .collect();
        key.push(names.get(i).unwrap().to_string());
        *out.entry(key.join("/")).or_insert(0.0) += values.get(i).unwrap();
    }
    out
}

/// The first row's `col` as a number (`None`: empty; a column of empty cells reads as text).
fn value(summary: &DataFrame, col: &str) -> Option<f64> {
    let c = summary.column(col).unwrap();
    c.cast(&DataType::Float64).unwrap().f64().unwrap().get(0)
}

#[test]
fn novel_rows_are_scored_and_summarised() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = run(&gmm("{name: fedgmm}", 3, 1), tmp.path());
    let auroc = value(&summary, "novelty_auroc").expect("FedGMM scores novelty");
    let ap = value(&summary, "novelty_ap").unwrap();
    let f1 = value(&summary, "novelty_max_f1").unwrap();
    for v in [auroc, ap, f1] {
        assert!((0.0..=1.0).contains(&v), "{v}");
    }
    let novelty = read_parquet(&tmp.path().join("novelty.parquet")).unwrap();
    assert_eq!(
        column_names(&novelty),
        ["run_id", "round", "client", "unseen", "sample", "score", "is_novel"]
    );
    // Every client: its 60 test rows, then its 50 novel rows, at each evaluation (one here).
    assert_eq!(novelty.height(), 30 * (60 + 50));
    let novel = novelty.column("is_novel").unwrap().bool().unwrap();
    assert_eq!(novel.sum(), Some(30 * 50));
    let rounds = novelty.column("round").unwrap().u32().unwrap();
    assert!(rounds.iter().all(|r| r == Some(3)));
    // FedGMM's per-client extras: each share sums to 1.
    let extras = read_parquet(&tmp.path().join("extras.parquet")).unwrap();
    let sums = sums_by(&extras, &["round", "client"], "name", "value");
    let last: Vec<_> = sums.iter().filter(|(k, _)| k.starts_with("3/")).collect();
    assert_eq!(last.len(), 30 * 2);
    for (key, s) in last {
        assert!((s - 1.0).abs() < 1e-9, "{key}: {s}");
    }
    // A baseline scores by its confidence; an algorithm without a score leaves it empty.
    let fedavg = run(&gmm("{name: fedavg}", 3, 1), &tmp.path().join("fedavg"));
    assert!(value(&fedavg, "novelty_auroc").is_some());
    let local = run(&gmm("{name: local}", 3, 1), &tmp.path().join("local"));
    assert!(value(&local, "novelty_auroc").is_some());
    let ditto = run(
        &gmm("{name: ditto, lambda: 0.1}", 3, 1),
        &tmp.path().join("ditto"),
    );
    assert!(value(&ditto, "novelty_auroc").is_none());
    assert!(!tmp.path().join("ditto/novelty.parquet").exists());
    // `label` scores log p(y | x) = log p(x, y) − log p(x): the `joint` score less `input`'s.
    let scores = |score: &str| -> Vec<f64> {
        let dir = tmp.path().join(score);
        run(
            &gmm(&format!("{{name: fedgmm, novelty_score: {score}}}"), 3, 1),
            &dir,
        );
        let novelty = read_parquet(&dir.join("novelty.parquet")).unwrap();
        let col = novelty.column("score").unwrap().f64().unwrap();
        col.into_no_null_iter().collect()
    };
    let (joint, input, label) = (scores("joint"), scores("input"), scores("label"));
    for i in 0..joint.len() {
        assert_eq!(label[i], joint[i] - input[i], "row {i}");
    }
}

/// `evaluation.novelty: max_over_clients` scores each row by the most confident of the
/// evaluated clients' classifiers: FedAvg's clients share one, so its scores are exactly those
/// of `own`; Local's are never below a client's own model's and above it somewhere; with one
/// client evaluated the highest is its own. Setting it changes nothing but the scores, and is
/// written into the resolved scenario.
#[test]
fn novelty_over_clients_takes_the_highest_confidence_of_the_evaluated_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let scored = |algorithm: &str, extra: &[&str], dir: &str| -> (Vec<f64>, DataFrame) {
        let s = gmm(algorithm, 2, 1);
        let s = scenario(&s.resolved_yaml, extra);
        let dir = tmp.path().join(dir);
        let summary = run(&s, &dir);
        let novelty = read_parquet(&dir.join("novelty.parquet")).unwrap();
        let score = novelty.column("score").unwrap().f64().unwrap();
        (score.into_no_null_iter().collect(), summary)
    };
    let over = "evaluation.novelty=max_over_clients";
    let (own, _) = scored("{name: fedavg}", &[], "fedavg");
    let (highest, _) = scored("{name: fedavg}", &[over], "fedavg-over");
    assert_eq!(own.len(), 30 * (60 + 50));
    assert_eq!(own, highest, "FedAvg's clients share one classifier");
    let (own, own_summary) = scored("{name: local}", &[], "local");
    let (highest, summary) = scored("{name: local}", &[over], "local-over");
    assert_eq!(own.len(), highest.len());
    assert!(own.iter().zip(&highest).all(|(o, h)| h >= o));
    assert!(own.iter().zip(&highest).filter(|(o, h)| h > o).count() > own.len() / 2);
    // The accuracies are those of the run scored by each client's own model.
    let acc = |df: &DataFrame| value(df, "test_acc_mean").unwrap();
    assert_eq!(acc(&own_summary), acc(&summary));
    assert_ne!(
        value(&own_summary, "novelty_auroc"),
        value(&summary, "novelty_auroc")
    );
    let one = ["evaluation.clients=1", over];
    let (alone, _) = scored("{name: local}", &one, "local-one");
    let (own_alone, _) = scored("{name: local}", &one[..1], "local-one-own");
    assert_eq!(alone.len(), 60 + 50);
    assert_eq!(
        alone, own_alone,
        "one client evaluated: its own model is the highest"
    );
    let resolved = scenario(&gmm("{name: local}", 2, 1).resolved_yaml, &[over]).resolved_yaml;
    assert!(
        resolved.contains("evaluation:\n  sample: fixed\n  novelty: max_over_clients\n"),
        "{resolved}"
    );
}

/// FedEM's `novelty_score: label` scores a row by log Σ_m π_m p(y | x; θ_m), the label's
/// probability under the client's mixture: never above the mixture's confidence maxᵧ (the
/// default score), equal to it where the mixture predicts the label, below it elsewhere.
/// Training is the same; the setting is written into the resolved scenario, the default not.
#[test]
fn fedem_label_score_is_the_labels_probability_under_the_clients_mixture() {
    let tmp = tempfile::tempdir().unwrap();
    let scored = |algorithm: &str, dir: &str| -> (Vec<f64>, DataFrame) {
        let dir = tmp.path().join(dir);
        let summary = run(&gmm(algorithm, 2, 1), &dir);
        let novelty = read_parquet(&dir.join("novelty.parquet")).unwrap();
        let score = novelty.column("score").unwrap().f64().unwrap();
        (score.into_no_null_iter().collect(), summary)
    };
    let (confidence, c_summary) = scored("{name: fedem, components: 3}", "confidence");
    let (label, l_summary) = scored(
        "{name: fedem, components: 3, novelty_score: label}",
        "label",
    );
    assert_eq!(label.len(), 30 * (60 + 50));
    assert_eq!(label.len(), confidence.len());
    let probability: Vec<f64> = label.iter().map(|l| l.exp()).collect();
    let pairs = || probability.iter().copied().zip(confidence.iter().copied());
    assert!(pairs().all(|(p, c)| p <= c + 1e-6), "above the confidence");
    let predicted = pairs().filter(|(p, c)| (p - c).abs() < 1e-6).count();
    let missed = pairs().filter(|(p, c)| p < &(c - 1e-3)).count();
    assert!(predicted > 0 && missed > 0, "{predicted} {missed}");
    let acc = |df: &DataFrame| value(df, "test_acc_mean").unwrap();
    assert_eq!(acc(&c_summary), acc(&l_summary));
    assert_ne!(
        value(&c_summary, "novelty_auroc"),
        value(&l_summary, "novelty_auroc")
    );
    let resolved = |algorithm: &str| gmm(algorithm, 2, 1).resolved_yaml;
    assert!(resolved("{name: fedem, novelty_score: label}").contains("novelty_score: label"));
    assert!(!resolved("{name: fedem, novelty_score: confidence}").contains("novelty_score"));
}

/// `evaluation.novelty: mean_weights` scores every client's rows with the evaluated training
/// clients' mean mixture weights (the FedGMM authors' FedEM score): the scores move and the
/// training does not; with one client evaluated the mean is its own π, so the scores are
/// those of its own mixture. The setting is written into the resolved scenario.
#[test]
fn fedem_mean_weights_score_with_the_evaluated_clients_mean_mixture() {
    let tmp = tempfile::tempdir().unwrap();
    let fedem = "{name: fedem, components: 3, novelty_score: label}";
    let scored = |extra: &[&str], dir: &str| -> (Vec<f64>, DataFrame) {
        let s = scenario(&gmm(fedem, 2, 1).resolved_yaml, extra);
        let dir = tmp.path().join(dir);
        let summary = run(&s, &dir);
        let novelty = read_parquet(&dir.join("novelty.parquet")).unwrap();
        let score = novelty.column("score").unwrap().f64().unwrap();
        (score.into_no_null_iter().collect(), summary)
    };
    let mean = "evaluation.novelty=mean_weights";
    let (own, own_summary) = scored(&[], "own");
    let (pooled, summary) = scored(&[mean], "mean");
    assert_eq!(own.len(), 30 * (60 + 50));
    assert_eq!(own.len(), pooled.len());
    let moved = own.iter().zip(&pooled).filter(|(o, p)| o != p).count();
    assert!(
        moved > own.len() / 2,
        "{moved} of {} scores moved",
        own.len()
    );
    let acc = |df: &DataFrame| value(df, "test_acc_mean").unwrap();
    assert_eq!(acc(&own_summary), acc(&summary));
    let one = ["evaluation.clients=1", mean];
    let (alone, _) = scored(&one, "mean-one");
    let (own_alone, _) = scored(&one[..1], "own-one");
    assert_eq!(alone.len(), 60 + 50);
    assert_eq!(
        alone, own_alone,
        "one client evaluated: the mean is its own π"
    );
    let resolved = scenario(&gmm(fedem, 2, 1).resolved_yaml, &[mean]).resolved_yaml;
    assert!(
        resolved.contains("evaluation:\n  sample: fixed\n  novelty: mean_weights\n"),
        "{resolved}"
    );
}

#[test]
fn unseen_clients_fit_their_joint_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = gmm("{name: fedgmm, gaussians: 2, classifiers: 3}", 3, 1);
    s = scenario(
        &s.resolved_yaml,
        &["unseen={fraction: 0.2}", "sampling={fraction: 1.0}"],
    );
    run(&s, tmp.path());
    let mixtures = read_parquet(&tmp.path().join("mixtures.parquet")).unwrap();
    let unseen = mixtures.column("unseen").unwrap().bool().unwrap();
    let client = mixtures.column("client").unwrap().u32().unwrap();
    let weight = mixtures.column("weight").unwrap().f64().unwrap();
    let mut per_client: BTreeMap<u32, (f64, usize)> = BTreeMap::new();
    for i in 0..mixtures.height() {
        if unseen.get(i) == Some(true) {
            let e = per_client.entry(client.get(i).unwrap()).or_default();
            e.0 += weight.get(i).unwrap();
            e.1 += 1;
        }
    }
    assert_eq!(per_client.len(), 6, "a fifth of 30 clients");
    for (c, (w, n)) in per_client {
        assert!((w - 1.0).abs() < 1e-9, "client {c}: {w}");
        assert_eq!(n, 2 * 3, "one weight per (Gaussian, classifier) pair");
    }
}

#[test]
fn fedgmm_refuses_stale_updates_and_bad_settings() {
    let bad = |overrides: &[&str]| {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        match Scenario::from_yaml(SMALL, Path::new("g.yaml"), &o) {
            Ok(_) => panic!("{overrides:?} should be refused"),
            Err(e) => e.to_string(),
        }
    };
    let e = bad(&[
        "algorithm={name: fedgmm}",
        "sampling=null",
        "policy={kind: fedbuff, buffer_size: 2, concurrency: 4}",
    ]);
    assert!(
        e.contains("field `policy`") && e.contains("`fedgmm` cannot take") && e.contains("`fedem`"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, epsilon: 0}"]);
    assert!(
        e.contains("field `algorithm.epsilon`: must be a positive number"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, gaussians: 0}"]);
    assert!(
        e.contains("field `algorithm.gaussians`: must be at least 1"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, classifiers: 0}"]);
    assert!(
        e.contains("field `algorithm.classifiers`: must be at least 1"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, init_variance: -1}"]);
    assert!(
        e.contains("field `algorithm.init_variance`: must be a positive number"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, novelty_score: output}"]);
    assert!(e.contains("`joint`") && e.contains("`input`"), "{e}");
    let e = bad(&["algorithm={name: fedem, novelty_score: joint}"]);
    assert!(
        e.contains("algorithm.novelty_score")
            && e.contains("`confidence`")
            && e.contains("`label`"),
        "{e}"
    );
    let e = bad(&["algorithm={name: fedgmm, unseen_em_iterations: 0}"]);
    assert!(e.contains("field `algorithm.unseen_em_iterations`"), "{e}");
    let e = bad(&["algorithm={name: fedgmm, covariance: spherical}"]);
    assert!(
        e.contains("unknown variant `spherical`")
            && e.contains("`full`")
            && e.contains("`diagonal`"),
        "{e}"
    );
    let e = bad(&["data={kind: fedgmm_synthetic, components: 1}"]);
    assert!(
        e.contains("field `data.components`: must be at least 2"),
        "{e}"
    );
    let e = bad(&["data={kind: fedgmm_synthetic, samples: 1}"]);
    assert!(
        e.contains("field `data.samples`: must be at least 2"),
        "{e}"
    );
    let e = bad(&["data={kind: fedgmm_synthetic, alpha: 0}"]);
    assert!(
        e.contains("field `data.alpha`: must be a positive number"),
        "{e}"
    );
    let e = bad(&["data={kind: fedgmm_synthetic, marginal: cauchy}"]);
    assert!(e.contains("`gaussian`, `laplace`"), "{e}");
    let e = bad(&["data={kind: fedgmm_synthetic, clients: 10, gaussian_clients: 20}"]);
    assert!(
        e.contains("field `data.gaussian_clients`: must be at most `clients` (10), got 20"),
        "{e}"
    );
}

/// FedGMM Table 2's ordering, synthetic row (the paper: FedGMM 72.0 > FedEM 65.6 > FedAvg
/// 53.2), on a small setting that runs in seconds; the full recipe is
/// `bash analysis/fedgmm_synthetic.sh`.
#[test]
fn fedgmm_beats_fedem_beats_fedavg_on_its_synthetic_data() {
    let tmp = tempfile::tempdir().unwrap();
    let mean = |alg: &str| {
        let s = run(
            &gmm(alg, 60, 1),
            &tmp.path().join(alg.replace([' ', ':', '{', '}', ','], "")),
        );
        (
            value(&s, "test_acc_mean").unwrap(),
            value(&s, "novelty_auroc").unwrap(),
        )
    };
    let (gmm_acc, gmm_auroc) = mean("{name: fedgmm}");
    let (em_acc, em_auroc) = mean("{name: fedem}");
    let (avg_acc, avg_auroc) = mean("{name: fedavg}");
    assert!(
        gmm_acc > em_acc + 0.02 && em_acc > avg_acc,
        "FedGMM {gmm_acc}, FedEM {em_acc}, FedAvg {avg_acc}"
    );
    assert!(
        gmm_auroc > em_auroc && gmm_auroc > avg_auroc,
        "AUROC: FedGMM {gmm_auroc}, FedEM {em_auroc}, FedAvg {avg_auroc}"
    );
}

#[test]
fn a_projection_file_shapes_the_gaussians() {
    let tmp = tempfile::tempdir().unwrap();
    // 32 input features → 2 dimensions: the sums of the first and of the last 16 features.
    let path = tmp.path().join("p.csv");
    let lines: Vec<&str> = (0..32)
        .map(|i| if i < 16 { "1,0" } else { "0,1" })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let alg = format!("{{name: fedgmm, projection: {}}}", path.display());
    let out = fedsim::results::simulate_scenario(&gmm(&alg, 2, 1), 2, |_| {}).unwrap();
    let models = out
        .records
        .iter()
        .find_map(|r| match r {
            fedsim::records::Record::FinalModels(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    // Three classifiers of the 32 features (33 parameters), then three Gaussians in 2
    // dimensions: mean (2) and covariance (4) each.
    let sizes: Vec<usize> = models.iter().map(Vec::len).collect();
    assert_eq!(sizes, [33, 33, 33, 6, 6, 6]);
    // A matrix of the wrong height is refused when the run starts, naming the field.
    std::fs::write(&path, "1,0\n0,1\n").unwrap();
    let s = gmm(&alg, 2, 1);
    let e = crate::common::run_error(&s, &tmp.path().join("bad"));
    assert!(
        e.contains("field `algorithm.projection`")
            && e.contains("needs one per input feature (32)"),
        "{e}"
    );
    // A missing file is refused by the pre-flight (`fedsim check`, `run`, `sweep`), naming
    // the field; reading the scenario opens no file.
    let o = vec![format!(
        "algorithm={{name: fedgmm, projection: {}/none.csv}}",
        tmp.path().display()
    )];
    let s = Scenario::from_yaml(SMALL, Path::new("g.yaml"), &o).expect("reads without files");
    let e = fedsim::plan::preflight(&s).unwrap_err().to_string();
    assert!(
        e.contains("field `algorithm.projection`") && e.contains("cannot read"),
        "{e}"
    );
    // More principal axes than input features: refused by the pre-flight too, where the
    // data's shape is known before it is built (SMALL's 20 features).
    let o = vec!["algorithm={name: fedgmm, projection: {kind: pca, dims: 21}}".to_string()];
    let s = Scenario::from_yaml(SMALL, Path::new("g.yaml"), &o).unwrap();
    let e = fedsim::plan::preflight(&s).unwrap_err().to_string();
    assert!(
        e.contains("field `algorithm.projection`")
            && e.contains("`dims: 21` is more than the 20 input features; at most 20"),
        "{e}"
    );
}

#[test]
fn describe_gives_the_ceilings_of_accuracy_and_novelty_detection() {
    let s = gmm("{name: fedgmm}", 1, 1);
    let data = s
        .data
        .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed))
        .unwrap();
    let d = fedsim::results::DataDescription::of(&data);
    let bayes = d.bayes_test.expect("the generator knows the truth");
    assert!(bayes.weighted_mean > 0.95, "{bayes:?}");
    let (input, joint) = d.oracle_novelty.expect("novel rows and known densities");
    // The label can only help the true density tell novel rows apart.
    assert!(
        input.auroc > 0.5 && joint.auroc >= input.auroc,
        "{input:?} {joint:?}"
    );
    let text = d.to_string();
    assert!(
        text.contains("Novel-sample detection by the true densities"),
        "{text}"
    );
}
