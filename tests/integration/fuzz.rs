//! The parsers never panic: scenario text, `--set` overrides, sweep files, Parquet data files
//! (corrupted, and with random schemas, types, sizes and values) and CSV files, fed arbitrary
//! and mutated input, give `Ok` or a clean error that says where; result folders in any state
//! (foreign files, fedsim's own, staging folders, a held lock) give results or a clear error and
//! keep every foreign file.
//!
//! Cases are drawn from a seeded ChaCha stream; `FEDSIM_FUZZ_CASES` (default 5000 per target)
//! and `FEDSIM_FUZZ_SEED` (default 1) change how many and which. A longer search:
//!   FEDSIM_FUZZ_CASES=200000 cargo test --release --test integration fuzz -- --nocapture

use fedsim::data::SplitSpec;
use fedsim::scenario::{Scenario, ScenarioError};
use fedsim::sim::SeedTree;
use fedsim::studies::Sweep;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_yaml::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn cases() -> usize {
    std::env::var("FEDSIM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

fn rng(target: u64) -> ChaCha8Rng {
    let seed: u64 = std::env::var("FEDSIM_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    ChaCha8Rng::seed_from_u64(seed.wrapping_mul(1000) + target)
}

/// Runs `f`, turning a panic into a test failure that shows the input.
fn no_panic<T>(what: &str, input: &dyn std::fmt::Debug, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{what} panicked ({msg}) on input {input:?}")
        }
    }
}

/// The shipped scenarios' texts (every algorithm, data set, policy and system setting they use).
fn scenario_texts() -> Vec<(PathBuf, String)> {
    crate::common::shipped_scenario_files()
        .into_iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            // Sweep files have a `base`; keep the scenarios.
            (!text.lines().any(|l| l.starts_with("base:"))).then_some((f, text))
        })
        .collect()
}

/// Every dotted field path of a YAML tree (maps only; list items by index).
fn field_paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m {
                let Some(k) = k.as_str() else { continue };
                let p = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(p.clone());
                field_paths(child, &p, out);
            }
        }
        Value::Sequence(s) => {
            for (i, child) in s.iter().enumerate().take(2) {
                let p = format!("{prefix}.{i}");
                out.push(p.clone());
                field_paths(child, &p, out);
            }
        }
        _ => {}
    }
}

/// Every field path of the shipped scenarios, with defaults filled in.
fn known_paths() -> Vec<String> {
    let mut paths = Vec::new();
    for (file, text) in scenario_texts() {
        let s = Scenario::from_yaml(&text, &file, &[]).expect("shipped scenarios are valid");
        let tree: Value = serde_yaml::from_str(&s.resolved_yaml).unwrap();
        field_paths(&tree, "", &mut paths);
    }
    paths.sort();
    paths.dedup();
    paths
}

/// Values that break naive code: edges of every type, as YAML text.
const EDGE_VALUES: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1",
    "2",
    "3",
    "0.5",
    "-0.5",
    "1.0e-300",
    "1.0e308",
    "-1.0e308",
    ".nan",
    ".inf",
    "-.inf",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "''",
    "x",
    "fedavg",
    "[]",
    "[1, 2]",
    "[0]",
    "[-1, 5]",
    "[.nan]",
    "{}",
    "{kind: x}",
    "{name: fedem}",
    "{kind: fractions}",
    "[[]]",
    "{a: {b: {c: 1}}}",
    "1000000000000",
    "0.0",
    "-0.0",
    "'0'",
    "~",
];

