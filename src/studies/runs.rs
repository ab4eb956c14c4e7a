//! Which runs a report covers (`fedsim report DIR...`), and the configuration each ran with.
//!
//! A folder given is a sweep folder (`cells.csv`: its finished `cell=<id>/` folders, labelled
//! by the sweep's axes), a run folder (`summary.csv`), or a folder of such folders, searched in
//! path order. Plain run folders are labelled by the fewest fields of their resolved scenarios
//! (`scenario.yaml`) that tell apart the runs whose scenarios differ, the seed left out, so runs
//! of one scenario with other seeds group as one configuration; where every field agrees, by
//! the scenario's `name`.
//! This module must not read anything but a folder's `cells.csv`, `summary.csv` and
//! `scenario.yaml`; the tables and curves are `study`'s.

use super::summaries::{read_csv_text, read_summary, text_column, RunRow};
use crate::results::ReportError;
use crate::settings::compact;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How deep below a given folder run and sweep folders are looked for.
const MAX_DEPTH: usize = 6;

/// Fields of a resolved scenario that never tell configurations apart.
const NOT_CONFIG: [&str; 2] = ["seed", "description"];

/// A finished run folder, the configuration it ran with and its seed (`None`: read from its
/// summary).
pub(super) struct RunDir {
    pub path: PathBuf,
    pub config: Vec<(String, String)>,
    pub seed: Option<String>,
}

impl RunDir {
    /// The rows of its `summary.csv`.
    pub fn summary(&self) -> Result<Vec<RunRow>, ReportError> {
        read_summary(
            &self.path.join("summary.csv"),
            &self.config,
            self.seed.as_deref(),
        )
    }
}

/// A sweep folder with cells that have no results yet.
#[derive(Clone, Debug, PartialEq)]
pub struct UnfinishedSweep {
    pub path: PathBuf,
    pub cells: usize,
}

/// A run whose results could not be read, and why.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: ReportError,
}

/// The finished runs under some folders (see the module docs).
pub struct Runs {
    pub(super) dirs: Vec<RunDir>,
    pub unfinished: Vec<UnfinishedSweep>,
    /// Runs left out of the rows and curves (unreadable, and skipped on request).
    pub(super) skipped: Vec<PathBuf>,
}

impl Runs {
    /// Finds the runs under `dirs`; a folder with none below it (and not a sweep folder) is
    /// an error that names it.
    pub fn find(dirs: &[PathBuf]) -> Result<Runs, ReportError> {
        let mut found = Found::default();
        for dir in dirs {
            if !dir.is_dir() {
                return Err(ReportError::NoRuns {
                    path: dir.clone(),
                    why: "there is no such folder".into(),
                });
            }
            let before = (found.sweep_runs.len(), found.plain.len(), found.sweeps);
            found.search(dir, 0)?;
            if before == (found.sweep_runs.len(), found.plain.len(), found.sweeps) {
                return Err(ReportError::NoRuns {
                    path: dir.clone(),
                    why: "it is not a sweep folder (no cells.csv) nor a run folder (no \
                          summary.csv), and no folder below it is one"
                        .into(),
                });
            }
        }
        let configs = plain_configs(&found.plain)?;
        let mut runs = found.sweep_runs;
        runs.extend(
            found
                .plain
                .into_iter()
                .zip(configs)
                .map(|(path, config)| RunDir {
                    path,
                    config,
                    seed: None,
                }),
        );
        Ok(Runs {
            dirs: runs,
            unfinished: found.unfinished,
            skipped: Vec::new(),
        })
    }

    /// Leaves these runs out of the rows and curves from now on.
    pub fn skip(&mut self, runs: &[Unreadable]) {
        self.skipped.extend(runs.iter().map(|u| u.path.clone()));
    }
}

/// What a search has found so far.
#[derive(Default)]
struct Found {
    sweep_runs: Vec<RunDir>,
    sweeps: usize,
    plain: Vec<PathBuf>,
    unfinished: Vec<UnfinishedSweep>,
}

