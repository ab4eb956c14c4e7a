//! `quantize`: b bits a value on an even grid between the minimum and the maximum.

use super::catalogue::CompressorSettings;
use super::{packed, VALUE_BYTES};
use crate::settings::FieldError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `quantize` (what it does: its entry in [`super::COMPRESSORS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuantizeSpec {
    /// b, from 1 to 16.
    pub bits: u32,
    /// Keep what the quantization changed and add it to the next change.
    #[serde(default)]
    pub error_feedback: bool,
}

impl CompressorSettings for QuantizeSpec {
    const EXAMPLE: &'static str = "{bits: 8}";

    fn validate(&self) -> Result<(), FieldError> {
        if !(1..=16).contains(&self.bits) {
            return Err(FieldError::new(
                "bits".into(),
                format!("must be from 1 to 16 (bits a value), got {}", self.bits),
            ));
        }
        Ok(())
    }

    fn error_feedback(&self) -> bool {
        self.error_feedback
    }

    /// 8 + ⌈d·b / 8⌉: minimum and step; b bits a value.
    fn bytes(&self, d: usize) -> u64 {
        2 * VALUE_BYTES + packed(d as u64 * u64::from(self.bits))
    }

    fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng) {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let step = (hi - lo) / ((1u64 << self.bits) - 1) as f64;
        for x in v.iter_mut() {
            let u: f64 = rng.gen();
            if step > 0.0 {
                let r = (*x - lo) / step;
                let level = r.floor() + f64::from(u8::from(u < r - r.floor()));
                *x = lo + level * step;
            }
        }
    }
}
