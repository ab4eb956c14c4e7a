//! Client-level differential privacy (`privacy:`): the same results whatever the thread count,
//! clipping that bounds what a round moves, the noise and the ε the run reports, and bad
//! settings refused with their field.

use crate::common::{error, run_saving, scenario, SMALL};
use fedsim::models::{read_models, Architecture, InputShape, ModelSpec};
use fedsim::privacy::tree::{every_release_squares, tree_epsilon};
use fedsim::privacy::{epsilon, pld_epsilon, Subsampling, TreeAccountant};
use fedsim::records::Record;
use fedsim::results::{differing_files, read_parquet, simulate_scenario};
use std::path::Path;

fn run(overrides: &[&str], threads: usize, dir: &Path) {
    run_saving(SMALL, overrides, threads, dir);
}

/// The first row's value of `column` in a `summary.csv` text.
fn summary_value(text: &str, column: &str) -> f64 {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header.iter().position(|&c| c == column).unwrap();
    lines
        .next()
        .unwrap()
        .split(',')
        .nth(at)
        .unwrap()
        .parse()
        .unwrap()
}

/// The final global models of SMALL with `overrides` (2 threads, nothing written).
fn final_models(overrides: &[&str]) -> Vec<Vec<f32>> {
    let out = simulate_scenario(&scenario(SMALL, overrides), 2, |_| {}).unwrap();
    (out.records.into_iter())
        .find_map(|r| match r {
            Record::FinalModels(m) => Some(m),
            _ => None,
        })
        .unwrap()
}

/// (round, client) of every job of the run in `dir` whose update was aggregated, as
/// jobs.parquet says.
fn aggregated_jobs(dir: &Path) -> Vec<(u32, u32)> {
    let jobs = read_parquet(&dir.join("jobs.parquet")).unwrap();
    let round = jobs.column("round").unwrap().u32().unwrap();
    let client = jobs.column("client").unwrap().u32().unwrap();
    let outcome = jobs.column("outcome").unwrap().str().unwrap();
    (0..jobs.height())
        .filter(|&i| outcome.get(i) == Some("aggregated"))
        .map(|i| (round.get(i).unwrap(), client.get(i).unwrap()))
        .collect()
}

fn floats(df: &polars::prelude::DataFrame, name: &str) -> Vec<f64> {
    let column = df.column(name).unwrap().f64().unwrap();
    column.into_no_null_iter().collect()
}

/// Clipping on the clients and noise on the server (FedAvg; Ditto spilled; FedEM's three
/// components), on the clients (local) or in shares under secure aggregation (distributed),
/// DP-FTRL, and DP-SGD (synchronous and FedBuff; σ given or solved) give identical result files
/// with 1, 2 and 4 threads, and on a rerun.
#[test]
fn private_runs_are_deterministic_across_threads_and_reruns() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("fedavg", vec!["privacy={clip: 0.5, noise_multiplier: 1.0}"]),
        (
            "ditto",
            vec![
                "algorithm={name: ditto, lambda: 0.1}",
                "privacy={clip: 0.5, target_epsilon: 8}",
                "training.spill=always",
            ],
        ),
        (
            "fedem",
            vec![
                "algorithm={name: fedem, components: 3}",
                "privacy={clip: 0.5, noise_multiplier: 0.8}",
            ],
        ),
        (
            "local",
            vec!["privacy={mechanism: local, clip: 0.5, noise_multiplier: 2.0}"],
        ),
        (
            "adaptive",
            vec!["privacy={clip: 0.05, noise_multiplier: 1.0, adaptive: {count_noise: 2}}"],
        ),
        (
            "poisson",
            vec![
                "sampling={strategy: poisson, fraction: 0.3}",
                "privacy={clip: 0.5, noise_multiplier: 1.0, adaptive: {count_noise: 2}}",
            ],
        ),
        (
            "dp_sgd",
            vec!["privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 1.2}"],
        ),
        (
            "dp_ftrl",
            vec![
                "algorithm={name: fedem, components: 3}",
                "privacy={mechanism: dp_ftrl, clip: 0.5, noise_multiplier: 1.0}",
            ],
        ),
        (
            "distributed",
            vec![
                "privacy={mechanism: distributed, clip: 0.5, target_epsilon: 8}",
                "secure_aggregation={protocol: secagg_plus, neighbours: 4, dropout: 0.1, \
                 threshold: 0.2}",
            ],
        ),
        (
            "dp_sgd_target",
            vec![
                "algorithm={name: fedem, components: 3}",
                "privacy={mechanism: dp_sgd, clip: 0.5, target_epsilon: 8}",
            ],
        ),
        (
            // Nothing of DP-SGD is the server's: asynchronous rounds take it too.
            "dp_sgd_fedbuff",
            vec![
                "privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 1.2}",
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
                "sampling={}",
            ],
        ),
    ] {
        let dir = |t: &str| tmp.path().join(format!("{name}-{t}"));
        for (label, threads) in [("1", 1), ("2", 2), ("4", 4), ("again", 2)] {
            run(&extra, threads, &dir(label));
        }
        for other in ["2", "4", "again"] {
            let differ = differing_files(&dir("1"), &dir(other));
            assert!(
                differ.is_empty(),
                "{name}: 1 thread vs {other}: {differ:?} differ"
            );
        }
    }
}

