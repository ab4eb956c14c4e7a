//! A run reported to the experiment trackers researchers use (`tracking:`), as it goes: its
//! configuration, each round's counts, each evaluation's accuracy and loss (the figures of
//! `summary.csv`, per split and model), and the summary at the end, in TensorBoard's event
//! format ([`super::tensorboard`]) and MLflow's file store ([`super::mlflow`]).
//!
//! Tracking changes no result and never stops a run: the first error a tracker meets is kept
//! (the run says so at its end) and that tracker writes no more. This room decides what is
//! tracked and when; the formats are their own rooms', and the files are `crate::io`'s.

use super::mlflow::{self, RunStatus};
use super::summary::Fairness;
use super::tensorboard;
use crate::io::{
    first_free_folder, read_if_present, replace_own, tracker_folder, TrackerError, TrackerFile,
};
use crate::records::{Record, RoundRecord};
use crate::settings::TrackingSpec;
use crate::sim::SimTime;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What identifies a run to its trackers.
pub struct TrackedRun<'a> {
    pub name: &'a str,
    pub run_id: &'a str,
    pub seed: u64,
    pub resolved_yaml: &'a str,
}

/// One evaluation as the trackers see it once all its clients' results are in: its round, the
/// simulated time of its last result, and its figures by name (`test/global/accuracy`, …).
pub struct Evaluation<'a> {
    pub round: u32,
    pub time_s: f64,
    pub values: &'a [(String, f64)],
}

/// Called with each evaluation as the run makes it, on the simulation's thread, in the run's
/// order (the Python package's `on_evaluation`).
pub type OnEvaluation = Box<dyn FnMut(&Evaluation<'_>)>;

/// How a finished run ends its tracking: its last round, its end, and its summary's figures.
pub struct Finished<'a> {
    pub last_round: u32,
    pub end: SimTime,
    pub values: &'a [(String, f64)],
}

/// The trackers of one run.
pub struct Tracker {
    tensorboard: Option<TensorBoard>,
    mlflow: Option<Mlflow>,
    on_evaluation: Option<OnEvaluation>,
    /// The evaluation being gathered: its round and, per (split, model, unseen), what its
    /// clients' records say.
    gathering: Option<(u32, SimTime, BTreeMap<EvalKey, Vec<ClientResult>>)>,
    /// The first error a tracker met.
    error: Option<TrackerError>,
}

/// A client's result in an evaluation: its accuracy, loss and rows.
struct ClientResult {
    accuracy: f64,
    loss: f64,
    rows: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct EvalKey {
    unseen: bool,
    split: &'static str,
    model: &'static str,
}

struct TensorBoard {
    file: TrackerFile,
}

struct Mlflow {
    run_dir: PathBuf,
    meta: RunMetaOwned,
    metrics: BTreeMap<String, TrackerFile>,
}

struct RunMetaOwned {
    run_id: String,
    run_name: String,
    experiment_id: String,
    artifact_uri: String,
    start_ms: u64,
    user: String,
}

impl Tracker {
    /// Opens the trackers `spec` names for `run` (none without it), and `on_evaluation`. An
    /// error here (a folder that cannot be made) is the run's: it has not started.
    pub fn open(
        spec: Option<&TrackingSpec>,
        run: &TrackedRun<'_>,
        on_evaluation: Option<OnEvaluation>,
    ) -> Result<Tracker, TrackerError> {
        let none = TrackingSpec::default();
        let spec = spec.unwrap_or(&none);
        let experiment = spec.experiment.as_deref().unwrap_or(run.name);
        let label = format!("{}-{}", run.name, run.run_id);
        let config = format!("```yaml\n{}```", run.resolved_yaml);
        let tensorboard = match &spec.tensorboard {
            Some(dir) => {
                let folder = dir.join(experiment).join(&label);
                let mut file = TrackerFile::first_free(&folder, tensorboard::event_file_name)?;
                file.append(&tensorboard::file_version())?;
                file.append(&tensorboard::text(0.0, 0, "scenario", &config))?;
                Some(TensorBoard { file })
            }
            None => None,
        };
        let mlflow = match &spec.mlflow {
            Some(dir) => Some(Mlflow::open(dir, experiment, &label, run)?),
            None => None,
        };
        Ok(Tracker {
            tensorboard,
            mlflow,
            on_evaluation,
            gathering: None,
            error: None,
        })
    }

