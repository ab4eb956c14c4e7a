//! Bring-your-own data: federated data sets read from Parquet files in the documented layout.

use crate::common::scenario;
use crate::common::write_parquet;
use fedsim::records::Record;
use fedsim::records::Split;
use fedsim::results::read_parquet;
use fedsim::results::{run_scenario, simulate_scenario, RunOptions};
use polars::prelude::*;
use std::path::Path;

/// 3 clients (ids 10, 2, 7 in the file: numbered 2 → 0, 7 → 1, 10 → 2), 2 features, binary
/// labels that follow the first feature; client 7 has rows in all three splits.
fn write_table(path: &Path, with_split: bool, as_list: bool) {
    let mut client = Vec::new();
    let mut split = Vec::new();
    let (mut f0, mut f1, mut label) = (Vec::new(), Vec::new(), Vec::new());
    for (id, n) in [(10i64, 12), (2, 9), (7, 15)] {
        for i in 0..n {
            client.push(id);
            split.push(match i % 5 {
                3 => "val",
                4 => "test",
                _ => "train",
            });
            let x = (i as f32 - n as f32 / 2.0) / n as f32 + id as f32 * 0.01;
            f0.push(x);
            f1.push(1.0 - x);
            label.push((x > 0.0) as i64);
        }
    }
    let mut cols = vec![
        Column::new("cid".into(), client),
        Column::new("y".into(), label),
    ];
    if with_split {
        cols.push(Column::new("part".into(), split));
    }
    if as_list {
        let rows: Vec<Series> = f0
            .iter()
            .zip(&f1)
            .map(|(a, b)| Series::new("".into(), vec![*a, *b]))
            .collect();
        cols.push(Column::new("x".into(), rows));
    } else {
        cols.push(Column::new("f0".into(), f0));
        cols.push(Column::new("f1".into(), f1));
    }
    let mut df = DataFrame::new_infer_height(cols).unwrap();
    write_parquet(path, &mut df).unwrap();
}

fn yaml(path: &Path, data_fields: &str) -> String {
    format!(
        "\
name: byod
rounds: 3
data: {{kind: parquet, path: '{}', client_column: cid, label_column: y, {data_fields}}}
split: {{kind: fractions, train: 0.5, val: 0.25, test: 0.25}}
algorithm: {{name: fedavg}}
training: {{local_epochs: 1, batch_size: 4, lr: 0.5}}
",
        path.display()
    )
}

fn test_rows_per_client(dir: &Path) -> Vec<(u32, String, u32)> {
    let df = read_parquet(&dir.join("metrics.parquet")).unwrap();
    let (c, s, n) = (
        df.column("client").unwrap().u32().unwrap(),
        df.column("split").unwrap().str().unwrap(),
        df.column("n_samples").unwrap().u32().unwrap(),
    );
    let last = df.column("round").unwrap().u32().unwrap();
    (0..df.height())
        .filter(|&i| last.get(i) == Some(3))
        .map(|i| {
            (
                c.get(i).unwrap(),
                s.get(i).unwrap().to_string(),
                n.get(i).unwrap(),
            )
        })
        .collect()
}

#[test]
fn split_column_and_feature_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.parquet");
    write_table(&file, true, false);
    let s = scenario(
        &yaml(&file, "split_column: part, feature_columns: [f0, f1]"),
        &[],
    );
    let out = tmp.path().join("run");
    let opts = RunOptions {
        out_dir: out.clone(),
        threads: 2,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(&s, &opts).unwrap();
    let rows = test_rows_per_client(&out);
    // Client 0 is id 2 (9 rows: i % 5 = 3 → val at 3, 8; = 4 → test at 4).
    let count = |client: u32, split: &str| {
        rows.iter()
            .find(|r| r.0 == client && r.1 == split)
            .map_or(0, |r| r.2)
    };
    assert_eq!(
        (count(0, "train"), count(0, "val"), count(0, "test")),
        (6, 2, 1)
    );
    // Client 2 is id 10 (12 rows), client 1 is id 7 (15 rows).
    assert_eq!(count(2, "train") + count(2, "val") + count(2, "test"), 12);
    assert_eq!(
        (count(1, "train"), count(1, "val"), count(1, "test")),
        (9, 3, 3)
    );
}

