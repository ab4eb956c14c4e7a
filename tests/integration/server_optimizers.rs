//! Server optimizers (`server_optimizer:`): `sgd` at rate 1 is plain averaging, bit for bit;
//! the optimizer steps every round's aggregate (FedAvgM with β = 0 is SGD at its rate, and
//! another rate moves the model elsewhere); what cannot work is refused with its field.
//! Each optimizer's step is worked by hand in its unit tests; determinism across threads is
//! in `determinism.rs`.

use crate::common::{error, run_saving, SMALL};
use std::path::Path;

/// `metrics.csv` without its first column (the run id, which the scenario's text sets).
fn metrics_without_run_id(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    let rows = text
        .lines()
        .map(|l| l.split_once(',').unwrap().1.to_string());
    rows.collect()
}

fn model(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("models.safetensors")).unwrap()
}

#[test]
fn sgd_at_rate_one_is_plain_averaging_and_other_steps_move_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let dir = tmp.path().join(name);
        run_saving(SMALL, extra, 2, &dir);
        dir
    };
    let plain = run("plain", &[]);
    let sgd = run("sgd", &["server_optimizer={kind: sgd}"]);
    assert_eq!(model(&plain), model(&sgd), "sgd at lr 1 moved the model");
    assert_eq!(metrics_without_run_id(&plain), metrics_without_run_id(&sgd));
    // Momentum without memory is SGD at its rate; that rate is not 1's.
    let twice = run("sgd2", &["server_optimizer={kind: sgd, lr: 2}"]);
    let momentum = run(
        "momentum0",
        &["server_optimizer={kind: momentum, beta: 0, lr: 2}"],
    );
    assert_eq!(model(&twice), model(&momentum));
    assert_ne!(model(&twice), model(&plain));
    for kind in [
        "{kind: momentum}",
        "{kind: adam, lr: 0.01}",
        "{kind: yogi, lr: 0.01}",
        "{kind: adagrad, lr: 0.01}",
    ] {
        let moved = run(kind, &[&format!("server_optimizer={kind}")]);
        assert_ne!(model(&moved), model(&plain), "{kind}");
        assert_ne!(model(&moved), model(&twice), "{kind}");
    }
}

#[test]
fn what_a_server_optimizer_cannot_step_is_refused_with_its_field() {
    let e = error(SMALL, &["server_optimizer={kind: adam}"]);
    assert!(
        e.contains("`server_optimizer`") && e.contains("`lr`"),
        "{e}"
    );
    let e = error(
        SMALL,
        &["server_optimizer={kind: adam, lr: 0.1, betas: [0.9, 1]}"],
    );
    assert!(
        e.contains("`server_optimizer.betas`") && e.contains("[0, 1)"),
        "{e}"
    );
    let e = error(SMALL, &["server_optimizer={kind: nesterov}"]);
    assert!(
        e.contains("`sgd`, `momentum`, `adam`, `yogi`, `adagrad`"),
        "{e}"
    );
    // pFedMe's server mixes with its own β; clustered FL's clusters split.
    for name in ["pfedme", "clustered", "local"] {
        let e = error(
            SMALL,
            &[
                &format!("algorithm.name={name}"),
                "server_optimizer={kind: momentum}",
            ],
        );
        assert!(
            e.contains("field `server_optimizer`") && e.contains("`fedavg`, `fedprox`"),
            "{name}: {e}"
        );
    }
    let peers = SMALL.replace("sampling: {fraction: 0.5}\n", "");
    let e = error(
        &peers,
        &[
            "algorithm.name=d_psgd",
            "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}",
            "server_optimizer={kind: momentum}",
        ],
    );
    assert!(e.contains("runs on peers, without a server"), "{e}");
}