impl Found {
    fn search(&mut self, dir: &Path, depth: usize) -> Result<(), ReportError> {
        if dir.join("cells.csv").exists() {
            return self.sweep(dir);
        }
        if dir.join("summary.csv").exists() {
            self.plain.push(dir.to_path_buf());
            return Ok(());
        }
        if depth == MAX_DEPTH {
            return Ok(());
        }
        let io = |source| ReportError::Read {
            path: dir.to_path_buf(),
            source,
        };
        let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subs.sort();
        for sub in subs {
            self.search(&sub, depth + 1)?;
        }
        Ok(())
    }

    /// A sweep folder's finished cells, labelled by the sweep's axes.
    fn sweep(&mut self, dir: &Path) -> Result<(), ReportError> {
        self.sweeps += 1;
        let cols = read_csv_text(&dir.join("cells.csv"))?;
        let ids = text_column(&cols, "cell").unwrap_or(&[]);
        let seeds = text_column(&cols, "seed").unwrap_or(&[]);
        let axes: Vec<_> = cols
            .iter()
            .filter(|(n, _)| n != "cell" && n != "seed")
            .collect();
        let mut missing = 0;
        for (i, id) in ids.iter().enumerate() {
            let run = dir.join(format!("cell={}", id.as_deref().unwrap_or_default()));
            if !run.join("summary.csv").exists() {
                missing += 1;
                continue;
            }
            let config = axes
                .iter()
                .map(|(n, v)| (n.clone(), v[i].clone().unwrap_or_default()))
                .collect();
            self.sweep_runs.push(RunDir {
                path: run,
                config,
                seed: seeds.get(i).cloned().flatten(),
            });
        }
        if missing > 0 {
            self.unfinished.push(UnfinishedSweep {
                path: dir.to_path_buf(),
                cells: missing,
            });
        }
        Ok(())
    }
}