#[test]
fn list_column_and_fractions_give_the_same_model_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.parquet"), tmp.path().join("b.parquet"));
    write_table(&a, false, false);
    write_table(&b, false, true);
    let run = |text: String| simulate_scenario(&scenario(&text, &[]), 1, |_| {}).unwrap();
    let by_columns = run(yaml(&a, "feature_columns: [f0, f1]"));
    let by_list = run(yaml(&b, "features_column: x"));
    assert_eq!(by_columns.records, by_list.records);
    // Fractions 0.5 / 0.25 / 0.25 of 9 rows: 5 train, 2 val, 2 test.
    let n: Vec<usize> = by_columns
        .records
        .iter()
        .filter_map(|r| match r {
            fedsim::records::Record::Eval(e) if e.client == 0 && e.round == 3 => Some(e.n_samples),
            _ => None,
        })
        .collect();
    assert_eq!(n, [5, 2, 2]);
}

#[test]
fn a_missing_column_is_named_with_the_file_and_the_columns_it_has() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.parquet");
    write_table(&file, true, false);
    let err = simulate_scenario(
        &scenario(&yaml(&file, "feature_columns: [f0, f2]"), &[]),
        1,
        |_| {},
    )
    .err()
    .unwrap();
    let err = fedsim::error_chain(&err);
    assert!(err.contains("data.parquet"), "{err}");
    assert!(err.contains("no feature column `f2`"), "{err}");
    assert!(err.contains("cid, y, part, f0, f1"), "{err}");
    let err = simulate_scenario(
        &scenario(
            &yaml(&file, "split_column: cid, feature_columns: [f0]"),
            &[],
        ),
        1,
        |_| {},
    )
    .err()
    .unwrap();
    let err = fedsim::error_chain(&err);
    assert!(err.contains("allowed: train, val, test"), "{err}");
}

/// The fixture written by pyarrow (`scripts/dev/make_parquet_fixtures.py`): the same three
/// features in seven layouts.
const FEATURE_TYPES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/parquet/feature_types.parquet"
);

fn feature_types_scenario(column: &str) -> fedsim::scenario::Scenario {
    scenario(
        &format!(
            "\
rounds: 2
data: {{kind: parquet, path: '{FEATURE_TYPES}', features_column: {column}}}
split: {{kind: fractions, train: 0.5, val: 0.25, test: 0.25}}
algorithm: {{name: fedavg}}
training: {{local_epochs: 1, batch_size: 4, lr: 0.1}}
"
        ),
        &[],
    )
}

#[test]
fn every_list_layout_pyarrow_writes_reads_as_the_same_features() {
    let mut first: Option<(Vec<f32>, Vec<fedsim::records::Record>)> = None;
    for column in [
        "fsl_f32",
        "fsl_f64",
        "fsl_u8",
        "fsl_i64",
        "list_f64",
        "list_i32",
        "large_f32",
    ] {
        let s = feature_types_scenario(column);
        let data = s
            .data
            .build(&s.split, &fedsim::sim::SeedTree::new(1))
            .unwrap_or_else(|e| panic!("{column}: {}", fedsim::error_chain(&e)));
        assert_eq!((data.dim, data.num_clients()), (3, 3), "{column}");
        // Client 0 is id 1; its first row is [(0·3 + 1) % 11, (0 + 2) % 7, 0 % 5].
        assert_eq!(&data.features[..3], &[1.0, 2.0, 0.0], "{column}");
        let records = simulate_scenario(&s, 1, |_| {}).unwrap().records;
        match &first {
            None => first = Some((data.features, records)),
            Some((features, recs)) => {
                assert_eq!(&data.features, features, "{column}");
                assert_eq!(&records, recs, "{column}");
            }
        }
    }
}

/// `write_table`'s layout with NaN in feature `f1` of rows 5 and 20 and +inf in row 30.
fn write_table_with_bad_numbers(path: &Path) {
    write_table(path, false, false);
    let mut df = read_parquet(path).unwrap();
    let f1: Vec<f32> = df
        .column("f1")
        .unwrap()
        .f32()
        .unwrap()
        .into_no_null_iter()
        .enumerate()
        .map(|(r, v)| match r {
            5 | 20 => f32::NAN,
            30 => f32::INFINITY,
            _ => v,
        })
        .collect();
    df.replace("f1", Column::new("f1".into(), f1)).unwrap();
    write_parquet(path, &mut df).unwrap();
}

