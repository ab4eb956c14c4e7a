//! Decentralized runs: peers over a topology (D-PSGD, D-FedEM), checked against FedAvg, by
//! hand-computed times, and for determinism.

use crate::common::{column_names, scenario};
use fedsim::records::Record;
use fedsim::results::{differing_files, read_parquet};
use fedsim::results::{run_scenario, simulate_scenario, RunOptions};
use std::path::Path;

/// Eight clients of exactly 60 training samples (so that FedAvg's n_t weights are uniform).
const EQUAL: &str = "\
name: equal
seed: 5
rounds: 4
eval_every: 1
data: {kind: fedem_synthetic, clients: 8, dim: 20, components: 2, min_samples: 60, max_samples: 60}
split: {kind: extra_test, test_samples: 30}
algorithm: {name: fedavg}
training: {local_epochs: 1, batch_size: 20, lr: 0.1, momentum: 0.9, weight_decay: 5.0e-4}
system:
  compute: {samples_per_second: 100}
  network: {latency_ms: 50, downlink_mbps: 20, uplink_mbps: 5}
";

const PEERS: &[&str] = &[
    "algorithm={name: d_psgd}",
    "topology={graph: {kind: complete}, mixing: {rule: uniform_neighbour}}",
];

fn test_rows(records: &[Record]) -> Vec<(u32, u32, String, usize, f64, f64)> {
    let mut rows: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Eval(e) => Some((
                e.round,
                e.client,
                e.split.as_str().to_string(),
                e.n_samples,
                e.loss,
                e.accuracy,
            )),
            _ => None,
        })
        .collect();
    rows.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
    rows
}

fn gossip(records: &[Record]) -> Vec<fedsim::records::GossipRecord> {
    fedsim::records::GossipRecord::all(records)
        .into_iter()
        .cloned()
        .collect()
}

#[test]
fn d_psgd_on_a_complete_graph_with_uniform_weights_is_fedavg_with_full_participation() {
    let fedavg = simulate_scenario(&scenario(EQUAL, &[]), 2, |_| {}).unwrap();
    let peers = simulate_scenario(&scenario(EQUAL, PEERS), 2, |_| {}).unwrap();
    let (a, b) = (test_rows(&fedavg.records), test_rows(&peers.records));
    assert_eq!(a.len(), 4 * 8 * 2, "rounds × clients × (train, test)");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.0, x.1, &x.2, x.3), (y.0, y.1, &y.2, y.3));
        assert!(
            (x.4 - y.4).abs() <= 1e-5 * x.4.abs().max(1.0),
            "loss {x:?} vs {y:?}"
        );
        assert!((x.5 - y.5).abs() <= 1e-9, "accuracy {x:?} vs {y:?}");
    }
    let final_models = |records: &[Record]| {
        records
            .iter()
            .find_map(|r| match r {
                Record::FinalModels(m) => Some(m.clone()),
                _ => None,
            })
            .expect("final models recorded")
    };
    let (fa, fb) = (final_models(&fedavg.records), final_models(&peers.records));
    assert_eq!(fa.len(), 1);
    for (x, y) in fa[0].iter().zip(&fb[0]) {
        assert!((x - y).abs() <= 1e-5, "final models differ: {x} vs {y}");
    }
    // Uniform weights on a complete graph: every peer holds the average, exactly.
    let rounds = gossip(&peers.records);
    assert_eq!(rounds.len(), 4);
    for g in &rounds {
        assert_eq!(g.consensus_distance, 0.0);
        assert!((g.spectral_gap - 1.0).abs() < 1e-9);
        assert!(g.connected && g.links == 28);
    }
}

#[test]
fn synchronous_gossip_takes_the_time_the_links_say() {
    // Complete graph on 8 peers. Per round: 60 samples at 100/s = 0.6 s of compute; then 7
    // messages of 21 floats (a binary linear model on 20 features: 84 bytes = 672 bits) queued
    // on a 5 Mbit/s uplink (the slower of 5 up and 20 down): 135 µs each (134.4, rounded up),
    // the last arriving 50 ms + 7·135 µs after the send.
    let out = simulate_scenario(&scenario(EQUAL, PEERS), 1, |_| {}).unwrap();
    let round_us = 600_000 + 50_000 + 7 * 135;
    let rounds = gossip(&out.records);
    for (k, g) in rounds.iter().enumerate() {
        assert_eq!(
            g.time.micros(),
            (k as u64 + 1) * round_us,
            "round {}",
            g.round
        );
        assert_eq!(g.bytes, 8 * 7 * 84);
    }
}

