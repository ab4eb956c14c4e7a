//! Secure aggregation in virtual time (`secure_aggregation:`): the protocol's steps lengthen
//! each round by what `rounds.parquet` says and add their bytes, leave the sum (so the model)
//! as it was when nobody drops, make a round aggregate nothing when too many drop, and give the
//! same files with 1 and 4 threads; bad settings are refused with their field.

use crate::common::{error, f64_column as floats, run_saving, u64_column as counts, SMALL};
use fedsim::results::{differing_files, read_parquet};

const MODELS: &str = "models.safetensors";
use polars::prelude::DataFrame;
use std::path::Path;

fn rounds(dir: &Path) -> DataFrame {
    read_parquet(&dir.join("rounds.parquet")).unwrap()
}

/// With a network (latency and bandwidth) and nobody dropping: each round lasts its setup and
/// its finish longer than without, its bytes grow by the protocol's, and the final models are
/// the same (the masked sum is the sum).
#[test]
fn secure_aggregation_lengthens_rounds_by_its_steps_and_keeps_the_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let network = "system={network: {latency_ms: 20, downlink_mbps: 10, uplink_mbps: 2}}";
    let plain = tmp.path().join("plain");
    run_saving(SMALL, &[network], 2, &plain);
    for protocol in ["secagg", "secagg_plus"] {
        let dir = tmp.path().join(protocol);
        let secagg = format!("secure_aggregation={{protocol: {protocol}}}");
        run_saving(SMALL, &[network, &secagg], 2, &dir);
        let (with, without) = (rounds(&dir), rounds(&plain));
        let span = |df: &DataFrame| -> Vec<f64> {
            let (start, end) = (floats(df, "start_s"), floats(df, "end_s"));
            end.iter().zip(&start).map(|(e, s)| e - s).collect()
        };
        let (setup, finish) = (
            floats(&with, "secagg_setup_s"),
            floats(&with, "secagg_finish_s"),
        );
        for (t, (a, b)) in span(&with).iter().zip(span(&without)).enumerate() {
            assert!(
                setup[t] > 0.04 && finish[t] > 0.04,
                "{protocol} round {t}: two legs each"
            );
            let expected = b + setup[t] + finish[t];
            assert!(
                (a - expected).abs() < 2e-6,
                "{protocol} round {t}: {a} vs {expected}"
            );
        }
        let total = |df: &DataFrame| -> Vec<u64> {
            let (up, down) = (counts(df, "bytes_up"), counts(df, "bytes_down"));
            up.iter().zip(&down).map(|(u, d)| u + d).collect()
        };
        let extra = counts(&with, "secagg_bytes");
        for (t, (a, b)) in total(&with).iter().zip(total(&without)).enumerate() {
            assert_eq!(*a, b + extra[t], "{protocol} round {t}");
        }
        assert!(counts(&with, "secagg_dropped").iter().all(|&d| d == 0));
        let models = |d: &Path| std::fs::read(d.join(MODELS)).expect("saved models");
        assert!(
            models(&dir) == models(&plain),
            "{protocol}: the same final models"
        );
    }
}

/// Clients dropping at every step (30 %): rounds fail (nothing aggregated, and jobs.parquet
/// says so) where too few holders answered, more often at a higher threshold; the files are
/// the same with 1 and 4 threads.
#[test]
fn dropouts_between_steps_fail_rounds_deterministically() {
    let tmp = tempfile::tempdir().unwrap();
    let failures = |extra: &str, threads: usize, name: &str| {
        let dir = tmp.path().join(name);
        run_saving(SMALL, &["rounds=8", extra], threads, &dir);
        let df = rounds(&dir);
        let failed: Vec<bool> = counts(&df, "secagg_failed")
            .iter()
            .map(|&f| f == 1)
            .collect();
        let completed = counts(&df, "completed");
        // jobs.parquet agrees: a round's aggregated jobs are its completed updates.
        let jobs = read_parquet(&dir.join("jobs.parquet")).unwrap();
        let job_round = jobs.column("round").unwrap().u32().unwrap();
        let outcome = jobs.column("outcome").unwrap().str().unwrap();
        for (t, &done) in completed.iter().enumerate() {
            let aggregated = (0..jobs.height())
                .filter(|&i| {
                    job_round.get(i) == Some(t as u32 + 1) && outcome.get(i) == Some("aggregated")
                })
                .count();
            assert_eq!(aggregated as u64, done, "{name} round {}", t + 1);
        }
        for (t, &f) in failed.iter().enumerate() {
            assert!(
                !f || completed[t] == 0,
                "{name} round {t}: a failed round aggregates nothing"
            );
        }
        (dir, failed.iter().filter(|&&f| f).count())
    };
    let loose =
        "secure_aggregation={protocol: secagg_plus, neighbours: 4, dropout: 0.3, threshold: 0.2}";
    let strict =
        "secure_aggregation={protocol: secagg_plus, neighbours: 4, dropout: 0.3, threshold: 0.8}";
    let (one, loose_failed) = failures(loose, 1, "loose-1");
    let (four, _) = failures(loose, 4, "loose-4");
    let differ = differing_files(&one, &four);
    assert!(differ.is_empty(), "1 vs 4 threads: {differ:?}");
    let (_, strict_failed) = failures(strict, 2, "strict");
    assert!(
        strict_failed > loose_failed,
        "{strict_failed} vs {loose_failed}"
    );
    assert!(strict_failed > 0);
}