#[test]
fn nan_and_infinite_features_are_refused_or_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.parquet");
    write_table_with_bad_numbers(&file);
    let s = scenario(&yaml(&file, "feature_columns: [f0, f1]"), &[]);
    let err = fedsim::error_chain(&simulate_scenario(&s, 1, |_| {}).err().unwrap());
    assert!(
        err.ends_with(&format!(
            "{}: 3 rows have NaN or infinite features; the first is row 5 (client `10`, column \
             `f1`); fix the data or set `data.non_finite: drop` to leave such rows out",
            file.display()
        )),
        "{err}"
    );
    // Dropped: the three rows are gone. File rows 0-11 are client 10's, 12-20 client 2's and
    // 21-35 client 7's, so each client loses one.
    let s = scenario(
        &yaml(&file, "feature_columns: [f0, f1], non_finite: drop"),
        &[],
    );
    let data = s
        .data
        .build(&s.split, &fedsim::sim::SeedTree::new(1))
        .unwrap();
    assert_eq!(data.labels.len(), 36 - 3);
    assert!(data.features.iter().all(|x| x.is_finite()));
    let rows = |c: usize| {
        [
            fedsim::records::Split::Train,
            fedsim::records::Split::Val,
            fedsim::records::Split::Test,
        ]
        .into_iter()
        .map(|sp| data.split_len(c, sp))
        .sum::<usize>()
    };
    // Clients in id order: 2, 7, 10.
    assert_eq!((rows(0), rows(1), rows(2)), (8, 14, 11));
    simulate_scenario(&s, 1, |_| {}).unwrap();
}

/// `write_table`'s rows sorted by client id (stably) and written in row groups of 5 rows, so
/// that clients span row groups.
fn write_sorted_in_small_groups(path: &Path, with_split: bool) {
    write_table(path, with_split, false);
    let df = read_parquet(path).unwrap();
    let mut df = df
        .sort(
            ["cid"],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .unwrap();
    let file = std::fs::File::create(path).unwrap();
    ParquetWriter::new(file)
        .with_row_group_size(Some(5))
        .finish(&mut df)
        .unwrap();
}

#[test]
fn rows_read_on_demand_are_the_rows_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    for with_split in [false, true] {
        let file = tmp.path().join(format!("sorted-{with_split}.parquet"));
        write_sorted_in_small_groups(&file, with_split);
        let fields = if with_split {
            "split_column: part, feature_columns: [f0, f1], scale: 2.0"
        } else {
            "feature_columns: [f0, f1], scale: 2.0"
        };
        let whole = scenario(&yaml(&file, fields), &[]);
        let lazy = scenario(&yaml(&file, fields), &["data.on_demand=true"]);
        let build = |s: &fedsim::scenario::Scenario| {
            s.data
                .build(&s.split, &fedsim::sim::SeedTree::new(1))
                .unwrap()
        };
        let (a, b) = (build(&whole), build(&lazy));
        assert!(b.on_demand.is_some() && b.features.is_empty());
        assert_eq!(
            (a.num_clients(), a.dim, a.classes),
            (b.num_clients(), b.dim, b.classes)
        );
        let clients: Vec<u32> = (0..a.num_clients() as u32).collect();
        let (ra, rb) = (a.rows_for(&clients), b.rows_for(&clients));
        for (k, _) in clients.iter().enumerate() {
            for split in [Split::Train, Split::Val, Split::Test] {
                let va = ra.data().view(ra.index(k), split);
                let vb = rb.data().view(rb.index(k), split);
                assert_eq!(va.labels, vb.labels, "client {k} {split:?}");
                assert_eq!(va.features, vb.features, "client {k} {split:?}");
            }
        }
        // The same jobs and accuracies (losses agree up to float rounding: rows made on demand
        // sit at another address).
        let run = |s, threads| simulate_scenario(s, threads, |_| {}).unwrap().records;
        let (ra, rb) = (run(&whole, 2), run(&lazy, 2));
        // Rows read on demand: the same records with 1, 2 and 3 trainer threads.
        assert_eq!(rb, run(&lazy, 1));
        assert_eq!(rb, run(&lazy, 3));
        assert_eq!(ra.len(), rb.len());
        for (x, y) in ra.iter().zip(&rb) {
            match (x, y) {
                (Record::Eval(x), Record::Eval(y)) => {
                    assert_eq!(
                        (x.client, x.round, x.accuracy),
                        (y.client, y.round, y.accuracy)
                    );
                    assert!((x.loss - y.loss).abs() <= 1e-5 * x.loss.abs().max(1.0));
                }
                (Record::FinalModels(_), Record::FinalModels(_)) => {}
                _ => assert_eq!(x, y),
            }
        }
    }
}

#[test]
fn on_demand_needs_rows_sorted_by_client_and_cannot_drop_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("data.parquet");
    write_table(&file, false, false);
    let s = scenario(
        &yaml(&file, "feature_columns: [f0, f1], on_demand: true"),
        &[],
    );
    let err = simulate_scenario(&s, 1, |_| {}).err().unwrap();
    let err = fedsim::error_chain(&err);
    // Ids 10 (12 rows), then 2: row 12 is out of order.
    assert!(err.contains("data.parquet"), "{err}");
    assert!(
        err.contains("row 12: client `2` comes after client `10`") && err.contains("sorted"),
        "{err}"
    );
    let err = crate::common::error(
        &yaml(
            &file,
            "feature_columns: [f0, f1], on_demand: true, non_finite: drop",
        ),
        &[],
    );
    assert!(
        err.contains("data.on_demand") && err.contains("non_finite: drop"),
        "{err}"
    );
}

