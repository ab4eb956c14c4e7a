//! Every input file and number is read as carefully as the scenario, and every loop and
//! allocation has a bound (issue 75): model files that are not regular files, per-client
//! values that the scenario would refuse inline, durations the virtual clock cannot count,
//! sizes that cannot fit, privacy targets no noise meets, and the loops and grids behind them
//! end in results or a clear error, never a hang, an abort or a silently saturated clock.

use crate::common::{assert_refused, bin, fedsim, names, stderr, write, SMALL};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// Runs `fedsim ARGS` in `cwd`, failing the test (and killing it) if it takes more than
/// `limit`: a hang is a failure, not a stuck test run.
fn within(limit: Duration, args: &[&str], cwd: &Path) -> Output {
    let mut child = bin()
        .args(args)
        .current_dir(cwd)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("fedsim {args:?} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const SECONDS: Duration = Duration::from_secs(60);

#[cfg(unix)]
fn fifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[cfg(unix)]
#[test]
fn model_files_that_are_not_regular_files_or_too_large_are_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fifo(&dir.join("pipe"));
    // A sparse file larger than any memory: refused by its size, never read.
    let huge = std::fs::File::create(dir.join("huge.safetensors")).unwrap();
    huge.set_len(1 << 40).unwrap();
    let init = |from: &str| format!("{SMALL}model: {{kind: linear, init: {{from: '{from}'}}}}\n");
    for (from, said) in [
        ("pipe", "named pipe (FIFO), not a regular file"),
        ("/dev/zero", "it is a device, not a regular file"),
        (
            "huge.safetensors",
            "it is 1.0 TiB; a weights file (held in memory) may take at most",
        ),
    ] {
        write(&dir.join("s.yaml"), &init(from));
        assert_refused(&within(SECONDS, &["check", "s.yaml"], dir), said);
        let o = within(SECONDS, &["run", "s.yaml", "-q", "--out", "out"], dir);
        assert_refused(&o, said);
    }
    // A safetensors file longer than its header says: refused before its data is read.
    let mut bytes = Vec::new();
    let header = br#"{"0.weight":{"dtype":"F32","shape":[1,20],"data_offsets":[0,80]},"0.bias":{"dtype":"F32","shape":[1],"data_offsets":[80,84]}}"#;
    bytes.extend((header.len() as u64).to_le_bytes());
    bytes.extend(header);
    bytes.extend([0u8; 84 + 1000]);
    std::fs::write(dir.join("long.safetensors"), &bytes).unwrap();
    write(&dir.join("s.yaml"), &init("long.safetensors"));
    assert_refused(
        &within(SECONDS, &["check", "s.yaml"], dir),
        "its header describes 84 bytes of tensors, and the file holds 1084 after it",
    );
    // A TorchScript module's path, the same.
    for (path, said) in [
        ("pipe", "named pipe (FIFO)"),
        ("/dev/zero", "it is a device"),
    ] {
        write(
            &dir.join("t.yaml"),
            &format!("{SMALL}model: {{kind: torchscript, path: '{path}', flops: 1000}}\n"),
        );
        assert_refused(&within(SECONDS, &["check", "t.yaml"], dir), said);
    }
}

/// A population file with one column of `values` for the clients of SMALL (24), and SMALL run
/// with `system` naming it.
fn run_with_population(dir: &Path, column: &str, values: &[&str], system: &str) -> Output {
    let mut csv = format!("client,{column}\n");
    for c in 0..24 {
        csv.push_str(&format!("{c},{}\n", values[c % values.len()]));
    }
    write(&dir.join("pop.csv"), &csv);
    write(&dir.join("p.yaml"), &format!("{SMALL}system: {system}\n"));
    within(SECONDS, &["run", "p.yaml", "-q", "--out", "out"], dir)
}

#[test]
fn per_client_values_from_files_meet_the_rules_of_inline_values() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let speed = "{compute: {samples_per_second: {dist: file, path: pop.csv, column: speed}}}";
    for (bad, shown) in [("-1", "-1.0"), ("NaN", "NaN"), ("0", "0.0")] {
        let o = run_with_population(dir, "speed", &["100", bad], speed);
        assert_refused(
            &o,
            &format!(
                "pop.csv: line 3: column `speed` (client 1): must be a positive number, got \
                 {shown}"
            ),
        );
    }
    let uplink = "{network: {uplink_mbps: {dist: file, path: pop.csv, column: up}}}";
    let o = run_with_population(dir, "up", &["10", "10", "0"], uplink);
    assert_refused(
        &o,
        "pop.csv: line 4: column `up` (client 2): must be a positive number, got 0.0",
    );
    let latency = "{network: {latency_ms: {dist: file, path: pop.csv, column: ms}}}";
    let o = run_with_population(dir, "ms", &["-0.5"], latency);
    assert_refused(
        &o,
        "column `ms` (client 0): must be a non-negative number, got -0.5",
    );
    // Valid values still run.
    let o = run_with_population(dir, "speed", &["100", "250.5"], speed);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn durations_the_clock_cannot_count_are_errors_naming_their_source() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // 1e-300 samples per second is a positive number, but no clock counts the training it
    // gives: an error naming the client and where the speed came from, not exit 0.
    write(
        &dir.join("slow.yaml"),
        &format!("{SMALL}system: {{compute: {{samples_per_second: 1.0e-300}}}}\n"),
    );
    let o = within(SECONDS, &["run", "slow.yaml", "-q", "--out", "slow"], dir);
    assert_refused(&o, "samples per second, from system.compute) takes");
    assert!(
        stderr(&o).contains("more than the virtual clock counts"),
        "{}",
        stderr(&o)
    );
    // Secure aggregation's costs the same.
    write(
        &dir.join("sa.yaml"),
        &format!("{SMALL}secure_aggregation: {{key_agreement_ms: 1.0e300}}\n"),
    );
    let o = within(SECONDS, &["run", "sa.yaml", "-q", "--out", "sa"], dir);
    assert_refused(
        &o,
        "secure_aggregation.key_agreement_ms: 1e300 ms each) takes",
    );
    // Seconds settings past what the clock counts are refused where they are written.
    for set in [
        "policy={kind: synchronous, deadline_s: 1.0e300}",
        "system.availability={kind: markov, mean_online_s: 1.0e300, mean_offline_s: 1}",
    ] {
        write(&dir.join("s.yaml"), SMALL);
        let o = within(SECONDS, &["check", "s.yaml", "--set", set], dir);
        assert_refused(&o, "the longest span the virtual clock counts");
    }
}

