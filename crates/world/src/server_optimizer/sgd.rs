//! `sgd`: x ← x + η·Δ (at η = 1, the aggregate itself).

use super::catalogue::ServerOptimizerSettings;
use super::Moments;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `sgd` (what it does: its entry in [`super::SERVER_OPTIMIZERS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SgdSpec {
    /// The server's learning rate η (1: plain averaging).
    #[serde(default = "one")]
    pub lr: f64,
}

pub(super) fn one() -> f64 {
    1.0
}

impl ServerOptimizerSettings for SgdSpec {
    const EXAMPLE: &'static str = "{lr: 1}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("lr", self.lr)
    }

    fn step(&self, global: &[f32], aggregate: &mut [f32], _: &mut Moments) {
        if self.lr == 1.0 {
            return;
        }
        for (x, a) in global.iter().zip(aggregate) {
            *a = (*x as f64 + self.lr * (*a as f64 - *x as f64)) as f32;
        }
    }
}
