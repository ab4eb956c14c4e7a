//! `training.precision`: bf16 mixed precision on the CPU is reproducible across threads, rounds
//! the results differently from fp32 and still learns; tf32 is refused where there is no GPU.
//! (TF32 itself runs only on CUDA: the GPU checklist runs it.)

use crate::common::{assert_identical_on_1_2_4_threads, error, run_saving, summary_value, SMALL};
use crate::real_data::{check_deterministic, femnist_available};
use fedsim::results::read_parquet;
use std::path::Path;

/// The run's summary: its mean test accuracy and test loss (metrics written: it evaluated).
fn summary(dir: &Path) -> (f64, f64) {
    let df = read_parquet(&dir.join("metrics.parquet")).unwrap();
    assert!(df.height() > 0, "{dir:?}: evaluated");
    (
        summary_value(dir, "test_acc_mean"),
        summary_value(dir, "test_loss_mean"),
    )
}

/// `settings` under bf16 against fp32 ([`check_reduced`]).
fn check_bf16(what: &str, settings: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let fp32 = tmp.path().join(format!("{what}-fp32"));
    run_saving(SMALL, settings, 2, &fp32);
    check_reduced("training.precision=bf16", settings, &fp32, tmp.path());
}

#[test]
fn bf16_runs_are_identical_across_threads_and_learn_as_fp32_does() {
    let mlp = "model={kind: mlp, hidden: [16]}";
    for (what, settings) in [
        // Stacked on the CPU (a dense model), and each client alone.
        (
            "fedem-cohorts",
            vec!["algorithm={name: fedem, components: 2}", mlp],
        ),
        (
            "fedem-alone",
            vec![
                "algorithm={name: fedem, components: 2}",
                mlp,
                "training.cohorts=off",
            ],
        ),
        // FedGMM's Gaussians stay f32 beside the classifiers' bf16 products.
        (
            "fedgmm",
            vec![
                "algorithm={name: fedgmm, gaussians: 2, classifiers: 2}",
                mlp,
            ],
        ),
        // Lockstep updates by the algorithm's own rule.
        ("pfedme", vec!["algorithm={name: pfedme, lambda: 15}", mlp]),
    ] {
        check_bf16(what, &settings);
    }
}

#[test]
fn bf16_convolutions_are_identical_across_threads_stacked_and_alone() {
    // FEMNIST's CNN on 7 writers, two rounds: stacked as on a GPU (grouped convolutions) and
    // each client alone.
    if !femnist_available() {
        return;
    }
    for cohorts in ["training.cohorts=always", "training.cohorts=off"] {
        check_deterministic(&[
            "algorithm={name: fedem, components: 2}",
            "training.precision=bf16",
            cohorts,
        ]);
    }
}

#[test]
fn tf32_without_a_gpu_is_refused_naming_the_field() {
    let message = error(SMALL, &["training.precision=tf32"]);
    assert!(
        message.contains("training.precision") && message.contains("`tf32`"),
        "{message}"
    );
    assert!(message.contains("`fp32` or `bf16`"), "{message}");
    let message = error(SMALL, &["training.precision=fp16"]);
    assert!(
        message.contains("training.precision") && message.contains("bf16"),
        "{message}"
    );
}

/// On a GPU machine only (`bash scripts/gpu.sh check synthetic`): FedEM on CUDA under `tf32`
/// and `bf16`, every result file bit-identical with 1 and 2 threads, other metrics than fp32's,
/// and a test accuracy within 5 points of it; after them an fp32 run gives fp32's files again
/// (each run sets libtorch's TF32 switch for itself).
#[test]
#[ignore = "needs a CUDA GPU and a `--features cuda` build"]
fn gpu_cohorts_in_reduced_precision_are_reproducible() {
    let settings = [
        "algorithm={name: fedem, components: 2}",
        "model={kind: mlp, hidden: [64]}",
        "training.device=cuda",
    ];
    let tmp = tempfile::tempdir().unwrap();
    let fp32 = tmp.path().join("fp32");
    run_saving(SMALL, &settings, 2, &fp32);
    for precision in ["training.precision=tf32", "training.precision=bf16"] {
        check_reduced(precision, &settings, &fp32, tmp.path());
    }
    let again = tmp.path().join("fp32-again");
    run_saving(SMALL, &settings, 2, &again);
    let differ = fedsim::results::differing_files(&fp32, &again);
    assert!(differ.is_empty(), "fp32 after tf32: {differ:?} differ");
}

/// `settings` with `precision`: identical with 1, 2 and 4 threads, not `fp32`'s metrics, an
/// accuracy within 5 points of them.
fn check_reduced(precision: &str, settings: &[&str], fp32: &Path, dir: &Path) {
    let reduced: Vec<&str> = [settings, &[precision]].concat();
    assert_identical_on_1_2_4_threads(precision, SMALL, &reduced, dir);
    let reduced = dir.join(format!("{precision}-1"));
    assert_ne!(
        std::fs::read(fp32.join("metrics.parquet")).unwrap(),
        std::fs::read(reduced.join("metrics.parquet")).unwrap(),
        "{precision}: the metrics of fp32"
    );
    let ((acc32, _), (acc, loss)) = (summary(fp32), summary(&reduced));
    assert!(
        (acc32 - acc).abs() <= 0.05 && loss.is_finite(),
        "{precision}: fp32 {acc32}, reduced {acc}"
    );
}