    /// Takes in the run's next record.
    pub fn record(&mut self, record: &Record) {
        match record {
            Record::Eval(e) => {
                if self
                    .gathering
                    .as_ref()
                    .is_some_and(|(round, ..)| *round != e.round)
                {
                    self.flush_evaluation();
                }
                let (_, time, gathered) =
                    (self.gathering).get_or_insert_with(|| (e.round, e.time, BTreeMap::new()));
                *time = (*time).max(e.time);
                let key = EvalKey {
                    unseen: e.unseen,
                    split: e.split.as_str(),
                    model: e.model.as_str(),
                };
                gathered.entry(key).or_default().push(ClientResult {
                    accuracy: e.accuracy,
                    loss: e.loss,
                    rows: e.n_samples as f64,
                });
            }
            Record::Round(round) => self.write(round.end, round.round, &round_values(round)),
            Record::Gossip(g) => {
                let values = vec![
                    (
                        "gossip/consensus_distance".to_string(),
                        g.consensus_distance,
                    ),
                    ("gossip/spectral_gap".to_string(), g.spectral_gap),
                    ("gossip/bytes".to_string(), g.bytes as f64),
                ];
                self.write(g.time, g.round, &values)
            }
            _ => {}
        }
    }

    /// Ends the run's tracking: the last evaluation, then, for a finished run, the summary's
    /// figures (`summary/…`) at its last round and end, and the run's state (finished, or
    /// failed where `summary` is `None`).
    pub fn finish(mut self, summary: Option<Finished<'_>>) -> Option<TrackerError> {
        self.flush_evaluation();
        if let Some(f) = &summary {
            self.write(f.end, f.last_round, f.values);
        }
        if let Some(mlflow) = &self.mlflow {
            let status = match summary {
                Some(_) => RunStatus::Finished,
                None => RunStatus::Failed,
            };
            if let Err(e) = mlflow.set_status(status, Some(wall_clock_ms())) {
                self.error.get_or_insert(e);
            }
        }
        self.error
    }

    fn flush_evaluation(&mut self) {
        let Some((round, time, gathered)) = self.gathering.take() else {
            return;
        };
        let mut values = Vec::new();
        for (key, records) in &gathered {
            let prefix = format!(
                "{}{}/{}",
                if key.unseen { "unseen/" } else { "" },
                key.split,
                key.model
            );
            let per_client: Vec<(f64, f64)> =
                records.iter().map(|r| (r.accuracy, r.rows)).collect();
            let fairness = Fairness::of(&per_client);
            let rows: f64 = records.iter().map(|r| r.rows).sum();
            let loss = records.iter().map(|r| r.loss * r.rows).sum::<f64>() / rows;
            values.push((format!("{prefix}/accuracy"), fairness.weighted_mean));
            values.push((format!("{prefix}/loss"), loss));
            values.push((
                format!("{prefix}/accuracy_bottom_decile"),
                fairness.bottom_decile,
            ));
            values.push((
                format!("{prefix}/accuracy_worst10_mean"),
                fairness.worst10_mean,
            ));
        }
        if let Some(call) = &mut self.on_evaluation {
            call(&Evaluation {
                round,
                time_s: time.as_secs_f64(),
                values: &values,
            });
        }
        self.write(time, round, &values);
    }

