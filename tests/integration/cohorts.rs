//! Cohort training (`training.cohorts: auto`, the default) against each client alone (`off`):
//! the same results up to float rounding, on every algorithm that trains in cohorts, and
//! bit-identical across thread counts when a cohort is cut into several shards.

use crate::common::{scenario, SMALL};
use crate::real_data::{check_deterministic, femnist_available, FEMNIST_CNN};
use fedsim::records::Record;
use fedsim::results::simulate_scenario;
use std::path::Path;

/// A run's final server models, its evaluation rows (client, split, model, loss) and their
/// accuracies.
pub(crate) struct Outcome {
    pub(crate) models: Vec<Vec<f32>>,
    losses: Vec<(u32, String, f64)>,
    accuracies: Vec<f64>,
}

pub(crate) fn simulate(text: &str, overrides: &[&str], threads: usize) -> Outcome {
    let s = scenario(text, overrides);
    let out = simulate_scenario(&s, threads, |_| {}).expect("run succeeds");
    let mut models = Vec::new();
    let (mut losses, mut accuracies) = (Vec::new(), Vec::new());
    for r in out.records {
        match r {
            Record::FinalModels(m) => models = m,
            Record::Eval(e) => {
                losses.push((
                    e.client,
                    format!(
                        "{:?} {:?} round {} unseen {}",
                        e.split, e.model, e.round, e.unseen
                    ),
                    e.loss,
                ));
                accuracies.push(e.accuracy);
            }
            _ => {}
        }
    }
    Outcome {
        models,
        losses,
        accuracies,
    }
}

/// ‖a − b‖∞ ≤ tol·max(‖a‖∞, ‖b‖∞) for every model, and every loss within `tol` relative.
pub(crate) fn assert_close(what: &str, a: &Outcome, b: &Outcome, tol: f64) {
    assert_eq!(a.models.len(), b.models.len(), "{what}: number of models");
    for (m, (x, y)) in a.models.iter().zip(&b.models).enumerate() {
        assert_eq!(x.len(), y.len());
        let scale = x.iter().chain(y).fold(0f64, |s, v| s.max(v.abs() as f64));
        let diff = x
            .iter()
            .zip(y)
            .fold(0f64, |s, (p, q)| s.max((p - q).abs() as f64));
        assert!(
            diff <= tol * scale,
            "{what}: model {m} differs by {diff:e} (scale {scale})"
        );
    }
    assert_eq!(a.losses.len(), b.losses.len(), "{what}: evaluation rows");
    for (x, y) in a.losses.iter().zip(&b.losses) {
        assert_eq!((x.0, &x.1), (y.0, &y.1), "{what}: rows in the same order");
        let diff = (x.2 - y.2).abs();
        assert!(
            diff <= tol * x.2.abs().max(y.2.abs()).max(1e-3),
            "{what}: client {} {} loss {} vs {}",
            x.0,
            x.1,
            x.2,
            y.2
        );
    }
}

/// Every registered decentralized algorithm that trains in cohorts, as `algorithm={...}` with
/// its example settings. Read from the registry, so that a new algorithm is tested here
/// without a list to edit.
fn peer_cohort_algorithms() -> Vec<String> {
    let found: Vec<String> = fedsim::algorithms::registry::REGISTRY
        .iter()
        .filter(|r| r.declared.capabilities.cohorts && r.declared.capabilities.decentralized)
        .map(|r| format!("algorithm={}", r.example_section()))
        .collect();
    assert!(found.len() >= 2, "{found:?}");
    found
}

/// Every model family of the catalogue that takes flat rows, as `model={...}` with its
/// example settings.
fn flat_models() -> Vec<String> {
    let found: Vec<String> = fedsim::models::MODELS
        .iter()
        .filter(|r| r.declared.inputs == fedsim::models::Inputs::Any && !r.declared.reads_file)
        .map(|r| format!("model={}", r.example_section()))
        .collect();
    assert!(found.len() >= 2, "{found:?}");
    found
}

