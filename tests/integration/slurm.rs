//! Sweeps on a real Slurm cluster: a single-node cluster (Debian's `slurmctld` and `slurmd` on
//! this machine, with munge) in the test's own temporary folder runs a sweep as the job array
//! `scripts/slurm/job.sh` submits (`--shard auto`, `--requeue`, checkpoints every 10 rounds);
//! one array task is preempted mid-run (`scontrol requeue`), resumes its cell from the cell's
//! checkpoint, and the sweep completes with files identical to one process running it. `scripts/test.sh` installs the packages where it can (as root, with apt);
//! elsewhere the test is skipped, and under CI it fails.

use crate::common::bin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The sweep: four cells of a few seconds each.
const BASE: &str = "\
name: slurm_base
seed: 7
rounds: 300
eval_every: 100
data: {kind: fedem_synthetic, clients: 24, dim: 20, components: 3}
split: {kind: fractions, train: 0.6, val: 0.2, test: 0.2}
model: {kind: mlp, hidden: [32]}
algorithm: {name: fedavg}
training: {local_epochs: 2, batch_size: 8, lr: 0.05}
sampling: {fraction: 0.5}
";
const SWEEP: &str = "\
name: on_slurm
base: base.yaml
seeds: [1, 2, 3, 4]
";

/// A running single-node cluster; dropping it stops its daemons.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    socket: PathBuf,
}

/// The Slurm and munge programs the cluster needs, where one is missing.
fn missing_program() -> Option<&'static str> {
    [
        "slurmctld",
        "slurmd",
        "sbatch",
        "scontrol",
        "squeue",
        "sinfo",
        "munged",
    ]
    .into_iter()
    .find(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .map_or(true, |o| !o.status.success())
    })
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `program args` run to its end; it must succeed.
fn ok(command: &mut Command) -> String {
    let o = command.output().unwrap();
    assert!(o.status.success(), "{command:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Cluster {
    /// munged, slurmctld and slurmd for this machine's short host name, their files in `dir`;
    /// returns once the node is idle.
    fn start(dir: &Path) -> Cluster {
        let host = ok(Command::new("hostname").arg("-s")).trim().to_string();
        let user = ok(Command::new("id").arg("-un")).trim().to_string();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        // munge: a key of our own, its socket in `dir`.
        let key = dir.join("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut bytes,
        )
        .unwrap();
        std::fs::write(&key, bytes).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o711))
            .unwrap();
        let socket = dir.join("munge/socket");
        let file = |name: &str| dir.join(name).display().to_string();
        ok(Command::new("munged").args([
            "--force".to_string(),
            format!("--socket={}", socket.display()),
            format!("--key-file={}", key.display()),
            format!("--log-file={}", file("log/munged.log")),
            format!("--pid-file={}", file("munge/munged.pid")),
            format!("--seed-file={}", file("munge/munged.seed")),
        ]));
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=fedsim_test\n\
                 SlurmctldHost={host}\n\
                 SlurmUser={user}\n\
                 SlurmdUser={user}\n\
                 AuthType=auth/munge\n\
                 AuthInfo=socket={socket}\n\
                 CredType=cred/munge\n\
                 SlurmctldPort={ctld}\n\
                 SlurmdPort={slurmd}\n\
                 StateSaveLocation={state}\n\
                 SlurmdSpoolDir={spool}\n\
                 SlurmctldPidFile={ctld_pid}\n\
                 SlurmdPidFile={slurmd_pid}\n\
                 SlurmctldLogFile={ctld_log}\n\
                 SlurmdLogFile={slurmd_log}\n\
                 ProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\n\
                 SchedulerType=sched/builtin\n\
                 SelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\n\
                 MpiDefault=none\n\
                 ReturnToService=2\n\
                 KillWait=5\n\
                 JobCompType=jobcomp/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 NodeName={host} CPUs=2 State=UNKNOWN\n\
                 PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                socket = socket.display(),
                ctld = free_port(),
                slurmd = free_port(),
                state = file("state"),
                spool = file("spool"),
                ctld_pid = file("slurmctld.pid"),
                slurmd_pid = file("slurmd.pid"),
                ctld_log = file("log/slurmctld.log"),
                slurmd_log = file("log/slurmd.log"),
            ),
        )
        .unwrap();
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            conf,
            socket,
        };
        ok(cluster.command("slurmctld").arg("-f").arg(&cluster.conf));
        ok(cluster.command("slurmd").arg("-f").arg(&cluster.conf));
        cluster.wait_for("the node to be idle", Duration::from_secs(60), |c| {
            c.slurm(&["sinfo", "-h", "-o", "%T"]).trim() == "idle"
        });
        cluster
    }

    /// `program` with this cluster's configuration.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf).current_dir(&self.dir);
        c
    }

    /// What a Slurm client command prints (it must succeed).
    fn slurm(&self, args: &[&str]) -> String {
        ok(self.command(args[0]).args(&args[1..]))
    }

    fn wait_for(&self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < limit,
                "waited {limit:?} for {what}; slurmctld's log:\n{}",
                std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The state of job `id` (`RUNNING`, `PENDING`, ...), or "" once it has left the queue.
    fn state(&self, id: &str) -> String {
        self.slurm(&["squeue", "-h", "-j", id, "-o", "%T"])
            .trim()
            .to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("scontrol").arg("shutdown").output();
        let _ = Command::new("munged")
            .arg("--stop")
            .arg(format!("--socket={}", self.socket.display()))
            .output();
    }
}

