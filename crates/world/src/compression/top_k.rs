//! `top_k`: the values of largest magnitude, sent with their indices.

use super::catalogue::CompressorSettings;
use super::{bits_for, kept, packed, valid_fraction, VALUE_BYTES};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `top_k` (what it does: its entry in [`super::COMPRESSORS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopKSpec {
    /// The fraction of each vector's values sent, in (0, 1].
    pub fraction: f64,
    /// Keep what was not sent and add it to the next change.
    #[serde(default)]
    pub error_feedback: bool,
}

impl CompressorSettings for TopKSpec {
    const EXAMPLE: &'static str = "{fraction: 0.01}";
    /// A vector with values set to zero is never longer.
    const KEEPS_NORM_BOUND: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        valid_fraction(self.fraction)
    }

    fn error_feedback(&self) -> bool {
        self.error_feedback
    }

    /// 4k + ⌈k·⌈log₂ d⌉ / 8⌉: values, then indices packed at ⌈log₂ d⌉ bits.
    fn bytes(&self, d: usize) -> u64 {
        let k = kept(self.fraction, d) as u64;
        VALUE_BYTES * k + packed(k * u64::from(bits_for(d)))
    }

    fn compress(&self, v: &mut [f64], _rng: &mut ChaCha20Rng) {
        let d = v.len();
        let k = kept(self.fraction, d);
        if k < d {
            let mut order: Vec<usize> = (0..d).collect();
            order.select_nth_unstable_by(k - 1, |&a, &b| {
                v[b].abs().total_cmp(&v[a].abs()).then(a.cmp(&b))
            });
            for &i in &order[k..] {
                v[i] = 0.0;
            }
        }
    }
}