/// Every algorithm × flat model pair of the catalogues, each with the other settings its
/// example needs (an algorithm whose example names a model of its own, a split of the layers,
/// with that model only), and Clustered FL with tolerances that split its clusters at once
/// (its example never splits in the rounds tested here).
fn cohort_matrix() -> Vec<Vec<String>> {
    let mut pairs = Vec::new();
    let registry = fedsim::algorithms::registry::REGISTRY.iter();
    for r in registry.filter(|r| r.declared.capabilities.cohorts) {
        if r.declared.capabilities.decentralized {
            continue;
        }
        let example = crate::common::algorithm_example(r);
        if example.iter().any(|s| s.starts_with("model=")) {
            pairs.push(example);
        } else {
            pairs.extend(flat_models().into_iter().map(|m| {
                let mut with = example.clone();
                with.push(m);
                with
            }));
        }
    }
    let clustered = "algorithm={name: clustered, tol1: 1000, tol2: 0}";
    pairs.extend(flat_models().into_iter().map(|m| vec![clustered.into(), m]));
    assert!(pairs.len() >= 22, "{pairs:?}");
    pairs
}

fn compare(settings: &[&str], what: &str, tol: f64) {
    compare_on(SMALL, settings, what, tol)
}

/// `compare` on the scenario `text`.
fn compare_on(text: &str, settings: &[&str], what: &str, tol: f64) {
    compare_with(text, settings, "training.cohorts=auto", what, tol)
}

/// Each client alone (`training.cohorts: off`) against the run with `setting` added, on `text`.
fn compare_with(text: &str, settings: &[&str], setting: &str, what: &str, tol: f64) {
    let alone = simulate(text, &[settings, &["training.cohorts=off"]].concat(), 2);
    let cohort = simulate(text, &[settings, &[setting]].concat(), 2);
    assert!(!alone.losses.is_empty(), "{what}: evaluated");
    assert_close(what, &alone, &cohort, tol);
}

#[test]
fn convolutions_in_cohorts_match_training_alone() {
    // `training.cohorts: always` stacks the CNNs on the CPU as a GPU run does (one grouped
    // convolution per layer, each run's dropout masks from its own stream): FedAvg and FedEM
    // with two components on FEMNIST's CNN, FedAvg and pFedMe in lockstep on the small CNN (two
    // dropout layers); one round on 7 writers, half of them sampled: parameters and losses
    // within 1e-5 (relative).
    // Every image model of the catalogue that stacks on FEMNIST's 28×28 images, from its
    // example, with FedAvg.
    if !femnist_available() {
        return;
    }
    let mut pairs: Vec<(String, String)> = image_models_that_stack()
        .into_iter()
        .map(|m| (m, "algorithm={name: fedavg}".to_string()))
        .collect();
    assert!(pairs.len() >= 3, "{pairs:?}");
    pairs.extend([
        (
            "model={kind: cnn}".to_string(),
            "algorithm={name: fedem, components: 2}".to_string(),
        ),
        (
            "model={kind: small_cnn}".to_string(),
            "algorithm={name: pfedme, lambda: 15, inner_steps: 2}".to_string(),
        ),
    ]);
    for (model, alg) in &pairs {
        let settings = [model.as_str(), alg.as_str(), "rounds=1"];
        let what = format!("{model} {alg}");
        compare_with(
            FEMNIST_CNN,
            &settings,
            "training.cohorts=always",
            &what,
            1e-5,
        );
    }
    // `auto` on the CPU trains convolutions alone (stacked, they were slower): the same bits.
    let settings = ["model={kind: small_cnn}", "rounds=1"];
    compare_with(FEMNIST_CNN, &settings, "training.cohorts=auto", "auto", 0.0);
}

/// The image models of the catalogue (example settings) whose layers all stack on FEMNIST's
/// 28×28 single-channel images, as `model={...}`.
fn image_models_that_stack() -> Vec<String> {
    use fedsim::models::{Architecture, InputShape, Inputs, ModelSpec, MODELS};
    let input = InputShape::Image([1, 28, 28]);
    MODELS
        .iter()
        .filter(|r| matches!(r.declared.inputs, Inputs::Images { .. }))
        .filter_map(|r| {
            let spec = ModelSpec::from_yaml(&r.example_section()).expect("examples read");
            let fits = spec.check_input(input).is_ok();
            (fits && Architecture::for_input(&spec, input, 62).stacks())
                .then(|| format!("model={}", r.example_section()))
        })
        .collect()
}