/// A random YAML value (nested up to `depth`).
fn random_value(rng: &mut ChaCha8Rng, depth: u32) -> String {
    match rng.gen_range(0..if depth == 0 { 4 } else { 6 }) {
        0 => EDGE_VALUES[rng.gen_range(0..EDGE_VALUES.len())].to_string(),
        1 => format!("{}", rng.gen::<i64>() >> rng.gen_range(0..63)),
        2 => format!(
            "{:e}",
            rng.gen::<f64>() * 10f64.powi(rng.gen_range(-10..12))
        ),
        3 => format!("'{}'", random_text(rng, 8).replace('\'', "''")),
        4 => {
            let n = rng.gen_range(0..4);
            let items: Vec<String> = (0..n).map(|_| random_value(rng, depth - 1)).collect();
            format!("[{}]", items.join(", "))
        }
        _ => {
            let n = rng.gen_range(0..3);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let key = ["kind", "name", "x", "rule", "dist", "path"][rng.gen_range(0..6)];
                    format!("{key}: {}", random_value(rng, depth - 1))
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// Random characters, weighted towards YAML's and `--set`'s syntax.
fn random_text(rng: &mut ChaCha8Rng, max: usize) -> String {
    const SYNTAX: &[char] = &[
        '=', '.', ':', ' ', '{', '}', '[', ']', ',', '-', '#', '\'', '"', '\n', '\t', '&', '*',
        '!', '|', '>', '%', '@', '0', '1', '9', 'a', 'z', 'é', '∞', '\u{0}',
    ];
    let n = rng.gen_range(0..=max);
    (0..n)
        .map(|_| match rng.gen_range(0..3) {
            0 => SYNTAX[rng.gen_range(0..SYNTAX.len())],
            1 => rng.gen_range(b'a'..=b'z') as char,
            _ => char::from_u32(rng.gen_range(0..0x3000)).unwrap_or('?'),
        })
        .collect()
}

/// `text` with a few random byte-level edits: flips, insertions, deletions, a truncation.
fn mutate(rng: &mut ChaCha8Rng, text: &[u8]) -> Vec<u8> {
    let mut b = text.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        if b.is_empty() {
            break;
        }
        let i = rng.gen_range(0..b.len());
        match rng.gen_range(0..4) {
            0 => b[i] ^= 1 << rng.gen_range(0..8),
            1 => {
                const SYNTAX: &[u8] = b"{}[]:,-#'\"\n 0.9";
                b.insert(i, SYNTAX[rng.gen_range(0..SYNTAX.len())])
            }
            2 => {
                b.remove(i);
            }
            _ => b.truncate(i),
        }
    }
    b
}

/// A scenario error must say where: a field path, or for text that is not YAML the line.
fn assert_located(e: &ScenarioError, input: &dyn std::fmt::Debug) {
    match e {
        ScenarioError::Invalid {
            path,
            line,
            message,
            ..
        } => assert!(
            !path.is_empty()
                || line.is_some()
                || message.contains("field `")
                || message.starts_with("not valid YAML"),
            "unlocated error `{e}` on {input:?}"
        ),
        ScenarioError::Override { .. } | ScenarioError::Read { .. } => {}
    }
}

#[test]
fn scenario_text_never_panics() {
    let texts = scenario_texts();
    let mut rng = rng(1);
    for _ in 0..cases() {
        let bytes = match rng.gen_range(0..3) {
            0 => (0..rng.gen_range(0..200))
                .map(|_| rng.gen::<u8>())
                .collect(),
            1 => random_text(&mut rng, 200).into_bytes(),
            _ => {
                let pick = rng.gen_range(0..texts.len());
                mutate(&mut rng, texts[pick].1.as_bytes())
            }
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let result = no_panic("Scenario::from_yaml", &text, || {
            Scenario::from_yaml(&text, Path::new("fuzz.yaml"), &[])
        });
        if let Err(e) = result {
            assert_located(&e, &text);
        }
    }
}

#[test]
fn any_value_at_any_known_field_gives_ok_or_an_error_with_its_path() {
    let texts = scenario_texts();
    let paths = known_paths();
    assert!(paths.len() > 60, "{} paths", paths.len());
    let mut rng = rng(2);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..cases() {
        let (file, text) = &texts[rng.gen_range(0..texts.len())];
        let overrides: Vec<String> = (0..rng.gen_range(1..3))
            .map(|_| {
                let path = &paths[rng.gen_range(0..paths.len())];
                format!("{path}={}", random_value(&mut rng, 2))
            })
            .collect();
        let input = (file, &overrides);
        match no_panic("Scenario::from_yaml", &input, || {
            Scenario::from_yaml(text, file, &overrides)
        }) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused += 1;
                if let ScenarioError::Invalid { path, message, .. } = &e {
                    assert!(
                        !path.is_empty() || message.contains("field"),
                        "no field path in `{e}` for {input:?}"
                    );
                }
                assert_located(&e, &input);
            }
        }
    }
    eprintln!(
        "known fields: {} paths, {ok} accepted, {refused} refused",
        paths.len()
    );
}

#[test]
fn random_set_strings_never_panic() {
    let (file, text) = &scenario_texts()[0];
    let paths = known_paths();
    let mut rng = rng(3);
    for _ in 0..cases() {
        let arg = match rng.gen_range(0..3) {
            0 => random_text(&mut rng, 40),
            1 => format!(
                "{}{}",
                paths[rng.gen_range(0..paths.len())],
                random_text(&mut rng, 12)
            ),
            _ => format!(
                "{}={}",
                random_text(&mut rng, 12),
                random_text(&mut rng, 12)
            ),
        };
        let input = [arg];
        if let Err(e) = no_panic("--set", &input, || Scenario::from_yaml(text, file, &input)) {
            assert_located(&e, &input);
        }
    }
}

#[test]
fn sweep_files_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("small.yaml"), crate::common::SMALL).unwrap();
    let file = tmp.path().join("sweep.yaml");
    let paths = known_paths();
    let good = "name: s\nbase: small.yaml\ngrid:\n  sampling.fraction: [0.25, 0.5]\n  \
                algorithm: [{name: fedavg}, {name: local}]\nzip:\n  training.lr: [0.1, 0.2]\n  \
                training.batch_size: [8, 16]\nseeds: [1, 2]\n";
    let mut rng = rng(4);
    for _ in 0..cases() / 3 {
        let text = match rng.gen_range(0..3) {
            0 => String::from_utf8_lossy(&mutate(&mut rng, good.as_bytes())).into_owned(),
            1 => format!("base: small.yaml\n{}", random_text(&mut rng, 120)),
            _ => {
                let axis = |rng: &mut ChaCha8Rng| {
                    let values: Vec<String> = (0..rng.gen_range(1..3))
                        .map(|_| random_value(rng, 1))
                        .collect();
                    format!(
                        "  {}: [{}]\n",
                        paths[rng.gen_range(0..paths.len())],
                        values.join(", ")
                    )
                };
                let (a, b) = (axis(&mut rng), axis(&mut rng));
                let seeds = random_value(&mut rng, 1);
                format!("base: small.yaml\ngrid:\n{a}{b}seeds: {seeds}\n")
            }
        };
        let r = no_panic("Sweep::from_yaml", &text, || Sweep::from_yaml(&text, &file));
        if let Err(e) = r {
            let msg = fedsim::error_chain(&e);
            assert!(msg.starts_with(&file.display().to_string()), "{msg}");
        }
    }
}