    /// Writes `values` at `step` to every tracker still writing.
    fn write(&mut self, time: SimTime, step: u32, values: &[(String, f64)]) {
        if values.is_empty() {
            return;
        }
        let seconds = time.as_secs_f64();
        let mut failed = Vec::new();
        if let Some(tb) = &mut self.tensorboard {
            let event = tensorboard::scalars(seconds, step as u64, values);
            if let Err(e) = tb.file.append(&event) {
                failed.push(e);
                self.tensorboard = None;
            }
        }
        if let Some(ml) = &mut self.mlflow {
            let ms = (seconds * 1000.0).round() as u64;
            if let Err(e) = ml.log(ms, step as u64, values) {
                failed.push(e);
                self.mlflow = None;
            }
        }
        for e in failed {
            self.error.get_or_insert(e);
        }
    }
}

fn round_values(round: &RoundRecord) -> Vec<(String, f64)> {
    let mut values: Vec<(String, f64)> = [
        ("completed", round.completed as f64),
        ("selected", round.selected as f64),
        ("failed", round.failed as f64),
        ("stragglers", round.stragglers as f64),
        ("discarded", round.discarded as f64),
        ("late", round.late as f64),
        ("bytes_up", round.bytes_up as f64),
        ("bytes_down", round.bytes_down as f64),
        ("seconds", (round.end - round.start).as_secs_f64()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("round/{k}"), v))
    .collect();
    if let Some(p) = &round.privacy {
        values.push(("privacy/epsilon".to_string(), p.epsilon));
    }
    values
}

impl Mlflow {
    fn open(
        dir: &Path,
        experiment: &str,
        label: &str,
        run: &TrackedRun<'_>,
    ) -> Result<Mlflow, TrackerError> {
        tracker_folder(dir)?;
        let root = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let experiment_id = mlflow::experiment_id(experiment);
        let known = read_if_present(&dir.join(&experiment_id).join("meta.yaml"))?;
        let now = wall_clock_ms();
        match known.map(|meta| mlflow::experiment_name(&meta)) {
            Some(Some(name)) if name == experiment => {}
            Some(_) => {
                return Err(TrackerError {
                    path: dir.join(&experiment_id).join("meta.yaml"),
                    source: std::io::Error::other(format!(
                        "MLflow experiment {experiment_id} is not named `{experiment}`: fedsim \
                         names its experiments' folders after their names; name another \
                         `tracking.experiment`"
                    )),
                });
            }
            None => {
                let location = format!("file://{}", root.join(&experiment_id).display());
                let meta = mlflow::experiment_meta(&experiment_id, experiment, &location, now);
                match TrackerFile::write_new(
                    &dir.join(&experiment_id),
                    "meta.yaml",
                    meta.as_bytes(),
                ) {
                    // Another run of the experiment, started at the same time, wrote it.
                    Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => {}
                    other => other?,
                }
            }
        }
        let run_dir = first_free_folder(&dir.join(&experiment_id), |n| {
            format!("{}{n:020}", run.run_id)
        })?;
        let run_id = (run_dir.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let meta = RunMetaOwned {
            artifact_uri: format!(
                "file://{}",
                root.join(&experiment_id)
                    .join(&run_id)
                    .join("artifacts")
                    .display()
            ),
            run_id,
            run_name: label.to_string(),
            experiment_id,
            start_ms: now,
            user: std::env::var("USER").unwrap_or_default(),
        };
        let ml = Mlflow {
            run_dir,
            meta,
            metrics: BTreeMap::new(),
        };
        TrackerFile::write_new(
            &ml.run_dir,
            "meta.yaml",
            ml.meta_yaml(RunStatus::Running, None).as_bytes(),
        )?;
        tracker_folder(&ml.run_dir.join("artifacts"))?;
        for (key, value) in mlflow::params(run.resolved_yaml) {
            TrackerFile::write_new(&ml.run_dir.join("params"), &key, value.as_bytes())?;
        }
        let tags = [
            ("mlflow.runName", label.to_string()),
            ("mlflow.source.name", "fedsim".to_string()),
            ("fedsim.run_id", run.run_id.to_string()),
            ("fedsim.seed", run.seed.to_string()),
            ("fedsim.version", env!("CARGO_PKG_VERSION").to_string()),
        ];
        for (key, value) in tags {
            TrackerFile::write_new(&ml.run_dir.join("tags"), key, value.as_bytes())?;
        }
        Ok(ml)
    }

    fn meta_yaml(&self, status: RunStatus, end_ms: Option<u64>) -> String {
        let m = &self.meta;
        mlflow::RunMeta {
            run_id: &m.run_id,
            run_name: &m.run_name,
            experiment_id: &m.experiment_id,
            artifact_uri: &m.artifact_uri,
            start_ms: m.start_ms,
            end_ms,
            status,
            user: &m.user,
        }
        .yaml()
    }

    fn log(&mut self, ms: u64, step: u64, values: &[(String, f64)]) -> Result<(), TrackerError> {
        for (key, value) in values {
            let file = match self.metrics.get_mut(key) {
                Some(file) => file,
                None => {
                    let path = self.run_dir.join("metrics").join(key);
                    let (dir, name) = (path.parent().expect("below metrics/"), path.file_name());
                    let name = name.expect("a key").to_string_lossy().into_owned();
                    let file = TrackerFile::create_new(dir, &name)?;
                    self.metrics.entry(key.clone()).or_insert(file)
                }
            };
            file.append(mlflow::metric_line(ms, *value, step).as_bytes())?;
        }
        Ok(())
    }

    fn set_status(&self, status: RunStatus, end_ms: Option<u64>) -> Result<(), TrackerError> {
        replace_own(
            &self.run_dir,
            "meta.yaml",
            self.meta_yaml(status, end_ms).as_bytes(),
        )
    }
}

fn wall_clock_ms() -> u64 {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .map_or(0, |d| d.as_millis() as u64)
}
