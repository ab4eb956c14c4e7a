//! Acceptance against the papers (`scenarios/paper/`): the FedEM authors' own code on the FedEM
//! synthetic benchmark (full size, 100 rounds, their exact data set: numpy seed 12345, labels
//! corrected), FedEM App. J.4 (one-hot mixtures), D-FedEM (Table 6) and pFedMe's Table 1 on the
//! pFedMe paper's own Synthetic(0.5, 0.5) data (numpy seed 0).

use fedsim::records::Record;
use fedsim::results::Summary;
use fedsim::results::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use std::path::Path;

fn run_paper(file: &str) -> Summary {
    run_paper_with(file, &[])
}

fn run_paper_with(file: &str, overrides: &[String]) -> Summary {
    run_paper_all(file, overrides)
        .into_iter()
        .rfind(|s| !s.unseen)
        .expect("training clients evaluated")
}

/// Every summary of the run: per group of clients and evaluated model.
fn run_paper_all(file: &str, overrides: &[String]) -> Vec<Summary> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = Scenario::load(&root.join(file), overrides).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        out_dir: tmp.path().to_path_buf(),
        threads: 2,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    let r = run_scenario(&s, &opts).unwrap();
    let h = r.headline().expect("paper runs evaluate their clients");
    eprintln!(
        "{file} {overrides:?}: mean {:.2} bottom decile {:.2} p10 {:.2} ({:.1} s wall)",
        100.0 * h.test.weighted_mean,
        100.0 * h.test.bottom_decile,
        100.0 * h.test.p10,
        r.wall_seconds
    );
    r.summaries
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
    // FedEM's personalisation pays on this benchmark: every seed beats FedAvg's 71.7 / 69.2,
    // and none beats the Bayes-optimal classifier (true components and mixture weights) beyond
    // the sampling noise of 1000 test rows per client: a bound a leak of test labels would break.
    let bayes = bayes_ceiling("scenarios/paper/fedem_synthetic_fedem.yaml");
    for s in &runs {
        assert!(
            100.0 * s.test.weighted_mean > 71.7 && 100.0 * s.test.p10 > 69.2,
            "{s:?}"
        );
        assert!(
            s.test.weighted_mean <= bayes.weighted_mean + 0.005 && s.test.p10 <= bayes.p10 + 0.01,
            "{s:?} above the Bayes-optimal {bayes:?}"
        );
    }
}

/// The Bayes-optimal classifier's test accuracy on a scenario's data (`fedsim describe`).
fn bayes_ceiling(file: &str) -> fedsim::results::Fairness {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = Scenario::load(&root.join(file), &[]).unwrap();
    let data = s
        .data
        .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed))
        .unwrap();
    fedsim::results::DataDescription::of(&data)
        .bayes_test
        .expect("the FedEM synthetic data knows its truth")
}

/// FedEM Table 3: clients held out of training fit only their mixture weights (EM, components
/// frozen) and do at least as well as FedAvg's global model on them.
#[test]
fn fedem_unseen_clients_do_at_least_as_well_as_fedavg() {
    let unseen = |file: &str| -> Summary {
        run_paper_all(file, &["unseen={fraction: 0.2}".to_string()])
            .into_iter()
            .find(|s| s.unseen)
            .expect("unseen clients evaluated")
    };
    let fedem = unseen("scenarios/paper/fedem_synthetic_fedem.yaml");
    let fedavg = unseen("scenarios/paper/fedem_synthetic_fedavg.yaml");
    assert_eq!((fedem.clients, fedavg.clients), (60, 60));
    assert_eq!(
        (fedem.model.as_str(), fedavg.model.as_str()),
        ("mixture", "global")
    );
    assert!(
        fedem.test.weighted_mean >= fedavg.test.weighted_mean,
        "unseen clients: FedEM {:.2}, FedAvg {:.2}",
        100.0 * fedem.test.weighted_mean,
        100.0 * fedavg.test.weighted_mean
    );
}

/// FedEM Table 8 protocol: 20% of the clients sampled per round, 1200 rounds (the lr schedule
/// stretched to match: ×0.1 after rounds 600 and 900); FedEM stays at least 4 points above
/// FedAvg. (After only 100 rounds at 20%, FedEM's components, which unsampled clients hold at
/// their previous value, have not separated yet and FedEM equals FedAvg.)
#[test]
fn fedem_with_20_percent_sampling_stays_4_points_above_fedavg() {
    let sampled = [
        "sampling.fraction=0.2",
        "rounds=1200",
        "eval_every=600",
        "training.lr_schedule={kind: multi_step, milestones: [600, 900], gamma: 0.1}",
    ]
    .map(String::from);
    let fedem = run_paper_with("scenarios/paper/fedem_synthetic_fedem.yaml", &sampled);
    let fedavg = run_paper_with("scenarios/paper/fedem_synthetic_fedavg.yaml", &sampled);
    let gap = 100.0 * (fedem.test.weighted_mean - fedavg.test.weighted_mean);
    assert!(gap >= 4.0, "FedEM {fedem:?}\nFedAvg {fedavg:?}");
}