#[test]
fn truncated_and_corrupted_parquet_files_give_errors_not_panics() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/parquet/feature_types.parquet"
    );
    let good = std::fs::read(fixture).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.parquet");
    let mut rng = rng(5);
    let split = SplitSpec::default();
    let (mut ok, mut refused) = (0, 0);
    for i in 0..cases() / 3 {
        let bytes = match i % 3 {
            0 => good[..rng.gen_range(0..good.len())].to_vec(),
            1 => {
                let mut b = good.clone();
                for _ in 0..rng.gen_range(1..8) {
                    let j = rng.gen_range(0..b.len());
                    b[j] ^= 1 << rng.gen_range(0..8);
                }
                b
            }
            _ => mutate(&mut rng, &good),
        };
        std::fs::write(&path, &bytes).unwrap();
        let column = ["fsl_f32", "fsl_u8", "list_f64", "large_f32"][rng.gen_range(0..4)];
        let spec: fedsim::data::DatasetSpec = serde_yaml::from_str(&format!(
            "{{kind: parquet, path: '{}', features_column: {column}}}",
            path.display()
        ))
        .unwrap();
        match no_panic("the Parquet loader", &(i, column, bytes.len()), || {
            spec.build(&split, &SeedTree::new(1))
        }) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused += 1;
                let msg = fedsim::error_chain(&e);
                assert!(msg.starts_with(&path.display().to_string()), "{msg}");
            }
        }
    }
    eprintln!("corrupted Parquet: {ok} still readable, {refused} refused");
}

/// A random column of `rows` values named `name`: integers of every width and sign (edges
/// included), floats (NaN, infinities, past f32's range), text, booleans, lists, or nulls.
fn random_column(rng: &mut ChaCha8Rng, name: &str, rows: usize) -> polars::prelude::Column {
    use polars::prelude::*;
    let name: PlSmallStr = name.into();
    let int = |rng: &mut ChaCha8Rng| -> i64 {
        match rng.gen_range(0..6) {
            0 => rng.gen_range(-3..12),
            1 => i64::MAX,
            2 => i64::MIN,
            3 => 1 << rng.gen_range(20..63),
            _ => rng.gen_range(0..4),
        }
    };
    let float = |rng: &mut ChaCha8Rng| -> f64 {
        match rng.gen_range(0..8) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => 1e300,
            3 => -1e39,
            4 => f64::MIN_POSITIVE,
            _ => rng.gen_range(-2.0..2.0),
        }
    };
    match rng.gen_range(0..9) {
        0 => Column::new(name, (0..rows).map(|_| int(rng)).collect::<Vec<i64>>()),
        1 => Column::new(
            name,
            (0..rows).map(|_| int(rng) as u64).collect::<Vec<u64>>(),
        ),
        2 => Column::new(name, (0..rows).map(|_| int(rng) as i8).collect::<Vec<i8>>()),
        3 => Column::new(name, (0..rows).map(|_| float(rng)).collect::<Vec<f64>>()),
        4 => Column::new(
            name,
            (0..rows).map(|_| float(rng) as f32).collect::<Vec<f32>>(),
        ),
        5 => Column::new(
            name,
            (0..rows)
                .map(|_| random_text(rng, 4))
                .collect::<Vec<String>>(),
        ),
        6 => Column::new(
            name,
            (0..rows).map(|_| rng.gen_bool(0.5)).collect::<Vec<bool>>(),
        ),
        7 => {
            let width = rng.gen_range(0..4);
            let lists: Vec<Series> = (0..rows)
                .map(|_| {
                    let n = if rng.gen_bool(0.9) { width } else { width + 1 };
                    Series::new("".into(), (0..n).map(|_| float(rng)).collect::<Vec<f64>>())
                })
                .collect();
            Column::new(name, lists)
        }
        _ => Column::new(
            name,
            (0..rows)
                .map(|_| rng.gen_bool(0.7).then(|| int(rng)))
                .collect::<Vec<Option<i64>>>(),
        ),
    }
}

/// The data path never panics: Parquet files with random schemas, types, sizes and values, read
/// whole or on demand, give data (whose model then passes or fails the memory check) or an
/// error about the file.
#[test]
fn random_parquet_schemas_give_data_or_an_error_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("random.parquet");
    let mut rng = rng(6);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..(cases() / 25).max(20) {
        let rows = [0, 1, 3, 8, 40][rng.gen_range(0..5)];
        let mut cols = Vec::new();
        for name in ["c", "y", "x", "s"] {
            if rng.gen_bool(0.05) {
                continue;
            }
            // Mostly a column as the documented layout has it, else anything.
            cols.push(match (rng.gen_bool(0.7), name) {
                (true, "c") => polars::prelude::Column::new(
                    "c".into(),
                    (0..rows).map(|r| (r % 3) as i64).collect::<Vec<_>>(),
                ),
                (true, "y") => polars::prelude::Column::new(
                    "y".into(),
                    (0..rows).map(|r| (r % 2) as i64).collect::<Vec<_>>(),
                ),
                (true, "x") => polars::prelude::Column::new(
                    "x".into(),
                    (0..rows).map(|r| r as f64 / 7.0).collect::<Vec<_>>(),
                ),
                (true, "s") => polars::prelude::Column::new(
                    "s".into(),
                    (0..rows)
                        .map(|r| ["train", "test", "val", "train"][r % 4])
                        .collect::<Vec<_>>(),
                ),
                _ => random_column(&mut rng, name, rows),
            });
        }
        let Ok(mut df) = polars::prelude::DataFrame::new_infer_height(cols) else {
            continue;
        };
        if crate::common::write_parquet(&path, &mut df).is_err() {
            continue;
        }
        let features = if rng.gen_bool(0.7) {
            "feature_columns: [x]"
        } else {
            "features_column: x"
        };
        let extra = [
            "",
            ", split_column: s",
            ", on_demand: true",
            ", classes: 3",
            ", non_finite: drop",
        ][rng.gen_range(0..5)];
        let text = format!(
            "name: fuzz\nrounds: 1\ndata: {{kind: parquet, path: '{}', client_column: c, \
             label_column: y, {features}{extra}}}\nalgorithm: {{name: fedavg}}\n",
            path.display()
        );
        let Ok(s) = Scenario::from_yaml(&text, Path::new("fuzz.yaml"), &[]) else {
            continue;
        };
        let input = (i, rows, df.dtypes(), extra);
        match no_panic("the Parquet loader", &input, || {
            s.data
                .build(&s.split, &SeedTree::new(1))
                .map(|data| fedsim::plan::check_run_fits(&s.run, &data, Some(24e9)).is_ok())
        }) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused += 1;
                let msg = fedsim::error_chain(&e);
                assert!(msg.contains(&path.display().to_string()), "{msg}");
            }
        }
    }
    eprintln!("random Parquet schemas: {ok} read, {refused} refused");
    assert!(ok > 0 && refused > 0, "{ok} read, {refused} refused");
}

