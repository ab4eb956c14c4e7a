//! Evaluation on a sample of the clients (`evaluation: {clients, every, sample}`): who is
//! evaluated, that the summary is computed on them, and how bad settings are reported; and on
//! the splits asked for (`evaluation.splits`).

use crate::common::{error, run_saving, scenario, SMALL};
use fedsim::records::{Record, Split};
use fedsim::results::simulate_scenario;
use std::collections::{BTreeMap, BTreeSet};

/// The clients evaluated (on the test split) after each evaluated round.
fn evaluated(records: &[Record]) -> BTreeMap<u32, BTreeSet<u32>> {
    let mut by_round: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for r in records {
        if let Record::Eval(e) = r {
            if e.split == fedsim::records::Split::Test {
                by_round.entry(e.round).or_default().insert(e.client);
            }
        }
    }
    by_round
}

fn run(overrides: &[&str]) -> fedsim::actors::SimOutput {
    simulate_scenario(&scenario(SMALL, overrides), 2, |_| {}).unwrap()
}

#[test]
fn a_fixed_sample_is_the_same_clients_at_every_evaluation() {
    let out = run(&["evaluation.clients=6", "rounds=6"]);
    let rounds = evaluated(&out.records);
    assert_eq!(rounds.keys().copied().collect::<Vec<_>>(), [2, 4, 6]);
    let first = &rounds[&2];
    assert_eq!(first.len(), 6);
    assert!(rounds.values().all(|clients| clients == first));
    // A fraction means ⌊0.25 · 24⌋ = 6 clients too, and the same draw.
    let by_fraction = evaluated(&run(&["evaluation.clients=0.25", "rounds=6"]).records);
    assert_eq!(by_fraction, rounds);
}

#[test]
fn a_fresh_sample_is_drawn_at_each_evaluation() {
    let out = run(&["evaluation={clients: 6, sample: fresh}", "rounds=6"]);
    let rounds = evaluated(&out.records);
    assert!(rounds.values().all(|clients| clients.len() == 6));
    let distinct: BTreeSet<&BTreeSet<u32>> = rounds.values().collect();
    assert!(
        distinct.len() > 1,
        "three draws of 6 of 24 clients, all equal: {rounds:?}"
    );
}

#[test]
fn training_is_the_same_and_the_summary_counts_the_sample() {
    let all = run(&[]);
    let sampled = run(&["evaluation.clients=5"]);
    let jobs = |out: &fedsim::actors::SimOutput| -> Vec<String> {
        out.records
            .iter()
            .filter(|r| matches!(r, Record::Job(_)))
            .map(|r| format!("{r:?}"))
            .collect()
    };
    assert_eq!(
        jobs(&all),
        jobs(&sampled),
        "who trains does not depend on who is tested"
    );
    let chosen = &evaluated(&sampled.records)[&4];
    // The sampled clients' figures are exactly their figures in the full evaluation.
    let rows = |out: &fedsim::actors::SimOutput| -> Vec<String> {
        out.records
            .iter()
            .filter(|r| matches!(r, Record::Eval(e) if chosen.contains(&e.client)))
            .map(|r| format!("{r:?}"))
            .collect()
    };
    assert_eq!(rows(&all), rows(&sampled));
    let run = fedsim::results::RunIdentity {
        run_id: "id",
        name: "small",
        algorithm: "fedavg",
        seed: 7,
        sim_seconds: 0.0,
        wall_seconds: 0.0,
    };
    let summary = fedsim::results::Summary::from_records(run, &sampled.records);
    assert_eq!(summary.clients, 5);
}

#[test]
fn peers_evaluate_only_the_sample() {
    let out = run(&[
        "algorithm={name: d_psgd}",
        "topology={graph: {kind: ring}, mixing: {rule: uniform_neighbour}}",
        "sampling={}",
        "evaluation.clients=4",
    ]);
    let rounds = evaluated(&out.records);
    assert_eq!(rounds.len(), 2);
    assert!(rounds.values().all(|peers| peers.len() == 4));
}

#[test]
fn every_can_be_given_in_the_section_and_is_written_where_it_always_was() {
    let top = scenario(SMALL, &[]);
    let nested = scenario(
        &SMALL.replace("eval_every: 2\n", "evaluation: {every: 2}\n"),
        &[],
    );
    assert_eq!(top.resolved_yaml, nested.resolved_yaml);
    assert_eq!(top.run_id(), nested.run_id());
    assert!(!top.resolved_yaml.contains("evaluation"));
    let sampled = scenario(SMALL, &["evaluation.clients=5"]);
    assert!(sampled
        .resolved_yaml
        .contains("evaluation:\n  clients: 5\n  sample: fixed\n"));
}