/// Clients of 30 training rows at 1e-11 samples per second: 3e12 s a round, so that three
/// rounds fit the clock (2⁶³ µs, 9.2e12 s) and the fourth does not.
const CLOCK_BOUND: &str = "\
name: clock
seed: 3
rounds: 6
eval_every: 1
data: {kind: fedem_synthetic, clients: 6, dim: 5, min_samples: 50, max_samples: 50}
split: {kind: fractions, train: 0.6, val: 0.2, test: 0.2}
algorithm: {name: fedavg}
training: {local_epochs: 1, batch_size: 10, lr: 0.1}
system: {compute: {samples_per_second: 1.0e-11}}
";

#[test]
fn a_run_past_the_clocks_end_stops_with_an_error_and_keeps_its_results_so_far() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(&dir.join("clock.yaml"), CLOCK_BOUND);
    let o = within(SECONDS, &["run", "clock.yaml", "-q", "--out", "out"], dir);
    assert_refused(&o, "the virtual clock cannot count past");
    assert!(
        stderr(&o)
            .contains("what the run had written is in out (rounds 1 to 3), without summary.csv"),
        "{}",
        stderr(&o)
    );
    let out = dir.join("out");
    assert!(!out.join("summary.csv").exists());
    let rounds = fedsim::results::read_parquet(&out.join("rounds.parquet")).unwrap();
    assert_eq!(rounds.height(), 3);
    let metrics = fedsim::results::read_parquet(&out.join("metrics.parquet")).unwrap();
    let evaluated = crate::common::u64_column(&metrics, "round");
    assert_eq!(evaluated.iter().max(), Some(&3));
    // Every time recorded is one the clock counts; none saturated.
    let end = crate::common::f64_column(&rounds, "end_s");
    assert!(end.iter().all(|&t| t < 9.3e12), "{end:?}");
    // In a sweep the cell fails, and leaves nothing.
    write(
        &dir.join("sweep.yaml"),
        "name: sw\nbase: clock.yaml\nseeds: [1]\n",
    );
    let o = within(SECONDS, &["sweep", "sweep.yaml", "-q", "--out", "sw"], dir);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        names(&dir.join("sw"))
            .iter()
            .all(|n| !n.starts_with(".partial") && !n.starts_with("cell=")),
        "{:?}",
        names(&dir.join("sw"))
    );
}

