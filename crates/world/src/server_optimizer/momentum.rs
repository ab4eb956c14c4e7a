//! `momentum`: FedAvgM's server momentum, m ← βm + Δ, x ← x + η·m.

use super::catalogue::ServerOptimizerSettings;
use super::Moments;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `momentum` (what it does: its entry in [`super::SERVER_OPTIMIZERS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MomentumSpec {
    /// The server's learning rate η.
    #[serde(default = "super::sgd::one")]
    pub lr: f64,
    /// The momentum β, in [0, 1).
    #[serde(default = "default_beta")]
    pub beta: f64,
}

fn default_beta() -> f64 {
    0.9
}

impl ServerOptimizerSettings for MomentumSpec {
    const EXAMPLE: &'static str = "{lr: 1, beta: 0.9}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("lr", self.lr)?;
        if !(0.0..1.0).contains(&self.beta) {
            return Err(FieldError::new(
                "beta".into(),
                format!("must be in [0, 1), got {}", self.beta),
            ));
        }
        Ok(())
    }

    fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments) {
        moments.first.resize(global.len(), 0.0);
        for ((x, a), m) in global.iter().zip(aggregate).zip(&mut moments.first) {
            let next = self.beta * *m as f64 + (*a as f64 - *x as f64);
            *a = (*x as f64 + self.lr * next) as f32;
            *m = next as f32;
        }
    }
}