#[test]
fn convolutional_cohorts_are_identical_across_threads() {
    // 16 writers, all training: pFedMe's lockstep cohort in two shards of 8; the small CNN's
    // dropout masks come from each job's stream.
    if femnist_available() {
        check_deterministic(&[
            "algorithm={name: pfedme, lambda: 15, inner_steps: 2}",
            "model={kind: small_cnn}",
            "training.cohorts=always",
            "data.partition={kind: natural, fraction: 0.0045}",
            "sampling.fraction=1.0",
            "rounds=1",
        ]);
    }
}

#[test]
fn cohorts_match_training_alone_after_a_round_on_every_cohort_algorithm() {
    // One round with evaluation: parameters within 1e-5 (relative), linear and MLP models,
    // full and partial participation (SMALL samples half of its 24 clients; clients of 8 to
    // 60 rows, so batches of 16 leave short last batches and runs of different lengths).
    for example in cohort_matrix() {
        for sampling in ["sampling.fraction=0.5", "sampling.fraction=1.0"] {
            let mut settings: Vec<&str> = example.iter().map(String::as_str).collect();
            settings.extend([sampling, "rounds=1", "eval_every=1"]);
            compare(
                &settings,
                &format!("{} {sampling}", example.join(" ")),
                1e-5,
            );
        }
    }
}

/// Whether the algorithm of `setting` (`algorithm={name: …}`) scores its training rows for an
/// E-step (FedEM, FedGMM, D-FedEM), from the registry.
fn scores_rows(setting: &str) -> bool {
    fedsim::algorithms::registry::REGISTRY.iter().any(|r| {
        r.declared.capabilities.scores_rows
            && [",", "}"]
                .iter()
                .any(|end| setting.contains(&format!("{{name: {}{end}", r.name)))
    })
}

#[test]
fn evaluations_in_cohorts_match_each_client_alone() {
    // `training.cohorts: always` stacks evaluations too (as on a GPU), and the E-steps' losses
    // (FedEM's, FedGMM's). On the CPU, `auto` stacks a dense model's training the same way but
    // evaluates (and scores) each client alone, so the two runs train the same bits (but for
    // an E-step's rounding on a model deeper than linear: within 1e-5) and differ in
    // evaluation: every loss within 1e-5 (relative) and every accuracy the same, on every
    // cohort algorithm (pFedMe's two models, FedEM's mixtures, FedGMM's per-row gates,
    // FedAvg+'s and Per-FedAvg's adapted models), held-out clients included, and on the peers
    // of D-PSGD and D-FedEM, over two evaluations.
    let check = |text: &str, settings: &[&str], what: &str| {
        let alone = simulate(text, &[settings, &["training.cohorts=auto"]].concat(), 2);
        let stacked = simulate(text, &[settings, &["training.cohorts=always"]].concat(), 2);
        let scored_in_stacks =
            scores_rows(settings[0]) && !settings.iter().any(|s| s.contains("kind: linear"));
        if !scored_in_stacks {
            assert_eq!(alone.models, stacked.models, "{what}: trained the same");
        }
        assert_close(what, &alone, &stacked, 1e-5);
        assert_eq!(alone.accuracies, stacked.accuracies, "{what}: accuracies");
        alone
    };
    for example in cohort_matrix() {
        let mut settings: Vec<&str> = example.iter().map(String::as_str).collect();
        settings.extend(["rounds=2", "eval_every=1", "unseen={fraction: 0.25}"]);
        let what = example.join(" ");
        let alone = check(SMALL, &settings, &what);
        assert!(
            alone.losses.iter().any(|l| l.1.contains("unseen true")),
            "{what}"
        );
    }
    let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
    for alg in peer_cohort_algorithms() {
        let topology = "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}";
        check(
            &peers,
            &[alg.as_str(), topology, "rounds=2", "eval_every=1"],
            &alg,
        );
    }
}

#[test]
fn stacked_evaluations_are_identical_across_threads() {
    // 200 clients evaluated in cohorts of 200 jobs, cut into 8 shards; a quarter held out
    // (FedEM's and FedGMM's π fitted from losses scored in stacked passes).
    for alg in ["fedem", "pfedme", "fedgmm"] {
        let algorithm = algorithm_setting(alg);
        let settings = [
            "data={kind: fedem_synthetic, clients: 200, dim: 10, components: 3}",
            algorithm.as_str(),
            "model={kind: mlp, hidden: [8]}",
            "training.cohorts=always",
            "unseen={fraction: 0.25}",
            "rounds=1",
        ];
        assert_reruns_identical(alg, &settings, &[1, 2, 4]);
    }
}