#[test]
fn mixing_on_a_ring_follows_the_spectral_gap() {
    // Metropolis–Hastings on a ring of 8: weights 1/3, eigenvalues (1 + 2cos(2πk/8))/3, so the
    // second-largest modulus is (1 + √2)/3.
    let ring = [
        "algorithm={name: d_psgd}",
        "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}",
    ];
    let out = simulate_scenario(&scenario(EQUAL, &ring), 2, |_| {}).unwrap();
    let rounds = gossip(&out.records);
    let gap = 1.0 - (1.0 + 2f64.sqrt()) / 3.0;
    for g in &rounds {
        assert!((g.spectral_gap - gap).abs() < 1e-9, "{}", g.spectral_gap);
        assert!(
            g.consensus_distance > 0.0,
            "a ring does not reach consensus in one step"
        );
        assert_eq!(g.bytes, 8 * 2 * 84);
    }
}

#[test]
fn asynchronous_gossip_does_not_wait_for_slow_neighbours() {
    // Device speeds spread widely: synchronous peers wait for their slowest neighbour each
    // round, asynchronous ones mix what has arrived and go on.
    let base = [
        "algorithm={name: d_psgd}",
        "system.compute.samples_per_second={dist: lognormal, median: 100, sigma: 1.0}",
    ];
    let with = |gossip: &str| {
        let topology = format!(
            "topology={{graph: {{kind: ring}}, mixing: {{rule: metropolis_hastings}}, gossip: {gossip}}}"
        );
        let mut o: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        o.push(topology);
        o.push("rounds=6".into());
        let o: Vec<&str> = o.iter().map(String::as_str).collect();
        simulate_scenario(&scenario(EQUAL, &o), 2, |_| {}).unwrap()
    };
    let (sync, asynchronous) = (with("synchronous"), with("asynchronous"));
    assert_eq!(gossip(&sync.records).len(), 6);
    assert_eq!(gossip(&asynchronous.records).len(), 6);
    // The slowest peer sets the end in both; the others finish far sooner without waiting.
    let finish_times = |records: &[Record]| -> Vec<u64> {
        let mut t = vec![0; 8];
        for r in records {
            if let Record::Eval(e) = r {
                if e.round == 6 {
                    t[e.client as usize] = e.time.micros();
                }
            }
        }
        t
    };
    let (s, a) = (
        finish_times(&sync.records),
        finish_times(&asynchronous.records),
    );
    assert!(a.iter().zip(&s).all(|(a, s)| a <= s), "{a:?} vs {s:?}");
    let (sum_a, sum_s): (u64, u64) = (a.iter().sum(), s.iter().sum());
    assert!(
        sum_a * 10 < sum_s * 9,
        "asynchronous {a:?} vs synchronous {s:?}"
    );
    assert_eq!(test_rows(&asynchronous.records).len(), 6 * 8 * 2);
}

/// A peer that drops out sits the round out: it sends nothing, and in synchronous gossip its
/// neighbours put its weight on themselves. On a complete graph with uniform weights every
/// peer mixes the exact average when nobody drops out, and the mixed models differ when
/// somebody does.
#[test]
fn dropped_peers_sit_the_round_out() {
    let overrides = [PEERS[0], PEERS[1], "system.dropout=0.3", "rounds=6"];
    let s = scenario(EQUAL, &overrides);
    let out = simulate_scenario(&s, 2, |_| {}).unwrap();
    let rounds = gossip(&out.records);
    assert_eq!(rounds.len(), 6);
    // Who drops out is the system model's draw for (peer, round), whatever the gossip does.
    let system = fedsim::system::SystemModel::build(
        &s.run.system,
        &fedsim::sim::SeedTree::new(s.run.seed),
        8,
        fedsim::system::SampleCost {
            batch_size: s.run.training.plan.batch_size,
            training_flops: 1.0,
        },
        None,
    )
    .unwrap();
    let mut some_dropped = false;
    for g in &rounds {
        let expected = (0..8)
            .filter(|&p| system.dropout_point(p, g.round as u64).is_some())
            .count() as u64;
        assert_eq!(g.dropped, expected, "round {}", g.round);
        // Each peer that stayed sends its model to its 7 neighbours (84 bytes each).
        assert_eq!(g.bytes, (8 - g.dropped) * 7 * 84, "round {}", g.round);
        if g.dropped == 0 {
            assert!(g.consensus_distance < 1e-12, "{g:?}");
        } else {
            some_dropped = true;
            assert!(g.consensus_distance > 1e-9, "{g:?}");
        }
    }
    assert!(
        some_dropped && rounds.iter().any(|g| g.dropped == 0),
        "{rounds:?}"
    );
    // Every peer is still evaluated every round.
    assert_eq!(test_rows(&out.records).len(), 6 * 8 * 2);
}

