//! Loss-guided client selection (`sampling.strategy: power_of_choice | oort`): what each draw
//! reads is what clients reported with updates that reached the server, so its choices follow
//! from the run by hand; every strategy gives the same files with 1, 2 and 4 threads; what
//! cannot work is refused with its fields.

use crate::common::{error, run_saving, u64_column, SMALL};
use fedsim::results::{differing_files, read_parquet};
use std::path::Path;

/// SMALL's 24 clients on devices a hundredfold apart in speed, with availability and
/// dropouts, for 8 rounds of 6.
const OVERRIDES: [&str; 4] = [
    "rounds=8",
    "sampling.fraction=0.25",
    "system={compute: {samples_per_second: {dist: lognormal, median: 50, sigma: 1.5}}, \
     availability: {kind: markov, mean_online_s: 60, mean_offline_s: 20}, dropout: 0.1}",
    "eval_every=4",
];

/// The clients each round sent jobs to, in id order.
fn selected(dir: &Path) -> Vec<Vec<u64>> {
    let jobs = read_parquet(&dir.join("jobs.parquet")).unwrap();
    let (rounds, clients) = (u64_column(&jobs, "round"), u64_column(&jobs, "client"));
    let mut by_round: Vec<Vec<u64>> = vec![Vec::new(); 8];
    for (r, c) in rounds.into_iter().zip(clients) {
        by_round[r as usize - 1].push(c);
    }
    by_round.iter_mut().for_each(|r| r.sort_unstable());
    by_round
}

/// The clients whose round-1 update was aggregated: those the server heard from.
fn aggregated_in_round_1(dir: &Path) -> Vec<u64> {
    let jobs = read_parquet(&dir.join("jobs.parquet")).unwrap();
    let outcomes = jobs.column("outcome").unwrap().str().unwrap();
    let (clients, rounds) = (u64_column(&jobs, "client"), u64_column(&jobs, "round"));
    (0..jobs.height())
        .filter(|&i| rounds[i] == 1 && outcomes.get(i) == Some("aggregated"))
        .map(|i| clients[i])
        .collect()
}

/// Power-of-choice with d = every client ranks clients not heard from first, in id order, so
/// its first rounds sweep the clients 0–5, 6–11, … (those whose update was lost to a dropout
/// or to going offline stay unheard and come back first). Oort without exploration exploits
/// the clients it heard from. Each gives the same files with 1, 2 and 4 threads.
#[test]
fn loss_guided_draws_follow_what_the_server_heard_on_every_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |strategy: &str, threads: usize| {
        let dir = tmp.path().join(format!("{strategy}-{threads}"));
        let mut overrides = OVERRIDES.to_vec();
        let sampling = format!("sampling.strategy={strategy}");
        overrides.push(&sampling);
        if strategy == "power_of_choice" {
            overrides.push("sampling.candidates=24");
        } else {
            overrides.push("sampling.oort={exploration: 0, exploration_min: 0}");
        }
        run_saving(SMALL, &overrides, threads, &dir);
        dir
    };
    let poc = run("power_of_choice", 1);
    let rounds = selected(&poc);
    // `jobs.parquet` has what each client reported: a positive mean loss for every job whose
    // update arrived, none for failed jobs (dropouts, clients gone offline).
    let jobs = read_parquet(&poc.join("jobs.parquet")).unwrap();
    let outcomes = jobs.column("outcome").unwrap().str().unwrap();
    let losses = jobs.column("reported_loss").unwrap().f64().unwrap();
    let failed = (0..jobs.height()).filter(|&i| outcomes.get(i) == Some("failed"));
    assert!(failed.count() > 0, "the run has failed jobs to check");
    for i in 0..jobs.height() {
        let (outcome, loss) = (outcomes.get(i).unwrap(), losses.get(i));
        match outcome {
            "failed" => assert_eq!(loss, None, "job {i}"),
            _ => assert!(
                loss.is_some_and(|l| l.is_finite() && l > 0.0),
                "job {i}: {loss:?}"
            ),
        }
    }
    let uniform = tmp.path().join("uniform");
    run_saving(SMALL, &OVERRIDES, 1, &uniform);
    let jobs = read_parquet(&uniform.join("jobs.parquet")).unwrap();
    assert!(
        jobs.column("reported_loss").is_err(),
        "no reports, no column"
    );
    assert_eq!(rounds[0], [0, 1, 2, 3, 4, 5]);
    let heard = aggregated_in_round_1(&poc);
    // Round 2: the unheard of round 1 first, then 6, 7, … up to six clients.
    let mut expected: Vec<u64> = (0..6).filter(|c| !heard.contains(c)).collect();
    expected.extend((6..).take(6 - expected.len()));
    assert_eq!(rounds[1], expected, "round 1 heard {heard:?}");
    // Oort without exploration exploits every client it has heard from while they are
    // fewer than K: round 2 keeps round 1's aggregated clients and fills up with others.
    let oort = run("oort", 1);
    let heard = aggregated_in_round_1(&oort);
    assert!(!heard.is_empty());
    let second = &selected(&oort)[1];
    assert!(
        heard.iter().all(|c| second.contains(c)),
        "{heard:?} ⊄ {second:?}"
    );
    assert_eq!(second.len(), 6);
    for strategy in ["power_of_choice", "oort"] {
        let one = tmp.path().join(format!("{strategy}-1"));
        for threads in [2, 4] {
            let other = run(strategy, threads);
            let differ = differing_files(&one, &other);
            assert!(
                differ.is_empty(),
                "{strategy}, {threads} threads: {differ:?}"
            );
        }
    }
}

#[test]
fn loss_guided_settings_that_cannot_work_are_refused_with_their_fields() {
    for (overrides, expected) in [
        (
            vec!["sampling.candidates=4"],
            "`sampling.candidates`: applies to `strategy: power_of_choice` only",
        ),
        (
            vec!["sampling.strategy=oort", "sampling.oort={exploration: 1.5}"],
            "`sampling.oort.exploration`: must be in [0, 1], got 1.5",
        ),
        (
            vec!["sampling.oort={penalty: 1}"],
            "`sampling.oort`: applies to `strategy: oort` only",
        ),
        (
            vec!["sampling.strategy=oort", "algorithm={name: pfedme}"],
            "`sampling.strategy`: a loss-guided draw ranks clients by the loss they report",
        ),
        (
            vec!["sampling.strategy=oort", "algorithm={name: pfedme}"],
            "; `pfedme` does not send updates it declares; use it with",
        ),
        (
            vec![
                "sampling.strategy=power_of_choice",
                "privacy={clip: 1, noise_multiplier: 1}",
            ],
            "`sampling.strategy`: a loss-guided draw reads the losses clients report",
        ),
        (
            vec![
                "sampling={strategy: oort}",
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
            ],
            "`sampling`: with `policy.kind: fedbuff`",
        ),
    ] {
        let e = error(SMALL, &overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
    // FedEM's clients start from a mixture, which has no one loss: refused when it starts.
    let s = crate::common::scenario(
        SMALL,
        &["sampling.strategy=oort", "algorithm={name: fedem}"],
    );
    let Err(e) = fedsim::results::simulate_scenario(&s, 1, |_| {}) else {
        panic!("Oort with FedEM ran");
    };
    let e = fedsim::error_chain(&e);
    assert!(
        e.contains("sampling.strategy") && e.contains("this algorithm's server sends 3 models"),
        "{e}"
    );
}
