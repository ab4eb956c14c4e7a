//! Where a run reports to the experiment trackers researchers already use: the scenario's
//! `tracking:` section. An execution setting, like the checkpoints' cadence: it is not part of
//! the resolved scenario (nor of its content hash), so a run's id and result files do not depend
//! on it.

use super::FieldError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The scenario's `tracking:` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackingSpec {
    /// A TensorBoard log folder (relative to the working directory): the run writes an event
    /// file into `DIR/<experiment>/<name>-<run id>/` as it goes (`tensorboard --logdir DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<PathBuf>,
    /// An MLflow file store (relative to the working directory; `mlflow ui
    /// --backend-store-uri DIR`): one MLflow run per fedsim run, in the experiment named
    /// `<experiment>`, with the scenario as parameters and the metrics as they are made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<PathBuf>,
    /// The experiment the run belongs to [default: the scenario's name; in a sweep, the
    /// sweep's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

impl TrackingSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.tensorboard.is_none() && self.mlflow.is_none() {
            return Err(FieldError::new(
                "tensorboard".into(),
                "name a folder for `tensorboard` or `mlflow` (or both), e.g. \
                 `tracking: {tensorboard: runs}`"
                    .into(),
            ));
        }
        for (field, dir) in [("tensorboard", &self.tensorboard), ("mlflow", &self.mlflow)] {
            if dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
                return Err(FieldError::new(
                    field.into(),
                    "is empty: name a folder".into(),
                ));
            }
        }
        if let Some(name) = &self.experiment {
            let fine = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
            if name.is_empty() || !name.chars().all(fine) || name.starts_with('.') {
                return Err(FieldError::new(
                    "experiment".into(),
                    format!(
                        "`{name}`: use letters, digits, `_`, `-` and `.` (not first), as a \
                         folder name"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_names_a_folder_and_a_plain_experiment() {
        let spec = |yaml: &str| serde_yaml::from_str::<TrackingSpec>(yaml).unwrap();
        assert!(spec("{tensorboard: runs}").validate().is_ok());
        assert!(spec("{mlflow: mlruns, experiment: my_study-2}")
            .validate()
            .is_ok());
        assert_eq!(spec("{}").validate().unwrap_err().path, "tensorboard");
        assert_eq!(spec("{mlflow: ''}").validate().unwrap_err().path, "mlflow");
        let e = spec("{tensorboard: runs, experiment: ../up}")
            .validate()
            .unwrap_err();
        assert_eq!(e.path, "experiment");
        assert!(serde_yaml::from_str::<TrackingSpec>("{tensorbord: runs}").is_err());
    }
}
