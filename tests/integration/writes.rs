//! Writing results under stress: a full or read-only disk ends with a clear error and no
//! `summary.csv`; `kill -9` while a run writes leaves the old complete files or no summary.

use crate::common::{bin, SMALL};
use fedsim::results::REPRODUCIBLE_FILES;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small tmpfs mounted for one test (root only; `None` where the machine does not allow it),
/// unmounted when dropped.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> Option<SmallFs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let test = std::thread::current()
                .name()
                .unwrap_or("a test")
                .to_string();
            crate::common::skipped(&test, "cannot mount a tmpfs here (not root?)");
        }
        ok.then(|| SmallFs {
            dir: dir.to_path_buf(),
        })
    }

    fn read_only(&self) {
        let remount = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(remount.success());
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

fn run_into(scenario: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .args(["run", scenario.to_str().unwrap(), "--quiet", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn staging_folders(out: &Path) -> Vec<String> {
    std::fs::read_dir(out)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.starts_with(".partial-")
                        || n.starts_with(fedsim::io::folder::STAGING_DRAFT)
                        || n.ends_with(".tmp")
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_full_disk_ends_with_a_clear_error_and_no_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, SMALL).unwrap();
    let Some(fs) = SmallFs::mount(&tmp.path().join("full"), "48k") else {
        return;
    };
    let out = fs.dir.join("out");
    let result = run_into(&file, &out, &["--set", "eval_every=1"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: running {}: writing {}/",
            file.display(),
            out.display()
        )) && stderr
            .trim_end()
            .ends_with("No space left on device (os error 28)")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!out.join("summary.csv").exists());
    assert!(
        staging_folders(&out).is_empty(),
        "{:?}",
        staging_folders(&out)
    );
}

#[test]
fn a_read_only_disk_ends_with_a_clear_error_and_keeps_the_old_results() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    std::fs::write(&file, SMALL).unwrap();
    let Some(fs) = SmallFs::mount(&tmp.path().join("ro"), "16m") else {
        return;
    };
    let out = fs.dir.join("out");
    assert!(run_into(&file, &out, &[]).status.success());
    let before = std::fs::read(out.join("metrics.parquet")).unwrap();
    fs.read_only();
    let result = run_into(&file, &out, &["--seed", "9"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    // The first thing a run writes into its folder is its lock.
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: running {}: writing {}/.fedsim-lock: Read-only file system (os error 30)",
            file.display(),
            out.display(),
        )
    );
    assert!(out.join("summary.csv").exists(), "the old results stay");
    assert_eq!(std::fs::read(out.join("metrics.parquet")).unwrap(), before);
}

/// A run folder's reproducible files, or `None` without `summary.csv` (no complete run).
fn complete_set(dir: &Path) -> Option<Vec<Vec<u8>>> {
    if !dir.join("summary.csv").exists() {
        return None;
    }
    Some(
        REPRODUCIBLE_FILES
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
            .collect(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    // As `cp -a` does: times kept, so fedsim's manifest still proves the files its own.
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        std::fs::copy(e.path(), &dest).unwrap();
        let modified = e.metadata().unwrap().modified().unwrap();
        let f = std::fs::File::options().write(true).open(&dest).unwrap();
        f.set_modified(modified).unwrap();
    }
}

#[test]
fn kill_minus_nine_during_a_run_leaves_the_old_complete_files_or_no_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.yaml");
    // Evaluations every round: more to write.
    std::fs::write(&file, SMALL.replace("eval_every: 2", "eval_every: 1")).unwrap();
    let (old, new) = (tmp.path().join("old"), tmp.path().join("new"));
    assert!(run_into(&file, &old, &["--seed", "1"]).status.success());
    assert!(run_into(&file, &new, &["--seed", "2"]).status.success());
    let (old_set, new_set) = (complete_set(&old).unwrap(), complete_set(&new).unwrap());
    assert_ne!(old_set, new_set);
    let target = tmp.path().join("target");
    let mut seen = [0usize; 3];
    for k in 0..30u32 {
        copy_dir(&old, &target);
        let mut child = bin()
            .args([
                "run",
                file.to_str().unwrap(),
                "--quiet",
                "--seed",
                "2",
                "--out",
            ])
            .arg(&target)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Aim at the writing (about 20 ms here, fsyncs included): wait for the staging
        // folder, then kill 0, 1, 2, ... ms
        // later (a few kills land after the run ended).
        while staging_folders(&target).is_empty() && child.try_wait().unwrap().is_none() {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        std::thread::sleep(std::time::Duration::from_millis(u64::from(k)));
        let _ = child.kill();
        child.wait().unwrap();
        match complete_set(&target) {
            None => seen[0] += 1,
            Some(set) if set == old_set => seen[1] += 1,
            Some(set) if set == new_set => seen[2] += 1,
            Some(_) => panic!("kill {k}: summary.csv next to a mixed set of result files"),
        }
    }
    eprintln!(
        "kills: {} without summary, {} old sets, {} new sets",
        seen[0], seen[1], seen[2]
    );
    // A rerun cleans up the staging folder a killed run left.
    let rerun = run_into(&file, &target, &["--seed", "2"]);
    assert!(rerun.status.success());
    assert_eq!(complete_set(&target).unwrap(), new_set);
    let left = staging_folders(&target);
    assert!(left.is_empty(), "left behind: {left:?}");
}