/// CSV traces and per-client columns with random headers, cells and lengths give values or an
/// error about the file, never a panic.
#[test]
fn random_csv_files_give_values_or_an_error_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("random.csv");
    let mut rng = rng(7);
    let cells = [
        "client", "x", "3", "-1", "1e999", "NaN", "", "0.5", "abc", "7", "2",
    ];
    let (mut ok, mut refused) = (0, 0);
    for i in 0..(cases() / 5).max(100) {
        let mut text = String::new();
        if rng.gen_bool(0.5) {
            text.push_str("client,x\n");
            for c in 0..rng.gen_range(0..5) {
                text.push_str(&format!("{c},{}\n", cells[rng.gen_range(1..cells.len())]));
            }
        }
        for _ in 0..rng.gen_range(0..4) {
            let n = rng.gen_range(0..5);
            let line: Vec<&str> = (0..n)
                .map(|_| cells[rng.gen_range(0..cells.len())])
                .collect();
            text.push_str(&line.join(if rng.gen_bool(0.9) { "," } else { ";" }));
            text.push('\n');
        }
        if rng.gen_bool(0.2) {
            text = String::from_utf8_lossy(&mutate(&mut rng, text.as_bytes())).into_owned();
        }
        std::fs::write(&path, &text).unwrap();
        let clients = rng.gen_range(0..4);
        match no_panic("the CSV reader", &(i, &text), || {
            fedsim::io::per_client_column(&path, "x", clients, &|_| Ok(()))
        }) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused += 1;
                assert!(e.to_string().contains("random.csv"), "{e}");
            }
        }
    }
    eprintln!("random CSV files: {ok} read, {refused} refused");
    assert!(ok > 0 && refused > 0, "{ok} read, {refused} refused");
}

