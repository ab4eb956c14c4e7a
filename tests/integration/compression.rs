//! Compressed updates (`compression:`): each upload carries the bytes of its compressor's
//! formula, which shortens its simulated time on a slow uplink; a compressed downlink charges
//! each client the moves of the model's copy it missed; every compressor (with and
//! without error feedback, FedAvg and FedEM's components, synchronous and FedBuff, spilled or
//! not, with local privacy) gives the same files with 1, 2 and 4 threads; what cannot work is
//! refused with its field.

use crate::common::{error, f64_column as floats, run_saving, u64_column as counts, SMALL};
use fedsim::compression::CompressorSpec;
use fedsim::results::{differing_files, read_parquet};
use polars::prelude::DataFrame;
use std::path::Path;

fn frame(dir: &Path, file: &str) -> DataFrame {
    read_parquet(&dir.join(file)).unwrap()
}

/// On a 1 Mbit/s uplink: each round's `bytes_up` is its updates times the compressor's bytes
/// for the model's d values (d read from the uncompressed run: 4 bytes a value), each upload
/// takes less simulated time, and so does each round.
#[test]
fn compressed_updates_carry_their_formulas_bytes_and_arrive_sooner() {
    let tmp = tempfile::tempdir().unwrap();
    let network = "system={network: {latency_ms: 10, downlink_mbps: 100, uplink_mbps: 1}}";
    let plain = tmp.path().join("plain");
    run_saving(SMALL, &[network], 2, &plain);
    let (rounds, jobs) = (
        frame(&plain, "rounds.parquet"),
        frame(&plain, "jobs.parquet"),
    );
    let completed = counts(&rounds, "completed");
    let dense = counts(&rounds, "bytes_up");
    let d = (dense[0] / (4 * completed[0])) as usize;
    assert_eq!(dense[0], 4 * d as u64 * completed[0]);
    for (n, text) in [
        "{kind: top_k, fraction: 0.1, error_feedback: true}",
        "{kind: random_k, fraction: 0.25}",
        "{kind: qsgd, levels: 7}",
        "{kind: sign, error_feedback: true}",
        "{kind: quantize, bits: 2}",
    ]
    .into_iter()
    .enumerate()
    {
        let compressor: CompressorSpec = serde_yaml::from_str(text).unwrap();
        let dir = tmp.path().join(n.to_string());
        let overrides = [network, &format!("compression={{uplink: {text}}}")];
        run_saving(SMALL, &overrides, 2, &dir);
        let (r, j) = (frame(&dir, "rounds.parquet"), frame(&dir, "jobs.parquet"));
        assert_eq!(counts(&r, "completed"), completed, "{text}: the same jobs");
        let expected: Vec<u64> = completed.iter().map(|c| c * compressor.bytes(d)).collect();
        assert_eq!(counts(&r, "bytes_up"), expected, "{text}");
        assert_eq!(counts(&r, "bytes_down"), counts(&rounds, "bytes_down"));
        // 1 Mbit/s: a byte is 8 µs.
        for (i, (up, dense_up)) in floats(&j, "upload_s")
            .iter()
            .zip(floats(&jobs, "upload_s"))
            .enumerate()
        {
            let saved = (4 * d as u64 - compressor.bytes(d)) as f64 * 8e-6;
            assert!(
                (dense_up - up - saved).abs() < 1e-5,
                "{text} job {i}: {up} s against {dense_up} s uncompressed"
            );
        }
        let span = |df: &DataFrame| floats(df, "end_s").last().copied().unwrap();
        assert!(span(&r) < span(&rounds), "{text}: the run ends sooner");
    }
}