#[test]
fn per_client_sizes_are_counted_before_anything_is_allocated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        &dir.join("sz.yaml"),
        "name: sz\nrounds: 1\ndata: {kind: fedem_synthetic, clients: 3, dim: 150, \
         sizes_from: {path: sizes.csv, column: n}}\nalgorithm: {name: fedavg}\n",
    );
    let sizes = |n: &str| {
        write(
            &dir.join("sizes.csv"),
            &format!("client,n\n0,50\n1,{n}\n2,60\n"),
        )
    };
    // 10⁸ and 4·10⁹ rows of 150 features: more than this machine (or any) holds. The
    // pre-flight counts them; a run never tries to allocate them.
    for n in ["100000000", "4000000000"] {
        sizes(n);
        for command in ["check", "run"] {
            let o = within(SECONDS, &[command, "sz.yaml"], dir);
            assert_refused(&o, "field `data.sizes_from`");
            assert!(
                stderr(&o).contains("more than this machine's"),
                "{}",
                stderr(&o)
            );
        }
    }
    // 10¹² is refused for what it is: past the 32-bit count of a client's rows.
    sizes("1000000000000");
    let o = within(SECONDS, &["check", "sz.yaml"], dir);
    assert_refused(
        &o,
        "sizes.csv: line 3: column `n` (client 1): must be a whole number of samples from 1 to \
         4294967295",
    );
}

#[test]
fn the_seed_is_refused_as_a_sweep_axis_pointing_to_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(&dir.join("s.yaml"), SMALL);
    for axes in [
        "grid:\n  seed: [1, 2]\n",
        "zip:\n  seed: [1, 2]\n  rounds: [2, 3]\n",
    ] {
        write(
            &dir.join("sweep.yaml"),
            &format!("name: sw\nbase: s.yaml\n{axes}"),
        );
        for extra in [&["--list"][..], &[]] {
            let args = [&["sweep", "sweep.yaml", "-q"][..], extra].concat();
            let o = fedsim(&args, dir);
            assert_refused(
                &o,
                ".seed`: the seed is not an axis; give the seeds as `seeds:",
            );
        }
    }
}

#[test]
fn report_names_a_run_whose_summary_was_cut_short() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(&dir.join("s.yaml"), SMALL);
    for seed in ["1", "2"] {
        let out = format!("runs/seed-{seed}");
        let o = fedsim(&["run", "s.yaml", "-q", "--seed", seed, "--out", &out], dir);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let summary = dir.join("runs/seed-2/summary.csv");
    let whole = std::fs::read_to_string(&summary).unwrap();
    let header_end = whole.find('\n').unwrap() + 1;
    for (cut, why) in [
        (
            &whole[..whole.len() - 20],
            "it ends in the middle of a line: the file was cut short",
        ),
        (
            &whole[..header_end],
            "it has a header but no rows: the file was cut short",
        ),
    ] {
        std::fs::write(&summary, cut).unwrap();
        let o = fedsim(&["report", "runs", "--out", "rep"], dir);
        assert_refused(&o, why);
        assert!(stderr(&o).contains("seed-2"), "{}", stderr(&o));
        let o = fedsim(
            &["report", "runs", "--out", "rep", "--skip-unreadable"],
            dir,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("left out"), "{}", stderr(&o));
        // Pointed at the run itself: the same reason.
        let o = fedsim(&["report", "runs/seed-2", "--out", "rep2"], dir);
        assert_refused(&o, why);
    }
}

