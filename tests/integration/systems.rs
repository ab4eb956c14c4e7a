//! The system model in virtual time: exact durations, deadlines, over-selection, FedBuff
//! staleness, failures and availability, and determinism under every policy.

use crate::common::scenario;
use fedsim::records::{EarlyEndRecord, JobOutcome, JobRecord, Record, RoundRecord};
use fedsim::results::{read_parquet, REPRODUCIBLE_FILES};
use fedsim::results::{run_scenario, simulate_scenario, RunOptions};
use fedsim::sim::{SeedTree, SimDuration, SimTime};
use fedsim::system::SystemModel;
use std::path::Path;

/// Six clients with seconds per batch 1, 2, 4, 8, 16, 32 (from a CSV file), one local step
/// of 8 samples, no training (`noop`): a job computes for exactly its client's seconds.
fn timed(dir: &Path, extra: &str) -> String {
    let speeds = dir.join("speeds.csv");
    let rows: String = (0..6).map(|c| format!("{c},{}\n", 1u64 << c)).collect();
    std::fs::write(&speeds, format!("client,seconds_per_batch\n{rows}")).unwrap();
    format!(
        "\
name: timed
seed: 3
rounds: 4
data: {{kind: fedem_synthetic, clients: 6, dim: 5, components: 2}}
algorithm: {{name: noop}}
training: {{local_steps: 1, batch_size: 8}}
system:
  compute: {{seconds_per_batch: {{dist: file, path: '{}', column: seconds_per_batch}}}}
  network: {{latency_ms: 10, downlink_mbps: 8, uplink_mbps: 2}}
{extra}",
        speeds.display()
    )
}

fn records(text: &str, overrides: &[&str], threads: usize) -> Vec<Record> {
    let s = scenario(text, overrides);
    simulate_scenario(&s, threads, |_| {}).unwrap().records
}

fn jobs(records: &[Record]) -> Vec<&JobRecord> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Job(j) => Some(j),
            _ => None,
        })
        .collect()
}

fn rounds(records: &[Record]) -> Vec<&RoundRecord> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Round(x) => Some(x),
            _ => None,
        })
        .collect()
}

fn secs(s: u64) -> SimDuration {
    SimDuration::from_secs(s)
}

/// Transfer times of the noop model of `timed` (linear, 5 features, 2 classes): latency
/// 10 ms plus 4 bytes per parameter over 8 (down) or 2 (up) Mbit/s, rounded up to a µs.
fn transfers() -> (SimDuration, SimDuration) {
    let params = fedsim::models::Architecture::new(
        &fedsim::models::ModelSpec::from_yaml("{kind: linear}").unwrap(),
        5,
        2,
    )
    .num_params();
    let bits = 32.0 * params as f64;
    let t = |mbps: f64| {
        SimDuration::from_millis(10) + SimDuration::from_secs_f64_ceil(bits / (mbps * 1e6))
    };
    (t(8.0), t(2.0))
}

#[test]
fn synchronous_rounds_take_exactly_the_slowest_selected_job() {
    let tmp = tempfile::tempdir().unwrap();
    let r = records(&timed(tmp.path(), "sampling: {count: 3}\n"), &[], 2);
    let (down, up) = transfers();
    let jobs = jobs(&r);
    assert_eq!(jobs.len(), 12);
    for j in &jobs {
        assert_eq!(j.outcome, JobOutcome::Aggregated);
        assert_eq!(j.download, down);
        assert_eq!(j.compute, secs(1 << j.client));
        assert_eq!(
            j.end - j.sent,
            down + secs(1 << j.client) + up,
            "client {}",
            j.client
        );
    }
    let rounds = rounds(&r);
    assert_eq!(rounds.len(), 4);
    let mut start = SimTime::ZERO;
    for x in rounds {
        let mine: Vec<_> = jobs.iter().filter(|j| j.round == x.round).collect();
        assert_eq!((x.selected, x.completed, mine.len()), (3, 3, 3));
        let slowest = mine.iter().map(|j| j.client).max().unwrap();
        assert_eq!(x.start, start);
        assert_eq!(x.end, x.start + down + secs(1 << slowest) + up);
        start = x.end;
    }
}

