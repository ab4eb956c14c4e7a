//! A client population described in one file (CSV or Parquet): device speed, links,
//! availability class and data size, a column each.

use crate::common::write_parquet;
use crate::common::{scenario, SMALL};
use fedsim::records::Record;
use fedsim::results::simulate_scenario;
use polars::prelude::*;
use std::path::Path;

const CLIENTS: usize = 24;

/// Client c: speed 100 + 10c samples/s, downlink 1 + c Mb/s, uplink half of that, latency c ms,
/// class `always` for even clients and `phone` for odd ones, 20 + c samples.
fn population(c: usize) -> (f64, f64, f64, f64, &'static str, u32) {
    let class = if c % 2 == 0 { "always" } else { "phone" };
    let down = 1.0 + c as f64;
    (
        100.0 + 10.0 * c as f64,
        down,
        down / 2.0,
        c as f64,
        class,
        20 + c as u32,
    )
}

fn write_csv(path: &Path) {
    let mut text = String::from(
        "# one row per client\nclient,samples_per_second,downlink_mbps,uplink_mbps,latency_ms,availability,samples\n",
    );
    // Rows in reverse order: the `client` column says whose row it is.
    for c in (0..CLIENTS).rev() {
        let (sps, down, up, lat, class, n) = population(c);
        text.push_str(&format!("{c},{sps},{down},{up},{lat},{class},{n}\n"));
    }
    std::fs::write(path, text).unwrap();
}

fn write_parquet_file(path: &Path) {
    let rows: Vec<_> = (0..CLIENTS).map(population).collect();
    let mut df = DataFrame::new_infer_height(vec![
        Column::new("client".into(), (0..CLIENTS as i64).collect::<Vec<_>>()),
        Column::new(
            "samples_per_second".into(),
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        ),
        Column::new(
            "downlink_mbps".into(),
            rows.iter().map(|r| r.1).collect::<Vec<_>>(),
        ),
        Column::new(
            "uplink_mbps".into(),
            rows.iter().map(|r| r.2).collect::<Vec<_>>(),
        ),
        Column::new(
            "latency_ms".into(),
            rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        ),
        Column::new(
            "availability".into(),
            rows.iter().map(|r| r.4).collect::<Vec<_>>(),
        ),
        Column::new(
            "samples".into(),
            rows.iter().map(|r| r.5).collect::<Vec<_>>(),
        ),
    ])
    .unwrap();
    write_parquet(path, &mut df).unwrap();
}

/// The settings that read every quantity from `file`.
fn from_file(file: &Path) -> Vec<String> {
    let f = file.display();
    let column = |c: &str| format!("{{dist: file, path: '{f}', column: {c}}}");
    vec![
        format!("data.sizes_from={{path: '{f}', column: samples}}"),
        format!("system.compute.samples_per_second={}", column("samples_per_second")),
        format!("system.network.downlink_mbps={}", column("downlink_mbps")),
        format!("system.network.uplink_mbps={}", column("uplink_mbps")),
        format!("system.network.latency_ms={}", column("latency_ms")),
        format!(
            "system.availability={{kind: classes, path: '{f}', classes: {{always: {{kind: always}}, \
             phone: {{kind: markov, mean_online_s: 5, mean_offline_s: 20}}}}}}"
        ),
        "sampling.available_only=true".into(),
    ]
}

fn run(file: &Path) -> Vec<Record> {
    run_on(file, 2)
}

fn run_on(file: &Path, threads: usize) -> Vec<Record> {
    let settings = from_file(file);
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    simulate_scenario(&scenario(SMALL, &settings), threads, |_| {})
        .unwrap_or_else(|e| panic!("{}", fedsim::error_chain(&e)))
        .records
}

#[test]
fn one_file_describes_devices_links_availability_and_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let (csv, parquet) = (tmp.path().join("pop.csv"), tmp.path().join("pop.parquet"));
    write_csv(&csv);
    write_parquet_file(&parquet);
    let records = run(&csv);
    assert_eq!(
        records,
        run(&parquet),
        "CSV and Parquet describe the same population"
    );
    for r in &records {
        match r {
            Record::Device(d) => {
                let (sps, down, up, _, _, _) = population(d.client as usize);
                assert_eq!(
                    (d.samples_per_second, d.downlink_mbps, d.uplink_mbps),
                    (sps, down, up)
                );
            }
            // Train, val and test rows of a client add up to its `samples`.
            Record::Eval(e) if e.round == 4 && e.split == fedsim::records::Split::Test => {
                let n = population(e.client as usize).5 as f64;
                assert_eq!(
                    e.n_samples,
                    (n * 0.2).round() as usize,
                    "client {}",
                    e.client
                );
            }
            // Only the `phone` class goes offline.
            Record::Job(j) if j.outcome == fedsim::records::JobOutcome::Failed => {
                assert_eq!(j.client % 2, 1, "{j:?}");
            }
            _ => {}
        }
    }
    let started: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Job(j) => Some(j.client),
            _ => None,
        })
        .collect();
    assert!(started.iter().any(|c| c % 2 == 0) && !started.is_empty());
}

#[test]
fn population_errors_name_the_file_the_client_and_what_is_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("pop.parquet");
    write_parquet_file(&file);
    let f = file.display();
    let fail = |settings: &[String]| {
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        let e = simulate_scenario(&scenario(SMALL, &settings), 1, |_| {})
            .err()
            .unwrap_or_else(|| panic!("{settings:?} should fail"));
        fedsim::error_chain(&e)
    };
    let e = fail(&[format!(
        "system.availability={{kind: classes, path: '{f}', classes: {{always: {{kind: always}}}}}}"
    )]);
    assert!(
        e.contains("pop.parquet")
            && e.contains("client 1: availability class `phone`")
            && e.contains("(always)"),
        "{e}"
    );
    let e = fail(&[format!(
        "system.compute.samples_per_second={{dist: file, path: '{f}', column: speed}}"
    )]);
    assert!(
        e.contains("no column `speed`") && e.contains("samples_per_second"),
        "{e}"
    );
    let e = fail(&[format!(
        "data.sizes_from={{path: '{f}', column: uplink_mbps}}"
    )]);
    assert!(
        e.contains("row 0: column `uplink_mbps` (client 0): must be a whole number"),
        "{e}"
    );
    let e = crate::common::error(
        SMALL,
        &["system.availability={kind: classes, path: p.csv, classes: {}}"],
    );
    assert!(e.contains("system.availability.classes"), "{e}");
}
