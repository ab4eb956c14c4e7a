//! MLflow's file store, as its `FileStore` reads it: `DIR/<experiment id>/meta.yaml` names an
//! experiment; `DIR/<experiment id>/<run id>/` holds a run's `meta.yaml`, `params/<key>` (the
//! value), `tags/<key>` (the value) and `metrics/<key>` (a line `timestamp value step` per
//! value, appended as the run goes).
//!
//! Metric timestamps are the run's simulated clock in milliseconds, as reproducible as the run;
//! a run's start and end times are the wall clock's (MLflow sorts runs by them). This room
//! makes text; it must not open files (the tracker does, through `crate::io`).

use sha2::{Digest, Sha256};

/// MLflow's run states, as `meta.yaml` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    Running = 1,
    Finished = 3,
    Failed = 4,
}

/// The experiment id of experiment `name`: the same in every process, so that runs of one sweep
/// started at once join one experiment (a number, as MLflow's own ids are).
pub fn experiment_id(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let bits = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")) >> 4;
    bits.to_string()
}

/// An experiment's `meta.yaml`.
pub fn experiment_meta(id: &str, name: &str, artifact_location: &str, now_ms: u64) -> String {
    format!(
        "artifact_location: {}\ncreation_time: {now_ms}\nexperiment_id: '{id}'\n\
         last_update_time: {now_ms}\nlifecycle_stage: active\nname: {}\n",
        yaml_text(artifact_location),
        yaml_text(name)
    )
}

/// The name `meta.yaml` gives an experiment, if it is one.
pub fn experiment_name(meta: &str) -> Option<String> {
    let value: serde_yaml::Value = serde_yaml::from_str(meta).ok()?;
    value.get("name")?.as_str().map(str::to_string)
}

/// What a run's `meta.yaml` says.
pub struct RunMeta<'a> {
    pub run_id: &'a str,
    pub run_name: &'a str,
    pub experiment_id: &'a str,
    pub artifact_uri: &'a str,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    pub status: RunStatus,
    pub user: &'a str,
}

impl RunMeta<'_> {
    pub fn yaml(&self) -> String {
        let end = self.end_ms.map_or("null".to_string(), |t| t.to_string());
        format!(
            "artifact_uri: {}\nend_time: {end}\nentry_point_name: ''\nexperiment_id: '{}'\n\
             lifecycle_stage: active\nrun_id: {}\nrun_name: {}\nrun_uuid: {}\nsource_name: ''\n\
             source_type: 4\nsource_version: ''\nstart_time: {}\nstatus: {}\ntags: []\n\
             user_id: {}\n",
            yaml_text(self.artifact_uri),
            self.experiment_id,
            self.run_id,
            yaml_text(self.run_name),
            self.run_id,
            self.start_ms,
            self.status as u8,
            yaml_text(self.user),
        )
    }
}

/// One value of a metric file.
pub fn metric_line(timestamp_ms: u64, value: f64, step: u64) -> String {
    let value = if value.is_finite() {
        format!("{value}")
    } else if value.is_nan() {
        "nan".to_string()
    } else if value > 0.0 {
        "inf".to_string()
    } else {
        "-inf".to_string()
    };
    format!("{timestamp_ms} {value} {step}\n")
}

/// The scenario as MLflow parameters: every leaf of its resolved YAML under its dotted path,
/// lists as flow YAML (`[64, 64]`), in the file's order. A key is also a file name in the
/// store: characters other than letters, digits, `_`, `-`, `.` and space become `_`.
pub fn params(resolved_yaml: &str) -> Vec<(String, String)> {
    let value: serde_yaml::Value =
        serde_yaml::from_str(resolved_yaml).expect("a resolved scenario is YAML");
    let mut out = Vec::new();
    flatten("", &value, &mut out);
    out
}

fn flatten(path: &str, value: &serde_yaml::Value, out: &mut Vec<(String, String)>) {
    use serde_yaml::Value;
    match value {
        Value::Mapping(map) if !map.is_empty() => {
            for (key, v) in map {
                let key = match key {
                    Value::String(s) => s.clone(),
                    other => flow_yaml(other),
                };
                let key: String = (key.chars())
                    .map(|c| match c.is_ascii_alphanumeric() || "_-. ".contains(c) {
                        true => c,
                        false => '_',
                    })
                    .collect();
                let path = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                flatten(&path, v, out);
            }
        }
        Value::String(s) => out.push((path.to_string(), s.clone())),
        other => out.push((path.to_string(), flow_yaml(other))),
    }
}

/// A YAML value on one line (lists and maps in flow style).
fn flow_yaml(value: &serde_yaml::Value) -> String {
    use serde_yaml::Value;
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => {
            let items: Vec<String> = items.iter().map(flow_yaml).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Mapping(map) => {
            let items: Vec<String> = (map.iter())
                .map(|(k, v)| format!("{}: {}", flow_yaml(k), flow_yaml(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Tagged(tagged) => flow_yaml(&tagged.value),
    }
}

/// `text` as a YAML scalar that reads back as itself.
fn yaml_text(text: &str) -> String {
    serde_yaml::to_string(text)
        .expect("a string is YAML")
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_becomes_dotted_parameters() {
        let p = params(
            "name: a\nmodel:\n  kind: mlp\n  hidden: [64, 32]\nsplit: {}\nseed: 3\n\
             files: {../x/y: 1}\n",
        );
        let want = [
            ("name", "a"),
            ("model.kind", "mlp"),
            ("model.hidden", "[64, 32]"),
            ("split", "{}"),
            ("seed", "3"),
            ("files..._x_y", "1"),
        ];
        let want: Vec<(String, String)> = (want.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(p, want);
    }

    #[test]
    fn meta_files_read_back_and_ids_are_stable_numbers() {
        let id = experiment_id("my_study");
        assert_eq!(id, experiment_id("my_study"));
        assert_ne!(id, experiment_id("my_study2"));
        assert!(id.parse::<u64>().unwrap() < 1 << 60);
        let meta = experiment_meta(&id, "a: b", "file:///x", 5);
        assert_eq!(experiment_name(&meta).as_deref(), Some("a: b"));
        let run = RunMeta {
            run_id: "r1",
            run_name: "n",
            experiment_id: &id,
            artifact_uri: "file:///x/r1/artifacts",
            start_ms: 1,
            end_ms: None,
            status: RunStatus::Running,
            user: "u",
        };
        let v: serde_yaml::Value = serde_yaml::from_str(&run.yaml()).unwrap();
        assert_eq!(v["status"].as_u64(), Some(1));
        assert!(v["end_time"].is_null());
        assert_eq!(v["experiment_id"].as_str(), Some(id.as_str()));
        assert_eq!(metric_line(7, 0.25, 3), "7 0.25 3\n");
        assert_eq!(metric_line(7, f64::NAN, 3), "7 nan 3\n");
    }
}