/// `system.local_work`: a job computes for the steps it does. Of 4 planned steps, a fraction
/// of 0.5 leaves every job 2 of its client's batches; drawn per job from uniform [0.25, 1],
/// each job does 1 to 4 of them, not all the same.
#[test]
fn a_job_computes_for_the_local_work_it_does() {
    let tmp = tempfile::tempdir().unwrap();
    let text = timed(tmp.path(), "").replace("local_steps: 1", "local_steps: 4");
    let half = records(&text, &["system.local_work={fraction: 0.5}"], 2);
    for j in jobs(&half) {
        assert_eq!(j.compute, secs(2 << j.client), "client {}", j.client);
    }
    let law = "system.local_work={fraction: {dist: uniform, low: 0.25, high: 1}}";
    let drawn = records(&text, &[law], 2);
    let batches: std::collections::BTreeSet<u64> = jobs(&drawn)
        .iter()
        .map(|j| {
            let per_batch = secs(1 << j.client);
            assert_eq!(j.compute.0 % per_batch.0, 0, "client {}", j.client);
            j.compute.0 / per_batch.0
        })
        .collect();
    assert!(
        batches.len() > 1 && batches.iter().all(|b| (1..=4).contains(b)),
        "{batches:?}"
    );
}

/// `late_updates: partial_work`: with a 20 s deadline, 4 planned steps and seconds per batch
/// 1, 2, …, 32, clients 0 to 2 do their whole 4 steps (4, 8, 16 s), client 3 the 2 steps of
/// 8 s and client 4 the 1 step of 16 s that end before the deadline less their upload, and
/// client 5, which cannot fit a step of 32 s, runs its whole job (128 s, through the 4 rounds)
/// and is a straggler.
#[test]
fn partial_work_trains_the_steps_that_fit_before_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = "policy: {kind: synchronous, deadline_s: 20, late_updates: partial_work}\n";
    let text = timed(tmp.path(), policy).replace("local_steps: 1", "local_steps: 4");
    let r = records(&text, &[], 2);
    let (down, up) = transfers();
    let jobs = jobs(&r);
    assert_eq!(jobs.len(), 4 * 5 + 1);
    for j in &jobs {
        let steps = [4, 4, 4, 2, 1, 4][j.client as usize];
        assert_eq!(j.compute, secs(steps << j.client), "client {}", j.client);
        let outcome = if j.client == 5 {
            JobOutcome::Straggler
        } else {
            assert!(j.end - j.sent <= secs(20), "client {}", j.client);
            assert_eq!(j.end - j.sent, down + j.compute + up);
            JobOutcome::Aggregated
        };
        assert_eq!(j.outcome, outcome, "client {}", j.client);
    }
}

#[test]
fn a_deadline_cuts_off_stragglers_and_late_updates_join_the_next_round() {
    let tmp = tempfile::tempdir().unwrap();
    for late in ["drop", "next_round"] {
        let policy = format!(
            "sampling: {{count: 4}}\npolicy: {{kind: synchronous, deadline_s: 5, late_updates: {late}, max_staleness: 2}}\n"
        );
        let r = records(&timed(tmp.path(), &policy), &[], 2);
        let (down, up) = transfers();
        let deadline = secs(5);
        let jobs = jobs(&r);
        for j in &jobs {
            let on_time = down + secs(1 << j.client) + up <= deadline;
            match j.outcome {
                JobOutcome::Aggregated => assert!(on_time, "{j:?}"),
                // (with next_round: too stale, or after the last round)
                JobOutcome::Straggler => assert!(!on_time, "{j:?}"),
                JobOutcome::Late => {
                    assert!(!on_time && late == "next_round", "{j:?}");
                    assert!((1..=2).contains(&j.staleness), "{j:?}");
                }
                JobOutcome::Discarded => assert!(!on_time, "{j:?}"),
                other => panic!("unexpected {other:?}"),
            }
        }
        let mut busy_until: Vec<SimTime> = vec![SimTime::ZERO; 6];
        for x in rounds(&r) {
            let mine: Vec<_> = jobs.iter().filter(|j| j.round == x.round).collect();
            let cut = mine
                .iter()
                .filter(|j| j.outcome != JobOutcome::Aggregated)
                .count() as u32;
            assert_eq!(x.stragglers, cut, "round {}", x.round);
            assert_eq!(x.completed as usize, mine.len() - cut as usize);
            // A round ends at its deadline when someone is cut off, else with its last job.
            if cut > 0 {
                assert_eq!(x.end, x.start + deadline);
            } else {
                assert_eq!(x.end, mine.iter().map(|j| j.end).max().unwrap());
            }
            // A client still busy with an earlier job is not selected.
            for j in &mine {
                assert!(
                    busy_until[j.client as usize] <= x.start,
                    "client {} reselected while busy",
                    j.client
                );
                busy_until[j.client as usize] = j.end;
            }
            let late = jobs
                .iter()
                .filter(|j| j.outcome == JobOutcome::Late && j.round + j.staleness == x.round)
                .count();
            assert_eq!(x.late as usize, late, "round {}", x.round);
        }
        if late == "next_round" {
            assert!(
                jobs.iter().any(|j| j.outcome == JobOutcome::Late),
                "no late update was used"
            );
        } else {
            assert!(jobs.iter().any(|j| j.outcome == JobOutcome::Straggler));
        }
    }
}