#[test]
fn momentum_kept_on_the_device_changes_no_result_whatever_fits() {
    // Stacked as on a GPU, FedEM on 200 clients (half of them a round, in 8 shards) over three
    // rounds: every momentum buffer kept on the device, some of them (the bound met part way,
    // at a point that depends on the threads), or none, with 1, 2 and 4 threads: the same
    // files, saved models included. 600 buffers of 97 floats (233 kB); 1e-4 GiB holds 276.
    let tmp = tempfile::tempdir().unwrap();
    let algorithm = algorithm_setting("fedem");
    let mut dirs = Vec::new();
    for gib in ["16", "0.0001", "0"] {
        let bound = format!("training.device_state_gib={gib}");
        let settings = [
            "data={kind: fedem_synthetic, clients: 200, dim: 10, components: 3}",
            algorithm.as_str(),
            "model={kind: mlp, hidden: [8]}",
            "training.cohorts=always",
            "rounds=3",
            "eval_every=3",
            bound.as_str(),
        ];
        for threads in [1, 2, 4] {
            let dir = tmp.path().join(format!("{gib}-{threads}"));
            crate::common::run_saving(SMALL, &settings, threads, &dir);
            dirs.push(dir);
        }
    }
    for other in &dirs[1..] {
        let differ = fedsim::results::differing_files(&dirs[0], other);
        assert!(differ.is_empty(), "{other:?}: {differ:?} differ");
    }
    let message = crate::common::error(SMALL, &["training.device_state_gib=-1"]);
    assert!(
        message.contains("training.device_state_gib") && message.contains("non-negative"),
        "{message}"
    );
}

#[test]
fn updates_kept_on_the_device_for_the_servers_sum_change_no_result() {
    // Stacked as on a GPU, each client's update stays on the device until the server sums it
    // there (FedAvg's and FedProx's model, FedEM's components, FedGMM's classifiers with
    // their own weights, Ditto's global model, FedNova's and AFL's models with theirs), or is
    // read back where the server needs it on the host (a deadline's late updates, FedBuff's
    // stale ones), or crosses as on the CPU (`device_state_gib=0`): the same files with 1 and
    // 4 threads.
    let tmp = tempfile::tempdir().unwrap();
    let late = "policy={kind: synchronous, deadline_s: 5, late_updates: next_round, \
                max_staleness: 2}";
    let fedbuff = "policy={kind: fedbuff, buffer_size: 3, concurrency: 6}";
    let system = "system={compute: {samples_per_second: {dist: lognormal, median: 5, sigma: 0.8}}}";
    let cases: [(&str, &[&str]); 9] = [
        ("fedavg", &[]),
        ("fednova", &["algorithm.name=fednova"]),
        ("afl", &["algorithm={name: afl, lambda_lr: 0.1}"]),
        ("fedprox", &["algorithm={name: fedprox, mu: 0.1}"]),
        ("fedem", &["algorithm.name=fedem"]),
        ("fedgmm", &["algorithm.name=fedgmm"]),
        ("ditto", &["algorithm={name: ditto, lambda: 0.5}"]),
        ("fedavg-late", &[late, system]),
        ("fedem-fedbuff", &["algorithm.name=fedem", fedbuff, system]),
    ];
    for (name, case) in cases {
        let mut dirs = Vec::new();
        for gib in ["16", "0"] {
            let bound = format!("training.device_state_gib={gib}");
            let mut settings = case.to_vec();
            settings.extend(["training.cohorts=always", "eval_every=1", bound.as_str()]);
            for threads in [1, 4] {
                let dir = tmp.path().join(format!("{name}-{gib}-{threads}"));
                // FedBuff's concurrency says who trains.
                let text = match name.ends_with("fedbuff") {
                    true => SMALL.replace("sampling: {fraction: 0.5}\n", ""),
                    false => SMALL.to_string(),
                };
                crate::common::run_saving(&text, &settings, threads, &dir);
                dirs.push(dir);
            }
        }
        for other in &dirs[1..] {
            let differ = fedsim::results::differing_files(&dirs[0], other);
            assert!(differ.is_empty(), "{name}: {other:?}: {differ:?} differ");
        }
    }
}

