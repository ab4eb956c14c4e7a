//! `adagrad`: FedAdagrad, Reddi et al.'s adaptive step with v ← v + Δ².

use super::catalogue::ServerOptimizerSettings;
use super::{adaptive_step, check_adaptive, Moments};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `adagrad` (what it does: its entry in [`super::SERVER_OPTIMIZERS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdagradSpec {
    /// The server's learning rate η.
    pub lr: f64,
    /// The decay β₁ of the first moment, in [0, 1) (0: no momentum).
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    /// The adaptivity τ (also v's start, τ²).
    #[serde(default = "super::adam::default_tau")]
    pub tau: f64,
}

fn default_beta1() -> f64 {
    0.9
}

impl ServerOptimizerSettings for AdagradSpec {
    const EXAMPLE: &'static str = "{lr: 0.1, beta1: 0.9, tau: 0.001}";

    fn validate(&self) -> Result<(), FieldError> {
        check_adaptive(self.lr, &[self.beta1], self.tau)
    }

    fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments) {
        let settings = (self.lr, self.beta1, self.tau);
        adaptive_step(global, aggregate, moments, settings, |v, d2| v + d2);
    }
}