/// Every compressor, and the features it meets, gives identical files with 1, 2 and 4
/// threads; error feedback's residual spilled gives the files it gives in memory.
#[test]
fn compressed_runs_are_deterministic_across_threads_and_spilling() {
    let tmp = tempfile::tempdir().unwrap();
    let compress = |text: &str| format!("compression={{uplink: {text}}}");
    for (name, extra) in [
        (
            "top_k",
            vec![compress(
                "{kind: top_k, fraction: 0.05, error_feedback: true}",
            )],
        ),
        (
            "fedem_qsgd",
            vec![
                "algorithm={name: fedem, components: 3}".to_string(),
                compress("{kind: qsgd, levels: 3, error_feedback: true}"),
            ],
        ),
        (
            "fedbuff_random_k",
            vec![
                compress("{kind: random_k, fraction: 0.2}"),
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}".to_string(),
                "sampling={}".to_string(),
            ],
        ),
        (
            "local_privacy_quantize",
            vec![
                compress("{kind: quantize, bits: 4}"),
                "privacy={mechanism: local, clip: 0.5, noise_multiplier: 1}".to_string(),
            ],
        ),
        (
            "central_privacy_sign",
            vec![
                compress("{kind: sign}"),
                "privacy={clip: 0.5, noise_multiplier: 1}".to_string(),
            ],
        ),
    ] {
        let dir = |t: &str| tmp.path().join(format!("{name}-{t}"));
        let mut runs = vec![("1", 1, "off"), ("2", 2, "off"), ("4", 4, "off")];
        runs.push(("spilled", 3, "always"));
        for (label, threads, spill) in runs {
            let mut overrides: Vec<String> = extra.clone();
            overrides.push("rounds=6".into());
            overrides.push(format!("training.spill={spill}"));
            let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
            run_saving(SMALL, &overrides, threads, &dir(label));
        }
        for other in ["2", "4", "spilled"] {
            let differ = differing_files(&dir("1"), &dir(other));
            assert!(differ.is_empty(), "{name}: 1 vs {other}: {differ:?}");
        }
    }
    // Error feedback changes what is learnt: the same run without it ends elsewhere.
    let without = tmp.path().join("no-feedback");
    let overrides = [
        "compression={uplink: {kind: top_k, fraction: 0.05}}",
        "rounds=6",
    ];
    run_saving(SMALL, &overrides, 2, &without);
    let differ = differing_files(&tmp.path().join("top_k-1"), &without);
    assert!(differ.iter().any(|f| f.contains("models")), "{differ:?}");
}

/// A compressed downlink (top-k at 10 %): a client pays the whole model the first time it
/// is sent one, then the compressed moves of the clients' copy since the version it holds (one
/// move per aggregation), at most the whole model; `rounds.parquet`'s `bytes_down` is what
/// the jobs of `jobs.parquet` replayed that way cost, the uplink is untouched, and the files
/// are identical with 1, 2 and 4 threads, for FedAvg, FedEM (every component) and FedBuff.
#[test]
fn a_compressed_downlink_charges_each_client_what_it_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let top_k = "{kind: top_k, fraction: 0.1}";
    let compressor: CompressorSpec = serde_yaml::from_str(top_k).unwrap();
    let downlink = format!("compression={{downlink: {top_k}}}");
    let plain = tmp.path().join("plain");
    run_saving(SMALL, &["rounds=6"], 2, &plain);
    let dir = |name: &str| tmp.path().join(name);
    run_saving(SMALL, &["rounds=6", &downlink], 1, &dir("1"));
    let (rounds, jobs) = (
        frame(&dir("1"), "rounds.parquet"),
        frame(&dir("1"), "jobs.parquet"),
    );
    let plain_rounds = frame(&plain, "rounds.parquet");
    assert_eq!(
        counts(&rounds, "bytes_up"),
        counts(&plain_rounds, "bytes_up")
    );
    let whole = counts(&plain_rounds, "bytes_down")[0] / counts(&plain_rounds, "selected")[0];
    let moved = compressor.bytes((whole / 4) as usize);
    let mut held = std::collections::BTreeMap::new();
    let mut expected = vec![0u64; 6];
    for (round, client) in counts(&jobs, "round")
        .into_iter()
        .zip(counts(&jobs, "client"))
    {
        // Round r is sent the copy's version r − 1.
        let version = round - 1;
        expected[round as usize - 1] += match held.insert(client, version) {
            Some(had) => ((version - had) * moved).min(whole),
            None => whole,
        };
    }
    assert_eq!(counts(&rounds, "bytes_down"), expected);
    assert!(expected[5] < counts(&plain_rounds, "bytes_down")[5]);
    let differ = differing_files(&plain, &dir("1"));
    assert!(differ.iter().any(|f| f.contains("models")), "{differ:?}");
    for (name, extra) in [
        ("fedavg", vec![]),
        ("fedem", vec!["algorithm={name: fedem, components: 3}"]),
        (
            "fedbuff",
            vec![
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
                "sampling={}",
            ],
        ),
    ] {
        let run = |threads: usize| {
            let out = dir(&format!("{name}-{threads}"));
            let mut overrides = vec!["rounds=6", downlink.as_str()];
            overrides.extend_from_slice(&extra);
            run_saving(SMALL, &overrides, threads, &out);
            out
        };
        let one = run(1);
        for threads in [2, 4] {
            let differ = differing_files(&one, &run(threads));
            assert!(differ.is_empty(), "{name}: 1 vs {threads}: {differ:?}");
        }
    }
}