/// rounds.parquet holds each round's noise (σ·2C/K) and the ε spent so far, which is the
/// accountant's for sampling K of N without replacement; summary.csv holds σ and the last ε;
/// a `target_epsilon` is spent to within 1 %, never more.
#[test]
fn rounds_and_summary_report_the_noise_and_the_privacy_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run(
        &["privacy={clip: 2.0, target_epsilon: 3, delta: 1.0e-6}"],
        2,
        &dir,
    );
    let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let sigma = summary_value(&summary, "noise_multiplier");
    let epsilons = floats(&rounds, "epsilon");
    assert_eq!(epsilons.len(), 4);
    // SMALL: 24 clients, half of them a round.
    let sampling = Subsampling::FixedSize {
        sample: 12,
        population: 24,
    };
    for (round, &eps) in epsilons.iter().enumerate() {
        let expected = epsilon(sampling, sigma, round as u64 + 1, 1e-6);
        assert_eq!(eps, expected, "round {}", round + 1);
    }
    assert!(epsilons.windows(2).all(|w| w[0] < w[1]), "{epsilons:?}");
    assert_eq!(summary_value(&summary, "epsilon"), epsilons[3]);
    assert!((0.99 * 3.0..=3.0).contains(&epsilons[3]), "{}", epsilons[3]);
    let completed = rounds.column("completed").unwrap().u32().unwrap();
    for (std, k) in floats(&rounds, "noise_std")
        .iter()
        .zip(completed.into_no_null_iter())
    {
        assert_eq!(*std, sigma * 2.0 * 2.0 / k as f64);
    }

    // Without privacy the tables keep their columns and the summary's stay empty.
    let plain = tmp.path().join("plain");
    run(&[], 1, &plain);
    let rounds = read_parquet(&plain.join("rounds.parquet")).unwrap();
    assert!(rounds.column("epsilon").is_err());
    let text = std::fs::read_to_string(plain.join("summary.csv")).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with(",noise_multiplier,epsilon,bytes_up,bytes_down"),
        "{text}"
    );
    let row: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
    assert!(row[row.len() - 4..row.len() - 2] == ["", ""], "{text}");
}