/// Availability in synchronous gossip, by hand. Complete graph on 8 peers, uniform weights,
/// rounds of 600 ms compute + 50 ms latency + 7 queued sends of 135 µs (as in
/// `synchronous_gossip_takes_the_time_the_links_say`). Peer 1 is never online: it sits out
/// every round and keeps its initial model. Peer 2 is online during [0, 0.3 s) and from 2 s:
/// it goes offline 0.3 s into round 1's compute and sits round 1 out, then starts round 2
/// when it is back at 2 s, and the others wait for its round-2 model.
#[test]
fn offline_peers_start_their_round_when_back_and_sit_out_when_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("online.csv");
    let mut rows = String::from("client,start_s,end_s\n0,0,1000000\n2,0,0.3\n2,2,1000000\n");
    for p in 3..8 {
        rows += &format!("{p},0,1000000\n");
    }
    std::fs::write(&trace, rows).unwrap();
    let availability = format!(
        "system.availability={{kind: csv, path: '{}'}}",
        trace.display()
    );
    let overrides = [PEERS[0], PEERS[1], "rounds=4", &availability];
    let out = simulate_scenario(&scenario(EQUAL, &overrides), 2, |_| {}).unwrap();
    let rounds = gossip(&out.records);
    assert_eq!(rounds.len(), 4);
    let round_us = 600_000 + 50_000 + 7 * 135;
    for g in &rounds {
        let (time, dropped, senders) = match g.round {
            1 => (round_us, 2, 6),
            k => (2_000_000 + (k as u64 - 1) * round_us, 1, 7),
        };
        assert_eq!(g.time.micros(), time, "round {}", g.round);
        assert_eq!(g.dropped, dropped, "round {}", g.round);
        assert_eq!(g.bytes, senders * 7 * 84, "round {}", g.round);
    }
    // Every peer is still evaluated every round; peer 1's model never moves.
    let rows = test_rows(&out.records);
    assert_eq!(rows.len(), 4 * 8 * 2);
    let peer1: Vec<_> = rows.iter().filter(|r| r.1 == 1 && r.2 == "test").collect();
    assert!(peer1.iter().all(|r| r.4 == peer1[0].4), "{peer1:?}");
    let peer0: Vec<_> = rows.iter().filter(|r| r.1 == 0 && r.2 == "test").collect();
    assert!(peer0[0].4 != peer0[3].4, "{peer0:?}");
}

/// Fastest Mixing Markov Chain weights can leave a peer no weight on itself. In asynchronous
/// gossip a peer whose neighbours sent nothing new mixes only its own model (it used to mix
/// nothing, and the run failed); the run ends with every round recorded.
#[test]
fn asynchronous_gossip_with_no_self_weight_keeps_the_peer_model() {
    let overrides = [
        "algorithm={name: d_psgd}",
        "topology={graph: {kind: erdos_renyi, p: 0.4}, mixing: {rule: fmmc, iterations: 30}, \
         gossip: asynchronous}",
        "system.compute.samples_per_second={dist: lognormal, median: 100, sigma: 1.0}",
        "rounds=20",
    ];
    let out = simulate_scenario(&scenario(EQUAL, &overrides), 2, |_| {}).unwrap();
    assert_eq!(gossip(&out.records).len(), 20);
    assert_eq!(test_rows(&out.records).len(), 20 * 8 * 2);
}

fn run_to(text: &str, overrides: &[&str], threads: usize, dir: &Path) {
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads,
        progress: false,
        force: false,
        save_models: true,
        save_client_models: true,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(&scenario(text, overrides), &opts).expect("run succeeds");
}

