//! Bad input: clear messages naming the file, the field path, the line and what is allowed.

use fedsim::scenario::{Scenario, ScenarioError};
use std::path::Path;

use crate::common::{error, preflight_error};

const BASE: &str = "\
rounds: 3
data:
  kind: fedem_synthetic
  clients: 10
algorithm:
  name: fedavg
sampling:
  fraction: 0.5
";

#[test]
fn unknown_field_names_path_line_and_choices() {
    let text = BASE.replace("  clients: 10", "  clients: 10\n  clientz: 4");
    let e = error(&text, &[]);
    assert!(e.starts_with("bad.yaml:5: field `data"), "{e}");
    assert!(e.contains("unknown field `clientz`"), "{e}");
    assert!(
        e.contains("expected one of") && e.contains("`clients`"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_the_field() {
    let text = BASE.replace("rounds: 3", "rounds: many");
    let e = error(&text, &[]);
    assert!(e.starts_with("bad.yaml:1: field `rounds`"), "{e}");
    assert!(e.contains("invalid type") && e.contains("u32"), "{e}");
}

#[test]
fn sampling_fraction_outside_unit_interval() {
    for bad in ["0", "1.5", "-0.2"] {
        let e = error(BASE, &[&format!("sampling.fraction={bad}")]);
        assert!(
            e.starts_with("bad.yaml:8: field `sampling.fraction`: must be in (0, 1]"),
            "{e}"
        );
    }
}

#[test]
fn sampling_count_beyond_the_clients() {
    let e = error(BASE, &["sampling.fraction=null", "sampling.count=11"]);
    assert!(
        e.contains(
            "field `sampling.count`: must be at most the number of training clients (10), got 11"
        ),
        "{e}"
    );
}

#[test]
fn unknown_algorithm_lists_the_known_ones() {
    let e = error(&BASE.replace("name: fedavg", "name: fedsgd"), &[]);
    // The path and line of the name itself.
    assert!(
        e.contains(":6: field `algorithm.name`: unknown variant `fedsgd`"),
        "{e}"
    );
    assert!(e.contains("`fedavg`") && e.contains("`local`"), "{e}");
}

#[test]
fn missing_required_field() {
    let e = error(&BASE.replace("rounds: 3\n", ""), &[]);
    assert!(e.contains("missing field `rounds`"), "{e}");
}

#[test]
fn semantic_errors_carry_their_path() {
    let e = error(BASE, &["training.local_steps=5", "training.local_epochs=2"]);
    assert!(
        e.contains("field `training.local_epochs`: give either"),
        "{e}"
    );
    let e = error(BASE, &["split.kind=fractions", "split.train=0.9"]);
    assert!(
        e.contains("field `split.train`: train + val + test must be 1"),
        "{e}"
    );
    let e = error(BASE, &["data.alpha=-1"]);
    assert!(
        e.contains("field `data.alpha`: must be a positive number"),
        "{e}"
    );
    let synthetic_ab = BASE.replace("kind: fedem_synthetic\n  clients: 10", "kind: synthetic_ab");
    let e = error(
        &synthetic_ab,
        &["data.numpy_seed=0", "data.max_samples=1000"],
    );
    assert!(
        e.contains("field `data.max_samples`: cannot be combined with numpy_seed"),
        "{e}"
    );
}

#[test]
fn malformed_yaml_reports_its_line() {
    let e = error("rounds: 3\ndata: [unclosed\n", &[]);
    assert!(e.starts_with("bad.yaml:"), "{e}");
    assert!(e.contains("not valid YAML"), "{e}");
}

#[test]
fn bad_override_syntax() {
    match Scenario::from_yaml(
        BASE,
        Path::new("bad.yaml"),
        &["sampling.fraction".to_string()],
    ) {
        Err(ScenarioError::Override { message, .. }) => assert!(message.contains("PATH=VALUE")),
        other => panic!("expected an override error, got {other:?}"),
    }
}

#[test]
fn missing_file() {
    let e = Scenario::load(Path::new("no/such/scenario.yaml"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot read scenario file no/such/scenario.yaml"),
        "{e}"
    );
}

#[test]
fn overrides_reach_any_field() {
    let s = Scenario::from_yaml(
        BASE,
        Path::new("ok.yaml"),
        &[
            "sampling.fraction=1.0".into(),
            "training.lr=0.5".into(),
            "data.dim=7".into(),
            "seed=99".into(),
        ],
    )
    .unwrap();
    assert_eq!(s.run.training.lr, 0.5);
    assert_eq!(s.run.seed, 99);
    assert!(s.resolved_yaml.contains("dim: 7"));
}

#[test]
fn unseen_fraction_must_leave_clients_on_both_sides() {
    let e = error(&format!("{BASE}unseen:\n  fraction: 0.05\n"), &[]);
    assert!(e.starts_with("bad.yaml:10: field `unseen.fraction`"), "{e}");
    assert!(e.contains("holds out 0 of 10 clients"), "{e}");
    let e = error(BASE, &["unseen={fraction: 1.5}"]);
    assert!(
        e.contains("field `unseen.fraction`: must be in (0, 1), got 1.5"),
        "{e}"
    );
    let e = error(BASE, &["unseen={fraction: 0.5}", "sampling={count: 6}"]);
    assert!(
        e.contains("at most the number of training clients (5)"),
        "{e}"
    );
}

#[test]
fn unknown_algorithm_lists_every_choice() {
    let e = error(&BASE.replace("name: fedavg", "name: fedsgd"), &[]);
    for name in [
        "pfedme",
        "clustered",
        "apfl",
        "per_fedavg",
        "ditto",
        "fedem",
        "fedgmm",
    ] {
        assert!(e.contains(name), "{name} missing from: {e}");
    }
}

#[test]
fn system_and_policy_errors_carry_their_path() {
    let e = error(
        BASE,
        &["policy={kind: fedbuff, buffer_size: 2, concurrency: 4}"],
    );
    assert!(
        e.contains("field `sampling`") && e.contains("concurrency"),
        "{e}"
    );
    let e = error(
        BASE,
        &[
            "sampling=null",
            "algorithm={name: pfedme}",
            "policy={kind: fedbuff, buffer_size: 2, concurrency: 4}",
        ],
    );
    assert!(
        e.contains("field `policy`") && e.contains("`pfedme` cannot take") && e.contains("fedem"),
        "{e}"
    );
    let e = error(BASE, &["policy={kind: synchronous, deadline_s: 0}"]);
    assert!(
        e.contains("field `policy.deadline_s`: must be a positive number"),
        "{e}"
    );
    let e = error(BASE, &["policy={kind: eventually}"]);
    assert!(
        e.contains("field `policy") && e.contains("synchronous") && e.contains("fedbuff"),
        "{e}"
    );
    let e = error(BASE, &["sampling.replacement=true"]);
    assert!(
        e.contains("field `sampling.replacement`: applies to `strategy: weighted`"),
        "{e}"
    );
    let e = error(BASE, &["sampling.over_selection=-1"]);
    assert!(e.contains("field `sampling.over_selection`"), "{e}");
    let e = error(
        BASE,
        &["system.compute={samples_per_second: 5, seconds_per_batch: 1}"],
    );
    assert!(
        e.contains("field `system.compute`: give one of `samples_per_second`, `seconds_per_batch`"),
        "{e}"
    );
    let e = error(
        BASE,
        &["system.compute={flops_per_second: 1.0e9, seconds_per_batch: 1}"],
    );
    assert!(e.contains("field `system.compute`: give one of"), "{e}");
    let e = error(BASE, &["system.compute.flops_per_second=-5"]);
    assert!(e.contains("field `system.compute.flops_per_second`"), "{e}");
    let e = error(
        BASE,
        &["system.network.uplink_mbps={dist: uniform, low: 3, high: 1}"],
    );
    assert!(
        e.contains("field `system.network.uplink_mbps.high`: must be at least low"),
        "{e}"
    );
    let e = error(BASE, &["system.network.latency_ms={dist: gamma}"]);
    assert!(
        e.contains("system.network.latency_ms") && e.contains("uniform"),
        "{e}"
    );
    let e = error(
        BASE,
        &["system.availability={kind: markov, mean_online_s: 0, mean_offline_s: 5}"],
    );
    assert!(
        e.contains("field `system.availability.mean_online_s`"),
        "{e}"
    );
    let e = error(BASE, &["system.dropout=1"]);
    assert!(
        e.contains("field `system.dropout`: must be in [0, 1)"),
        "{e}"
    );
    let e = error(BASE, &["target_accuracy=80"]);
    assert!(e.contains("field `target_accuracy`"), "{e}");
    let e = error(
        BASE,
        &["policy={kind: synchronous, late_updates: partial_work}"],
    );
    assert!(
        e.contains("field `policy.late_updates`") && e.contains("give `deadline_s`"),
        "{e}"
    );
    let text = format!("{BASE}system:\n  local_work: {{fraction: 1.5}}\n");
    let e = error(&text, &[]);
    assert!(
        e.starts_with("bad.yaml:10: field `system.local_work.fraction`")
            && e.contains(
                "must be a positive number of at most 1 (all of the planned work), got 1.5"
            ),
        "{e}"
    );
    let e = error(
        BASE,
        &["system.local_work={fraction: {dist: file, path: w.csv, column: f}}"],
    );
    assert!(
        e.contains("field `system.local_work.fraction`") && e.contains("`per: client`"),
        "{e}"
    );
}

#[test]
fn a_missing_trace_file_is_named_when_the_run_starts() {
    let s = fedsim::scenario::Scenario::from_yaml(
        BASE,
        Path::new("ok.yaml"),
        &["system.availability={kind: csv, path: no/such/trace.csv}".to_string()],
    )
    .unwrap();
    let e = fedsim::results::simulate_scenario(&s, 1, |_| {})
        .err()
        .unwrap();
    let e = fedsim::error_chain(&e);
    assert!(e.contains("no/such/trace.csv"), "{e}");
}

/// BASE without sampling, for decentralized runs.
const PEERS: &str = "\
rounds: 3
data:
  kind: fedem_synthetic
  clients: 10
algorithm:
  name: d_psgd
topology:
  graph: {kind: ring}
";

#[test]
fn topology_errors_carry_their_path() {
    let e = error(BASE, &["topology={graph: {kind: ring}}"]);
    assert!(
        e.contains("field `topology`") && e.contains("`d_psgd` or `d_fedem`"),
        "{e}"
    );
    let e = error(BASE, &["algorithm={name: d_fedem}", "sampling={}"]);
    assert!(
        e.contains("field `algorithm`") && e.contains("topology"),
        "{e}"
    );
    let e = error(PEERS, &["topology.graph={kind: erdos_renyi, p: 0}"]);
    assert!(
        e.contains("field `topology.graph.p`: must be in (0, 1]"),
        "{e}"
    );
    let e = error(PEERS, &["topology.graph={kind: hypercube}"]);
    assert!(
        e.contains("unknown variant `hypercube`") && e.contains("erdos_renyi"),
        "{e}"
    );
    let e = error(PEERS, &["topology.mixing={rule: fmmc, iterations: 0}"]);
    assert!(e.contains("field `topology.mixing.iterations`"), "{e}");
    let e = error(PEERS, &["topology.time_varying={kind: resample, every: 2}"]);
    assert!(
        e.contains("field `topology.time_varying`") && e.contains("drop_links"),
        "{e}"
    );
    let e = error(PEERS, &["topology.time_varying={kind: drop_links, p: 1}"]);
    assert!(
        e.contains("field `topology.time_varying.p`: must be in [0, 1)"),
        "{e}"
    );
    let e = error(PEERS, &["sampling.fraction=0.5"]);
    assert!(
        e.contains("field `sampling`") && e.contains("every peer"),
        "{e}"
    );
    let e = error(
        PEERS,
        &["policy={kind: fedbuff, buffer_size: 2, concurrency: 4}"],
    );
    assert!(
        e.contains("field `policy`") && e.contains("topology.gossip"),
        "{e}"
    );
    let e = error(PEERS, &["unseen={fraction: 0.25}"]);
    assert!(
        e.contains("field `unseen`") && e.contains("decentralized"),
        "{e}"
    );
}

#[test]
fn topology_errors_that_need_the_peers_are_named_when_the_run_starts() {
    let start = |overrides: &[&str]| {
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let s = Scenario::from_yaml(PEERS, Path::new("ok.yaml"), &o).unwrap();
        fedsim::error_chain(
            &fedsim::results::simulate_scenario(&s, 1, |_| {})
                .err()
                .expect("the run is refused"),
        )
    };
    let e = start(&["topology.graph={kind: torus, rows: 3, cols: 4}"]);
    assert!(
        e.contains("topology.graph") && e.contains("rows × cols = 12") && e.contains("(10)"),
        "{e}"
    );
    let e = start(&["topology.graph={kind: star, center: 10}"]);
    assert!(e.contains("topology.graph.center"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let edges = dir.path().join("links.csv");
    std::fs::write(&edges, "a,b\n0,1\n1,2\n").unwrap();
    let set = format!(
        "topology.graph={{kind: edge_list, path: {}}}",
        edges.display()
    );
    let e = start(&[&set]);
    assert!(
        e.contains("disconnected") && e.contains("disconnected: allow"),
        "{e}"
    );
    std::fs::write(&edges, "a,b\n0,1\n1,x\n").unwrap();
    let e = start(&[&set]);
    assert!(
        e.contains("links.csv:3") && e.contains("`x` is not a peer id"),
        "{e}"
    );
}

#[test]
fn sizes_that_cannot_fit_in_memory_are_refused_with_the_estimate() {
    let e = preflight_error(BASE, &["data.clients=100000000000"]);
    assert!(
        e.starts_with(
            "bad.yaml:4: field `data.clients`: 100000000000 clients need at least 2.7 PiB of \
             memory (2.7 PiB of data, every client at its minimum size, and 2.9 TiB of \
             per-client state), more than this machine's "
        ),
        "{e}"
    );
    assert!(
        e.ends_with(
            "or `data.on_demand: true` to make each client's rows only when a job needs them"
        ),
        "{e}"
    );
    // Made on demand, the rows cost nothing up front: only 32 bytes per client are counted.
    let e = preflight_error(BASE, &["data.clients=1000000000000", "data.on_demand=true"]);
    assert!(
        e.contains("need at least 29.1 TiB of memory (no rows held: they are made on demand, and"),
        "{e}"
    );
    assert!(!e.contains("on_demand"), "{e}");
    let fits = crate::common::scenario(BASE, &["data.clients=10000000", "data.on_demand=true"]);
    fedsim::plan::preflight(&fits).expect("10⁷ clients on demand fit");
    let e = preflight_error(
        &BASE.replace("kind: fedem_synthetic\n  clients: 10", "kind: synthetic_ab"),
        &["data.clients=1000000000000", "sampling.fraction=0.0001"],
    );
    assert!(
        e.contains("field `data.clients`: 1000000000000 clients need at least"),
        "{e}"
    );
}

#[test]
fn new_hardening_fields_name_what_is_allowed() {
    let e = error(BASE, &["on_divergence=ignore"]);
    assert!(
        e.contains(
            "field `on_divergence`: unknown variant `ignore`, expected `stop` or `continue`"
        ),
        "{e}"
    );
    let parquet = "rounds: 3\ndata: {kind: parquet, path: x.parquet, features_column: x}\n\
                   algorithm: {name: fedavg}\n";
    // The data set reads its own fields, and the error names the field inside `data`.
    let e = error(parquet, &["data.non_finite=keep"]);
    assert!(
        e.contains("field `data.non_finite`: unknown variant `keep`, expected `reject` or `drop`"),
        "{e}"
    );
}

#[test]
fn fedgmm_image_settings_are_refused_with_their_paths() {
    let mnist = "rounds: 1\ndata: {kind: mnist, partition: {kind: iid, clients: 4}}\n\
                 algorithm: {name: fedgmm}\n";
    let e = error(mnist, &["data.joint_shift={fraction: 1.5}"]);
    assert!(
        e.contains("field `data.joint_shift.fraction`: must be in (0, 1], got 1.5"),
        "{e}"
    );
    let e = error(mnist, &["data.joint_shift={fraction: 0.5, mode: both}"]);
    assert!(
        e.contains("field `data.joint_shift.mode`")
            && e.contains("expected one of `joint`, `separate`, `features`"),
        "{e}"
    );
    let e = error(mnist, &["algorithm.projection={kind: pca, dims: 0}"]);
    assert!(
        e.contains("field `algorithm.projection.dims`: must be at least 1"),
        "{e}"
    );
    let e = error(mnist, &["algorithm.projection={kind: pca, dim: 48}"]);
    assert!(
        e.contains("algorithm.projection") && e.contains("unknown field `dim`"),
        "{e}"
    );
}

#[test]
fn kept_classes_are_refused_with_their_paths() {
    let fashion = "rounds: 1\ndata: {kind: fashion_mnist, partition: {kind: iid, clients: 3}}\n\
                   algorithm: {name: fedavg}\n";
    let e = error(fashion, &["data.keep_classes=[0, 2, 12]"]);
    assert!(
        e.contains(
            "field `data.keep_classes[2]`: `12` is not a label of this data set: labels are 0–9"
        ),
        "{e}"
    );
    let e = error(fashion, &["data.keep_classes=[6, 6]"]);
    assert!(
        e.contains("field `data.keep_classes[1]`") && e.contains("listed twice"),
        "{e}"
    );
    let e = error(fashion, &["data.keep_classes=[6]"]);
    assert!(
        e.contains("field `data.keep_classes`") && e.contains("at least two classes"),
        "{e}"
    );
    // Three classes kept: a model of three outputs.
    let s = crate::common::scenario(fashion, &["data.keep_classes=[0, 2, 6]"]);
    assert_eq!(s.data.classes(), Some(3));
}

#[test]
fn a_field_given_to_a_kind_that_takes_none_is_refused() {
    // serde would ignore any field beside the tag of a kind without settings.
    for (text, set, path) in [
        (
            PEERS,
            "topology.graph={kind: ring, degree: 4}",
            "topology.graph",
        ),
        (
            PEERS,
            "topology.mixing={rule: max_degree, iterations: 3}",
            "topology.mixing",
        ),
        (
            PEERS,
            "topology.time_varying={kind: fixed, every: 2}",
            "topology.time_varying",
        ),
        (
            BASE,
            "system.availability={kind: always, mean_online_s: 5}",
            "system.availability",
        ),
        (
            BASE,
            "training.lr_schedule={kind: constant, gamma: 0.5}",
            "training.lr_schedule",
        ),
        (
            BASE,
            "adversary={fraction: 0.2, attack: {kind: label_flip, scale: 3}}",
            "adversary.attack",
        ),
        (BASE, "aggregation={kind: median, trim: 0.1}", "aggregation"),
    ] {
        let e = error(text, &[set]);
        assert!(
            e.contains(&format!("field `{path}`: unknown field `"))
                && e.contains("there are no fields"),
            "{set}: {e}"
        );
    }
}
