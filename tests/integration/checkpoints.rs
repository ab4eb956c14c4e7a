//! Checkpoints inside a run: a run killed with `kill -9` at random points and started again
//! with the same command ends with the result files of a run that never stopped, byte for
//! byte, for every registered algorithm and with every round policy (stragglers and FedBuff's
//! jobs in flight included), privacy, compression, Byzantine clients, loss-guided selection and
//! a server optimizer switched on; and the checkpoint a run cannot resume from is refused with
//! the way out.
//!
//! Each killed process is killed a random 0–3 ms after it has written its first to third
//! checkpoint (so every process but the last moves the run on), at most `FEDSIM_KILL_CASES`
//! times a case (2 by default; the long run in the docs used more). A run whose rounds come to
//! rest must leave a checkpoint behind some kill: where a process ended before its kill, the
//! case is tried again from the start.

use crate::common::{algorithm_example, bin, stderr, SMALL};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// SMALL, long enough for several checkpoints (one before every round).
fn scenario_text() -> String {
    SMALL
        .replace("rounds: 4", "rounds: 30")
        .replace("eval_every: 2", "eval_every: 3")
}

/// A small xorshift: the kills' delays (a test's own randomness, not the run's).
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self, most: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % (most + 1)
    }
}

fn kills_per_case() -> usize {
    std::env::var("FEDSIM_KILL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

fn command(file: &Path, sets: &[String], out: &Path, threads: usize, every: &str) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        file.display().to_string(),
        "--quiet".into(),
        "--threads".into(),
        threads.to_string(),
        "--checkpoint-every".into(),
        every.into(),
        "--out".into(),
        out.display().to_string(),
    ];
    for s in sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    args
}