#[test]
fn over_selection_aggregates_the_first_k_arrivals() {
    let tmp = tempfile::tempdir().unwrap();
    let text = timed(tmp.path(), "");
    let r = records(
        &text,
        &[
            "rounds=1",
            "sampling.count=2",
            "sampling.over_selection=1.0",
        ],
        2,
    );
    let (down, up) = transfers();
    let x = rounds(&r)[0].clone();
    let jobs = jobs(&r);
    assert_eq!((x.selected, x.completed, x.discarded), (4, 2, 2));
    let mut chosen: Vec<u32> = jobs.iter().map(|j| j.client).collect();
    chosen.sort();
    let second_fastest = chosen[1];
    assert_eq!(x.end, SimTime::ZERO + down + secs(1 << second_fastest) + up);
    for j in jobs {
        let expected = if j.client <= second_fastest {
            JobOutcome::Aggregated
        } else {
            JobOutcome::Discarded
        };
        assert_eq!(j.outcome, expected, "client {}", j.client);
    }
}

#[test]
fn fedbuff_staleness_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    // Clients 0, 1, 2 compute 1, 2, 4 s; transfers take 1 µs each way.
    let speeds = tmp.path().join("speeds.csv");
    std::fs::write(&speeds, "client,seconds_per_batch\n0,1\n1,2\n2,4\n").unwrap();
    let text = format!(
        "\
seed: 1
rounds: 3
data: {{kind: fedem_synthetic, clients: 3, dim: 5, components: 2}}
algorithm: {{name: noop}}
training: {{local_steps: 1, batch_size: 8}}
policy: {{kind: fedbuff, buffer_size: 2, concurrency: 3, max_staleness: 10}}
system:
  compute: {{seconds_per_batch: {{dist: file, path: '{}', column: seconds_per_batch}}}}
  network: {{latency_ms: 0, downlink_mbps: 1.0e12, uplink_mbps: 1.0e12}}
",
        speeds.display()
    );
    let r = records(&text, &[], 2);
    let us = |s: u64, micros: u64| SimTime(s * 1_000_000 + micros);
    let got: Vec<(u32, u32, JobOutcome, SimTime)> = jobs(&r)
        .iter()
        .map(|j| (j.client, j.staleness, j.outcome, j.end))
        .collect();
    use JobOutcome::*;
    // Worked by hand: each client restarts as soon as it reports; aggregations at
    // 2.000002 (c0, c1), 3.000006 (c0 stale, c0) and 4.000004 (c2, c1); then nothing starts.
    let expected = vec![
        (0, 0, Aggregated, us(1, 2)),
        (1, 0, Aggregated, us(2, 2)),
        (0, 1, Late, us(2, 4)),
        (0, 0, Aggregated, us(3, 6)),
        (2, 2, Late, us(4, 2)),
        (1, 1, Late, us(4, 4)),
        (0, 1, Discarded, us(4, 8)),
        (2, 1, Discarded, us(8, 4)),
    ];
    assert_eq!(got, expected);
    let ends: Vec<SimTime> = rounds(&r).iter().map(|x| x.end).collect();
    assert_eq!(ends, vec![us(2, 2), us(3, 6), us(4, 4)]);
    // With a maximum staleness of 1, the update two aggregations old is dropped.
    let r = records(&text, &["policy.max_staleness=1"], 1);
    let c2 = jobs(&r)
        .into_iter()
        .find(|j| j.client == 2)
        .unwrap()
        .clone();
    assert_eq!((c2.staleness, c2.outcome), (2, Discarded));
}