/// pFedMe paper Table 1 (Synthetic(0.5, 0.5), MLR) on the paper's own data (numpy seed 0 in
/// the authors' generator): FedAvg after its 600 rounds is within 1.5 points of the paper's
/// 77.62, and pFedMe's personalized model beats it by at least 3 points (paper: 83.20 vs 77.62).
/// pFedMe's 600 rounds take about 45 s on 2 cores; its personalized model is at its level long
/// before (82.46 after 50 rounds, 82.81 after 600), so the test runs 50 of them: a harder test
/// of the same claim. The full run is in docs/src/validation/pfedme.md.
#[test]
fn pfedme_personalized_model_beats_fedavg_by_three_points() {
    let fedavg = run_paper("scenarios/paper/pfedme_synthetic_fedavg.yaml");
    assert_eq!(fedavg.final_round, 600);
    let fedavg = 100.0 * fedavg.test.weighted_mean;
    assert!(
        (fedavg - 77.62).abs() <= 1.5,
        "FedAvg {fedavg:.2}, paper 77.62"
    );
    let pfedme = run_paper_all(
        "scenarios/paper/pfedme_synthetic_pfedme.yaml",
        &["rounds=50".into()],
    );
    let personalized = pfedme
        .iter()
        .find(|s| s.model == "personalized")
        .expect("pFedMe reports its personalized model");
    assert_eq!(personalized.final_round, 50);
    let personalized = 100.0 * personalized.test.weighted_mean;
    assert!(
        personalized - fedavg >= 3.0,
        "pFedMe personalized {personalized:.2} vs FedAvg {fedavg:.2}"
    );
}

/// Cosine similarity of two vectors.
fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// All orderings of 0..m.
fn permutations(m: usize) -> Vec<Vec<usize>> {
    if m == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in permutations(m - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, m - 1);
            out.push(q);
        }
    }
    out
}

/// How well one FedEM run on the one-hot data of App. J.4 recovered the truth, up to the
/// relabelling of components that matches best.
#[derive(Debug)]
struct Recovery {
    /// Cosine distance between each true component θ_m and the learned one, worst and mean
    /// over components. Per component, because a logistic model's weight vector is recovered
    /// only up to scale: on the stacked Θ matrices, learned norms that differ between
    /// components would count as distance.
    worst_component: f64,
    mean_component: f64,
    /// Cosine distance between the true and learned mixture matrices Π (T × M).
    pi: f64,
    /// Share of clients whose largest mixture weight names their true component.
    cluster_accuracy: f64,
}

/// Runs `scenarios/paper/fedem_one_hot.yaml` (200 rounds, the paper's synthetic protocol) with
/// M components and `seed` (which also draws the data), and scores the recovery.
fn one_hot_recovery(m: usize, seed: u64) -> Recovery {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let overrides = [
        format!("seed={seed}"),
        format!("data.components={m}"),
        format!("algorithm.components={m}"),
    ];
    let s = Scenario::load(&root.join("scenarios/paper/fedem_one_hot.yaml"), &overrides).unwrap();
    let truth = s
        .data
        .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed))
        .unwrap()
        .truth
        .unwrap();
    let out = fedsim::results::simulate_scenario(&s, 2, |_| {}).unwrap();
    let (mut learned, mut mixtures) = (Vec::new(), vec![Vec::new(); truth.weights.len()]);
    for r in out.records {
        match r {
            Record::FinalModels(ms) => learned = ms,
            Record::Mixture(w) if w.round == s.run.rounds => {
                mixtures[w.client as usize] = w.weights
            }
            _ => {}
        }
    }
    assert_eq!(learned.len(), m);
    assert!(mixtures.iter().all(|w| w.len() == m), "every client's π");
    // Each component's weight vector (the bias, last, is not part of θ_m).
    let dim = truth.components[0].len();
    let learned: Vec<Vec<f64>> = learned
        .iter()
        .map(|p| p[..dim].iter().map(|&v| v as f64).collect())
        .collect();
    let true_pi: Vec<f64> = truth.weights.iter().flatten().copied().collect();
    // perm[k]: the learned component that plays true component k.
    let distances = |perm: &[usize]| -> Vec<f64> {
        (0..m)
            .map(|k| 1.0 - cosine(&learned[perm[k]], &truth.components[k]))
            .collect()
    };
    let perm = permutations(m)
        .into_iter()
        .min_by(|a, b| {
            let worst = |p: &[usize]| distances(p).into_iter().fold(0.0, f64::max);
            worst(a).total_cmp(&worst(b))
        })
        .unwrap();
    let distances = distances(&perm);
    let learned_pi: Vec<f64> = mixtures
        .iter()
        .flat_map(|w| perm.iter().map(move |&j| w[j]))
        .collect();
    let right = mixtures
        .iter()
        .zip(&truth.weights)
        .filter(|(w, t)| {
            let top = (0..m).max_by(|&a, &b| w[a].total_cmp(&w[b])).unwrap();
            let true_component = t.iter().position(|&p| p == 1.0).expect("one-hot");
            top == perm[true_component]
        })
        .count();
    let r = Recovery {
        worst_component: distances.iter().copied().fold(0.0, f64::max),
        mean_component: distances.iter().sum::<f64>() / m as f64,
        pi: 1.0 - cosine(&true_pi, &learned_pi),
        cluster_accuracy: right as f64 / mixtures.len() as f64,
    };
    eprintln!("one-hot M = {m}, seed {seed}: {r:?}");
    r
}