/// A pooled table (no client column): 400 rows of 10 labels (in 5 coarse pairs), 2 features.
fn write_pool(path: &Path) {
    let label: Vec<i64> = (0..400).map(|i| (i * 7 % 10) as i64).collect();
    let f0: Vec<f32> = (0..400).map(|i| (i % 13) as f32 / 13.0).collect();
    let f1: Vec<f32> = label.iter().map(|&y| y as f32 / 10.0).collect();
    let mut df = DataFrame::new_infer_height(vec![
        Column::new("y".into(), label),
        Column::new("f0".into(), f0),
        Column::new("f1".into(), f1),
    ])
    .unwrap();
    write_parquet(path, &mut df).unwrap();
}

#[test]
fn a_pooled_table_is_dealt_by_a_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("pool.parquet");
    write_pool(&file);
    let text = format!(
        "\
name: pooled
rounds: 2
data: {{kind: parquet, path: '{}', label_column: y, feature_columns: [f0, f1],
        partition: {{kind: pachinko, clients: 8, alpha: 0.4, beta: 10,
                     coarse: [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]}}}}
split: {{kind: fractions, train: 0.6, val: 0.2, test: 0.2}}
algorithm: {{name: fedavg}}
training: {{local_epochs: 1, batch_size: 8, lr: 0.5}}
",
        file.display()
    );
    let s = scenario(&text, &[]);
    let runs: Vec<Vec<Record>> = [1, 3]
        .iter()
        .map(|&threads| simulate_scenario(&s, threads, |_| {}).unwrap().records)
        .collect();
    assert_eq!(runs[0], runs[1], "1 and 3 trainer threads");
    // 8 clients of ⌊400 / 8⌋ = 50 rows: 30 / 10 / 10.
    let mut rows = std::collections::BTreeMap::new();
    for r in &runs[0] {
        if let Record::Eval(e) = r {
            if e.round == 2 {
                rows.insert((e.client, format!("{:?}", e.split)), e.n_samples);
            }
        }
    }
    let clients: std::collections::BTreeSet<u32> = rows.keys().map(|(c, _)| *c).collect();
    assert_eq!(clients.len(), 8, "{rows:?}");
    for ((_, split), n) in &rows {
        assert_eq!(*n, if split == "Train" { 30 } else { 10 }, "{rows:?}");
    }

    // Bad partitions name their field, or the file and what is allowed.
    let bad = |partition: &str, extra: &str| {
        let text = text.replace(
            "partition: {kind: pachinko, clients: 8, alpha: 0.4, beta: 10,\n                     coarse: [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]}",
            &format!("partition: {partition}{extra}"),
        );
        assert!(text.contains(partition), "the partition was replaced");
        match fedsim::scenario::Scenario::from_yaml(&text, Path::new("bad.yaml"), &[]) {
            Err(e) => fedsim::error_chain(&e),
            Ok(s) => fedsim::error_chain(&simulate_scenario(&s, 1, |_| {}).err().unwrap()),
        }
    };
    let e = bad("{kind: natural}", "");
    assert!(
        e.contains("data.partition") && e.contains("client_column"),
        "{e}"
    );
    let e = bad("{kind: pachinko, clients: 8}", ", on_demand: true");
    assert!(e.contains("data.on_demand"), "{e}");
    let e = bad("{kind: pachinko, clients: 8, beta: -1}", "");
    assert!(
        e.contains("data.partition.beta") && e.contains("must be a positive number"),
        "{e}"
    );
    let e = bad("{kind: pachinko, clients: 8}", "");
    assert!(
        e.contains("pool.parquet") && e.contains("for 100 fine labels; the data has 10 classes"),
        "{e}"
    );
}

