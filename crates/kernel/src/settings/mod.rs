//! The settings of a run that belong to no catalogue: what is evaluated (`evaluation:` and
//! `eval_every`, resolved to an [`EvaluationPlan`]), what a diverged run does, how clients are
//! trained on the machine (`training.cohorts`, `training.spill`), where a run reports to
//! experiment trackers (`tracking:`); the glue every catalogue shares ([`catalogue`]); and
//! [`FieldError`], how every section says what is wrong with it.
//!
//! This room sits at the bottom with the kernel: serde types and their pure validation. It
//! must not read files, ask the machine anything (memory, devices) or touch libtorch, so that
//! a scenario validates the same everywhere. Behaviour that uses these settings lives with
//! the entities that do it.

pub mod catalogue;
mod checkpoint;
mod evaluation;
mod tracking;
mod training;

pub use checkpoint::{CheckpointEvery, CheckpointSpec};
pub use evaluation::{
    EvalClients, EvalSample, EvalSplit, EvaluatedSplits, EvaluationPlan, NoveltyScoring,
    RawEvaluation,
};
pub use tracking::TrackingSpec;
pub use training::{Cohorts, Precision, Spill, AUTO_SPILL_SHARE};

/// A problem with one field of a scenario section: the dotted path below the section that
/// holds it, and what is wrong and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{path}`: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

/// The longest span of simulated time in microseconds: 2⁶² (`sim::SimDuration::LONGEST`), so
/// that a time plus a span never wraps.
pub const LONGEST_MICROS: u64 = 1 << 62;

/// [`LONGEST_MICROS`] in seconds: the most a setting in seconds may say.
pub const LONGEST_SECONDS: f64 = LONGEST_MICROS as f64 / 1e6;

impl FieldError {
    pub fn new(path: String, message: String) -> Self {
        FieldError { path, message }
    }

    /// The same error, found inside the section `prefix`: its path then starts there.
    pub fn within(self, prefix: &str) -> FieldError {
        let path = if self.path.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        FieldError { path, ..self }
    }

    /// `field` must be at least 1.
    pub fn at_least_one(field: &str, v: usize) -> Result<(), FieldError> {
        if v == 0 {
            return Err(FieldError::new(field.into(), "must be at least 1".into()));
        }
        Ok(())
    }

    /// `field` must be a positive finite number.
    pub fn positive(field: &str, v: f64) -> Result<(), FieldError> {
        if !(v > 0.0 && v.is_finite()) {
            return Err(FieldError::new(
                field.into(),
                format!("must be a positive number, got {v}"),
            ));
        }
        Ok(())
    }

    /// `field` must be a positive number of seconds the virtual clock can count (at most
    /// [`LONGEST_SECONDS`]).
    pub fn seconds(field: &str, v: f64) -> Result<(), FieldError> {
        if !(v > 0.0 && v <= LONGEST_SECONDS) {
            return Err(FieldError::new(
                field.into(),
                format!(
                    "must be a positive number of seconds, at most 4.6e12 (about 146 000 \
                     years, the longest span the virtual clock counts), got {}",
                    number(v)
                ),
            ));
        }
        Ok(())
    }

    /// `field` must be a non-negative finite number.
    pub fn non_negative(field: &str, v: f64) -> Result<(), FieldError> {
        if !(v >= 0.0 && v.is_finite()) {
            return Err(FieldError::new(
                field.into(),
                format!("must be a non-negative number, got {v}"),
            ));
        }
        Ok(())
    }
}

/// What a run does when a client, a peer or the server first sees NaN or infinite numbers.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnDivergence {
    /// End the run there; the results so far are written, marked as diverged.
    #[default]
    Stop,
    /// Record it and run on (every later figure may be NaN).
    Continue,
}

impl OnDivergence {
    /// The default, left out of the resolved scenario so that run ids stay as they were.
    pub fn is_stop(&self) -> bool {
        *self == OnDivergence::Stop
    }
}

/// A number for a message: as written where that is short (`0.5`, `250`), else in scientific
/// notation (`1e300`, `7.5e-12`), never hundreds of digits.
pub fn number(v: f64) -> String {
    let plain = v.to_string();
    if v == 0.0 || !v.is_finite() || plain.len() <= 12 {
        plain
    } else {
        format!("{v:e}")
    }
}

/// A value on one line (flow style), for labels and tables.
pub fn compact(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::Null => "null".into(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(compact).collect::<Vec<_>>().join(", ")
            )
        }
        serde_yaml::Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", compact(k), compact(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        serde_yaml::Value::Tagged(t) => compact(&t.value),
    }
}

#[cfg(test)]
mod tests {
    use super::FieldError;

    fn message(r: Result<(), FieldError>) -> Option<String> {
        r.err().map(|e| format!("{}: {}", e.path, e.message))
    }

    #[test]
    fn the_shared_value_checks_by_hand() {
        assert_eq!(message(FieldError::at_least_one("dim", 1)), None);
        assert_eq!(
            message(FieldError::at_least_one("dim", 0)).as_deref(),
            Some("dim: must be at least 1")
        );
        assert_eq!(message(FieldError::positive("lr", 1e-300)), None);
        for (v, got) in [
            (0.0, "0"),
            (-1.5, "-1.5"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(
                message(FieldError::positive("lr", v)),
                Some(format!("lr: must be a positive number, got {got}"))
            );
        }
        for v in [0.0, -0.0, 2.5] {
            assert_eq!(message(FieldError::non_negative("mu", v)), None);
        }
        for (v, got) in [
            (-1e-9, "-0.000000001"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(
                message(FieldError::non_negative("mu", v)),
                Some(format!("mu: must be a non-negative number, got {got}"))
            );
        }
    }
}