/// Local noise: each round's ε is the Gaussian mechanism's (no sampling) composed over the
/// updates of the client that has sent the most so far (from jobs.parquet), and the noise each
/// client adds is σ·2C.
#[test]
fn local_privacy_spends_per_update_of_the_busiest_client() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    run(
        &["privacy={mechanism: local, clip: 0.25, noise_multiplier: 3.0}"],
        2,
        &dir,
    );
    let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
    let aggregated = aggregated_jobs(&dir);
    let mut most_so_far = Vec::new();
    for round in 1..=4u32 {
        let mut sent = std::collections::BTreeMap::<u32, u64>::new();
        for &(_, client) in aggregated.iter().filter(|(r, _)| *r <= round) {
            *sent.entry(client).or_default() += 1;
        }
        most_so_far.push(sent.values().copied().max().unwrap());
    }
    assert!(most_so_far.windows(2).any(|w| w[1] > w[0]));
    for ((spent, std), most) in (floats(&rounds, "epsilon").iter())
        .zip(floats(&rounds, "noise_std"))
        .zip(most_so_far)
    {
        // Every update is seen: the Gaussian mechanism without sampling, `most` times.
        let expected = epsilon(Subsampling::Poisson { rate: 1.0 }, 3.0, most, 1e-5);
        assert_eq!(*spent, expected, "after {most} updates");
        assert_eq!(std, 3.0 * 2.0 * 0.25);
    }
    // Without noise, local and central are the same clipping; the local noise moves the model.
    let final_model = |privacy: &str| final_models(&[privacy]);
    let central = final_model("privacy={clip: 0.25, noise_multiplier: 0}");
    assert_eq!(
        central,
        final_model("privacy={mechanism: local, clip: 0.25, noise_multiplier: 0}")
    );
    assert_ne!(
        central,
        final_model("privacy={mechanism: local, clip: 0.25, noise_multiplier: 3}")
    );
}

/// Adaptive clipping: round 1 clips to the given bound, each next bound is the last one moved
/// by the noised fraction within it (C·exp(−η(b̃ − γ)), as rounds.parquet records them), the
/// updates' noise is σ_Δ·2C/K with σ_Δ = (σ⁻² − σ_b⁻²)^(−1/2), and ε is that of σ. A bound far
/// below every update's norm grows, one far above shrinks.
#[test]
fn adaptive_clipping_moves_the_bound_by_the_noised_count() {
    let tmp = tempfile::tempdir().unwrap();
    let run_from = |clip: f64| {
        let dir = tmp.path().join(format!("clip-{clip}"));
        let privacy = format!(
            "privacy={{clip: {clip}, noise_multiplier: 1.0, \
             adaptive: {{quantile: 0.4, learning_rate: 0.3, count_noise: 2}}}}"
        );
        run(&[&privacy], 2, &dir);
        read_parquet(&dir.join("rounds.parquet")).unwrap()
    };
    let rounds = run_from(0.05);
    let (bounds, within) = (
        floats(&rounds, "clip"),
        floats(&rounds, "unclipped_fraction"),
    );
    assert_eq!(bounds.len(), 4);
    assert_eq!(bounds[0], 0.05);
    for t in 0..3 {
        assert_eq!(
            bounds[t + 1],
            bounds[t] * (-0.3 * (within[t] - 0.4)).exp(),
            "round {}",
            t + 2
        );
    }
    let update_sigma = (1.0f64 - 0.25).powf(-0.5);
    let completed = rounds.column("completed").unwrap().u32().unwrap();
    let sampling = Subsampling::FixedSize {
        sample: 12,
        population: 24,
    };
    for (t, ((std, k), eps)) in (floats(&rounds, "noise_std").iter())
        .zip(completed.into_no_null_iter())
        .zip(floats(&rounds, "epsilon"))
        .enumerate()
    {
        assert_eq!(*std, update_sigma * 2.0 * bounds[t] / k as f64);
        assert_eq!(eps, epsilon(sampling, 1.0, t as u64 + 1, 1e-5));
    }
    let grows = floats(&run_from(1e-6), "clip");
    assert!(grows[3] > grows[0], "{grows:?}");
    let shrinks = floats(&run_from(1e6), "clip");
    assert!(shrinks[3] < shrinks[0], "{shrinks:?}");
    // A fixed bound writes neither column.
    let fixed = tmp.path().join("fixed");
    run(&["privacy={clip: 0.05, noise_multiplier: 1.0}"], 1, &fixed);
    let rounds = read_parquet(&fixed.join("rounds.parquet")).unwrap();
    assert!(rounds.column("clip").is_err() && rounds.column("unclipped_fraction").is_err());
}