/// The configurations of plain run folders: the fewest fields of their resolved scenarios
/// that tell apart the runs whose scenarios differ (beyond the seed): `name` and
/// `algorithm.name` if they help, then the others in the order they first appear; `name`
/// where no field differs. A folder without `scenario.yaml` is labelled `run` = its
/// folder's name.
fn plain_configs(paths: &[PathBuf]) -> Result<Vec<Vec<(String, String)>>, ReportError> {
    let scenarios = paths
        .iter()
        .map(|p| scenario_fields(&p.join("scenario.yaml")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut keys: Vec<&str> = Vec::new();
    for fields in scenarios.iter().flatten() {
        for (k, _) in fields {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let maps: Vec<Option<BTreeMap<&str, &str>>> = scenarios
        .iter()
        .map(|f| {
            f.as_ref()
                .map(|f| f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        })
        .collect();
    let known: Vec<&BTreeMap<&str, &str>> = maps.iter().flatten().collect();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|k| known.iter().any(|m| value(m, k) != value(known[0], k)))
        .collect();
    // The fewest fields, `name` and the algorithm's first, that tell the configurations apart:
    // a field joins the label where it splits runs the label so far puts together.
    let groups = |label: &[&str]| {
        let mut seen: Vec<Vec<&str>> = known
            .iter()
            .map(|m| label.iter().map(|k| value(m, k)).collect())
            .collect();
        seen.sort();
        seen.dedup();
        seen.len()
    };
    let wanted = groups(&differing);
    let mut label: Vec<&str> = Vec::new();
    let candidates = ["name", "algorithm.name"]
        .into_iter()
        .chain(differing.iter().copied())
        .filter(|k| differing.contains(k));
    for k in candidates {
        let now = groups(&label);
        if now == wanted {
            break;
        }
        let mut with = label.clone();
        with.push(k);
        if !label.contains(&k) && groups(&with) > now {
            label = with;
        }
    }
    if label.is_empty() {
        label.push("name");
    }
    Ok(paths
        .iter()
        .zip(&maps)
        .map(|(path, fields)| match fields {
            Some(m) => label
                .iter()
                .map(|k| (k.to_string(), value(m, k).to_string()))
                .collect(),
            None => {
                let name = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                vec![("run".into(), name)]
            }
        })
        .collect())
}

/// `key`'s value in a scenario's fields, `–` where it has none.
fn value<'a>(fields: &BTreeMap<&'a str, &'a str>, key: &str) -> &'a str {
    fields.get(key).copied().unwrap_or("–")
}

/// A resolved scenario's leaf fields as (dotted path, value) in file order, a list as one value
/// written as `scenario::compact` writes it, the fields in [`NOT_CONFIG`] left out; `None`
/// where the file does not exist.
fn scenario_fields(path: &Path) -> Result<Option<Vec<(String, String)>>, ReportError> {
    let text = match crate::io::read_text(path, crate::io::SizeLimit::RESULT) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ReportError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| ReportError::Scenario {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let mut fields = Vec::new();
    flatten("", &value, &mut fields);
    fields.retain(|(k, _)| !NOT_CONFIG.contains(&k.as_str()));
    Ok(Some(fields))
}

fn flatten(prefix: &str, v: &serde_yaml::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_yaml::Value::Mapping(m) => {
            for (k, v) in m {
                let key = compact(k);
                let path = if prefix.is_empty() {
                    key
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, v, out);
            }
        }
        _ => out.push((prefix.to_string(), compact(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path, name: &str, scenario: Option<&str>) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("summary.csv"), "model,seed\nglobal,1\n").unwrap();
        if let Some(s) = scenario {
            std::fs::write(p.join("scenario.yaml"), s).unwrap();
        }
        p
    }

    #[test]
    fn plain_runs_are_labelled_by_the_fewest_fields_that_differ_seed_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let base = |alg: &str, lr: f64, seed: u32| {
            format!(
                "# Resolved scenario\nname: x\nseed: {seed}\ndescription: d{seed}\n\
                 training: {{lr: {lr}, milestones: [5, 8]}}\nalgorithm: {alg}\n"
            )
        };
        let fedem = "{name: fedem, components: 3}";
        let fedavg = "{name: fedavg}";
        // Searched in path order below the folder, nested folders included.
        run(tmp.path(), "b/seed-2", Some(&base(fedem, 0.1, 2)));
        run(tmp.path(), "b/seed-1", Some(&base(fedem, 0.1, 1)));
        run(tmp.path(), "a/seed-1", Some(&base(fedavg, 0.03, 1)));
        run(tmp.path(), "c", None);
        let runs = Runs::find(&[tmp.path().to_path_buf()]).unwrap();
        let configs: Vec<_> = runs.dirs.iter().map(|r| r.config.clone()).collect();
        let c = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        // The algorithm tells the configurations apart (the learning rate is its shadow).
        assert_eq!(
            configs,
            [
                c("algorithm.name", "fedavg"),
                c("algorithm.name", "fedem"),
                c("algorithm.name", "fedem"),
                c("run", "c"),
            ]
        );
        // FedAvg at a second learning rate: the algorithm no longer suffices.
        run(tmp.path(), "a2/seed-1", Some(&base(fedavg, 0.1, 1)));
        let runs = Runs::find(&[tmp.path().to_path_buf()]).unwrap();
        let labels: Vec<String> = runs
            .dirs
            .iter()
            .map(|r| {
                let parts: Vec<String> = r.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
                parts.join(" ")
            })
            .collect();
        assert_eq!(
            labels,
            [
                "algorithm.name=fedavg training.lr=0.03",
                "algorithm.name=fedavg training.lr=0.1",
                "algorithm.name=fedem training.lr=0.1",
                "algorithm.name=fedem training.lr=0.1",
                "run=c",
            ]
        );
        // One scenario over seeds: one configuration, named.
        let one = tempfile::tempdir().unwrap();
        run(one.path(), "s1", Some(&base(fedavg, 0.1, 1)));
        run(one.path(), "s2", Some(&base(fedavg, 0.1, 2)));
        let runs = Runs::find(&[one.path().to_path_buf()]).unwrap();
        assert!(runs
            .dirs
            .iter()
            .all(|r| r.config == [("name".to_string(), "x".to_string())]));
    }

    #[test]
    fn a_folder_without_runs_is_an_error_that_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("empty/inner")).unwrap();
        let dir = tmp.path().join("empty");
        let e = Runs::find(std::slice::from_ref(&dir)).err().unwrap();
        let text = e.to_string();
        assert!(
            text.contains(&dir.display().to_string()) && text.contains("no folder below it"),
            "{text}"
        );
        let missing = tmp.path().join("nope");
        let e = Runs::find(&[missing]).err().unwrap();
        assert!(e.to_string().contains("no such folder"), "{e}");
    }
}
