//! `random_k`: values at positions drawn from the job's stream, sent with the seed of the draw.

use super::catalogue::CompressorSettings;
use super::{kept, valid_fraction, SEED_BYTES, VALUE_BYTES};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `random_k` (what it does: its entry in [`super::COMPRESSORS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RandomKSpec {
    /// The fraction of each vector's values sent, in (0, 1].
    pub fraction: f64,
    /// Keep what was not sent and add it to the next change.
    #[serde(default)]
    pub error_feedback: bool,
}

impl CompressorSettings for RandomKSpec {
    const EXAMPLE: &'static str = "{fraction: 0.01}";

    fn validate(&self) -> Result<(), FieldError> {
        valid_fraction(self.fraction)
    }

    fn error_feedback(&self) -> bool {
        self.error_feedback
    }

    /// 4k + 8: values, and the seed of the positions.
    fn bytes(&self, d: usize) -> u64 {
        VALUE_BYTES * kept(self.fraction, d) as u64 + SEED_BYTES
    }

    fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng) {
        let d = v.len();
        let k = kept(self.fraction, d);
        let scale = if self.error_feedback {
            1.0
        } else {
            d as f64 / k as f64
        };
        let mut keep = vec![false; d];
        for i in rand::seq::index::sample(rng, d, k) {
            keep[i] = true;
        }
        for (x, kept) in v.iter_mut().zip(keep) {
            *x = if kept { *x * scale } else { 0.0 };
        }
    }
}