#[test]
fn peers_train_in_cohorts_as_they_would_alone() {
    // D-PSGD and D-FedEM, synchronous and asynchronous gossip, two rounds.
    for alg in peer_cohort_algorithms() {
        for gossip in ["synchronous", "asynchronous"] {
            let topology = format!(
                "topology={{graph: {{kind: ring}}, mixing: {{rule: metropolis_hastings}}, \
                 gossip: {gossip}}}"
            );
            let settings = [alg.as_str(), topology.as_str(), "rounds=2", "eval_every=1"];
            // Every peer trains each round: SMALL without its client sampling.
            let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
            compare_on(&peers, &settings, &format!("{alg} {gossip}"), 1e-5);
        }
    }
}

#[test]
fn cohorts_match_training_alone_with_every_solver_setting() {
    // Softmax regression (10 classes), no momentum, momentum reset each round, local steps
    // instead of epochs, a learning-rate schedule, no weight decay: 3 rounds.
    let data = "data={kind: synthetic_ab, clients: 20, dim: 12, classes: 10, max_samples: 300}";
    let cases: [&[&str]; 4] = [
        &[data, "training.momentum=0"],
        &[data, "training.keep_momentum=false"],
        &["training={local_steps: 5, batch_size: 8, lr: 0.05, momentum: 0.5}"],
        &[
            "training.weight_decay=0",
            "training.lr_schedule={kind: multi_step, milestones: [1, 2], gamma: 0.5}",
        ],
    ];
    for case in cases {
        for alg in ["algorithm={name: fedavg}", "algorithm={name: fedem}"] {
            let mut settings = case.to_vec();
            settings.extend([alg, "rounds=3", "eval_every=1"]);
            compare(&settings, &format!("{case:?} {alg}"), 1e-4);
        }
    }
}

/// The algorithm setting for `name` (Ditto needs its λ, Per-FedAvg its α).
fn algorithm_setting(name: &str) -> String {
    match name {
        "ditto" => "algorithm={name: ditto, lambda: 0.5}".to_string(),
        "per_fedavg" => "algorithm={name: per_fedavg, inner_lr: 0.02}".to_string(),
        _ => format!("algorithm.name={name}"),
    }
}

/// Runs `SMALL` with `settings` once per entry of `threads` and asserts that every result file
/// is bit-identical across the runs.
fn assert_reruns_identical(what: &str, settings: &[&str], threads: &[usize]) {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = threads
        .iter()
        .enumerate()
        .map(|(k, &threads)| {
            let dir = tmp.path().join(format!("run-{k}"));
            let opts = fedsim::results::RunOptions {
                out_dir: dir.clone(),
                threads,
                progress: false,
                force: false,
                save_models: false,
                save_client_models: false,
                keep_unfinished: false,
                checkpoint: Default::default(),
            };
            fedsim::results::run_scenario(&scenario(SMALL, settings), &opts).expect("run succeeds");
            dir
        })
        .collect();
    for other in &dirs[1..] {
        let differ = fedsim::results::differing_files(&dirs[0], other);
        assert!(differ.is_empty(), "{what}: {differ:?} differ");
    }
}

#[test]
fn batchwise_cohorts_match_training_alone_over_rounds() {
    // pFedMe, APFL (with its adapted α and local model kept between rounds) and Per-FedAvg
    // (local steps in pairs; epochs with an odd batch count) over three rounds.
    for alg in ["pfedme", "apfl", "per_fedavg"] {
        let algorithm = match alg {
            "apfl" => "algorithm={name: apfl, adaptive: true}".to_string(),
            _ => algorithm_setting(alg),
        };
        for work in [
            "training.local_epochs=1",
            "training={local_steps: 3, batch_size: 8, lr: 0.05}",
        ] {
            let settings = [algorithm.as_str(), work, "rounds=3", "eval_every=1"];
            compare(&settings, &format!("{alg} {work}"), 1e-4);
        }
    }
}

