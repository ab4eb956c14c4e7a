//! Large populations: data made on demand (`fedem_synthetic`, `synthetic_ab` and
//! `fedgmm_synthetic` with `on_demand: true`) and clients woken only while they have work give
//! the results of the
//! resident run (up to float rounding), the same bytes with any number of threads, and clear
//! errors where they cannot.

use crate::common::{scenario, SMALL};
use fedsim::records::Record;
use fedsim::results::simulate_scenario;

const ON_DEMAND: &str = "data.on_demand=true";
/// Synthetic(α, β) small enough for a test, in place of SMALL's FedEM data.
const SYNTHETIC_AB: &str =
    "data={kind: synthetic_ab, clients: 12, dim: 20, min_samples: 4, size_factor: 2, max_samples: 40}";
/// FedGMM's benchmark with novel rows, so the novelty scores are compared too.
const FEDGMM: &str =
    "data={kind: fedgmm_synthetic, clients: 12, dim: 4, samples: 60, novel_samples: 8}";

fn records(overrides: &[&str], threads: usize) -> Vec<Record> {
    simulate_scenario(&scenario(SMALL, overrides), threads, |_| {})
        .unwrap()
        .records
}

/// Evaluation rows as (round, client, split, model, n, loss, accuracy).
fn evaluations(records: &[Record]) -> Vec<(u32, u32, String, String, usize, f64, f64)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Eval(e) => Some((
                e.round,
                e.client,
                e.split.as_str().into(),
                e.model.as_str().into(),
                e.n_samples,
                e.loss,
                e.accuracy,
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn rows_made_on_demand_give_the_resident_results_up_to_rounding() {
    for settings in [
        vec![],
        vec!["algorithm={name: fedem, components: 3}"],
        vec!["training.cohorts=off"],
        vec!["algorithm={name: pfedme}", "rounds=2"],
        vec![SYNTHETIC_AB],
        vec![SYNTHETIC_AB, "algorithm={name: fedem, components: 2}"],
        vec![FEDGMM, "algorithm={name: fedgmm}"],
    ] {
        let resident = records(&settings, 2);
        let with: Vec<&str> = settings.iter().copied().chain([ON_DEMAND]).collect();
        let lazy = records(&with, 2);
        let jobs = |r: &[Record]| -> Vec<String> {
            r.iter()
                .filter(|r| matches!(r, Record::Job(_)))
                .map(|r| format!("{r:?}"))
                .collect()
        };
        assert_eq!(
            jobs(&resident),
            jobs(&lazy),
            "{settings:?}: the same jobs at the same times"
        );
        let (a, b) = (evaluations(&resident), evaluations(&lazy));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.0, x.1, &x.2, &x.3, x.4), (y.0, y.1, &y.2, &y.3, y.4));
            assert!(
                (x.5 - y.5).abs() <= 1e-5 * x.5.abs().max(1.0),
                "{settings:?}: {x:?} {y:?}"
            );
            assert_eq!(x.6, y.6, "{settings:?}: accuracy");
        }
        let novelty = |r: &[Record]| -> Vec<(u32, u32, usize, usize)> {
            r.iter()
                .filter_map(|r| match r {
                    Record::Novelty(n) => Some((
                        n.round,
                        n.client,
                        n.scores.typical.len(),
                        n.scores.novel.len(),
                    )),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(novelty(&resident), novelty(&lazy), "{settings:?}: novelty");
        if settings.contains(&FEDGMM) {
            assert!(
                novelty(&lazy).iter().all(|n| n.3 == 8),
                "every client's novel rows"
            );
        }
    }
}

#[test]
fn rows_made_on_demand_are_deterministic_across_threads() {
    for data in [None, Some(SYNTHETIC_AB), Some(FEDGMM)] {
        on_demand_files_are_identical_with_1_and_3_threads(data);
    }
}

fn on_demand_files_are_identical_with_1_and_3_threads(data: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for threads in [1, 3] {
        let out = tmp.path().join(format!("t{threads}"));
        let mut settings = vec![
            ON_DEMAND,
            "evaluation={clients: 10, sample: fresh}",
            "algorithm={name: fedem}",
        ];
        settings.extend(data);
        let s = scenario(SMALL, &settings);
        let opts = fedsim::results::RunOptions {
            out_dir: out.clone(),
            threads,
            progress: false,
            force: false,
            save_models: false,
            save_client_models: false,
            keep_unfinished: false,
            checkpoint: Default::default(),
        };
        fedsim::results::run_scenario(&s, &opts).unwrap();
        files.push(
            [
                "metrics.parquet",
                "jobs.parquet",
                "mixtures.parquet",
                "clients.parquet",
            ]
            .map(|f| std::fs::read(out.join(f)).unwrap()),
        );
    }
    assert!(
        files[0] == files[1],
        "{data:?}: 1 and 3 threads wrote different files"
    );
}

#[test]
fn describe_reads_rows_made_on_demand() {
    let resident = scenario(SMALL, &[]);
    let lazy = scenario(SMALL, &[ON_DEMAND]);
    let build = |s: &fedsim::scenario::Scenario| {
        s.data
            .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed))
            .unwrap()
    };
    let (a, b) = (build(&resident), build(&lazy));
    let (da, db) = (
        fedsim::results::DataDescription::of(&a),
        fedsim::results::DataDescription::of(&b),
    );
    assert_eq!(da.splits, db.splits, "the same sizes and label shares");
    assert!(
        da.bayes_test.is_some() && db.bayes_test.is_none(),
        "no truth kept on demand"
    );
    assert!(!da.made_on_demand && db.made_on_demand);
    assert!(db.to_string().contains("rows made on demand"), "{db}");
    assert_eq!(
        fedsim::results::client_label_shares(&a),
        fedsim::results::client_label_shares(&b)
    );
}

#[test]
fn on_demand_errors_name_the_field() {
    let numpy = crate::common::error(SMALL, &[ON_DEMAND, "data.numpy_seed=3"]);
    assert!(
        numpy.contains("field `data.on_demand`") && numpy.contains("numpy_seed"),
        "{numpy}"
    );
    let slowest = simulate_scenario(
        &scenario(
            SMALL,
            &[
                ON_DEMAND,
                "system.compute={samples_per_second: 100, slowest_to_component: 0}",
            ],
        ),
        1,
        |_| {},
    )
    .err()
    .expect("refused");
    let slowest = fedsim::error_chain(&slowest);
    assert!(
        slowest.contains("slowest_to_component") && slowest.contains("on_demand"),
        "{slowest}"
    );
}