/// Poisson participation: rounds of varying size (none at all with a small enough rate), the
/// noise σ·C/(qN) of one client more or less over the expected count in every round, empty
/// ones included, and ε that of Poisson sampling at q after each of them. With every client
/// drawn (q = 1) and no noise, the fixed denominator is the count and the run is the uniform
/// draw's.
#[test]
fn poisson_participation_releases_every_round_over_the_expected_count() {
    let tmp = tempfile::tempdir().unwrap();
    let rounds_of = |name: &str, q: f64| {
        let dir = tmp.path().join(name);
        let sampling = format!("sampling={{strategy: poisson, fraction: {q}}}");
        let privacy = "privacy={clip: 0.5, noise_multiplier: 1.0}";
        run(&["rounds=8", &sampling, privacy], 2, &dir);
        read_parquet(&dir.join("rounds.parquet")).unwrap()
    };
    for (name, q) in [("quarter", 0.25), ("rare", 0.02)] {
        let rounds = rounds_of(name, q);
        assert_eq!(rounds.height(), 8, "{name}: every round recorded");
        let selected: Vec<u32> = (rounds.column("selected").unwrap().u32().unwrap())
            .into_no_null_iter()
            .collect();
        let expected_count = q * 24.0;
        for (t, (std, eps)) in (floats(&rounds, "noise_std").iter())
            .zip(floats(&rounds, "epsilon"))
            .enumerate()
        {
            assert_eq!(*std, 1.0 * 0.5 / expected_count, "{name} round {}", t + 1);
            let poisson = Subsampling::Poisson { rate: q };
            assert_eq!(eps, epsilon(poisson, 1.0, t as u64 + 1, 1e-5), "{name}");
        }
        if name == "quarter" {
            assert!(selected.iter().any(|&k| k != selected[0]), "{selected:?}");
        } else {
            assert!(selected.contains(&0), "{selected:?}");
        }
    }
    let final_model =
        |sampling: &str| final_models(&[sampling, "privacy={clip: 0.5, noise_multiplier: 0}"]);
    assert_eq!(
        final_model("sampling={strategy: poisson, fraction: 1.0}"),
        final_model("sampling={fraction: 1.0}")
    );
}

/// `accountant: pld`: each round's ε is the privacy loss distribution's (the same function,
/// bit for bit), below RDP's for the same noise; solving `target_epsilon` with it spends the
/// target to 1 % and needs less noise than RDP does.
#[test]
fn pld_accountant_reports_a_tighter_epsilon_and_needs_less_noise() {
    let tmp = tempfile::tempdir().unwrap();
    let poisson = "sampling={strategy: poisson, fraction: 0.25}";
    let rounds_of = |name: &str, privacy: &str| {
        let dir = tmp.path().join(name);
        run(&["rounds=4", poisson, privacy], 2, &dir);
        read_parquet(&dir.join("rounds.parquet")).unwrap()
    };
    let pld = rounds_of(
        "pld",
        "privacy={clip: 0.5, noise_multiplier: 1.0, accountant: pld}",
    );
    for (t, eps) in floats(&pld, "epsilon").into_iter().enumerate() {
        let steps = t as u64 + 1;
        assert_eq!(eps, pld_epsilon(0.25, 1.0, steps, 1e-5), "round {steps}");
        let rdp = epsilon(Subsampling::Poisson { rate: 0.25 }, 1.0, steps, 1e-5);
        assert!(eps < rdp, "round {steps}: PLD {eps} ≥ RDP {rdp}");
    }
    let solved = |accountant: &str| {
        let privacy = format!("privacy={{clip: 0.5, target_epsilon: 2, accountant: {accountant}}}");
        let rounds = rounds_of(accountant, &privacy);
        let last = |c| *floats(&rounds, c).last().unwrap();
        (last("noise_std"), last("epsilon"))
    };
    let ((pld_std, pld_eps), (rdp_std, rdp_eps)) = (solved("pld"), solved("rdp"));
    for eps in [pld_eps, rdp_eps] {
        assert!((0.99 * 2.0..=2.0).contains(&eps), "ε {eps}");
    }
    assert!(
        pld_std < rdp_std,
        "PLD's σ·C/qN {pld_std} vs RDP's {rdp_std}"
    );
}