/// Runs the case to its end in `out`, killing its processes as the module docs say; how many
/// kills left a checkpoint to resume from.
fn run_killed(file: &Path, sets: &[String], out: &Path, delays: &mut Delays) -> usize {
    let checkpoint = out.join(fedsim::results::CHECKPOINT_FILE);
    let (mut kills, mut resumable) = (0, 0);
    loop {
        let before = stamp(&checkpoint);
        let log = out.with_extension("log");
        let mut child = bin()
            .args(command(file, sets, out, 2, "1"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let last = kills == kills_per_case();
        let mut written = 1 + delays.next_ms(2);
        let mut seen = before;
        while !last && written > 0 && child.try_wait().unwrap().is_none() {
            let now = stamp(&checkpoint);
            if now != seen && now.is_some() {
                (written, seen) = (written - 1, now);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        if !last {
            std::thread::sleep(Duration::from_millis(delays.next_ms(3)));
            let _ = child.kill();
        }
        let status = child.wait().unwrap();
        if status.success() {
            return resumable;
        }
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !last && status.code().is_none(),
            "{sets:?}: the run failed on its own ({status}): {said}"
        );
        kills += 1;
        resumable += usize::from(checkpoint.exists());
    }
}

/// The case with `sets`: uninterrupted on one thread, and killed and resumed on two; the same
/// files. `resumes`: whether its rounds come to rest (so that a kill leaves a checkpoint).
fn check_case(name: &str, text: &str, sets: &[String], resumes: bool, delays: &mut Delays) {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, text).unwrap();
    let whole = tmp.path().join("whole");
    let o = bin()
        .args(command(&file, sets, &whole, 1, "off"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    let mut killed = tmp.path().join("killed");
    let mut resumable = run_killed(&file, sets, &killed, delays);
    for again in 1..=3 {
        if !resumes || kills_per_case() == 0 || resumable > 0 {
            break;
        }
        killed = tmp.path().join(format!("killed-{again}"));
        resumable = run_killed(&file, sets, &killed, delays);
    }
    if resumes && kills_per_case() > 0 {
        assert!(
            resumable > 0,
            "{name}: no kill left a checkpoint, in four tries"
        );
    }
    let differ = fedsim::results::differing_files(&whole, &killed);
    assert!(differ.is_empty(), "{name}: {differ:?} differ after kills");
    let left: Vec<PathBuf> = std::fs::read_dir(&killed)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(".partial") || name == fedsim::results::CHECKPOINT_FILE
        })
        .collect();
    assert!(left.is_empty(), "{name}: left behind {left:?}");
}

#[test]
fn every_registered_algorithm_resumes_after_kills_with_the_files_of_an_uninterrupted_run() {
    let text = scenario_text();
    let peers = text.replace("sampling: {fraction: 0.5}\n", "");
    let mut delays = Delays(0x9e37_79b9_7f4a_7c15);
    for r in fedsim::algorithms::registry::REGISTRY {
        let mut sets = algorithm_example(r);
        let decentralized = r.declared.capabilities.decentralized;
        if decentralized {
            sets.push("topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}".into());
        }
        let text = if decentralized { &peers } else { &text };
        check_case(r.name, text, &sets, true, &mut delays);
    }
}

/// Gossip, synchronous and asynchronous, with slow peers, dropouts, availability and links that
/// fail: saved with models on their way, inboxes part full and jobs in flight.
#[test]
fn decentralized_runs_resume_after_kills() {
    let text = scenario_text().replace("sampling: {fraction: 0.5}\n", "");
    let mut delays = Delays(0x5851_f42d_4c95_7f2d);
    let slow = "system={compute: {samples_per_second: {dist: lognormal, median: 50, sigma: 1}}, \
                dropout: 0.1, availability: {kind: markov, mean_online_s: 40, mean_offline_s: 120}}";
    let cases: [(&str, &[&str]); 3] = [
        (
            "synchronous gossip, slow peers, dropouts, availability",
            &[
                "algorithm={name: d_psgd}",
                "topology={graph: {kind: erdos_renyi, p: 0.3}, mixing: {rule: metropolis_hastings}, \
                 time_varying: {kind: drop_links, p: 0.2}}",
                slow,
            ],
        ),
        (
            "asynchronous gossip, slow peers",
            &[
                "algorithm={name: d_psgd}",
                "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}, \
                 gossip: asynchronous}",
                slow,
            ],
        ),
        (
            "D-FedEM, slow peers",
            &[
                "algorithm={name: d_fedem}",
                "topology={graph: {kind: ring}, mixing: {rule: metropolis_hastings}}",
                slow,
            ],
        ),
    ];
    for (name, sets) in cases {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        check_case(name, &text, &sets, true, &mut delays);
    }
}

#[test]
fn policies_privacy_compression_attacks_and_selection_resume_after_kills() {
    let text = scenario_text();
    let mut delays = Delays(0x2545_f491_4f6c_dd1d);
    let slow = "system={compute: {samples_per_second: {dist: lognormal, median: 50, sigma: 1}}}";
    let fast = "system={compute: {samples_per_second: {dist: lognormal, median: 500, sigma: 1}}}";
    let cases: [(&str, &[&str], bool); 15] = [
        // Momentum buffers kept on the device between rounds (the GPU path, here on the CPU).
        ("cohorts keep momentum", &["training.cohorts=always"], true),
        // Evaluations still in flight where a round starts: started again on resume.
        ("every round evaluated", &["eval_every=1"], true),
        (
            "central DP",
            &["privacy={clip: 1, noise_multiplier: 1}"],
            true,
        ),
        (
            "DP-SGD",
            &["privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1}"],
            true,
        ),
        (
            "compression both ways, error feedback",
            &[
                "compression={uplink: {kind: top_k, fraction: 0.1, error_feedback: true}, \
               downlink: {kind: qsgd, levels: 7}}",
            ],
            true,
        ),
        (
            "Byzantine clients, robust rule",
            &[
                "adversary={fraction: 0.25, attack: {kind: sign_flip, scale: 4}}",
                "aggregation={kind: trimmed_mean, trim: 0.2}",
            ],
            true,
        ),
        ("Oort", &["sampling={fraction: 0.5, strategy: oort}"], true),
        (
            "server optimizer",
            &["server_optimizer={kind: adam, lr: 0.01}"],
            true,
        ),
        (
            "secure aggregation with dropouts",
            &["secure_aggregation={protocol: secagg_plus, neighbours: 4, dropout: 0.1}"],
            true,
        ),
        (
            "availability",
            &["system.availability={kind: markov, mean_online_s: 40, mean_offline_s: 120}"],
            true,
        ),
        // Every job's work cut to end by the deadline: rounds come to rest.
        (
            "deadline with partial work",
            &[
                fast,
                "policy={kind: synchronous, deadline_s: 2, late_updates: partial_work}",
            ],
            true,
        ),
        // Stragglers run into the next round: saved with their jobs in flight.
        (
            "deadline with late updates",
            &[
                slow,
                "policy={kind: synchronous, deadline_s: 2, late_updates: next_round}",
            ],
            true,
        ),
        // The jobs over-selection discards run on into the next rounds.
        (
            "over-selection",
            &[slow, "sampling={fraction: 0.5, over_selection: 0.5}"],
            true,
        ),
        // FedBuff: saved before an update arrives, with jobs in flight and updates held.
        (
            "FedBuff",
            &[
                "sampling={strategy: uniform}",
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
            ],
            true,
        ),
        // ... with stale updates, wake-ups, residuals and the clients' downlink copy.
        (
            "FedBuff with slow devices, availability and compression",
            &[
                "sampling={strategy: uniform}",
                "policy={kind: fedbuff, concurrency: 6, buffer_size: 3}",
                "system={compute: {samples_per_second: {dist: lognormal, median: 50, sigma: 1}}, \
                 availability: {kind: markov, mean_online_s: 40, mean_offline_s: 120}}",
                "compression={uplink: {kind: top_k, fraction: 0.1, error_feedback: true}, \
                 downlink: {kind: qsgd, levels: 7}}",
            ],
            true,
        ),
    ];
    for (name, sets, resumes) in cases {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        check_case(name, &text, &sets, resumes, &mut delays);
    }
}

/// Runs `file` into `out` with a checkpoint every round and kills it once it has written its
/// first: the checkpoint a killed run leaves.
fn leave_checkpoint(file: &Path, out: &Path) {
    kill_after_first_checkpoint(&command(file, &[], out, 1, "1"), out);
}

/// Runs fedsim with `args` (a run into `out`) and kills it once it has written a checkpoint.
fn kill_after_first_checkpoint(args: &[String], out: &Path) {
    let checkpoint = out.join(fedsim::results::CHECKPOINT_FILE);
    let mut child = bin()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !checkpoint.exists() && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = child.kill();
    child.wait().unwrap();
    assert!(
        checkpoint.exists(),
        "the run wrote no checkpoint before it ended"
    );
}

#[test]
fn a_checkpoint_of_another_scenario_or_a_damaged_one_is_refused_and_restart_discards_it() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, scenario_text()).unwrap();
    let out = tmp.path().join("out");
    let checkpoint = out.join(fedsim::results::CHECKPOINT_FILE);
    leave_checkpoint(&file, &out);
    let kept = std::fs::read(&checkpoint).unwrap();
    let run = |sets: &[&str], extra: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let mut args = command(&file, &sets, &out, 1, "1");
        args.extend(extra.iter().map(|s| s.to_string()));
        bin().args(args).output().unwrap()
    };
    let other = run(&["training.lr=0.05"], &[]);
    assert!(!other.status.success());
    let said = stderr(&other);
    assert!(
        said.contains("a checkpoint of another scenario")
            && said.contains("lr: 0.1")
            && said.contains("lr: 0.05")
            && said.contains("--restart"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&checkpoint).unwrap(),
        kept,
        "refused, it is kept"
    );
    // Damaged (a byte flipped, as a failing disk would, size and time kept): still fedsim's,
    // refused, never half read, and kept.
    let mut damaged = kept.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    let modified = std::fs::metadata(&checkpoint).unwrap().modified().unwrap();
    std::fs::write(&checkpoint, &damaged).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(&checkpoint)
        .unwrap();
    f.set_modified(modified).unwrap();
    let refused = run(&[], &[]);
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains("checksum does not match") && said.contains("--restart"),
        "{said}"
    );
    assert_eq!(std::fs::read(&checkpoint).unwrap(), damaged);
    // Written by hand (its time changed): fedsim's manifest no longer proves it fedsim's, so
    // it is foreign.
    std::fs::write(&checkpoint, &damaged).unwrap();
    let foreign = run(&[], &[]);
    assert!(!foreign.status.success());
    assert!(
        stderr(&foreign).contains("did not write"),
        "{}",
        stderr(&foreign)
    );
    let damaged_run = run(&[], &["--force"]);
    assert!(damaged_run.status.success(), "{}", stderr(&damaged_run));
    let aside = out.join(format!(
        "{}.before-fedsim",
        fedsim::results::CHECKPOINT_FILE
    ));
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        damaged,
        "moved aside, never deleted"
    );
    // --restart discards fedsim's own checkpoint of another scenario and runs this one.
    leave_checkpoint(&file, &out);
    let restarted = run(&["training.lr=0.05"], &["--restart"]);
    assert!(restarted.status.success(), "{}", stderr(&restarted));
    assert!(
        !checkpoint.exists(),
        "a finished run removes its checkpoint"
    );
}