/// Result folders as users leave them: any mix of foreign files with result names, fedsim's own
/// files, changed files, staging folders (marked or not) and a held lock. A run gives results
/// or a clear error; never a foreign file deleted or changed.
#[test]
fn result_folders_in_any_state_keep_every_foreign_file() {
    use fedsim::io::{OutputFolder, OutputRules};
    use fedsim::results::result_files;
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = rng(8);
    let names = result_files();
    // Other tests of this process start fedsim processes meanwhile: for the moment between
    // fork and exec a child holds a copy of every open file, a lock just released included.
    // Claims that no holder of this test's own refuses wait that moment out.
    let wait = std::time::Duration::from_secs(10);
    for i in 0..(cases() / 50).max(40) {
        let dir = tmp.path().join(format!("case{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        // First, perhaps, an earlier run of fedsim's own.
        if rng.gen_bool(0.5) {
            let (mut folder, _) =
                OutputFolder::claim_within(&dir, &names, &OutputRules::default(), wait)
                    .expect("an empty folder is fedsim's to use");
            let staging = folder.staging(".partial-").unwrap();
            let staged: Vec<_> = names[..rng.gen_range(1..names.len())]
                .iter()
                .rev()
                .map(|n| {
                    staging
                        .write(n, format!("fedsim's {n}").as_bytes())
                        .unwrap()
                })
                .collect();
            folder.publish(&staged, &names).unwrap();
            drop(staging);
        }
        // Then the user's files, some over fedsim's (changed), and folders.
        let mut foreign = std::collections::BTreeMap::new();
        for _ in 0..rng.gen_range(0..4) {
            let name = if rng.gen_bool(0.7) {
                names[rng.gen_range(0..names.len())].to_string()
            } else {
                random_text(&mut rng, 8).replace(['/', '\0', '.'], "_") + ".txt"
            };
            if name.is_empty() || name == "_" || name.starts_with(".fedsim") {
                continue;
            }
            let text = format!("user {i} {name}");
            if std::fs::write(dir.join(&name), &text).is_ok() {
                foreign.insert(name, text);
            }
        }
        if rng.gen_bool(0.3) {
            fedsim::io::folder::make_staging(&dir.join(".partial-77777777"))
                .unwrap()
                .left_behind();
        }
        let user_partial = rng.gen_bool(0.3);
        if user_partial {
            std::fs::create_dir_all(dir.join(".partial-user")).unwrap();
        }
        let force = rng.gen_bool(0.5);
        let held = rng
            .gen_bool(0.2)
            .then(|| OutputFolder::claim_within(&dir, &[], &OutputRules::default(), wait).unwrap());
        let rules = OutputRules {
            force,
            inputs: Vec::new(),
        };
        let patience = if held.is_some() {
            std::time::Duration::ZERO
        } else {
            wait
        };
        let result = no_panic("claiming a folder", &(i, &foreign), || {
            OutputFolder::claim_within(&dir, &names, &rules, patience).map(|(mut folder, _)| {
                let staging = folder.staging(".partial-").unwrap();
                let staged: Vec<_> = names
                    .iter()
                    .rev()
                    .map(|n| staging.write(n, b"new").unwrap())
                    .collect();
                folder.publish(&staged, &names)
            })
        });
        let text = match &result {
            Ok(Ok(_)) => String::new(),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        };
        match (
            &held,
            force,
            foreign.keys().any(|n| names.contains(&n.as_str())),
        ) {
            (Some(_), _, _) => assert!(text.contains("being written by another"), "{text}"),
            (None, false, true) => assert!(text.contains("fedsim did not write"), "{text}"),
            _ => assert!(text.is_empty(), "case {i}: {text}"),
        }
        // Every foreign file is where it was, or moved aside, and unchanged.
        for (name, text) in &foreign {
            let here = std::fs::read_to_string(dir.join(name)).ok();
            let aside = std::fs::read_to_string(dir.join(format!("{name}.before-fedsim"))).ok();
            assert!(
                here.as_ref() == Some(text) || aside.as_ref() == Some(text),
                "case {i}: {name} lost ({here:?}, {aside:?})"
            );
        }
        assert_eq!(dir.join(".partial-user").is_dir(), user_partial, "case {i}");
        drop(held);
    }
}

#[test]
fn torchscript_sections_and_corrupted_modules_give_ok_or_an_error_with_its_path() {
    // A valid TorchScript scenario (the fixture module on 1×16×16 images of 10 classes), then
    // any value at its fields, or the module file corrupted (bytes flipped, inserted, removed,
    // cut): a scenario or an error that names a field, never a panic.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("images.parquet");
    crate::layers::write_images(&data, 1, 16, 4);
    let module = tmp.path().join("module.pt");
    let fixture = std::fs::read(crate::weights::fixture("femnist_cnn16.pt")).unwrap();
    let model = format!(
        "{{kind: torchscript, path: '{}', flops: 1000}}",
        module.display()
    );
    let text = crate::layers::images_scenario(&data, [1, 16, 16], &model)
        .replace("classes: 4", "classes: 10");
    std::fs::write(&module, &fixture).unwrap();
    Scenario::from_yaml(&text, Path::new("fuzz.yaml"), &[]).expect("the base scenario is valid");
    let fields = [
        "model.path",
        "model.flops",
        "model.init",
        "model.kind",
        "model",
    ];
    let mut rng = rng(9);
    // Loading a module takes milliseconds: a tenth of the other targets' cases.
    for _ in 0..cases().div_ceil(10) {
        let overrides: Vec<String> = match rng.gen_range(0..2) {
            0 => {
                std::fs::write(&module, &fixture).unwrap();
                let field = fields[rng.gen_range(0..fields.len())];
                vec![format!("{field}={}", random_value(&mut rng, 2))]
            }
            _ => {
                std::fs::write(&module, mutate(&mut rng, &fixture)).unwrap();
                Vec::new()
            }
        };
        let input = &overrides;
        if let Err(e) = no_panic("Scenario::from_yaml", input, || {
            Scenario::from_yaml(&text, Path::new("fuzz.yaml"), &overrides)
        }) {
            assert_located(&e, input);
        }
    }
}

/// Runs `read` on another thread and waits at most `limit` for it: a reader that blocks (on a
/// FIFO) or reads without end (a device) fails the test instead of hanging it.
fn finishes<T: Send + 'static>(
    what: &str,
    input: &dyn std::fmt::Debug,
    limit: std::time::Duration,
    read: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(read)));
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("{what} panicked on {input:?}"),
        Err(_) => panic!("{what} did not end within {limit:?} on {input:?}"),
    }
}

/// What an input file is made to be: a valid one, a special file, an empty one, one far larger
/// than any memory (sparse, never written), random bytes, or a valid file mutated.
#[derive(Clone, Copy, Debug)]
enum FileState {
    Valid,
    Fifo,
    Device,
    Folder,
    Missing,
    Empty,
    Huge,
    Random,
    Mutated,
}

const FILE_STATES: [FileState; 9] = [
    FileState::Valid,
    FileState::Fifo,
    FileState::Device,
    FileState::Folder,
    FileState::Missing,
    FileState::Empty,
    FileState::Huge,
    FileState::Random,
    FileState::Mutated,
];

/// Makes `path` be `state` (from `good`, a valid file's bytes, where it is mutated); returns
/// the path to read (`/dev/zero` for a device).
fn make_file(rng: &mut ChaCha8Rng, path: &Path, state: FileState, good: &[u8]) -> PathBuf {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }
    match state {
        FileState::Fifo => {
            let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }
        FileState::Device => return PathBuf::from("/dev/zero"),
        FileState::Folder => std::fs::create_dir(path).unwrap(),
        FileState::Missing => {}
        FileState::Empty => std::fs::write(path, b"").unwrap(),
        FileState::Huge => std::fs::File::create(path)
            .unwrap()
            .set_len(1 << 40)
            .unwrap(),
        FileState::Random => {
            let bytes: Vec<u8> = (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect();
            std::fs::write(path, bytes).unwrap();
        }
        FileState::Mutated => std::fs::write(path, mutate(rng, good)).unwrap(),
        FileState::Valid => std::fs::write(path, good).unwrap(),
    }
    path.to_path_buf()
}

