//! `gaussian`: a change of independent N(0, std²) values.

use super::catalogue::AttackSettings;
use crate::settings::FieldError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// The settings of `gaussian` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GaussianSpec {
    #[serde(default = "super::one")]
    pub std: f64,
}

impl AttackSettings for GaussianSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("std", self.std)
    }

    fn is_own(&self) -> bool {
        true
    }

    fn own(&self, delta: &mut [f64], rng: &mut ChaCha20Rng) {
        delta
            .iter_mut()
            .for_each(|x| *x = self.std * rng.sample::<f64, _>(StandardNormal));
    }
}