/// A Python with numpy and pyarrow (`scripts/test.sh` puts them in `.venv`), or `None` after
/// saying why this check cannot run (which fails under CI).
fn python_with_pyarrow(check: &str) -> Option<std::path::PathBuf> {
    let python = Path::new(".venv/bin/python").to_path_buf();
    let ok = std::process::Command::new(&python)
        .args(["-c", "import numpy, pyarrow"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::common::skipped(check, ".venv/bin/python has no numpy and pyarrow");
        return None;
    }
    Some(python)
}

/// Makes a small archive in CIFAR's layout with Python (`kind`: the archive's folder), runs
/// `scripts/cifar_to_parquet.py` on it and reads the Parquet file with fedsim. Image k of
/// the archive (in written order) has pixel j = (7k + j) mod 256 and label k mod classes.
fn convert_cifar(python: &Path, dir: &Path, kind: &str) -> fedsim::data::FederatedData {
    let archive = dir.join(format!("{kind}.tar.gz"));
    let out = dir.join(format!("{kind}.parquet"));
    let make = format!(
        r#"
import io, pickle, tarfile, numpy as np
kind = "{kind}"
members = [f"data_batch_{{i}}" for i in range(1, 6)] + ["test_batch"] if kind == "cifar-10-batches-py" else ["train", "test"]
classes = 10 if kind == "cifar-10-batches-py" else 100
k = 0
with tarfile.open("{archive}", "w:gz") as tar:
    for m in members:
        n = 3 if m != "test" and m != "test_batch" else 2
        data = np.array([[(7 * (k + i) + j) % 256 for j in range(3072)] for i in range(n)], dtype=np.uint8)
        labels = [(k + i) % classes for i in range(n)]
        batch = {{b"data": data}}
        if classes == 10:
            batch[b"labels"] = labels
        else:
            batch[b"fine_labels"] = labels
            batch[b"coarse_labels"] = [l // 5 for l in labels]
        k += n
        blob = pickle.dumps(batch)
        info = tarfile.TarInfo(f"{{kind}}/{{m}}")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
"#,
        archive = archive.display()
    );
    let status = std::process::Command::new(python)
        .args(["-c", &make])
        .status()
        .unwrap();
    assert!(status.success(), "making the archive");
    let run = std::process::Command::new(python)
        .arg("scripts/cifar_to_parquet.py")
        .arg(&archive)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let s = scenario(
        "rounds: 1\ndata: {kind: parquet, path: PATH, features_column: x, label_column: y, \
         shape: [3, 32, 32], scale: 255, classes: CLASSES, \
         partition: {kind: iid, clients: 2}}\nsplit: {kind: fractions, train: 0.5, val: 0, \
         test: 0.5}\nalgorithm: {name: fedavg}\n"
            .replace("PATH", &out.display().to_string())
            .replace(
                "CLASSES",
                if kind == "cifar-10-batches-py" {
                    "10"
                } else {
                    "100"
                },
            )
            .as_str(),
        &[],
    );
    s.data
        .build(&s.split, &fedsim::sim::SeedTree::new(1))
        .unwrap()
}

#[test]
fn cifar_archives_convert_to_parquet_that_fedsim_reads() {
    let Some(python) = python_with_pyarrow("cifar_archives_convert_to_parquet_that_fedsim_reads")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for (kind, images, classes) in [
        ("cifar-10-batches-py", 17, 10),
        ("cifar-100-python", 5, 100),
    ] {
        let data = convert_cifar(&python, tmp.path(), kind);
        assert_eq!(data.labels.len(), images, "{kind}: every image once");
        assert_eq!(data.classes, classes);
        assert_eq!(data.layout, fedsim::data::Layout::Image([3, 32, 32]));
        // Every row is one of the archive's images, pixels / 255, with its label.
        let mut seen = vec![false; images];
        for r in 0..images {
            let row = &data.features[r * 3072..(r + 1) * 3072];
            let k = (0..images)
                .find(|&k| (0..3072).all(|j| row[j] == ((7 * k + j) % 256) as f32 / 255.0))
                .unwrap_or_else(|| panic!("{kind}: row {r} is no image of the archive"));
            assert!(!seen[k], "{kind}: image {k} twice");
            seen[k] = true;
            assert_eq!(
                data.labels[r],
                (k % classes) as i64,
                "{kind}: image {k}'s label"
            );
        }
    }
    // What is not CIFAR's layout is refused with what was expected.
    let bad = tmp.path().join("other.tar.gz");
    let make = format!(
        "import tarfile, io\nwith tarfile.open('{}', 'w:gz') as t:\n    \
         i = tarfile.TarInfo('images/a'); i.size = 1; t.addfile(i, io.BytesIO(b'x'))",
        bad.display()
    );
    assert!(std::process::Command::new(&python)
        .args(["-c", &make])
        .status()
        .unwrap()
        .success());
    let run = std::process::Command::new(&python)
        .arg("scripts/cifar_to_parquet.py")
        .arg(&bad)
        .arg(tmp.path().join("o.parquet"))
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("expected the folder cifar-10-batches-py/ or cifar-100-python/"),
        "{err}"
    );
}