/// Every kind of input file fedsim reads (scenarios, sweeps, Parquet data, per-client CSV
/// columns, online intervals, FedScale traces, edge lists, FedGMM projections, `model.init`
/// weights, TorchScript modules), in every state (a FIFO, a device, a folder, missing, empty,
/// larger than any memory, random, a valid file mutated): each read ends, within seconds, in a
/// value or an error naming the file; never a hang, a panic or an attempt to read it all.
#[test]
fn every_input_file_kind_in_any_state_gives_a_value_or_an_error_naming_it() {
    use fedsim::models::{models_to_safetensors, read_models, Architecture};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut rng = rng(10);
    let spec: fedsim::models::ModelSpec = serde_yaml::from_str("{kind: linear}").unwrap();
    let arch = Architecture::for_input(&spec, fedsim::data::InputShape::Flat(4), 3);
    let weights = models_to_safetensors(&arch, &[arch.init(&mut rng)]);
    let module = std::fs::read(crate::weights::fixture("femnist_cnn16.pt")).unwrap();
    let parquet = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/parquet/feature_types.parquet"
    ))
    .unwrap();
    let kinds: [(&'static str, Vec<u8>); 10] = [
        ("scenario.yaml", crate::common::SMALL.as_bytes().to_vec()),
        (
            "sweep.yaml",
            b"name: s\nbase: small.yaml\nseeds: [1, 2]\n".to_vec(),
        ),
        ("data.parquet", parquet),
        ("column.csv", b"client,x\n0,1\n1,2.5\n2,3\n".to_vec()),
        (
            "online.csv",
            b"client,start_s,end_s\n0,0,10\n1,5,8\n".to_vec(),
        ),
        (
            "devices.pkl",
            std::fs::read(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/fedscale/client_device_capacity"
            ))
            .unwrap(),
        ),
        ("edges.csv", b"source,target\n0,1\n1,2\n2,3\n".to_vec()),
        ("projection.csv", b"1,0\n0,1\n1,1\n0,0\n".to_vec()),
        ("weights.safetensors", weights),
        ("module.pt", module),
    ];
    std::fs::write(dir.join("small.yaml"), crate::common::SMALL).unwrap();
    // Images of the fixture module's shape, for a module to be read against.
    crate::layers::write_images(&dir.join("images.parquet"), 1, 16, 4);
    let limit = std::time::Duration::from_secs(30);
    let mut outcomes = std::collections::BTreeMap::<String, (usize, usize)>::new();
    // Loading a module takes milliseconds: a fiftieth of the other targets' cases.
    for i in 0..(cases() / 50).max(2 * kinds.len() * FILE_STATES.len()) {
        let (name, good) = &kinds[i % kinds.len()];
        let state = FILE_STATES[(i / kinds.len()) % FILE_STATES.len()];
        let path = make_file(&mut rng, &dir.join(name), state, good);
        let shown = path.display().to_string();
        let (p, d, arch) = (path.clone(), dir.clone(), arch.clone());
        let name: &'static str = name;
        let input = (i, name, state);
        let result: Result<(), String> = finishes("a reader", &input, limit, move || {
            let e = |e: &dyn std::error::Error| fedsim::error_chain(e);
            match name.split('.').next().unwrap() {
                "scenario" => Scenario::load(&p, &[]).map(drop).map_err(|x| e(&x)),
                "sweep" => Sweep::load(&p).map(drop).map_err(|x| e(&x)),
                "data" => {
                    let text = format!(
                        "name: f\nrounds: 1\ndata: {{kind: parquet, path: '{}', \
                         features_column: fsl_f32}}\nalgorithm: {{name: fedavg}}\n",
                        p.display()
                    );
                    let s =
                        Scenario::from_yaml(&text, &d.join("f.yaml"), &[]).map_err(|x| e(&x))?;
                    s.data
                        .build(&s.split, &SeedTree::new(1))
                        .map(drop)
                        .map_err(|x| e(&x))
                }
                "column" => fedsim::io::per_client_column(&p, "x", 3, &|_| Ok(()))
                    .map(drop)
                    .map_err(|x| e(&x)),
                "online" => fedsim::io::population::online_intervals(&p, 2)
                    .map(drop)
                    .map_err(|x| e(&x)),
                "devices" => fedsim::io::population::fedscale_devices(&p, 2)
                    .map(drop)
                    .map_err(|x| e(&x)),
                "edges" => fedsim::topology::Graph::read_edge_list(&p, 4)
                    .map(drop)
                    .map_err(|x| e(&x)),
                "projection" => {
                    let text = format!(
                        "name: f\nrounds: 1\ndata: {{kind: fedgmm_synthetic, clients: 3, \
                         dim: 4}}\nalgorithm: {{name: fedgmm, projection: '{}'}}\n",
                        p.display()
                    );
                    Scenario::from_yaml(&text, &d.join("f.yaml"), &[])
                        .map_err(|x| e(&x))
                        .and_then(|s| fedsim::plan::preflight(&s).map_err(|x| e(&x)))
                }
                "module" => {
                    let model = format!(
                        "{{kind: torchscript, path: '{}', flops: 1000}}",
                        p.display()
                    );
                    let text = crate::layers::images_scenario(
                        &d.join("images.parquet"),
                        [1, 16, 16],
                        &model,
                    )
                    .replace("classes: 4", "classes: 10");
                    Scenario::from_yaml(&text, &d.join("f.yaml"), &[])
                        .map(drop)
                        .map_err(|x| e(&x))
                }
                _ => read_models(&p, &arch).map(drop),
            }
        });
        let counts = outcomes.entry(name.to_string()).or_default();
        match result {
            Ok(()) => counts.0 += 1,
            Err(message) => {
                counts.1 += 1;
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                assert!(
                    message.contains(&shown) || message.contains(&file),
                    "{input:?}: the error does not name {shown}: {message}"
                );
                if matches!(state, FileState::Fifo | FileState::Device) {
                    assert!(
                        message.contains("not a regular file"),
                        "{input:?}: {message}"
                    );
                }
            }
        }
    }
    eprintln!("input files (read, refused): {outcomes:?}");
}

