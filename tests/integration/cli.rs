//! The `fedsim` binary: exit codes, messages, and no partial results on bad input.

use crate::common::{bin, stdout_of, SMALL};

#[test]
fn bad_inputs_exit_nonzero_and_leave_no_results() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.yaml");
    std::fs::write(&good, SMALL).unwrap();
    let unknown = tmp.path().join("unknown.yaml");
    std::fs::write(&unknown, SMALL.replace("rounds: 4", "rounds: 4\nroundz: 5")).unwrap();
    let wrong_type = tmp.path().join("wrong.yaml");
    std::fs::write(&wrong_type, SMALL.replace("rounds: 4", "rounds: four")).unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![unknown.display().to_string()],
            "unknown field `roundz`",
        ),
        (vec![wrong_type.display().to_string()], "field `rounds`"),
        (
            vec![
                good.display().to_string(),
                "--set".into(),
                "sampling.fraction=1.5".into(),
            ],
            "field `sampling.fraction`: must be in (0, 1]",
        ),
        (
            vec![tmp.path().join("missing.yaml").display().to_string()],
            "cannot read scenario file",
        ),
    ];
    for (i, (args, expected)) in cases.into_iter().enumerate() {
        let out_dir = tmp.path().join(format!("out{i}"));
        let out = bin()
            .arg("run")
            .args(&args)
            .arg("--out")
            .arg(&out_dir)
            .arg("--quiet")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr.contains(expected), "{args:?}: stderr was {stderr}");
        assert!(!out_dir.exists(), "{args:?} left an output folder behind");
    }
}

#[test]
fn run_prints_a_summary_and_writes_files() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, SMALL).unwrap();
    let out_dir = tmp.path().join("out");
    let stdout = stdout_of(
        bin()
            .args([
                "run",
                file.to_str().unwrap(),
                "--threads",
                "2",
                "--seed",
                "3",
                "--out",
            ])
            .arg(&out_dir),
    );
    for needle in [
        "accuracy, weighted",
        "bottom decile",
        "10th percentile",
        "simulated time",
        "wall time",
        "results in",
    ] {
        assert!(stdout.contains(needle), "summary lacks {needle}:\n{stdout}");
    }
    for f in [
        "metrics.parquet",
        "metrics.csv",
        "rounds.parquet",
        "summary.csv",
        "scenario.yaml",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    assert!(std::fs::read_to_string(out_dir.join("scenario.yaml"))
        .unwrap()
        .contains("seed: 3"));
}

#[test]
fn help_explains_the_commands() {
    let out = bin().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("run") && text.contains("check"), "{text}");
    let out = bin().args(["run", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--out", "--seed", "--threads", "--set", "--quiet"] {
        assert!(text.contains(flag), "run --help lacks {flag}:\n{text}");
    }
}

#[test]
fn algorithms_lists_the_registry_with_capabilities() {
    let out = bin().arg("algorithms").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
            .split_whitespace()
            .take(7)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // name, runs on, stale updates, cohorts, privacy (client-level, DP-SGD), server
    // optimizer, then the summary.
    assert_eq!(row("fedavg"), "fedavg server yes yes client, dp_sgd yes");
    assert_eq!(row("apfl"), "apfl server yes yes client yes APFL");
    assert_eq!(row("fedgmm"), "fedgmm server no yes no yes FedGMM");
    assert_eq!(row("pfedme"), "pfedme server no yes no no pFedMe");
    assert_eq!(row("d_fedem"), "d_fedem peers no yes no no D-FedEM");
    assert_eq!(
        text.lines().count(),
        1 + fedsim::algorithms::registry::REGISTRY.len()
    );
}

/// `fedsim describe` names each layer with parameters as a split of the layers reads it
/// (`personal:`, `frozen:`), the head marked; layers without parameters have no name.
#[test]
fn describe_names_the_layers_a_split_reads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = stdout_of(
        bin()
            .arg("describe")
            .arg(root.join("scenarios/studies/partial_mnist.yaml"))
            .args(["--set", "data={kind: fedem_synthetic, clients: 4, dim: 20}"]),
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("dense") || l.contains("relu"))
        .collect();
    let ends = |row: &str, name: &str| row.trim_end().ends_with(name);
    assert!(text.contains("MFLOP  name"), "{text}");
    assert!(
        rows.len() >= 3 && ends(rows[rows.len() - 3], " 0"),
        "{rows:?}"
    );
    assert!(
        ends(rows[rows.len() - 2], "0.000"),
        "relu has no name: {rows:?}"
    );
    assert!(ends(rows[rows.len() - 1], " 1 (head)"), "{rows:?}");
}