#[test]
fn dropouts_and_availability_lose_jobs_and_selection_sees_only_online_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let text = timed(
        tmp.path(),
        "sampling: {count: 3, available_only: true}\n\
         policy: {kind: synchronous, deadline_s: 6, late_updates: next_round, max_staleness: 3}\n",
    );
    let overrides = [
        "rounds=30",
        "system.dropout=0.2",
        "system.availability={kind: markov, mean_online_s: 40, mean_offline_s: 120}",
    ];
    let s = scenario(&text, &overrides);
    let r = simulate_scenario(&s, 2, |_| {}).unwrap().records;
    let model =
        SystemModel::build(&s.run.system, &SeedTree::new(s.run.seed), 6, cost(8), None).unwrap();
    let jobs = jobs(&r);
    let failed = jobs
        .iter()
        .filter(|j| j.outcome == JobOutcome::Failed)
        .count();
    assert!(failed > 0, "no job failed");
    for j in &jobs {
        assert!(
            model.online_until(j.client, j.sent).is_some(),
            "offline client selected: {j:?}"
        );
        if j.outcome != JobOutcome::Failed {
            // A job that arrived ran while its client stayed online.
            assert!(
                model.online_until(j.client, j.sent).unwrap() >= j.end,
                "{j:?}"
            );
        }
    }
    let counted: u32 = rounds(&r).iter().map(|x| x.failed).sum();
    assert!(counted as usize <= failed && counted > 0);
    // Every late update aggregated is counted in the round that took it, also when it arrived
    // while the server waited for a client to come online.
    let late = jobs
        .iter()
        .filter(|j| j.outcome == JobOutcome::Late)
        .count();
    assert!(late > 0, "no late update");
    assert_eq!(
        rounds(&r).iter().map(|x| x.late as usize).sum::<usize>(),
        late
    );
}