#[test]
fn decentralized_runs_are_deterministic_across_threads_and_reruns() {
    let variants: [&[&str]; 2] = [
        &[
            "algorithm={name: d_fedem, components: 2}",
            "topology={graph: {kind: erdos_renyi, p: 0.4}, mixing: {rule: fmmc, iterations: 30}, \
             time_varying: {kind: resample, every: 2}}",
            "system.compute.samples_per_second={dist: lognormal, median: 100, sigma: 0.5}",
            "system.dropout=0.25",
            "system.availability={kind: markov, mean_online_s: 3, mean_offline_s: 1}",
        ],
        &[
            "algorithm={name: d_psgd}",
            "topology={graph: {kind: exponential}, time_varying: {kind: drop_links, p: 0.3}, \
             disconnected: allow, gossip: asynchronous, mixing: {rule: max_degree}}",
            "system.network.uplink_mbps={dist: uniform, low: 0.01, high: 1}",
            "system.dropout=0.25",
            "system.availability={kind: markov, mean_online_s: 3, mean_offline_s: 1}",
        ],
    ];
    for overrides in variants {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("c"),
        );
        run_to(EQUAL, overrides, 1, &a);
        run_to(EQUAL, overrides, 3, &b);
        run_to(EQUAL, overrides, 1, &c);
        assert!(a.join("gossip.parquet").exists());
        assert!(
            differing_files(&a, &b).is_empty(),
            "{overrides:?}: 1 vs 3 threads: {:?}",
            differing_files(&a, &b)
        );
        assert!(
            differing_files(&a, &c).is_empty(),
            "{overrides:?}: rerun: {:?}",
            differing_files(&a, &c)
        );
        // Each peer's own copy after the last round, as its `global` model (D-FedEM: two
        // components, and the peer's mixture weights).
        let names = crate::weights::client_tensor_names(&a);
        let fedem = overrides[0].contains("d_fedem");
        for peer in 0..8 {
            let expected = if fedem {
                [
                    format!("{peer}.global.0.0.weight"),
                    format!("{peer}.global.1.0.bias"),
                    format!("{peer}.mixture.weights"),
                ]
                .to_vec()
            } else {
                [
                    format!("{peer}.global.0.weight"),
                    format!("{peer}.global.0.bias"),
                ]
                .to_vec()
            };
            for name in expected {
                assert!(names.contains(&name), "{name} missing in {names:?}");
            }
        }
        let g = read_parquet(&a.join("gossip.parquet")).unwrap();
        assert_eq!(g.height(), 4);
        let names = column_names(&g);
        for col in [
            "round",
            "end_s",
            "consensus_distance",
            "spectral_gap",
            "connected",
            "links",
            "bytes",
            "dropped",
        ] {
            assert!(
                names.iter().any(|n| n == col),
                "gossip.parquet lacks {col}: {names:?}"
            );
        }
        let gaps = g.column("spectral_gap").unwrap().f64().unwrap();
        assert!(gaps.iter().flatten().all(|x| (0.0..=1.0).contains(&x)));
        // The summary carries the mean gap and the final consensus distance (for reports).
        let found = fedsim::studies::Runs::find(std::slice::from_ref(&a)).unwrap();
        let runs = fedsim::studies::report_rows(&found, &Default::default()).0;
        let m = &runs[0].metrics;
        let mean_gap = gaps.iter().flatten().sum::<f64>() / 4.0;
        assert!((m["spectral_gap_mean"] - mean_gap).abs() < 1e-12, "{m:?}");
        assert!(m["consensus_distance_final"] >= 0.0, "{m:?}");
    }
}

#[test]
fn d_fedem_peers_learn_mixtures_and_denser_graphs_agree_more() {
    let run = |topology: &str| {
        let o = [
            "algorithm={name: d_fedem, components: 2}",
            topology,
            "rounds=8",
        ];
        simulate_scenario(&scenario(EQUAL, &o), 2, |_| {}).unwrap()
    };
    let dense =
        run("topology={graph: {kind: erdos_renyi, p: 0.6}, mixing: {rule: fmmc, iterations: 30}}");
    let ring = run("topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}");
    let (dense_rounds, ring_rounds) = (gossip(&dense.records), gossip(&ring.records));
    assert_eq!(dense_rounds.len(), 8);
    assert!(dense_rounds[7].spectral_gap > ring_rounds[7].spectral_gap);
    assert!(
        dense_rounds[7].consensus_distance < ring_rounds[7].consensus_distance,
        "{} vs {}",
        dense_rounds[7].consensus_distance,
        ring_rounds[7].consensus_distance
    );
    let mixtures = dense
        .records
        .iter()
        .filter(|r| matches!(r, Record::Mixture(m) if m.weights.len() == 2))
        .count();
    assert_eq!(
        mixtures,
        8 * 8,
        "a mixture record per peer per evaluated round"
    );
    let models = dense.records.iter().find_map(|r| match r {
        Record::FinalModels(m) => Some(m.len()),
        _ => None,
    });
    assert_eq!(models, Some(2), "the peers' average components");
}