#[test]
fn bad_secure_aggregation_settings_are_refused_with_their_field() {
    for (overrides, expected) in [
        (
            vec!["secure_aggregation={threshold: 0}"],
            "secure_aggregation.threshold",
        ),
        (
            vec!["secure_aggregation={protocol: secagg_plus, neighbours: 3}"],
            "secure_aggregation.neighbours",
        ),
        (
            vec!["secure_aggregation={neighbours: 4}"],
            "`secagg` shares with every other client",
        ),
        (
            vec!["secure_aggregation={dropout: 1}"],
            "secure_aggregation.dropout",
        ),
        (
            vec!["secure_aggregation={key_agreement_ms: -1}"],
            "`secure_aggregation.key_agreement_ms`: must be a number ≥ 0, got -1",
        ),
        (
            vec!["secure_aggregation={mask_floats_per_second: 0}"],
            "`secure_aggregation.mask_floats_per_second`: must be a positive number, got 0",
        ),
        (
            vec![
                "secure_aggregation={}",
                "policy={kind: fedbuff, concurrency: 4, buffer_size: 2}",
                "sampling={}",
            ],
            "needs synchronous rounds without late updates",
        ),
        (
            vec!["secure_aggregation={}", "algorithm={name: pfedme}"],
            "secure aggregation computes the sum of what clients send",
        ),
    ] {
        let e = error(SMALL, &overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
}

/// Distributed DP (`privacy.mechanism: distributed`): with every drawn client's share in each
/// sum, each round spends what central noise of the same σ spends and carries the same noise;
/// with clients dropping between the protocol's steps, sums carry fewer shares and the run
/// spends more, less so when the shares were sized for fewer survivors; the same files with 1 and 4
/// threads.
#[test]
fn distributed_noise_shares_spend_what_reaches_the_sum() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], threads: usize, name: &str| {
        let dir = tmp.path().join(name);
        let mut overrides = vec!["rounds=6"];
        overrides.extend_from_slice(extra);
        run_saving(SMALL, &overrides, threads, &dir);
        let df = rounds(&dir);
        (dir, floats(&df, "epsilon"), floats(&df, "noise_std"))
    };
    let central = "privacy={clip: 1, noise_multiplier: 1}";
    let distributed = "privacy={mechanism: distributed, clip: 1, noise_multiplier: 1}";
    let secagg = "secure_aggregation={}";
    let (_, eps_central, std_central) = run(&[central], 2, "central");
    let (_, eps_all, std_all) = run(&[distributed, secagg], 2, "all");
    // Composed round by round rather than multiplied: the same ε up to float rounding.
    for (a, c) in eps_all.iter().zip(&eps_central) {
        assert!(
            (a - c).abs() <= 1e-12 * c,
            "every share in every sum: central's ε, {a} vs {c}"
        );
    }
    assert_eq!(std_all, std_central, "and central's noise");
    let dropping = "secure_aggregation={protocol: secagg_plus, neighbours: 4, dropout: 0.2, \
                    threshold: 0.2}";
    let (one, eps_short, _) = run(&[distributed, dropping], 1, "short-1");
    let (four, _, _) = run(&[distributed, dropping], 4, "short-4");
    let differ = differing_files(&one, &four);
    assert!(differ.is_empty(), "1 vs 4 threads: {differ:?}");
    let last = |eps: &[f64]| *eps.last().unwrap();
    assert!(
        last(&eps_short) > last(&eps_all),
        "{eps_short:?} vs {eps_all:?}"
    );
    let sized = "privacy={mechanism: distributed, clip: 1, noise_multiplier: 1, \
                 share_survivors: 0.5}";
    let (_, eps_sized, _) = run(&[sized, dropping], 2, "sized");
    assert!(
        last(&eps_sized) < last(&eps_short),
        "shares sized for half of the clients: {eps_sized:?} vs {eps_short:?}"
    );
}

#[test]
fn distributed_privacy_needs_secure_aggregation_and_a_fixed_count() {
    let distributed = "privacy={mechanism: distributed, clip: 1, noise_multiplier: 1}";
    for (overrides, expected) in [
        (vec![distributed], "`distributed` needs a `secure_aggregation:` section"),
        (
            vec![
                distributed,
                "secure_aggregation={}",
                "sampling={strategy: poisson, fraction: 0.5}",
            ],
            "`distributed` needs a fixed number of clients a round",
        ),
        (
            vec![
                "privacy={mechanism: distributed, clip: 1, noise_multiplier: 1, share_survivors: 2}",
                "secure_aggregation={}",
            ],
            "privacy.share_survivors",
        ),
    ] {
        let e = error(SMALL, &overrides);
        assert!(e.contains(expected), "{overrides:?}: {e}");
    }
}