/// Per-client files of hostile numbers (negative, zero, NaN, infinities, denormals, past any
/// clock, past 32 bits) for every per-client quantity of the system model and for
/// `sizes_from`: the system model and the data are built, or refused naming the file, line and
/// column; and every duration a built model gives is one the virtual clock counts, or an error
/// that names where it came from. Never a panic, and never a saturated clock.
#[test]
fn per_client_files_of_hostile_numbers_give_valid_values_or_errors_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("population.csv");
    let mut rng = rng(11);
    const HOSTILE: [&str; 16] = [
        "-1",
        "0",
        "-0",
        "NaN",
        "inf",
        "-inf",
        "1e-320",
        "5e-324",
        "1e300",
        "1e-300",
        "1e12",
        "4294967296",
        "18446744073709551616",
        "0.5",
        "3",
        "250",
    ];
    let quantities = [
        "compute: {samples_per_second: {dist: file, path: P, column: v}}",
        "compute: {seconds_per_batch: {dist: file, path: P, column: v}}",
        "compute: {flops_per_second: {dist: file, path: P, column: v}}",
        "network: {uplink_mbps: {dist: file, path: P, column: v}}",
        "network: {downlink_mbps: {dist: file, path: P, column: v}}",
        "network: {latency_ms: {dist: file, path: P, column: v}}",
    ];
    let (mut built, mut refused, mut clock) = (0, 0, 0);
    for i in 0..(cases() / 10).max(200) {
        let clients = 4;
        let mut csv = String::from("client,v\n");
        for c in 0..clients {
            csv.push_str(&format!(
                "{c},{}\n",
                HOSTILE[rng.gen_range(0..HOSTILE.len())]
            ));
        }
        std::fs::write(&path, &csv).unwrap();
        let shown = path.display().to_string();
        let sizes = i % 7 == 0;
        let text = if sizes {
            format!(
                "name: h\nrounds: 1\ndata: {{kind: fedem_synthetic, clients: {clients}, dim: 3, \
                 sizes_from: {{path: '{shown}', column: v}}}}\nalgorithm: {{name: fedavg}}\n"
            )
        } else {
            let system = quantities[rng.gen_range(0..quantities.len())].replace('P', &shown);
            format!(
                "name: h\nrounds: 1\ndata: {{kind: fedem_synthetic, clients: {clients}, dim: 3}}\n\
                 algorithm: {{name: fedavg}}\nsystem: {{{system}}}\n"
            )
        };
        let s = Scenario::from_yaml(&text, Path::new("h.yaml"), &[]).expect("valid inline");
        let input = (i, &csv, &text);
        let outcome = no_panic("building the data and system model", &input, || {
            let data = match s.data.build(&s.split, &SeedTree::new(1)) {
                Ok(d) => std::sync::Arc::new(d),
                Err(e) => return Err(fedsim::error_chain(&e)),
            };
            let plan =
                fedsim::plan::RunPlan::new(&s.run, data, 1).map_err(|e| fedsim::error_chain(&e))?;
            let parts = plan.setup;
            // Every duration the model gives for these clients: counted, or an error.
            let mut errors = Vec::new();
            for c in 0..clients as u32 {
                for samples in [0, 1, 1000, u32::MAX as u64] {
                    if let Err(e) = parts.system.compute_time(c, 1, samples) {
                        errors.push(e.to_string());
                    }
                }
                for link in [fedsim::system::Link::Up, fedsim::system::Link::Down] {
                    if let Err(e) = parts.system.transfer_time(c, link, 1 << 30) {
                        errors.push(e.to_string());
                    }
                }
            }
            Ok(errors)
        });
        match outcome {
            Ok(errors) => {
                built += 1;
                for e in errors {
                    clock += 1;
                    assert!(
                        e.contains("more than the virtual clock counts"),
                        "{input:?}: {e}"
                    );
                    assert!(e.contains("client "), "{input:?}: {e}");
                }
            }
            Err(message) => {
                refused += 1;
                assert!(message.contains(&shown), "{input:?}: {message}");
                assert!(
                    message.contains("line ") && message.contains("column `v`"),
                    "{input:?}: {message}"
                );
            }
        }
    }
    eprintln!(
        "hostile per-client numbers: {built} built ({clock} durations refused), {refused} \
         files refused"
    );
    assert!(built > 0 && refused > 0, "{built} built, {refused} refused");
}