#[test]
fn baselines_keep_their_state_in_cohorts_as_alone_over_rounds() {
    // Stacked as on a GPU, three rounds of every client agree with each client alone:
    // FedNova's runs start each round from zero momentum, where other algorithms' buffers stay
    // on the device between rounds (SMALL keeps momentum 0.9); FedDyn's clients keep their drift λ_k and
    // train around their own anchor θ − λ_k; SCAFFOLD's keep their control variates, and every
    // step's gradient is corrected by c − c_i (both options); MOON's keep their last model, the
    // negative of their contrastive term from their second round on (in the first it equals
    // the positive, and the term has no gradient).
    for algorithm in [
        "algorithm.name=fednova",
        "algorithm={name: feddyn, alpha: 0.1}",
        "algorithm={name: scaffold}",
        "algorithm={name: scaffold, option: 1}",
        "algorithm={name: moon, mu: 5}",
    ] {
        let settings = [
            algorithm,
            "model={kind: mlp, hidden: [8]}",
            "sampling.fraction=1.0",
            "rounds=3",
            "eval_every=1",
        ];
        compare_with(SMALL, &settings, "training.cohorts=always", algorithm, 1e-4);
    }
}

#[test]
fn sharded_cohorts_are_identical_across_threads() {
    // 200 clients, 100 sampled a round: a cohort of 100 jobs in 8 shards (FedEM: 300 runs;
    // FedGMM: its 3 classifiers per client, with the Gaussians fitted inside each shard;
    // Ditto: a global and a personal run per client; pFedMe, APFL and Per-FedAvg: minibatch
    // steps in lockstep, every client of pFedMe training each round).
    for alg in [
        "fedavg",
        "fedem",
        "fedgmm",
        "ditto",
        "pfedme",
        "apfl",
        "per_fedavg",
    ] {
        let algorithm = algorithm_setting(alg);
        let settings = [
            "data={kind: fedem_synthetic, clients: 200, dim: 10, components: 3}",
            algorithm.as_str(),
            "rounds=3",
        ];
        assert_reruns_identical(alg, &settings, &[1, 2, 4]);
    }
}

#[test]
fn fedem_synthetic_full_run_agrees_with_training_alone() {
    // The FedEM authors' setting (T = 300, M = 3, 100 rounds): the summary accuracy of the
    // cohort path is that of training alone, to 0.1 point.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("scenarios/paper/fedem_synthetic_fedem.yaml");
    let run = |cohorts: &str| {
        let s = fedsim::scenario::Scenario::load(&file, &[format!("training.cohorts={cohorts}")])
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let opts = fedsim::results::RunOptions {
            out_dir: tmp.path().to_path_buf(),
            threads: 2,
            progress: false,
            force: false,
            save_models: false,
            save_client_models: false,
            keep_unfinished: false,
            checkpoint: Default::default(),
        };
        let r = fedsim::results::run_scenario(&s, &opts).unwrap();
        let h = r.headline().expect("evaluated").test;
        eprintln!(
            "cohorts {cohorts}: mean {:.3} p10 {:.3} ({:.1} s wall)",
            100.0 * h.weighted_mean,
            100.0 * h.p10,
            r.wall_seconds
        );
        (h.weighted_mean, h.p10)
    };
    let (alone, cohort) = (run("off"), run("auto"));
    assert!(
        (alone.0 - cohort.0).abs() <= 0.001,
        "{alone:?} vs {cohort:?}"
    );
    assert!(
        (alone.1 - cohort.1).abs() <= 0.001,
        "{alone:?} vs {cohort:?}"
    );
}

#[test]
fn a_bad_cohorts_value_names_the_field_and_what_is_allowed() {
    let err = fedsim::scenario::Scenario::from_yaml(
        "rounds: 1\ndata: {kind: fedem_synthetic, clients: 4}\ntraining:\n  cohorts: maybe\n",
        Path::new("c.yaml"),
        &[],
    )
    .unwrap_err()
    .to_string();
    for part in [
        "c.yaml:4",
        "training.cohorts",
        "`auto`",
        "`always`",
        "`off`",
    ] {
        assert!(err.contains(part), "{part} missing in: {err}");
    }
}