/// `evaluation.splits` leaves the other splits' evaluations out and changes nothing else: the
/// records of `[test]` (and of `[val, test]`) are those of the run that measures every split,
/// without the rows of the splits left out, alone and in cohorts. The setting is written into
/// the resolved scenario, and its files are the same with 1 and 2 threads.
#[test]
fn only_the_splits_asked_for_are_measured() {
    for cohorts in ["training.cohorts=off", "training.cohorts=always"] {
        let all = run(&[cohorts]).records;
        assert!(all
            .iter()
            .any(|r| matches!(r, Record::Eval(e) if e.split == Split::Train)));
        for (splits, kept) in [
            ("[test]", &[Split::Test][..]),
            ("[val, test]", &[Split::Val, Split::Test][..]),
        ] {
            let asked = format!("evaluation={{splits: {splits}}}");
            let measured = run(&[cohorts, &asked]).records;
            let expected: Vec<Record> = (all.iter())
                .filter(|r| !matches!(r, Record::Eval(e) if !kept.contains(&e.split)))
                .cloned()
                .collect();
            assert!(measured == expected, "{cohorts} {splits}");
        }
    }
    let test_only = scenario(SMALL, &["evaluation.splits=[test]"]);
    assert!(
        test_only
            .resolved_yaml
            .contains("evaluation:\n  sample: fixed\n  splits:\n  - test\n"),
        "{}",
        test_only.resolved_yaml
    );
    let tmp = tempfile::tempdir().unwrap();
    for threads in [1, 2] {
        let dir = tmp.path().join(threads.to_string());
        run_saving(SMALL, &["evaluation.splits=[test]"], threads, &dir);
    }
    let differ = fedsim::results::differing_files(&tmp.path().join("1"), &tmp.path().join("2"));
    assert!(differ.is_empty(), "1 vs 2 threads: {differ:?}");
}

#[test]
fn bad_evaluation_settings_name_the_field_and_what_is_allowed() {
    let both = error(SMALL, &["evaluation.every=3"]);
    assert!(
        both.contains("`evaluation.every`") && both.contains("not both"),
        "{both}"
    );
    let zero = error(
        &SMALL.replace("eval_every: 2\n", "evaluation: {every: 0}\n"),
        &[],
    );
    assert!(
        zero.contains("bad.yaml:4: field `evaluation.every`: must be at least 1"),
        "{zero}"
    );
    let word = error(&format!("{SMALL}evaluation: {{clients: most}}\n"), &[]);
    assert!(
        word.contains("bad.yaml:10") && word.contains("`all`") && word.contains("most"),
        "{word}"
    );
    let many = error(SMALL, &["evaluation.clients=25"]);
    assert!(
        many.contains("`evaluation.clients`")
            && many.contains("at most the number of clients (24)"),
        "{many}"
    );
    let fraction = error(SMALL, &["evaluation.clients=1.5"]);
    assert!(
        fraction.contains("(0, 1]") && fraction.contains("1.5"),
        "{fraction}"
    );
    let sample = error(SMALL, &["evaluation={clients: 3, sample: sometimes}"]);
    assert!(
        sample.contains("evaluation.sample") && sample.contains("fresh"),
        "{sample}"
    );
    for (splits, says) in [
        (
            "[train, val]",
            "field `evaluation.splits`: must include `test`: the summary",
        ),
        (
            "[test, test]",
            "field `evaluation.splits`: lists a split twice",
        ),
        (
            "[test, backdoor]",
            "field `evaluation.splits[1]`: unknown variant `backdoor`, expected one of `train`, \
             `val`, `test`",
        ),
    ] {
        let e = error(SMALL, &[&format!("evaluation.splits={splits}")]);
        assert!(e.contains(says), "{splits}: {e}");
    }
    let mixture = error(
        &format!("{SMALL}evaluation: {{novelty: max_over_clients}}\n"),
        &["algorithm={name: fedem, components: 2}"],
    );
    assert!(
        mixture.contains("bad.yaml:10: field `evaluation.novelty`")
            && mixture.contains("`fedem` does not score novelty by one classifier's confidence")
            && mixture.contains("`local`")
            && mixture.contains("`own`"),
        "{mixture}"
    );
    let weights = error(
        &format!("{SMALL}evaluation: {{novelty: mean_weights}}\n"),
        &["algorithm.name=fedavg"],
    );
    assert!(
        weights.contains("bad.yaml:10: field `evaluation.novelty`")
            && weights.contains("`fedavg` has no mixture weights; use it with `fedem`")
            && weights.contains("`own`"),
        "{weights}"
    );
    let word = error(SMALL, &["evaluation.novelty=best"]);
    assert!(
        word.contains("evaluation.novelty")
            && word.contains("`own`")
            && word.contains("`max_over_clients`")
            && word.contains("`mean_weights`"),
        "{word}"
    );
}