#[test]
fn privacy_targets_no_noise_meets_are_refused_with_the_least_epsilon_reachable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base =
        "name: dp\nseed: 1\nrounds: 10\ndata: {kind: fedem_synthetic, clients: 100, dim: 20}\n\
                algorithm: {name: fedavg}\n";
    for (settings, said) in [
        // 10 of 100 a round: ε floors near 0.045 before the KL bound's drop to 0.
        (
            "sampling: {count: 10}\nprivacy: {target_epsilon: 0.01, clip: 1.0}\n",
            "no noise multiplier spends ε = 0.01: the least ε one can be calibrated to here is",
        ),
        // Poisson participation at q = 1e-9.
        (
            "sampling: {strategy: poisson, fraction: 1.0e-9}\nprivacy: {target_epsilon: 0.01, clip: 1.0}\n",
            "no noise multiplier spends ε = 0.01",
        ),
        // DP-SGD.
        (
            "privacy: {mechanism: dp_sgd, target_epsilon: 0.001, clip: 1.0}\n",
            "no noise multiplier spends ε = 0.001",
        ),
    ] {
        write(&dir.join("dp.yaml"), &format!("{base}{settings}"));
        let o = within(SECONDS, &["run", "dp.yaml", "-q", "--out", "dp"], dir);
        assert_refused(&o, said);
        assert!(stderr(&o).contains("dp.yaml:"), "located: {}", stderr(&o));
    }
    // A target more than the least noise spends: it runs, and says so.
    write(
        &dir.join("dp.yaml"),
        &format!("{base}sampling: {{count: 10}}\nprivacy: {{target_epsilon: 1.0e9, clip: 1.0}}\n"),
    );
    let o = within(SECONDS, &["run", "dp.yaml", "-q", "--out", "dp"], dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: target_epsilon 1000000000 is more than any noise multiplier"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_pld_accountants_grid_and_secure_aggregations_graph_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // 4·10⁹ rounds: the PLD grid would take more than memory; refused at once.
    write(
        &dir.join("pld.yaml"),
        "name: pld\nrounds: 4000000000\ndata: {kind: fedem_synthetic, clients: 100, dim: 20}\n\
         algorithm: {name: fedavg}\nsampling: {strategy: poisson, fraction: 0.1}\n\
         privacy: {noise_multiplier: 1.0, clip: 1.0, accountant: pld}\n",
    );
    let o = within(SECONDS, &["describe", "pld.yaml"], dir);
    assert_refused(
        &o,
        "the PLD accountant over 4000000000 rounds at σ = 1.0000e0 needs a grid",
    );
    // SecAgg's graph grows with the square of the clients a round: the estimate counts it.
    let s = crate::common::scenario(
        SMALL,
        &[
            "data.clients=20000",
            "sampling.fraction=1.0",
            "secure_aggregation={protocol: secagg}",
        ],
    );
    let shape = fedsim::plan::DataShape {
        input: fedsim::data::InputShape::Flat(20),
        classes: 2,
        clients: 20_000,
        least_train_rows: 1,
        data_bytes: 0.0,
    };
    let terms = fedsim::plan::run_terms(&s.run, &shape);
    let graph = terms
        .iter()
        .find(|t| t.field == "secure_aggregation")
        .expect("a term for the graph");
    assert_eq!(graph.bytes, 20_000.0 * (8.0 * 19_999.0 + 32.0));
    let e = fedsim::plan::check_terms(&terms, Some(2e9)).unwrap_err();
    assert_eq!(e.path, "secure_aggregation");
}

#[test]
fn oort_after_training_diverges_runs_on_and_writes_its_results() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        &dir.join("oort.yaml"),
        &format!(
            "{}sampling: {{fraction: 0.5, strategy: oort}}\non_divergence: continue\n",
            SMALL
                .replace("sampling: {fraction: 0.5}\n", "")
                .replace("lr: 0.1", "lr: 1.0e38")
                .replace("rounds: 4", "rounds: 10")
        ),
    );
    let o = within(SECONDS, &["run", "oort.yaml", "-q", "--out", "out"], dir);
    assert_eq!(
        o.status.code(),
        Some(4),
        "diverged, not a panic: {}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(dir.join("out/summary.csv").is_file());
}

/// One bit flipped in a page header of a valid file (the long fuzz run's find) made a page
/// declare −25 values, which polars read as 2⁶⁴ − 25 and tried to reserve: an abort. The page
/// headers are now checked against the footer first.
#[test]
fn a_parquet_page_declaring_impossible_counts_is_refused_not_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/parquet/feature_types.parquet"
    );
    let mut bytes = std::fs::read(fixture).unwrap();
    bytes[49] ^= 1;
    let path = tmp.path().join("flipped.parquet");
    std::fs::write(&path, &bytes).unwrap();
    let spec: fedsim::data::DatasetSpec = serde_yaml::from_str(&format!(
        "{{kind: parquet, path: '{}', features_column: fsl_f32}}",
        path.display()
    ))
    .unwrap();
    let Err(e) = spec.build(&Default::default(), &fedsim::sim::SeedTree::new(1)) else {
        panic!("a corrupt page header is refused");
    };
    let e = fedsim::error_chain(&e);
    assert!(
        e.contains("not a readable Parquet file (it is corrupt: row group 0, column `client`: a page at byte 41 declares -25 values"),
        "{e}"
    );
}