#[test]
fn a_sweep_on_slurm_survives_a_preempted_task_and_matches_one_process() {
    let check = "slurm::a_sweep_on_slurm_survives_a_preempted_task_and_matches_one_process";
    if let Some(program) = missing_program() {
        crate::common::skipped(
            check,
            &format!("`{program}` is not installed (scripts/test.sh installs Slurm as root)"),
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("base.yaml"), BASE).unwrap();
    std::fs::write(dir.join("sweep.yaml"), SWEEP).unwrap();
    let cluster = Cluster::start(&dir.join("cluster"));
    let fedsim = Path::new(env!("CARGO_BIN_EXE_fedsim"));
    let job_sh = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm/job.sh");
    // Two tasks for the four cells, each requeued when preempted; then the report.
    let submitted = ok(cluster
        .command("bash")
        .arg(&job_sh)
        .args(["sweep.yaml", "out"])
        .current_dir(dir)
        .env("FEDSIM", fedsim)
        .env("MAX_TASKS", "2")
        .env("CHECKPOINT_EVERY", "10"));
    let array = (submitted.split("array job ").nth(1))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("job.sh said: {submitted}"))
        .trim()
        .to_string();
    // Preempt task 1 once one of its cells has written a checkpoint, and let it start again
    // at once (a requeued job waits for a begin time the cluster would set).
    let task = format!("{array}_1");
    let listed = ok(bin()
        .args([
            "sweep",
            "sweep.yaml",
            "--out",
            "out",
            "--list",
            "--shard",
            "1/2",
        ])
        .current_dir(dir));
    let checkpoints: Vec<PathBuf> = (listed.lines())
        .filter_map(|l| l.split_whitespace().next())
        .map(|id| {
            dir.join(format!(
                "out/.partial-cell={id}-resumable/checkpoint.fedsim"
            ))
        })
        .collect();
    assert_eq!(checkpoints.len(), 2, "{listed}");
    cluster.wait_for(
        "task 1 to save a checkpoint",
        Duration::from_secs(60),
        |_| checkpoints.iter().any(|c| c.exists()),
    );
    cluster.slurm(&["scontrol", "requeue", &task]);
    cluster.wait_for("task 1 to run again", Duration::from_secs(120), |c| {
        let state = c.state(&task);
        if state == "PENDING" {
            let _ = c
                .command("scontrol")
                .args(["update", &format!("jobid={task}"), "StartTime=now"])
                .output();
        }
        state == "RUNNING" || state.is_empty()
    });
    let restarts = cluster.slurm(&["scontrol", "show", "job", &task]);
    assert!(restarts.contains("Restarts=1"), "{restarts}");
    cluster.wait_for("the sweep and its report", Duration::from_secs(300), |c| {
        c.slurm(&["squeue", "-h"]).trim().is_empty()
    });
    // Every cell finished, and the report job ran.
    let listed = ok(bin()
        .args(["sweep", "sweep.yaml", "--out", "out", "--list"])
        .current_dir(dir));
    assert_eq!(listed.matches("finished").count(), 4, "{listed}");
    assert!(
        dir.join("out/report").is_dir(),
        "the report job wrote no report"
    );
    // The preempted task resumed its cell from the cell's checkpoint (every 10 rounds).
    let log = std::fs::read_to_string(dir.join(format!("slurm-logs/{task}.out"))).unwrap();
    assert!(log.contains("resumed from its checkpoint"), "{log}");
    // The same files as one process running the sweep.
    ok(bin()
        .args(["sweep", "sweep.yaml", "--out", "one", "--quiet"])
        .current_dir(dir));
    let mut cells = 0;
    for entry in std::fs::read_dir(dir.join("one")).unwrap() {
        let name = entry.unwrap().file_name();
        if !name.to_string_lossy().starts_with("cell=") {
            continue;
        }
        cells += 1;
        let differ = fedsim::results::differing_files(
            &dir.join("one").join(&name),
            &dir.join("out").join(&name),
        );
        assert!(differ.is_empty(), "{name:?}: {differ:?} differ");
    }
    assert_eq!(cells, 4);
}