/// DP-FTRL: with every client in every round, round t's ε is the Gaussian one of a client in
/// all t releases and the noise added is σ·2C/K times √(nodes entering and leaving the
/// prefix): 1, √2, 1, √3 for rounds 1–4. With half the clients a round (and weighted draws,
/// which the tree's accountant allows), each round's ε is the largest over the clients of the
/// releases they took part in (jobs.parquet). With σ = 0 the run is the noise-free central one.
#[test]
fn dp_ftrl_noises_prefix_sums_and_spends_by_participation() {
    let tmp = tempfile::tempdir().unwrap();
    let ftrl = "privacy={mechanism: dp_ftrl, clip: 0.5, noise_multiplier: 1.5}";
    let dir = tmp.path().join("all");
    run(&[ftrl, "sampling={fraction: 1.0}"], 2, &dir);
    let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
    let k = 24.0; // every one of SMALL's clients
    for (t, (eps, std)) in (floats(&rounds, "epsilon").into_iter())
        .zip(floats(&rounds, "noise_std"))
        .enumerate()
    {
        let t = t as u64 + 1;
        assert_eq!(
            eps,
            tree_epsilon(1.5, every_release_squares(t), 1e-5),
            "round {t}"
        );
        let nodes = [1.0, 2.0, 1.0, 3.0][t as usize - 1];
        assert_eq!(std, 1.5 * 2.0 * 0.5 / k * f64::sqrt(nodes), "round {t}");
    }
    let dir = tmp.path().join("half");
    run(
        &[ftrl, "sampling={fraction: 0.5, strategy: weighted}"],
        2,
        &dir,
    );
    let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
    let aggregated = aggregated_jobs(&dir);
    let mut tree = TreeAccountant::new(4);
    for (round, spent) in (1..=4u32).zip(floats(&rounds, "epsilon")) {
        let clients = (aggregated.iter())
            .filter(|(r, _)| *r == round)
            .map(|&(_, c)| c);
        tree.release(round as u64, clients);
        assert_eq!(spent, tree.worst_epsilon(1.5, 1e-5), "round {round}");
    }
    let noiseless = |mechanism: &str| {
        final_models(&[&format!(
            "privacy={{mechanism: {mechanism}, clip: 0.5, noise_multiplier: 0}}"
        )])
    };
    assert_eq!(noiseless("dp_ftrl"), noiseless("central"));
}