#[test]
fn compression_that_cannot_work_is_refused_with_its_field() {
    for (overrides, expected) in [
        (
            vec!["compression={uplink: {kind: top_k, fraction: 0}}"],
            "`compression.uplink.fraction`: must be in (0, 1]",
        ),
        (
            vec!["compression={uplink: {kind: quantize, bits: 32}}"],
            "`compression.uplink.bits`: must be from 1 to 16",
        ),
        (
            vec!["compression={uplink: {kind: qsgd, levels: 0}}"],
            "`compression.uplink.levels`",
        ),
        (
            vec!["compression={uplink: {kind: topk, fraction: 0.1}}"],
            "`compression.uplink.kind`: unknown variant `topk`, expected one of `top_k`, \
             `random_k`, `qsgd`, `sign`, `quantize`",
        ),
        (
            vec![
                "compression={uplink: {kind: top_k, fraction: 0.1}}",
                "algorithm={name: pfedme}",
            ],
            "`compression`: compresses the updates clients send to a server; `pfedme`",
        ),
        (
            vec![
                "compression={uplink: {kind: sign}}",
                "secure_aggregation={}",
            ],
            "cannot be combined with `secure_aggregation:`",
        ),
        (
            vec![
                "compression={uplink: {kind: qsgd, levels: 4}}",
                "privacy={clip: 1, noise_multiplier: 1}",
            ],
            "`compression.uplink`: under `privacy` with noise added after the clients",
        ),
        (
            vec![
                "compression={uplink: {kind: top_k, fraction: 0.1, error_feedback: true}}",
                "privacy={mechanism: dp_ftrl, clip: 1, noise_multiplier: 1}",
            ],
            "only `top_k` and `sign` without error feedback",
        ),
        (
            vec!["compression={}"],
            "`compression`: give `uplink`, `downlink` or both",
        ),
        (
            vec!["compression={downlink: {kind: sign, error_feedback: true}}"],
            "`compression.downlink.error_feedback`: the downlink always carries what it dropped",
        ),
        (
            vec![
                "compression={downlink: {kind: top_k, fraction: 0.1}}",
                "aggregation={kind: median}",
            ],
            "`compression.downlink`: cannot be combined with `aggregation:`",
        ),
        (
            vec![
                "compression={downlink: {kind: qsgd, levels: 7}}",
                "privacy={mechanism: local, clip: 1, noise_multiplier: 1}",
            ],
            "`compression.downlink`: cannot be combined with `privacy:`",
        ),
    ] {
        let e = error(SMALL, &overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
    // An unknown kind lists the allowed ones.
    let e = error(SMALL, &["compression={uplink: {kind: zip}}"]);
    assert!(e.contains("top_k") && e.contains("quantize"), "{e}");
}