/// Every command that writes (`run`, `sweep`, `report`, `export-weights`, `describe
/// --heatmap`), with or without `--force`, into folders in any state: foreign files, folders
/// and FIFOs under the names it writes, fedsim's own files (changed or not), staging folders
/// and drafts (marked or not), a garbled manifest, a lock that is a folder. Each ends in results
/// or a clear error (exit 0, 1 or 2, never a panic); every foreign entry is where it was or
/// moved aside, unchanged; nothing half-written is left.
#[test]
fn every_writing_command_over_folders_in_any_state_keeps_what_is_not_its_own() {
    use crate::common::{bin, write};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(&root.join("s.yaml"), crate::common::SMALL);
    write(
        &root.join("sweep.yaml"),
        "name: sw\nbase: s.yaml\nseeds: [1]\n",
    );
    // A finished run with its models, for `report` and `export-weights` to read.
    let o = bin()
        .args(["run", "s.yaml", "-q", "--out", "source", "--save-models"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(o.status.success());
    let mut rng = rng(12);
    // What each command writes into the folder `out` (the names a foreign entry may take).
    let commands: [(&str, &[&str], Vec<&str>); 5] = [
        (
            "run",
            &["run", "s.yaml", "-q", "--out", "out"],
            fedsim::results::result_files(),
        ),
        (
            "sweep",
            &["sweep", "sweep.yaml", "-q", "--out", "out"],
            vec!["cells.csv", "cell=x"],
        ),
        (
            "report",
            &["report", "source", "--out", "out"],
            vec!["report.csv", "report.md", "client_accuracy_cdf.png"],
        ),
        (
            "export",
            &["export-weights", "source", "--out", "out/w.safetensors"],
            vec!["w.safetensors"],
        ),
        (
            "heatmap",
            &["describe", "s.yaml", "--heatmap", "out/map.png"],
            vec!["map.png"],
        ),
    ];
    let mut outcomes = std::collections::BTreeMap::<&str, [usize; 2]>::new();
    for i in 0..(cases() / 100).max(2 * commands.len()) {
        let (name, args, written) = &commands[i % commands.len()];
        let out = root.join("out");
        if out.exists() {
            std::fs::remove_dir_all(&out).unwrap();
        }
        // Perhaps an earlier run of the same command: fedsim's own files.
        if rng.gen_bool(0.4) {
            let _ = bin().args(*args).current_dir(root).output().unwrap();
        }
        std::fs::create_dir_all(&out).unwrap();
        // Foreign entries: files (some over fedsim's own), folders and FIFOs of the names the
        // command writes, and others.
        let mut foreign: Vec<(String, Option<String>)> = Vec::new();
        for _ in 0..rng.gen_range(0..4) {
            let entry = if rng.gen_bool(0.7) {
                written[rng.gen_range(0..written.len())].to_string()
            } else {
                format!("notes-{}.txt", rng.gen_range(0..5))
            };
            let path = out.join(&entry);
            if std::fs::symlink_metadata(&path).is_ok() && rng.gen_bool(0.5) {
                continue;
            }
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                if meta.is_dir() {
                    std::fs::remove_dir_all(&path).unwrap();
                } else {
                    std::fs::remove_file(&path).unwrap();
                }
                foreign.retain(|(e, _)| *e != entry);
            }
            match rng.gen_range(0..6) {
                0 => std::fs::create_dir(&path).unwrap(),
                1 => {
                    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                    // SAFETY: a valid NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
                _ => {
                    let text = format!("user {i} {entry}");
                    std::fs::write(&path, &text).unwrap();
                    foreign.push((entry, Some(text)));
                    continue;
                }
            }
            foreign.push((entry, None));
        }
        // fedsim's bookkeeping in any state.
        match rng.gen_range(0..6) {
            0 => write(&out.join(".fedsim-manifest"), "garbled\tx\n"),
            1 => fedsim::io::folder::make_staging(&out.join(".partial-99999999"))
                .unwrap()
                .left_behind(),
            2 => {
                std::fs::create_dir_all(out.join(".fedsim-draft.partial-99999998")).unwrap();
                out.clone()
            }
            3 => {
                std::fs::create_dir_all(out.join(".partial-mine")).unwrap();
                foreign.push((".partial-mine".into(), None));
                out.clone()
            }
            4 if !out.join(".fedsim-lock").exists() => {
                std::fs::create_dir_all(out.join(".fedsim-lock")).unwrap();
                out.clone()
            }
            _ => out.clone(),
        };
        let force = rng.gen_bool(0.5);
        let mut command: Vec<&str> = args.to_vec();
        if force {
            command.push("--force");
        }
        let o = bin().args(&command).current_dir(root).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let input = (i, name, force, &foreign);
        assert!(
            matches!(o.status.code(), Some(0..=2)) && !err.contains("panicked"),
            "{input:?}: {:?} {err}",
            o.status
        );
        outcomes.entry(name).or_default()[(o.status.code() != Some(0)) as usize] += 1;
        // Every foreign entry is where it was, or moved aside; files unchanged.
        for (entry, text) in &foreign {
            let here = out.join(entry);
            let aside = out.join(format!("{entry}.before-fedsim"));
            match text {
                Some(text) => {
                    let kept = [&here, &aside]
                        .iter()
                        .any(|p| std::fs::read_to_string(p).ok().as_ref() == Some(text));
                    assert!(kept, "{input:?}: {entry} lost or changed; {err}");
                }
                None => assert!(
                    std::fs::symlink_metadata(&here).is_ok()
                        || std::fs::symlink_metadata(&aside).is_ok(),
                    "{input:?}: {entry} gone; {err}"
                ),
            }
        }
        // Nothing half-written: no staging folder of this process, no temporary file.
        if out.is_dir() {
            let left: Vec<String> = crate::common::names(&out)
                .into_iter()
                .filter(|n| {
                    (n.starts_with(".partial-") && n != ".partial-mine" && n != ".partial-99999999")
                        || n.ends_with(".tmp")
                })
                .collect();
            assert!(left.is_empty(), "{input:?}: {left:?}; {err}");
        }
    }
    eprintln!("writing commands (done, refused): {outcomes:?}");
}