/// An availability trace that ends: clients 0–2 are online during [0, 10.5 s), clients 3–5
/// never, and the server samples online clients only. A round takes d = down + 4 s + up
/// (client 2 is the slowest of the three), so round 3 starts at 2d (about 8.06 s); clients 0
/// and 1 report before 10.5 s, and client 2 goes offline mid-compute and fails at 10.5 s,
/// which closes round 3. Round 4 finds no client online then or ever after: the run ends
/// after round 3 and keeps what it has (the global model evaluated at round 3, its final
/// models, every file), says so in `summary.csv` and on the command line, and exits 0.
/// FedBuff ends the same way when its last jobs fail at 10.5 s. `describe` says so beforehand.
#[test]
fn a_run_whose_clients_are_gone_for_good_ends_early_and_keeps_its_results() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("online.csv");
    std::fs::write(
        &trace,
        "client,start_s,end_s\n0,0,10.5\n1,0,10.5\n2,0,10.5\n",
    )
    .unwrap();
    let text = timed(tmp.path(), "");
    let availability = format!(
        "system.availability={{kind: csv, path: '{}'}}",
        trace.display()
    );
    let gone = SimTime(10_500_000);
    // FedAvg (`timed` trains nothing, and so evaluates nothing).
    let common = [
        "algorithm={name: fedavg}",
        "rounds=10",
        "eval_every=2",
        availability.as_str(),
    ];
    let ended = |r: &[Record]| -> Vec<EarlyEndRecord> {
        r.iter()
            .filter_map(|x| match x {
                Record::EndedEarly(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    };
    let evaluated_rounds = |r: &[Record]| -> Vec<u32> {
        let mut v: Vec<u32> = r
            .iter()
            .filter_map(|x| match x {
                Record::Eval(e) => Some(e.round),
                _ => None,
            })
            .collect();
        v.dedup();
        v
    };
    let final_models = |r: &[Record]| {
        r.iter()
            .filter(|x| matches!(x, Record::FinalModels(_)))
            .count()
    };

    let synchronous = [&common[..], &["sampling={count: 3, available_only: true}"]].concat();
    let r = records(&text, &synchronous, 2);
    let rs = rounds(&r);
    assert_eq!(rs.len(), 3);
    assert_eq!((rs[2].completed, rs[2].failed, rs[2].end), (2, 1, gone));
    let last: Vec<_> = jobs(&r).into_iter().filter(|j| j.round == 3).collect();
    let c2 = last.iter().find(|j| j.client == 2).unwrap();
    assert_eq!((c2.outcome, c2.end), (JobOutcome::Failed, gone));
    assert_eq!(
        ended(&r),
        vec![EarlyEndRecord {
            round: 3,
            time: gone
        }]
    );
    assert_eq!(evaluated_rounds(&r), vec![2, 3]);
    assert_eq!(final_models(&r), 1);

    let fedbuff = [
        &common[..],
        &["policy={kind: fedbuff, buffer_size: 2, concurrency: 3}"],
    ]
    .concat();
    let r = records(&text, &fedbuff, 2);
    let aggregations = rounds(&r).len() as u32;
    assert!(aggregations >= 4, "{aggregations} aggregations");
    assert_eq!(
        ended(&r),
        vec![EarlyEndRecord {
            round: aggregations,
            time: gone
        }]
    );
    assert_eq!(evaluated_rounds(&r).last(), Some(&aggregations));
    assert_eq!(final_models(&r), 1);
    let failed: Vec<_> = jobs(&r)
        .into_iter()
        .filter(|j| j.outcome == JobOutcome::Failed)
        .collect();
    assert!(!failed.is_empty() && failed.iter().all(|j| j.end == gone));

    // The command line: every file is written, the summary says so, the warning says why.
    let file = tmp.path().join("gone.yaml");
    std::fs::write(&file, &text).unwrap();
    let out_dir = tmp.path().join("out");
    let mut args = vec![
        "run".to_string(),
        file.display().to_string(),
        "--quiet".into(),
    ];
    for o in &synchronous {
        args.extend(["--set".to_string(), o.to_string()]);
    }
    args.extend(["--out".into(), out_dir.display().to_string()]);
    let out = crate::common::bin().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "warning: the run ended early, after round 3: no client is online at 10.500 s \
         (simulated) or will be again; its results are those of round 3 (summary.csv says \
         ended_early = true)"
    );
    for f in REPRODUCIBLE_FILES {
        assert!(out_dir.join(f).exists(), "{f} missing");
    }
    let summary = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    let mut lines = summary.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |name: &str| row[head.iter().position(|h| *h == name).unwrap()];
    assert_eq!((at("final_round"), at("ended_early")), ("3", "true"));

    // `describe` foresees it.
    let described = crate::common::bin()
        .args([
            "describe",
            &file.display().to_string(),
            "--set",
            &availability,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(
        text.contains(
            "  availability: 3 of 6 clients online at the start; none is online after 10.500 s \
             (simulated): a run still going then trains no one (and ends early if it samples \
             online clients only)\n"
        ),
        "{text}"
    );
}

/// Every reproducible file, for one run.
fn files(text: &str, overrides: &[&str], threads: usize, dir: &Path) -> Vec<Vec<u8>> {
    let s = scenario(text, overrides);
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(&s, &opts).unwrap();
    REPRODUCIBLE_FILES
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect()
}

const SYSTEMS: &str = "\
name: systems
seed: 5
rounds: 6
eval_every: 3
data: {kind: fedem_synthetic, clients: 20, dim: 10, components: 2}
split: {kind: fractions, train: 0.6, val: 0.2, test: 0.2}
algorithm: {name: fedem, components: 2}
training: {local_epochs: 1, batch_size: 16, lr: 0.1}
system:
  compute: {samples_per_second: {dist: lognormal, median: 20, sigma: 0.8}, jitter: 0.2}
  network: {latency_ms: {dist: uniform, low: 5, high: 100}, downlink_mbps: 10, uplink_mbps: {dist: lognormal, median: 1, sigma: 0.5}}
  availability: {kind: markov, mean_online_s: 60, mean_offline_s: 30}
  dropout: 0.1
";

#[test]
fn every_policy_is_deterministic_across_threads_and_reruns() {
    let tmp = tempfile::tempdir().unwrap();
    let policies: [&[&str]; 5] = [
        &[
            "sampling={fraction: 0.3, available_only: true, over_selection: 0.5, strategy: weighted}",
            "policy={kind: synchronous, deadline_s: 8, late_updates: next_round}",
        ],
        &["policy={kind: fedbuff, buffer_size: 3, concurrency: 6}"],
        &["algorithm={name: fedavg}", "policy={kind: fedbuff, buffer_size: 2, concurrency: 5, server_lr: 0.5}"],
        &[
            "algorithm={name: fednova}",
            "training.local_epochs=3",
            "system.local_work={fraction: {dist: uniform, low: 0.2, high: 1}}",
        ],
        &[
            "algorithm={name: fednova}",
            "training.local_epochs=3",
            "policy={kind: synchronous, deadline_s: 8, late_updates: partial_work}",
        ],
    ];
    for (i, p) in policies.iter().enumerate() {
        let d = |k: &str| tmp.path().join(format!("{i}-{k}"));
        let one = files(SYSTEMS, p, 1, &d("a"));
        assert_eq!(
            one,
            files(SYSTEMS, p, 1, &d("b")),
            "policy {p:?}: reruns differ"
        );
        assert_eq!(
            one,
            files(SYSTEMS, p, 2, &d("c")),
            "policy {p:?}: 1 and 2 threads differ"
        );
        assert_eq!(
            one,
            files(SYSTEMS, p, 4, &d("d")),
            "policy {p:?}: 1 and 4 threads differ"
        );
        let jobs = read_parquet(&d("a").join("jobs.parquet")).unwrap();
        assert!(jobs.height() > 0);
        let clients = read_parquet(&d("a").join("clients.parquet")).unwrap();
        assert_eq!(clients.height(), 20);
    }
}

#[test]
fn fedscale_traces_set_devices_and_availability() {
    use fedsim::system::{Link, SystemSpec};
    // Written by Python's pickle in FedScale's layout (tests/data/fedscale/make_fixtures.py).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fedscale");
    let spec: SystemSpec = serde_yaml::from_str(&format!(
        "fedscale_devices: '{}'\navailability: {{kind: fedscale, path: '{}'}}\n",
        dir.join("client_device_capacity").display(),
        dir.join("client_behave_trace").display()
    ))
    .unwrap();
    let m = SystemModel::build(&spec, &SeedTree::new(1), 4, cost(8), None).unwrap();
    // Device ids in ascending order are 3, 7, 12; client c takes position c mod 3. Training
    // costs 3× the inference milliseconds per sample; kbit/s become Mbit/s both ways.
    let speeds: Vec<f64> = (0..4).map(|c| m.samples_per_second(c)).collect();
    assert_eq!(
        speeds,
        vec![
            1000.0 / 150.0,
            1000.0 / 300.0,
            1000.0 / 600.0,
            1000.0 / 150.0
        ]
    );
    assert_eq!(m.bandwidth_mbps(0, Link::Up), 8.0);
    assert_eq!(m.bandwidth_mbps(2, Link::Down), 0.5);
    // Behaviour ids 1, 2: client 0 (and 2) online in [0, 100] and [200, 250] every 300 s;
    // client 1 (and 3) in [30, 60] every 120 s.
    let t = |s: u64| SimTime(s * 1_000_000);
    assert_eq!(m.online_until(0, t(50)), Some(t(100)));
    assert_eq!(m.online_until(0, t(150)), None);
    assert_eq!(m.next_online(0, t(150)), Some(t(200)));
    assert_eq!(m.online_until(2, t(320)), Some(t(400)));
    assert_eq!(m.online_until(1, t(10)), None);
    assert_eq!(m.next_online(1, t(10)), Some(t(30)));
    assert_eq!(m.online_until(3, t(150)), Some(t(180)));
    // A file that is not a pickle is named in the error.
    let bad: SystemSpec = serde_yaml::from_str(&format!(
        "availability: {{kind: fedscale, path: '{}'}}\n",
        dir.join("make_fixtures.py").display()
    ))
    .unwrap();
    let e = SystemModel::build(&bad, &SeedTree::new(1), 4, cost(8), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("make_fixtures.py") && e.contains("pickle"),
        "{e}"
    );
}

/// A sample cost for `batch_size` (seconds per batch) and a unit FLOP count.
fn cost(batch_size: usize) -> fedsim::system::SampleCost {
    fedsim::system::SampleCost {
        batch_size,
        training_flops: 1.0,
    }
}

#[test]
fn flop_rate_devices_charge_each_model_its_own_cost() {
    // The same data and device speed in FLOP/s: an MLP's job costs more simulated time than a
    // linear model's, in proportion to three forward passes per sample.
    let flops = ["system.compute={flops_per_second: 1.0e6}", "rounds=1"];
    let end = |model: &str| {
        let mut sets = flops.to_vec();
        sets.push(model);
        let s = scenario(crate::common::SMALL, &sets);
        simulate_scenario(&s, 1, |_| {})
            .unwrap()
            .end_time
            .as_secs_f64()
    };
    let linear = end("model={kind: linear}");
    let mlp = end("model={kind: mlp, hidden: [64]}");
    // d = 20, binary: linear 2·20 FLOPs forward; MLP 2·(20·64 + 64) = 2688.
    assert!(mlp > 10.0 * linear, "linear {linear} s, mlp {mlp} s");
}