#[test]
fn describe_shows_the_data_and_its_bayes_ceiling() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = bin()
        .arg("describe")
        .arg(root.join("scenarios/paper/fedem_synthetic_fedem.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The authors' data set: 300 clients, 67 758 training rows, 1000 extra test rows each.
    for needle in [
        "300 clients, 150 features, 2 classes",
        "train   67758",
        "test    300000     1000 / 1000 / 1000",
        "Bayes-optimal test accuracy",
    ] {
        assert!(text.contains(needle), "describe lacks {needle:?}:\n{text}");
    }
    // The authors' label bug breaks the link between labels and the true model: no ceiling.
    let out = bin()
        .arg("describe")
        .arg(root.join("scenarios/paper/fedem_synthetic_fedem.yaml"))
        .args(["--set", "data.authors_label_bug=true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !text.contains("Bayes"), "{text}");
}

/// With `compression:` and `adversary:`, describe prints the bytes of a compressed model and
/// how many clients are malicious.
#[test]
fn describe_says_what_compression_and_an_adversary_do() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut describe = bin();
    describe
        .arg("describe")
        .arg(root.join("scenarios/quickstart.yaml"))
        .args([
            "--set",
            "compression={uplink: {kind: sign, error_feedback: true}}",
            "--set",
            "adversary={fraction: 0.25, attack: {kind: alie}}",
            "--set",
            "aggregation={kind: median}",
        ]);
    let text = stdout_of(&mut describe);
    let line = |start: &str| text.lines().find(|l| l.contains(start)).unwrap_or_default();
    let params: u64 = line("model: ")
        .split("model: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the model's parameters");
    let expected = format!(
        "{} bytes a model of {params} values against {} uncompressed",
        4 + params.div_ceil(8),
        4 * params
    );
    assert!(line("uplink compression").contains(&expected), "{text}");
    assert!(
        line("adversary:").contains("25 malicious clients (kind: alie); aggregation: kind: median"),
        "{text}"
    );
}

/// With `privacy:`, describe prints σ and the ε the run will spend, and which neighbours that ε
/// tells apart: K of N drawn (one client's data replaced) or Poisson participation (one client
/// more or less).
#[test]
fn describe_says_what_privacy_a_scenario_spends() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let describe = |extra: &[&str]| {
        let out = bin()
            .arg("describe")
            .arg(root.join("scenarios/quickstart.yaml"))
            .args(["--set", "privacy={clip: 1, target_epsilon: 4}"])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find(|l| l.contains("privacy ("))
            .unwrap_or_default()
            .to_string()
    };
    let fixed = describe(&[]);
    assert!(
        fixed.contains("of 100 a round, one client's data replaced")
            && fixed.contains("(solved for target_epsilon)")
            && fixed.contains("spend ε = 3.9"),
        "{fixed}"
    );
    let poisson = describe(&["--set", "sampling.strategy=poisson"]);
    assert!(
        poisson.contains("Poisson participation q = 0.1, one client more or less"),
        "{poisson}"
    );
    let dp_sgd = describe(&[
        "--set",
        "privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1}",
    ]);
    assert!(
        dp_sgd.contains("(DP-SGD, one record of a client added or removed): σ = 1.0000")
            && dp_sgd.contains("a client drawn in all 30 rounds")
            && dp_sgd.contains("ε ≤ "),
        "{dp_sgd}"
    );
    // A target for DP-SGD is solved for that client; FedEM's three runs an update say so.
    let dp_sgd_target = describe(&[
        "--set",
        "privacy={mechanism: dp_sgd, clip: 1, target_epsilon: 8}",
        "--set",
        "algorithm={name: fedem, components: 3}",
    ]);
    assert!(
        dp_sgd_target.contains("per step (solved for target_epsilon)")
            && dp_sgd_target.contains("3 local runs an update, spends ε ≤ 7.9"),
        "{dp_sgd_target}"
    );
    // The PLD accountant says so, and solves for less noise than RDP.
    let pld = describe(&[
        "--set",
        "sampling.strategy=poisson",
        "--set",
        "privacy={clip: 1, target_epsilon: 4, accountant: pld}",
    ]);
    let sigma = |line: &str| -> f64 {
        let at = line.find("σ = ").expect("a σ") + "σ = ".len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(pld.ends_with("(PLD accountant)"), "{pld}");
    assert!(sigma(&pld) < sigma(&poisson), "{pld} vs {poisson}");
    let ftrl = describe(&[
        "--set",
        "privacy={mechanism: dp_ftrl, clip: 1, noise_multiplier: 3}",
    ]);
    use fedsim::privacy::tree::{every_release_squares, one_release_squares, tree_epsilon};
    let once = tree_epsilon(3.0, one_release_squares(30), 1e-5);
    let every = tree_epsilon(3.0, every_release_squares(30), 1e-5);
    assert!(
        ftrl.contains("(DP-FTRL tree aggregation, one client's data replaced, no amplification")
            && ftrl.contains(&format!("aggregated once spends ε ≤ {once:.4}"))
            && ftrl.contains(&format!("aggregated every round ε = {every:.4}")),
        "{ftrl}"
    );
}

/// `fedsim run` ends with the ε spent, and under DP-SGD and DP-FTRL says whose it is.
#[test]
fn run_says_what_privacy_was_spent() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let spent = |privacy: &str| {
        let out = bin()
            .arg("run")
            .arg(root.join("scenarios/quickstart.yaml"))
            .args(["--quiet", "--set", "rounds=2", "--set", privacy, "--out"])
            .arg(tmp.path().join("run"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text.lines().find(|l| l.contains("privacy spent"));
        line.unwrap_or_else(|| panic!("no privacy line in:\n{text}"))
            .to_string()
    };
    let dp_sgd = spent("privacy={mechanism: dp_sgd, clip: 1, noise_multiplier: 1}");
    assert!(
        dp_sgd.contains("at δ = 1e-5 (the most any client's records spent)"),
        "{dp_sgd}"
    );
    let central = spent("privacy={clip: 1, noise_multiplier: 1}");
    assert!(central.ends_with("at δ = 1e-5"), "{central}");
    let ftrl = spent("privacy={mechanism: dp_ftrl, clip: 1, noise_multiplier: 1}");
    assert!(
        ftrl.ends_with("at δ = 1e-5 (the most any client spent)"),
        "{ftrl}"
    );
}

#[test]
fn a_profile_shows_stacked_e_steps_and_changes_no_result() {
    // FedEM with an MLP, everything stacked (as on a GPU), every client every round: the
    // profile shows the training rows scored in stacked passes (with their FLOPs) and their
    // losses coming back; what goes down each round is the global components once per shard,
    // not a copy and a momentum buffer per run (those stay on the device), and what comes back
    // is the server's sums, not every client's trained components (those stay on the device
    // until the server sums them there); and the result files are those of the run unprofiled.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, profile: &str, extra: &[&str]| {
        let out = bin()
            .env("FEDSIM_PROFILE", profile)
            .arg("run")
            .arg(root.join("scenarios/quickstart.yaml"))
            .args(["--quiet", "--threads", "2"])
            .args(["--set", "rounds=3", "--set", "eval_every=3"])
            .args(["--set", "sampling.fraction=1.0"])
            .args(["--set", "algorithm={name: fedem}"])
            .args(["--set", "model={kind: mlp, hidden: [16]}"])
            .args(["--set", "training.cohorts=always"])
            .args(extra)
            .arg("--out")
            .arg(tmp.path().join(name))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let profile = run("profiled", "1", &[]);
    let line = |profile: &str, start: &str| -> String {
        let found = profile.lines().find(|l| l.trim_start().starts_with(start));
        let found = found.unwrap_or_else(|| panic!("no '{start}' line in:\n{profile}"));
        found.to_string()
    };
    assert!(
        line(&profile, "score training rows").contains("GFLOP"),
        "{profile}"
    );
    assert!(
        line(&profile, "evaluate").contains("% of peak"),
        "{profile}"
    );
    assert!(line(&profile, "sum updates").contains("times"), "{profile}");
    assert!(
        line(&profile, "row values tensor → host").contains("MB"),
        "{profile}"
    );
    let megabytes = |profile: &str, start: &str| -> f64 {
        let line = line(profile, start);
        let rest = line.trim_start().strip_prefix(start).unwrap();
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let traffic = |profile: &str| {
        (
            megabytes(profile, "vectors host → tensor"),
            megabytes(profile, "vectors tensor → host"),
        )
    };
    let (down, up) = traffic(&profile);
    assert!(
        line(&profile, "kept on the device").contains("MB at most"),
        "{profile}"
    );
    // With no room on the device, buffers and updates cross as on the host: more goes down
    // (every run's buffer) and far more comes back (every run's parameters and buffer, against
    // one sum per component and round); the results are the same.
    let crossing = run("crossing", "1", &["--set", "training.device_state_gib=0"]);
    let (down_again, up_again) = traffic(&crossing);
    assert!(down_again > 2.0 * down, "{down_again} MB against {down} MB");
    assert!(up_again > 4.0 * up, "{up_again} MB against {up} MB");
    assert!(!crossing.contains("sum updates"), "{crossing}");
    let quiet = run("unprofiled", "0", &[]);
    assert!(!quiet.contains("profile"), "{quiet}");
    for file in ["metrics.csv", "clients.csv", "mixtures.parquet"] {
        let read = |run: &str| std::fs::read(tmp.path().join(run).join(file)).unwrap();
        assert_eq!(read("profiled"), read("unprofiled"), "{file}");
        assert_eq!(read("profiled"), read("crossing"), "{file}");
    }
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    // `fedsim check … | head -0`: the pipe's reading end is closed before fedsim writes.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = bin()
        .args(["check"])
        .arg(root.join("scenarios/quickstart.yaml"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "a panic's exit code");
}

#[test]
fn check_determinism_reruns_and_compares() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, SMALL.replace("name: fedavg", "name: fedem")).unwrap();
    let out_dir = tmp.path().join("out");
    let out = bin()
        .args([
            "run",
            file.to_str().unwrap(),
            "--threads",
            "3",
            "--quiet",
            "--check-determinism",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // FedEM's mixture weights are compared (and named) too.
    assert!(stdout.contains("determinism check: scenario.yaml, metrics.parquet, metrics.csv, rounds.parquet, jobs.parquet, clients.parquet, clients.csv, mixtures.parquet identical with 3 and 1 trainer threads"), "{stdout}");
    assert!(
        !out_dir.join(".determinism-check").exists(),
        "the rerun folder is removed when identical"
    );
}

#[test]
fn errors_are_printed_once_with_their_causes() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).display().to_string();
    std::fs::write(
        p("parquet.yaml"),
        "rounds: 3\ndata: {kind: parquet, path: no/such.parquet, features_column: x}\n\
         algorithm: {name: fedavg}\n",
    )
    .unwrap();
    std::fs::write(p("sweep.yaml"), "base: nothere.yaml\n").unwrap();
    let no_such = "No such file or directory (os error 2)";
    let cases: [(Vec<String>, String); 5] = [
        (
            vec!["run".into(), p("parquet.yaml"), "--out".into(), p("out")],
            format!(
                "error: running {}: data: no/such.parquet: cannot open: {no_such}",
                p("parquet.yaml")
            ),
        ),
        (
            vec!["run".into(), p("missing.yaml")],
            format!(
                "error: cannot read scenario file {}: {no_such}",
                p("missing.yaml")
            ),
        ),
        (
            vec![
                "check".into(),
                p("parquet.yaml"),
                "--set".into(),
                "rounds=-1".into(),
            ],
            format!(
                "error: {}:1: field `rounds`: invalid value: integer `-1`, expected u32",
                p("parquet.yaml")
            ),
        ),
        (
            vec!["sweep".into(), p("nosweep.yaml")],
            format!(
                "error: cannot read sweep file {}: {no_such}",
                p("nosweep.yaml")
            ),
        ),
        (
            vec!["sweep".into(), p("sweep.yaml")],
            format!(
                "error: {}: field `base`: cannot read {}: {no_such}",
                p("sweep.yaml"),
                p("nothere.yaml")
            ),
        ),
    ];
    for (args, expected) in cases {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            expected + "\n",
            "{args:?}"
        );
    }
}

#[test]
fn every_committed_scenario_validates_against_the_schema() {
    // `fedsim schema` is what an editor's language server checks a scenario with: every
    // scenario in scenarios/ (sweeps aside) passes it, and mistakes a reader makes fail it.
    let out = bin().arg("schema").output().unwrap();
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let validator = jsonschema::validator_for(&schema).expect("a valid draft-7 schema");
    let as_json = |text: &str| -> serde_json::Value {
        let yaml: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
        serde_json::to_value(yaml).unwrap()
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for path in crate::common::shipped_scenario_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        if text.lines().any(|l| l.starts_with("base:")) {
            continue; // a sweep
        }
        let errors: Vec<String> = validator
            .iter_errors(&as_json(&text))
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        checked += 1;
    }
    assert!(checked >= 30, "{checked} scenarios");
    let quickstart = std::fs::read_to_string(root.join("scenarios/quickstart.yaml")).unwrap();
    // Every catalogue item's example, in its section of the quickstart (a partition inside
    // MNIST's section), passes: the schema describes each item's own fields.
    let with_section = |key: &str, section: String| {
        let mut tree: serde_yaml::Value = serde_yaml::from_str(&quickstart).unwrap();
        tree[key] = serde_yaml::from_str(&section).unwrap();
        serde_json::to_value(tree).unwrap()
    };
    let mut sections: Vec<(&str, String)> = Vec::new();
    for r in fedsim::algorithms::registry::REGISTRY {
        sections.push(("algorithm", r.example_section()));
    }
    for r in fedsim::models::MODELS {
        sections.push(("model", r.example_section()));
    }
    for r in fedsim::data::DATASETS {
        sections.push(("data", r.example_section()));
    }
    for r in fedsim::data::PARTITIONS {
        let section = format!("{{kind: mnist, partition: {}}}", r.example_section());
        sections.push(("data", section));
    }
    for (key, section) in sections {
        let errors: Vec<String> = validator
            .iter_errors(&with_section(key, section.clone()))
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{key}: {section}: {errors:?}");
    }
    for (wrong, with) in [
        ("  kind: linear", "  kind: resnet"),
        ("  name: fedavg", "  name: fedavg\n  mu: 0.1"),
        ("  lr: 0.1", "  lrr: 0.1"),
        ("  fraction: 0.1", "  fraction: many"),
        ("  clients: 100", "  clients: -3"),
    ] {
        assert!(quickstart.contains(wrong), "{wrong}");
        let bad = as_json(&quickstart.replacen(wrong, with, 1));
        assert!(!validator.is_valid(&bad), "{with} passes the schema");
    }
}

#[test]
fn precision_is_an_option_of_the_command_line() {
    // `--precision P` is `--set training.precision=P`: the resolved scenario says it, and
    // `tf32` without a GPU is refused with the field's path and line.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let check = |precision: &str| {
        bin()
            .arg("check")
            .arg(root.join("scenarios/quickstart.yaml"))
            .args(["--precision", precision])
            .output()
            .unwrap()
    };
    let bf16 = check("bf16");
    let resolved = String::from_utf8_lossy(&bf16.stdout);
    assert!(
        bf16.status.success(),
        "{}",
        String::from_utf8_lossy(&bf16.stderr)
    );
    assert!(resolved.contains("precision: bf16"), "{resolved}");
    let tf32 = check("tf32");
    let error = String::from_utf8_lossy(&tf32.stderr);
    assert_eq!(tf32.status.code(), Some(2), "{error}");
    assert!(
        error.contains("quickstart.yaml:") && error.contains("field `training.precision`"),
        "{error}"
    );
}