/// DP-SGD: each round's ε is the largest over clients of the Poisson accountant at the
/// client's rate 1/⌈n/B⌉ over every local step it has sent (FedEM: one run per component),
/// from jobs.parquet and the clients' training rows; the noise recorded is σ·C (determinism:
/// `private_runs_are_deterministic_across_threads_and_reruns`).
#[test]
fn dp_sgd_spends_per_record_of_the_client_that_has_spent_most() {
    let tmp = tempfile::tempdir().unwrap();
    let dp_sgd = "privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 1.2}";
    let s = scenario(SMALL, &[dp_sgd]);
    let data = (s
        .data
        .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed)))
    .unwrap();
    let rows = |c: u32| data.split_len(c as usize, fedsim::records::Split::Train);
    for (name, runs, extra) in [
        ("fedavg", 1, vec![dp_sgd]),
        (
            "fedem",
            3,
            vec![dp_sgd, "algorithm={name: fedem, components: 3}"],
        ),
    ] {
        let dir = tmp.path().join(name);
        run(&extra, 2, &dir);
        let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
        let aggregated = aggregated_jobs(&dir);
        let epsilons = floats(&rounds, "epsilon");
        for (round, spent) in (1..=4u32).zip(&epsilons) {
            let mut sent = std::collections::BTreeMap::<u32, u64>::new();
            for &(_, client) in aggregated.iter().filter(|(r, _)| *r <= round) {
                *sent.entry(client).or_default() += 1;
            }
            let worst = (sent.iter())
                .map(|(&c, &updates)| {
                    let batches = rows(c).div_ceil(16) as u64;
                    let rate = Subsampling::Poisson {
                        rate: 1.0 / batches as f64,
                    };
                    epsilon(rate, 1.2, updates * runs * batches, 1e-5)
                })
                .fold(0.0, f64::max);
            assert_eq!(*spent, worst, "{name}, round {round}");
        }
        assert!(epsilons.windows(2).all(|w| w[0] <= w[1]), "{epsilons:?}");
        assert!(floats(&rounds, "noise_std")
            .iter()
            .all(|&std| std == 1.2 * 0.5));
    }
}

/// DP-SGD with `target_epsilon`: σ is solved for a client of the smallest batches drawn in
/// every round, each update one run per vector sent (FedEM: 3), so that that client would
/// spend the target (within 1 %); the run, whose clients are drawn half the rounds, spends
/// less, and `rounds.parquet` records the σ solved. FedEM's three runs an update need more
/// noise than FedAvg's one.
#[test]
fn dp_sgd_target_epsilon_holds_for_a_client_in_every_round() {
    let tmp = tempfile::tempdir().unwrap();
    let target = "privacy={mechanism: dp_sgd, clip: 0.5, target_epsilon: 6}";
    let sigma_of = |extra: &[&str], name: &str| {
        let dir = tmp.path().join(name);
        let mut overrides = vec![target];
        overrides.extend_from_slice(extra);
        run(&overrides, 2, &dir);
        let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        let sigma = summary_value(&summary, "noise_multiplier");
        let spent = summary_value(&summary, "epsilon");
        assert!(
            sigma > 0.0 && spent <= 6.0,
            "{name}: σ {sigma}, spent {spent}"
        );
        // Each round noised every step with σ·C.
        let rounds = read_parquet(&dir.join("rounds.parquet")).unwrap();
        assert!(floats(&rounds, "noise_std")
            .iter()
            .all(|&std| std == sigma * 0.5));
        // That σ for a client in all 4 rounds: within 1 % of the target.
        let s = scenario(SMALL, &overrides);
        let data = (s
            .data
            .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed)))
        .unwrap();
        let plan = &s.run.training.plan;
        let runs = if name == "fedem" { 3 } else { 1 };
        let worst = (0..data.num_clients())
            .map(|c| data.split_len(c, fedsim::records::Split::Train))
            .filter(|&n| n > 0)
            .map(|n| {
                let rate = Subsampling::Poisson {
                    rate: plan.dp_sampling_rate(n),
                };
                epsilon(rate, sigma, 4 * runs * plan.steps(n), 1e-5)
            })
            .fold(0.0, f64::max);
        assert!(
            (0.99 * 6.0..=6.0).contains(&worst),
            "{name}: σ {sigma} gives {worst}"
        );
        sigma
    };
    let fedavg = sigma_of(&[], "fedavg");
    let fedem = sigma_of(&["algorithm={name: fedem, components: 3}"], "fedem");
    assert!(fedem > fedavg, "{fedem} vs {fedavg}");
}