#[test]
fn a_device_that_cannot_be_had_names_the_field_and_what_is_allowed() {
    let load = |device: &str| {
        let text = format!(
            "rounds: 1\ndata: {{kind: fedem_synthetic, clients: 4}}\ntraining:\n  device: {device}\nalgorithm: {{name: fedavg}}\n"
        );
        fedsim::scenario::Scenario::from_yaml(&text, Path::new("d.yaml"), &[])
    };
    let err = load("gpu").unwrap_err().to_string();
    for part in [
        "d.yaml:4",
        "training.device",
        "`cpu`",
        "`cuda:N`",
        "`auto`",
        "`gpu`",
    ] {
        assert!(err.contains(part), "{part} missing in: {err}");
    }
    // `auto` takes the CPU where libtorch sees no GPU; `cuda` asks for one.
    let s = load("auto").expect("auto always resolves");
    if tch::Cuda::device_count() == 0 {
        let placement = s.run.training.device.resolve_here().unwrap();
        assert_eq!(placement.devices(), [tch::Device::Cpu]);
        // A scenario validates the same on every machine; the pre-flight of `run` and `check`
        // says that this one has no GPU, pointing into the file.
        let cuda = load("cuda:0").expect("valid on any machine");
        let err = fedsim::plan::preflight(&cuda).unwrap_err().to_string();
        for part in [
            "d.yaml:4",
            "training.device",
            "no CUDA device",
            "FEDSIM_CUDA=1",
        ] {
            assert!(err.contains(part), "{part} missing in: {err}");
        }
    }
    // The default leaves the resolved scenario (and so the run id) as before.
    let cpu = load("cpu").unwrap();
    assert!(
        !cpu.resolved_yaml.contains("device"),
        "{}",
        cpu.resolved_yaml
    );
}

/// On a GPU machine only (CI has none):
/// `FEDSIM_CUDA=1 bash scripts/test.sh --features cuda --test integration -- --ignored gpu_`.
/// Cohorts on CUDA (`training.device: cuda`), their evaluations stacked there too: every
/// result file bit-identical across reruns with 1 and 2 threads (the same GPU), parameters
/// and losses within 1e-4 of the CPU's, and the same bits with nothing kept on the GPU.
#[test]
#[ignore = "needs a CUDA GPU and a `--features cuda` build"]
fn gpu_cohorts_are_reproducible_and_agree_with_the_cpu() {
    for alg in ["fedavg", "fedem", "ditto"] {
        let algorithm = algorithm_setting(alg);
        let settings = [
            "data={kind: fedem_synthetic, clients: 200, dim: 10, components: 3}",
            algorithm.as_str(),
            "rounds=3",
            "eval_every=1",
        ];
        let mut on_gpu = settings.to_vec();
        on_gpu.push("training.device=cuda");
        assert_reruns_identical(&format!("{alg} on CUDA"), &on_gpu, &[1, 2, 2]);
        let cpu = simulate(SMALL, &settings, 2);
        let gpu = simulate(SMALL, &on_gpu, 2);
        assert_close(&format!("{alg}: CUDA against CPU"), &cpu, &gpu, 1e-4);
        // Nothing kept on the GPU (momentum buffers and updates cross each round, the server
        // sums on the host): the same bits as kept there and summed on the GPU.
        let mut crossing = on_gpu.clone();
        crossing.push("training.device_state_gib=0");
        let crossed = simulate(SMALL, &crossing, 2);
        assert_close(
            &format!("{alg}: summed on CUDA and on the host"),
            &gpu,
            &crossed,
            0.0,
        );
    }
}

/// On a GPU machine only, as above: FEMNIST's CNN (FedEM, two components) and the small CNN
/// (pFedMe in lockstep, dropout) in cohorts on CUDA, one grouped convolution per layer: every
/// result file bit-identical with 1 and 2 threads, and within 1e-3 of each client alone on
/// the CPU.
#[test]
#[ignore = "needs a CUDA GPU and a `--features cuda` build"]
fn gpu_convolutional_cohorts_are_reproducible_and_agree_with_the_cpu() {
    assert!(femnist_available(), "FEMNIST is beside the clone");
    for (model, alg) in [
        (
            "model={kind: cnn}",
            "algorithm={name: fedem, components: 2}",
        ),
        (
            "model={kind: small_cnn}",
            "algorithm={name: pfedme, lambda: 15, inner_steps: 2}",
        ),
    ] {
        check_deterministic(&[model, alg, "rounds=1", "training.device=cuda"]);
        let what = format!("{model} {alg}: CUDA against the CPU");
        let settings = [model, alg, "rounds=1"];
        compare_with(FEMNIST_CNN, &settings, "training.device=cuda", &what, 1e-3);
    }
}