/// FedEM App. J.4: when every client draws from a single component, FedEM recovers the true
/// components and mixture weights (cosine distance ≤ 1e-2 between Θ* and Θ̌, here for every
/// component, and ≤ 1e-8 between Π* and Π̌, up to a relabelling), and assigning each client to
/// its largest mixture weight recovers the clusters exactly. The paper's synthetic protocol
/// (200 rounds): after only 100, some starts have not yet separated their components. Seed 1
/// for both M; docs/src/validation/fedem.md reports seeds 1 to 8 (`one_hot_recovery_across_seeds`).
#[test]
fn fedem_recovers_one_hot_components() {
    for m in [2, 3] {
        let r = one_hot_recovery(m, 1);
        assert!(r.worst_component <= 1e-2, "M = {m}: {r:?}");
        assert!(r.pi <= 1e-8, "M = {m}: {r:?}");
        assert_eq!(r.cluster_accuracy, 1.0, "M = {m}: {r:?}");
    }
}

/// App. J.4 on seeds 1 to 8 for M = 2 and 3 (16 minutes on 2 cores), one markdown row per run;
/// holds the mean component distance to 1e-2 (the worst one is printed):
/// `cargo test --release --test integration -- --ignored one_hot_recovery_across_seeds --nocapture`.
#[test]
#[ignore = "16 minutes; the J.4 table of docs/src/validation/fedem.md"]
fn one_hot_recovery_across_seeds() {
    let mut failures = Vec::new();
    for m in [2, 3] {
        for seed in 1..=8 {
            let r = one_hot_recovery(m, seed);
            println!(
                "| {m} | {seed} | {:.4} | {:.4} | {:.1e} | {:.1} |",
                r.mean_component,
                r.worst_component,
                r.pi,
                100.0 * r.cluster_accuracy
            );
            if r.mean_component > 1e-2 || r.pi > 1e-8 || r.cluster_accuracy < 1.0 {
                failures.push((m, seed, r));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// FedEM Table 6 (synthetic): D-FedEM on G(300, 0.5) with FMMC weights ends within 2 points of
/// FedEM (paper: 73.8 vs 74.7) and above FedAvg, on the same data and seed.
#[test]
fn d_fedem_is_within_two_points_of_fedem_and_above_fedavg() {
    let d_fedem = run_paper("scenarios/paper/dfedem_synthetic.yaml");
    let fedem = run_paper("scenarios/paper/fedem_synthetic_fedem.yaml");
    let fedavg = run_paper("scenarios/paper/fedem_synthetic_fedavg.yaml");
    let acc = |s: &Summary| 100.0 * s.test.weighted_mean;
    assert_eq!(d_fedem.final_round, 100);
    assert_eq!(d_fedem.clients, 300);
    assert!(
        (acc(&d_fedem) - acc(&fedem)).abs() <= 2.0,
        "D-FedEM {:.2} vs FedEM {:.2}",
        acc(&d_fedem),
        acc(&fedem)
    );
    assert!(
        acc(&d_fedem) > acc(&fedavg),
        "D-FedEM {:.2} vs FedAvg {:.2}",
        acc(&d_fedem),
        acc(&fedavg)
    );
}
