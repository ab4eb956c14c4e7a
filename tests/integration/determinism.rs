//! Same scenario and seed ⇒ identical result files, whatever the number of trainer threads.

use crate::common::{algorithm_example, column_names, scenario, SMALL};
use fedsim::results::{run_scenario, RunOptions};
use std::path::Path;

fn run(text: &str, overrides: &[&str], threads: usize, dir: &Path) -> Vec<u8> {
    let s = scenario(text, overrides);
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(&s, &opts).expect("run succeeds");
    std::fs::read(dir.join("metrics.parquet")).expect("metrics.parquet written")
}

fn check_algorithm(name: &str) {
    check_algorithm_with(name, &[]);
}

fn check_algorithm_with(name: &str, settings: &[&str]) {
    let overrides: Vec<String> = std::iter::once(format!("algorithm.name={name}"))
        .chain(settings.iter().map(|s| s.to_string()))
        .collect();
    check_overrides(SMALL, name, &overrides);
}

/// `text` with `overrides`: identical result files with 1, 2 and 4 threads and on a rerun, and
/// other results with another seed.
fn check_overrides(text: &str, name: &str, overrides: &[String]) {
    let tmp = tempfile::tempdir().unwrap();
    let with = |extra: &[&'static str]| -> Vec<String> {
        overrides
            .iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let base = with(&[]);
    let base: Vec<&str> = base.iter().map(String::as_str).collect();
    let one = run(text, &base, 1, &tmp.path().join("a"));
    let again = run(text, &base, 1, &tmp.path().join("b"));
    let two = run(text, &base, 2, &tmp.path().join("c"));
    let four = run(text, &base, 4, &tmp.path().join("d"));
    assert_eq!(one, again, "{name}: two runs with the same seed differ");
    assert_eq!(one, two, "{name}: 1 and 2 threads differ");
    assert_eq!(one, four, "{name}: 1 and 4 threads differ");
    for other in ["b", "c", "d"] {
        let differ =
            fedsim::results::differing_files(&tmp.path().join("a"), &tmp.path().join(other));
        assert!(
            differ.is_empty(),
            "{name}: {differ:?} differ (a vs {other})"
        );
    }
    let reseeded = with(&["seed=8"]);
    let reseeded: Vec<&str> = reseeded.iter().map(String::as_str).collect();
    let other_seed = run(text, &reseeded, 2, &tmp.path().join("e"));
    // Which clients are sampled follows the seed, whatever else the algorithm draws; where
    // the run evaluates models (every algorithm but `noop`), their metrics follow it too.
    let differ = fedsim::results::differing_files(&tmp.path().join("a"), &tmp.path().join("e"));
    assert!(
        !differ.is_empty(),
        "{name}: a different seed gave the same results"
    );
    let metrics = fedsim::results::read_parquet(&tmp.path().join("a/metrics.parquet")).unwrap();
    if metrics.height() > 0 {
        assert_ne!(
            one, other_seed,
            "{name}: a different seed gave the same metrics"
        );
    }
}

/// Every data set of the catalogue that generates its rows, on 12 clients (each such set
/// has a `clients` field), with FedAvg: a new generator is checked without editing a list.
#[test]
fn every_generated_data_set_is_deterministic_across_threads_and_reruns() {
    for r in fedsim::data::DATASETS {
        if r.declared.source != fedsim::data::Source::Generated {
            continue;
        }
        let overrides = vec![format!("data={{kind: {}, clients: 12}}", r.name)];
        check_overrides(SMALL, r.name, &overrides);
    }
}

/// Every algorithm of the registry, with the settings it declares as its example (on peers
/// over a ring where it is decentralized): a new algorithm is checked without editing a list.
#[test]
fn every_registered_algorithm_is_deterministic_across_threads_and_reruns() {
    // Every peer trains each round: SMALL's sampling goes for decentralized algorithms.
    let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
    for r in fedsim::algorithms::registry::REGISTRY {
        let mut overrides = algorithm_example(r);
        let text = if r.declared.capabilities.decentralized {
            overrides
                .push("topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}".into());
            peers.as_str()
        } else {
            SMALL
        };
        check_overrides(text, r.name, &overrides);
    }
}

/// Every server optimizer of the catalogue with FedAvg (its example settings), and Adam with
/// every algorithm that declares global vectors a server optimizer steps, under synchronous
/// rounds and FedBuff's stale updates: a new optimizer or algorithm is checked without
/// editing a list.
#[test]
fn every_server_optimizer_is_deterministic_across_threads_and_reruns() {
    for r in fedsim::server_optimizer::SERVER_OPTIMIZERS {
        let optimizer = format!("server_optimizer={}", r.example_section());
        check_overrides(SMALL, r.name, &[optimizer]);
    }
    let adam = "server_optimizer={kind: adam, lr: 0.01}".to_string();
    for r in fedsim::algorithms::registry::REGISTRY {
        if r.declared.capabilities.server_optimizer {
            let mut overrides = algorithm_example(r);
            overrides.push(adam.clone());
            check_overrides(SMALL, r.name, &overrides);
        }
    }
    let fedbuff = "policy={kind: fedbuff, buffer_size: 2, concurrency: 4}".to_string();
    let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
    check_overrides(&peers, "fedbuff", &[fedbuff, adam]);
}

#[test]
fn fedgmm_is_deterministic_across_threads_and_reruns() {
    // On its own data (with novel rows, so novelty.parquet is compared too), and on FedEM's.
    check_algorithm_with(
        "fedgmm",
        &["data={kind: fedgmm_synthetic, clients: 12, dim: 4, samples: 80, novel_samples: 10}"],
    );
    check_algorithm_with("fedgmm", &["algorithm.covariance=diagonal"]);
    // FedEM scoring by its label's likelihood under each client's mixture.
    check_algorithm_with(
        "fedem",
        &[
            "data={kind: fedgmm_synthetic, clients: 12, dim: 4, samples: 80, novel_samples: 10}",
            "algorithm.novelty_score=label",
        ],
    );
}

#[test]
fn novelty_over_clients_is_deterministic_across_threads_and_reruns() {
    // Clustered FL's clients score with their clusters' models; every evaluated client's
    // classifier is gathered by the server before any client's rows are scored.
    for algorithm in ["local", "clustered"] {
        check_algorithm_with(
            algorithm,
            &[
                "data={kind: fedgmm_synthetic, clients: 12, dim: 4, samples: 80, novel_samples: 10}",
                "evaluation.novelty=max_over_clients",
            ],
        );
    }
    // FedEM's rows scored with the training clients' mean π, gathered by the server; a held-out
    // client's π (fitted at each evaluation) is not counted.
    check_algorithm_with(
        "fedem",
        &[
            "data={kind: fedgmm_synthetic, clients: 12, dim: 4, samples: 80, novel_samples: 10}",
            "algorithm.novelty_score=label",
            "evaluation.novelty=mean_weights",
            "unseen={fraction: 0.25}",
        ],
    );
}

#[test]
fn fedem_writes_every_clients_mixture_weights() {
    let tmp = tempfile::tempdir().unwrap();
    run(
        SMALL,
        &[
            "algorithm.name=fedem",
            "algorithm.components=3",
            "unseen={fraction: 0.25}",
        ],
        2,
        tmp.path(),
    );
    let df = fedsim::results::read_parquet(&tmp.path().join("mixtures.parquet")).unwrap();
    assert_eq!(
        column_names(&df),
        ["run_id", "round", "client", "unseen", "component", "weight"]
    );
    // Rounds 2 and 4 evaluated, 24 clients (6 held out, with the π they fitted), 3 components;
    // each client's weights sum to 1.
    assert_eq!(df.height(), 2 * 24 * 3);
    let column = |c: &str| -> Vec<u32> {
        df.column(c)
            .unwrap()
            .u32()
            .unwrap()
            .into_no_null_iter()
            .collect()
    };
    let (rounds, clients) = (column("round"), column("client"));
    let unseen = df.column("unseen").unwrap().bool().unwrap().sum().unwrap();
    assert_eq!(unseen, 2 * 6 * 3);
    let weights: Vec<f64> = df
        .column("weight")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    let mut sums = std::collections::BTreeMap::new();
    for i in 0..df.height() {
        *sums.entry((rounds[i], clients[i])).or_insert(0.0) += weights[i];
    }
    assert_eq!(sums.len(), 2 * 24);
    for w in sums.values() {
        assert!((w - 1.0).abs() < 1e-9, "weights sum to {w}");
    }
    // Algorithms without mixtures write no such file.
    let plain = tempfile::tempdir().unwrap();
    run(SMALL, &[], 2, plain.path());
    assert!(!plain.path().join("mixtures.parquet").exists());
}

#[test]
fn fedavg_plus_is_deterministic_and_evaluates_fine_tuned_models() {
    check_algorithm("fedavg_plus");
    let tmp = tempfile::tempdir().unwrap();
    run(SMALL, &["algorithm.name=fedavg_plus"], 2, tmp.path());
    let df = fedsim::results::read_parquet(&tmp.path().join("metrics.parquet")).unwrap();
    let models = df.column("model").unwrap().str().unwrap();
    assert!(models.iter().all(|m| m == Some("personalized")));
}

fn metrics(settings: &[&str]) -> polars::prelude::DataFrame {
    let tmp = tempfile::tempdir().unwrap();
    run(SMALL, settings, 2, tmp.path());
    fedsim::results::read_parquet(&tmp.path().join("metrics.parquet")).unwrap()
}

fn distinct_strings(df: &polars::prelude::DataFrame, col: &str) -> Vec<String> {
    let mut v: Vec<String> = df
        .column(col)
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(|m| m.unwrap().to_string())
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn pfedme_is_deterministic_and_reports_personalized_and_global_models() {
    let settings = ["algorithm.lambda=5", "algorithm.personal_lr=0.05"];
    check_algorithm_with("pfedme", &settings);
    let df = metrics(&["algorithm.name=pfedme", settings[0], settings[1]]);
    assert_eq!(distinct_strings(&df, "model"), ["global", "personalized"]);
    // Algorithm 1: every client trains each round, only the sampled half is aggregated.
    let sampled = df.column("sampled").unwrap().bool().unwrap().sum().unwrap();
    assert_eq!(sampled as usize, df.height());
}

#[test]
fn pfedme_on_synthetic_alpha_beta_is_deterministic() {
    let data = "data={kind: synthetic_ab, clients: 6, max_samples: 300}";
    let training = "training={local_steps: 3, batch_size: 16, lr: 0.05}";
    check_algorithm_with("pfedme", &[data, training]);
}

#[test]
fn clustered_fl_is_deterministic_and_reports_clusters() {
    // tol1 huge and tol2 zero: every cluster with more than two reporting clients splits.
    let settings = ["algorithm.tol1=1000", "algorithm.tol2=0"];
    check_algorithm_with("clustered", &settings);
    let df = metrics(&["algorithm.name=clustered", settings[0], settings[1]]);
    assert_eq!(distinct_strings(&df, "model"), ["cluster"]);
    let clusters = df.column("cluster").unwrap().u32().unwrap();
    assert_eq!(clusters.null_count(), 0);
    assert!(
        clusters.iter().flatten().max().unwrap() >= 2,
        "no split happened"
    );
    // Default tolerances on this small problem: one cluster, id 0.
    let df = metrics(&["algorithm.name=clustered"]);
    let clusters = df.column("cluster").unwrap().u32().unwrap();
    assert!(clusters.iter().all(|c| c == Some(0)));
}

#[test]
fn apfl_is_deterministic_across_threads_and_reruns() {
    check_algorithm_with("apfl", &["algorithm.adaptive=true"]);
}

#[test]
fn per_fedavg_is_deterministic_across_threads_and_reruns() {
    check_algorithm_with("per_fedavg", &["algorithm.inner_lr=0.05"]);
}

#[test]
fn fedem_with_the_authors_float32_e_step_is_deterministic_across_threads_and_reruns() {
    check_algorithm_with("fedem", &["algorithm.e_step=float32"]);
}

#[test]
fn scaffold_with_option_one_is_deterministic_across_threads_and_reruns() {
    check_algorithm_with("scaffold", &["algorithm.option=1"]);
}

#[test]
fn ditto_is_deterministic_across_threads_and_reruns() {
    check_algorithm_with("ditto", &["algorithm.lambda=0.5"]);
}

#[test]
fn results_have_the_documented_shape() {
    let tmp = tempfile::tempdir().unwrap();
    run(SMALL, &[], 2, tmp.path());
    let df = fedsim::results::read_parquet(&tmp.path().join("metrics.parquet")).unwrap();
    assert_eq!(
        column_names(&df),
        [
            "run_id",
            "algorithm",
            "seed",
            "round",
            "sim_time_s",
            "client",
            "split",
            "model",
            "n_samples",
            "loss",
            "accuracy",
            "sampled",
            "cluster",
            "unseen"
        ]
    );
    // Rounds 2 and 4 evaluated, 24 clients, three splits each.
    assert_eq!(df.height(), 2 * 24 * 3);
    let summary = std::fs::read_to_string(tmp.path().join("summary.csv")).unwrap();
    let header = summary.lines().next().unwrap();
    for col in [
        "test_acc_mean",
        "test_acc_bottom_decile",
        "test_acc_p10",
        "test_acc_worst10_mean",
        "final_round",
        "sim_seconds",
        "wall_seconds",
    ] {
        assert!(header.contains(col), "summary.csv lacks {col}: {header}");
    }
    // Half the clients train each round: 12 sampled rows per (round, split).
    let sampled = df.column("sampled").unwrap().bool().unwrap().sum().unwrap();
    assert_eq!(sampled, 2 * 12 * 3);
    let resolved = std::fs::read_to_string(tmp.path().join("scenario.yaml")).unwrap();
    assert!(resolved.contains("content hash sha256:") && resolved.contains("seed: 7"));
    // No temporary files are left behind.
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".tmp"), "left over {name}");
    }
}