/// DP-SGD under heterogeneous local work (`system.local_work`): the accountant composes the
/// steps each job did, so 4 planned epochs of which every job does a quarter spend what 1
/// planned epoch spends, and less than 4.
#[test]
fn dp_sgd_accounts_for_the_local_work_each_job_did() {
    let tmp = tempfile::tempdir().unwrap();
    let spent = |extra: &[&str], name: &str| {
        let dir = tmp.path().join(name);
        let mut overrides = vec!["privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 1.0}"];
        overrides.extend_from_slice(extra);
        run(&overrides, 2, &dir);
        let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        summary_value(&summary, "epsilon")
    };
    let quarter = spent(
        &[
            "training.local_epochs=4",
            "system.local_work={fraction: 0.25}",
        ],
        "quarter",
    );
    assert_eq!(quarter, spent(&[], "one"));
    assert!(quarter < spent(&["training.local_epochs=4"], "four"));
}

/// DP-SGD trains alone as in a cohort: the same steps from the same draws, so the same model
/// up to the order of float sums; its noise moves the model, and without noise a bound no
/// gradient reaches leaves only the Poisson sampling (not plain SGD's batches).
#[test]
fn dp_sgd_trains_alike_alone_and_in_cohorts() {
    let dp_sgd = "privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 1.2}";
    let alone = final_models(&[dp_sgd, "training.cohorts=off"]);
    let stacked = final_models(&[dp_sgd, "training.cohorts=always"]);
    for (a, s) in alone[0].iter().zip(&stacked[0]) {
        assert!((a - s).abs() <= 1e-4 * (1.0 + a.abs()), "{a} vs {s}");
    }
    let quiet = final_models(&["privacy={mechanism: dp_sgd, clip: 0.5, noise_multiplier: 0}"]);
    assert_ne!(quiet, stacked);
    let unbounded =
        final_models(&["privacy={mechanism: dp_sgd, clip: 1.0e9, noise_multiplier: 0}"]);
    assert_ne!(unbounded, quiet);
    assert_ne!(unbounded, final_models(&[]));
}

/// With σ = 0 and full participation, a round moves the global model by the average of the
/// clients' clipped changes, so by at most C (here 0.01; the same round unclipped moves it by
/// more than 0.05).
#[test]
fn clipping_bounds_how_far_a_round_moves_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    run(&["rounds=1", "sampling.fraction=1.0"], 1, &first);
    let start = first.join("models.safetensors");
    let init = format!(
        "model={{kind: linear, init: {{from: {}}}}}",
        start.display()
    );
    let arch = Architecture::for_input(
        &ModelSpec::from_yaml("{kind: linear}").unwrap(),
        InputShape::Flat(20),
        2,
    );
    let before = &read_models(&start, &arch).unwrap()[0];
    let moved = |clip: f64| {
        let privacy = format!("privacy={{clip: {clip}, noise_multiplier: 0}}");
        let after = &final_models(&["rounds=1", "sampling.fraction=1.0", &init, &privacy])[0];
        let squares: f64 = (after.iter().zip(before))
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum();
        squares.sqrt()
    };
    let (tight, loose) = (moved(0.01), moved(1e6));
    assert!(
        tight > 0.0 && tight <= 0.01 * (1.0 + 1e-5),
        "moved {tight} with C = 0.01"
    );
    assert!(loose > 0.05, "unclipped, the round moves {loose}");
}