/// The scenario's `checkpoint:` section sets the cadence where the command line does not; it
/// is no part of the resolved scenario, so the run's id and files are those of the scenario
/// without it.
#[test]
fn the_scenarios_checkpoint_section_sets_the_cadence_and_changes_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain.yaml");
    std::fs::write(&plain, scenario_text()).unwrap();
    let with = tmp.path().join("with.yaml");
    let text = format!("checkpoint: {{every_rounds: 1}}\n{}", scenario_text());
    std::fs::write(&with, text).unwrap();
    let out = tmp.path().join("with");
    let args: Vec<String> = ["run", with.to_str().unwrap(), "--quiet", "--out"]
        .into_iter()
        .map(String::from)
        .chain([out.display().to_string()])
        .collect();
    kill_after_first_checkpoint(&args, &out);
    let resumed = bin()
        .args(["run", with.to_str().unwrap(), "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        stderr(&resumed).contains("resumed from the checkpoint"),
        "{}",
        stderr(&resumed)
    );
    let plain_out = tmp.path().join("plain");
    let o = bin()
        .args(["run", plain.to_str().unwrap(), "--quiet", "--out"])
        .arg(&plain_out)
        .output()
        .unwrap();
    assert!(o.status.success());
    let differ = fedsim::results::differing_files(&plain_out, &out);
    assert!(differ.is_empty(), "{differ:?} differ");
    let bad = format!("checkpoint: {{every_rounds: 0}}\n{}", scenario_text());
    std::fs::write(&with, bad).unwrap();
    let refused = bin()
        .args(["check", with.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        stderr(&refused)
            .contains("with.yaml:1: field `checkpoint.every_rounds`: must be at least 1"),
        "{}",
        stderr(&refused)
    );
}
