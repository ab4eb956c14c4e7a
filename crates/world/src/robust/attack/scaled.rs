//! `scaled`: factor·Δ.

use super::catalogue::AttackSettings;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `scaled` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaledSpec {
    pub factor: f64,
}

impl AttackSettings for ScaledSpec {
    const EXAMPLE: &'static str = "{factor: 10.0}";

    fn validate(&self) -> Result<(), FieldError> {
        super::finite("factor", self.factor)
    }

    fn is_own(&self) -> bool {
        true
    }

    fn own(&self, delta: &mut [f64], _rng: &mut ChaCha20Rng) {
        delta.iter_mut().for_each(|x| *x *= self.factor);
    }
}