#[test]
fn bad_privacy_settings_are_refused_with_their_field() {
    let cases: [(&[&str], &str); 20] = [
        (
            &["privacy={mechanism: distributed, clip: 1, noise_multiplier: 1, accountant: pld}"],
            "`privacy.accountant`: `mechanism: distributed` is accounted by `rdp`",
        ),
        (
            &["privacy={mechanism: dp_ftrl, clip: 1, noise_multiplier: 1, accountant: pld}"],
            "`privacy.accountant`: `mechanism: dp_ftrl` releases one Gaussian mechanism",
        ),
        (
            &["privacy={mechanism: dp_ftrl, clip: 1, noise_multiplier: 1, adaptive: {}}"],
            "`privacy.adaptive`: adaptive clipping needs `mechanism: central`",
        ),
        (
            &["privacy={clip: 1, noise_multiplier: 1, accountant: pld}"],
            "`privacy.accountant`: `pld` accounts Poisson participation",
        ),
        (
            &["privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1, accountant: pld}"],
            "`privacy.accountant`: `mechanism: dp_sgd` is accounted by `rdp`",
        ),
        (
            &["privacy={mechanism: local, clip: 1, noise_multiplier: 1, share_survivors: 0.5}"],
            "`privacy.share_survivors`: applies to `mechanism: distributed` only",
        ),
        (
            &["privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1, adaptive: {}}"],
            "`privacy.adaptive`: adaptive clipping needs `mechanism: central`",
        ),
        (
            &[
                "privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1}",
                "algorithm={name: pfedme}",
            ],
            "`privacy.mechanism`: `dp_sgd` trains local SGD runs",
        ),
        (
            &["sampling={strategy: poisson, count: 5}"],
            "sampling.count",
        ),
        (
            &["sampling={strategy: poisson, fraction: 0.5, over_selection: 0.2}"],
            "sampling.over_selection",
        ),
        (
            &[
                "sampling={strategy: poisson}",
                "policy={kind: fedbuff, concurrency: 4, buffer_size: 2}",
            ],
            "uniform or weighted",
        ),
        (
            &["privacy={mechanism: local, clip: 1, noise_multiplier: 1, adaptive: {}}"],
            "`privacy.adaptive`: adaptive clipping needs `mechanism: central`",
        ),
        (
            &["privacy={clip: 1, noise_multiplier: 1, adaptive: {quantile: 0}}"],
            "privacy.adaptive.quantile",
        ),
        (
            &["privacy={clip: 1, noise_multiplier: -1}"],
            "privacy.noise_multiplier",
        ),
        (
            &["privacy={clip: 1, target_epsilon: 2, delta: 1}"],
            "privacy.delta",
        ),
        (&["privacy={clip: 0, target_epsilon: 2}"], "privacy.clip"),
        (
            &[
                "privacy={clip: 1, target_epsilon: 2}",
                "algorithm={name: pfedme}",
            ],
            "does not take client-level privacy",
        ),
        (
            &[
                "privacy={clip: 1, target_epsilon: 2}",
                "policy={kind: fedbuff, concurrency: 4, buffer_size: 2}",
                "sampling={}",
            ],
            "synchronous rounds",
        ),
        (
            &[
                "privacy={clip: 1, target_epsilon: 2}",
                "sampling.strategy=weighted",
            ],
            "sampling.strategy: uniform",
        ),
        (
            &[
                "privacy={clip: 1, target_epsilon: 2}",
                "sampling.available_only=true",
            ],
            "available_only: false",
        ),
    ];
    for (overrides, expected) in cases {
        let e = error(SMALL, overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
    let e = error(
        SMALL,
        &["privacy={clip: 1, noise_multiplier: 1, target_epsilon: 2}"],
    );
    assert!(
        e.contains("privacy.target_epsilon") && e.contains("not both"),
        "{e}"
    );
    let e = error(SMALL, &["privacy={clip: 1, sigma: 2}"]);
    assert!(e.contains("sigma"), "{e}");
    // Known once the data say how many clients a round draws: SMALL's 12, so σ_b = 12/20 = 0.6
    // by default, not above σ = 1.
    let s = scenario(
        SMALL,
        &["privacy={clip: 1, noise_multiplier: 1, adaptive: {}}"],
    );
    let Err(e) = simulate_scenario(&s, 1, |_| {}) else {
        panic!("σ_b = 0.6 under σ = 1 should be refused")
    };
    let e = format!("{:#}", anyhow::Error::from(e));
    assert!(
        e.contains("privacy.adaptive") && e.contains("12 clients per round / 20"),
        "{e}"
    );
}