#[test]
fn simulated_time_follows_the_system_model() {
    // 10 clients of exactly 100 training samples, full participation, one epoch, 1000
    // samples/s, 10 ms latency, 151 floats = 604 bytes at 8 Mbit/s down and 1 Mbit/s up.
    let text = "\
rounds: 2
data: {kind: fedem_synthetic, clients: 10, dim: 150, min_samples: 100, max_samples: 100}
split: {kind: extra_test, test_samples: 10}
algorithm: {name: fedavg}
system:
  compute: {samples_per_second: 1000}
  network: {latency_ms: 10, downlink_mbps: 8, uplink_mbps: 1}
";
    let s = scenario(text, &[]);
    let out = fedsim::results::simulate_scenario(&s, 2, |_| {}).unwrap();
    // Per round: down 10 ms + 604 µs, compute 100 ms, up 10 ms + 4832 µs.
    let round_us = 10_000 + 604 + 100_000 + 10_000 + 4_832;
    assert_eq!(out.end_time.micros(), 2 * round_us);
    let rounds: Vec<_> = out
        .records
        .iter()
        .filter_map(|r| {
            if let fedsim::records::Record::Round(r) = r {
                Some(r.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[1].start.micros(), round_us);
    assert_eq!(rounds[0].bytes_down, 10 * 604);
}

#[test]
fn unseen_clients_never_train_and_are_reported_apart() {
    // 24 clients, a quarter held out: 6 unseen, 18 train, 9 sampled per round.
    let settings = ["unseen={fraction: 0.25}"];
    check_algorithm_with("fedem", &settings);
    let tmp = tempfile::tempdir().unwrap();
    run(SMALL, &["algorithm.name=fedem", settings[0]], 2, tmp.path());
    let df = fedsim::results::read_parquet(&tmp.path().join("metrics.parquet")).unwrap();
    let unseen = df.column("unseen").unwrap().bool().unwrap();
    let sampled = df.column("sampled").unwrap().bool().unwrap();
    let clients = df.column("client").unwrap().u32().unwrap();
    let mut held_out: Vec<u32> = Vec::new();
    for i in 0..df.height() {
        if unseen.get(i).unwrap() {
            assert!(!sampled.get(i).unwrap(), "an unseen client trained");
            held_out.push(clients.get(i).unwrap());
        }
    }
    held_out.sort();
    held_out.dedup();
    assert_eq!(held_out.len(), 6);
    let rounds = fedsim::results::read_parquet(&tmp.path().join("rounds.parquet")).unwrap();
    let selected = rounds.column("selected").unwrap().u32().unwrap();
    assert!(selected.iter().all(|k| k == Some(9)));
    let summary = std::fs::read_to_string(tmp.path().join("summary.csv")).unwrap();
    assert_eq!(
        summary.lines().count(),
        3,
        "header, training and unseen clients:\n{summary}"
    );
}

/// `training.spill: always` (every idle client state, finished job and waiting update in the
/// spill file) leaves every result file as it is in memory (`off`), with 1 and 3 threads:
/// every registered algorithm, FedBuff's stale aggregation, a deadline with late updates, and
/// stacked cohorts.
#[test]
fn spilling_leaves_every_result_file_as_it_was() {
    let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
    let mut cases: Vec<(String, &str, Vec<String>)> = fedsim::algorithms::registry::REGISTRY
        .iter()
        .map(|r| {
            let mut overrides = algorithm_example(r);
            let text = if r.declared.capabilities.decentralized {
                overrides.push(
                    "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}".into(),
                );
                peers.as_str()
            } else {
                SMALL
            };
            (r.name.to_string(), text, overrides)
        })
        .collect();
    let variants = [
        (
            "fedbuff",
            "policy={kind: fedbuff, buffer_size: 2, concurrency: 4}",
        ),
        (
            "late updates",
            "policy={kind: synchronous, deadline_s: 5, late_updates: next_round, max_staleness: 2}",
        ),
        ("cohorts", "training.cohorts=always"),
    ];
    for (name, setting) in variants {
        let mut overrides = vec![setting.to_string()];
        if name == "late updates" {
            overrides.push(
                "system={compute: {samples_per_second: {dist: lognormal, median: 5, sigma: 0.8}}}"
                    .into(),
            );
        }
        // FedBuff's concurrency says who trains: no sampling section.
        let text = if name == "fedbuff" {
            peers.as_str()
        } else {
            SMALL
        };
        cases.push((name.to_string(), text, overrides));
    }
    for (name, text, overrides) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let with = |spill: &str| -> Vec<String> {
            let mut o = overrides.clone();
            o.push(format!("training.spill={spill}"));
            o
        };
        let (off, always) = (with("off"), with("always"));
        let off: Vec<&str> = off.iter().map(String::as_str).collect();
        let always: Vec<&str> = always.iter().map(String::as_str).collect();
        run(text, &off, 1, &tmp.path().join("off"));
        run(text, &always, 1, &tmp.path().join("one"));
        run(text, &always, 3, &tmp.path().join("three"));
        for other in ["one", "three"] {
            let differ =
                fedsim::results::differing_files(&tmp.path().join("off"), &tmp.path().join(other));
            assert!(
                differ.is_empty(),
                "{name}: {differ:?} differ when spilled ({other})"
            );
        }
    }
}

#[test]
fn machine_yaml_says_what_ran_and_is_never_compared() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = [1, 2].map(|t| tmp.path().join(format!("t{t}")));
    for (threads, dir) in [1, 2].into_iter().zip(&dirs) {
        crate::common::run_saving(SMALL, &[], threads, dir);
        let text = std::fs::read_to_string(dir.join(fedsim::results::MACHINE_FILE)).unwrap();
        let machine: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(
            machine["threads"],
            serde_yaml::Value::from(threads),
            "{text}"
        );
        assert_eq!(
            machine["devices"][0],
            serde_yaml::Value::from("cpu"),
            "{text}"
        );
        assert_eq!(
            machine["fedsim"],
            serde_yaml::Value::from(env!("CARGO_PKG_VERSION")),
            "{text}"
        );
    }
    // The two files differ (their thread counts), the results do not.
    let machine = |d: &Path| std::fs::read(d.join(fedsim::results::MACHINE_FILE)).unwrap();
    assert_ne!(machine(&dirs[0]), machine(&dirs[1]));
    assert!(!fedsim::results::compared_files(&dirs[0], &dirs[1])
        .contains(&fedsim::results::MACHINE_FILE));
    assert_eq!(
        fedsim::results::differing_files(&dirs[0], &dirs[1]),
        Vec::<String>::new()
    );
}
