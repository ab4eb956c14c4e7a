//! `sign_flip`: −scale·Δ.

use super::catalogue::AttackSettings;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `sign_flip` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignFlipSpec {
    #[serde(default = "super::one")]
    pub scale: f64,
}

impl AttackSettings for SignFlipSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("scale", self.scale)
    }

    fn is_own(&self) -> bool {
        true
    }

    fn own(&self, delta: &mut [f64], _rng: &mut ChaCha20Rng) {
        delta.iter_mut().for_each(|x| *x *= -self.scale);
    }
}
