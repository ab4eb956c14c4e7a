//! `yogi`: FedYogi, Reddi et al.'s adaptive step with v ← v − (1 − β₂)Δ²·sign(v − Δ²).

use super::catalogue::ServerOptimizerSettings;
use super::{adaptive_step, check_adaptive, Moments};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// −1, 0 or 1 (0 where v = Δ²).
fn sign(x: f64) -> f64 {
    if x == 0.0 {
        0.0
    } else {
        x.signum()
    }
}

/// The settings of `yogi` (what it does: its entry in [`super::SERVER_OPTIMIZERS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct YogiSpec {
    /// The server's learning rate η.
    pub lr: f64,
    /// The decays [β₁, β₂] of the first and second moments, each in [0, 1).
    #[serde(default = "super::adam::default_betas")]
    pub betas: [f64; 2],
    /// The adaptivity τ (also v's start, τ²).
    #[serde(default = "super::adam::default_tau")]
    pub tau: f64,
}

impl ServerOptimizerSettings for YogiSpec {
    const EXAMPLE: &'static str = "{lr: 0.01, betas: [0.9, 0.99], tau: 0.001}";

    fn validate(&self) -> Result<(), FieldError> {
        check_adaptive(self.lr, &self.betas, self.tau)
    }

    fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments) {
        let [beta1, beta2] = self.betas;
        let settings = (self.lr, beta1, self.tau);
        adaptive_step(global, aggregate, moments, settings, |v, d2| {
            v - (1.0 - beta2) * d2 * sign(v - d2)
        });
    }
}
