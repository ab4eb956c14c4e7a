//! Cross-device scale (issue 17), `scenarios/studies/scale_fedavg.yaml`: FedAvg on FedEM's
//! synthetic generator (d = 10, 10–20 samples per client, rows made on demand, the linear
//! model), 100 clients per round, at
//! populations of 10⁴ to 10⁷ clients (`FEDSIM_SCALE_MAX=1e6` stops earlier;
//! `FEDSIM_SCALE_RESIDENT=1` holds every row instead, for comparison;
//! `FEDSIM_SCALE_AVAILABILITY=1` adds Markov availability (mean 600 s online, 1800 s offline)
//! and samples among online clients only: the server keeps who is online by their changes).
//!
//! Each figure is one `fedsim run` process, timed from outside, its peak memory read from
//! the kernel (`wait4`), so every run's memory is its own:
//! - **target**: 100 rounds, evaluation of 10⁴ sampled clients every 20 rounds (targets:
//!   10⁶ clients in ≤ 30 s and ≤ 1 GB; 10⁷ in ≤ 2 GB);
//! - **rounds/s**: runs of 1 and 2001 rounds, evaluated only after the last one (10⁴ sampled
//!   clients): 2000 rounds over the difference of their wall times;
//! - **set-up** per client and **bytes per idle client**: the slope of the 1-round runs' time
//!   and peak memory over the population (between consecutive sizes).
//!
//! Run with `cargo bench --bench scale` (release build of `fedsim`); writes
//! `target/scale/scale.csv` and `target/scale/rounds_per_second.png`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Wall seconds and peak resident bytes of one `fedsim run` of `scenarios/studies/scale_fedavg.yaml`.
fn run(dir: &Path, clients: u64, extra: &[String]) -> (f64, f64) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/studies/scale_fedavg.yaml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fedsim"));
    cmd.arg("run").arg(&file).arg("--quiet");
    cmd.stdout(std::process::Stdio::null());
    cmd.arg("--out").arg(dir.join("out"));
    cmd.arg("--set").arg(format!("data.clients={clients}"));
    if std::env::var_os("FEDSIM_SCALE_RESIDENT").is_some() {
        cmd.arg("--set").arg("data.on_demand=false");
    }
    if std::env::var_os("FEDSIM_SCALE_AVAILABILITY").is_some() {
        cmd.arg("--set")
            .arg("system.availability={kind: markov, mean_online_s: 600, mean_offline_s: 1800}");
        cmd.arg("--set").arg("sampling.available_only=true");
    }
    for e in extra {
        cmd.arg("--set").arg(e);
    }
    let start = Instant::now();
    // Reaped below by `wait4`, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("fedsim runs");
    let mut status = 0;
    // SAFETY: plain POSIX call on our own child; `usage` is written by the kernel.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let pid = libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage);
        assert!(pid > 0, "wait4 failed");
        usage
    };
    let wall = start.elapsed().as_secs_f64();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "fedsim run failed for {clients} clients"
    );
    (wall, usage.ru_maxrss as f64 * 1024.0)
}

struct Row {
    clients: u64,
    target_wall: f64,
    target_rss: f64,
    one_round: (f64, f64),
    rounds_per_second: f64,
}

fn main() {
    let max: u64 = std::env::var("FEDSIM_SCALE_MAX")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(10_000_000, |v| v as u64);
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/scale");
    std::fs::create_dir_all(&out).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let last_only = |rounds: u32| {
        vec![
            format!("rounds={rounds}"),
            format!("evaluation.every={rounds}"),
        ]
    };
    let mut rows = Vec::new();
    let mut clients = 10_000;
    while clients <= max {
        let (target_wall, target_rss) = run(tmp.path(), clients, &[]);
        let one_round = run(tmp.path(), clients, &last_only(1));
        let (wall_2001, _) = run(tmp.path(), clients, &last_only(2001));
        let rounds_per_second = 2000.0 / (wall_2001 - one_round.0);
        println!(
            "{clients:>9} clients: target run {target_wall:.2} s, {:.2} GB; 1 round {:.2} s, \
             {:.2} GB; {rounds_per_second:.0} rounds/s",
            target_rss / 1e9,
            one_round.0,
            one_round.1 / 1e9
        );
        rows.push(Row {
            clients,
            target_wall,
            target_rss,
            one_round,
            rounds_per_second,
        });
        clients *= 10;
    }
    let mut csv = std::fs::File::create(out.join("scale.csv")).unwrap();
    writeln!(
        csv,
        "clients,target_wall_s,target_peak_gb,one_round_wall_s,one_round_peak_gb,rounds_per_s,\
         setup_us_per_client,bytes_per_idle_client"
    )
    .unwrap();
    println!("\n| clients | 100 rounds, 10⁴ evaluated every 20 | peak RSS | rounds/s | set-up per client | bytes per idle client |");
    println!("|---|---|---|---|---|---|");
    for (i, r) in rows.iter().enumerate() {
        let slope = i.checked_sub(1).map(|j| {
            let p = &rows[j];
            let dn = (r.clients - p.clients) as f64;
            (
                (r.one_round.0 - p.one_round.0) / dn * 1e6,
                (r.one_round.1 - p.one_round.1) / dn,
            )
        });
        let (setup, bytes) = slope.unwrap_or((f64::NAN, f64::NAN));
        writeln!(
            csv,
            "{},{:.3},{:.3},{:.3},{:.3},{:.1},{setup:.2},{bytes:.0}",
            r.clients,
            r.target_wall,
            r.target_rss / 1e9,
            r.one_round.0,
            r.one_round.1 / 1e9,
            r.rounds_per_second
        )
        .unwrap();
        println!(
            "| {:.0e} | {:.1} s | {:.2} GB | {:.0} | {setup:.1} µs | {bytes:.0} B |",
            r.clients as f64,
            r.target_wall,
            r.target_rss / 1e9,
            r.rounds_per_second
        );
    }
    let chart = fedsim::studies::Chart {
        title: "FedAvg, 100 clients per round: rounds per second against the population".into(),
        x_label: "clients".into(),
        y_label: "rounds per second".into(),
        log_x: true,
        x_ticks: Some(rows.iter().map(|r| r.clients as f64).collect()),
        y_from_zero: true,
        series: vec![fedsim::studies::Series {
            label: "fedsim (2 cores)".into(),
            points: rows
                .iter()
                .map(|r| (r.clients as f64, r.rounds_per_second, 0.0))
                .collect(),
        }],
    };
    for (ext, bytes) in fedsim::studies::chart_images(&chart).unwrap() {
        std::fs::write(out.join(format!("rounds_per_second.{ext}")), bytes).unwrap();
    }
    println!(
        "\nwrote {}/scale.csv and rounds_per_second.png",
        out.display()
    );
}
