//! `qsgd`: the norm, and per value a sign and a level rounded at random (Alistarh et al. 2017).

use super::catalogue::CompressorSettings;
use super::{bits_for, packed, VALUE_BYTES};
use crate::settings::FieldError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `qsgd` (what it does: its entry in [`super::COMPRESSORS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QsgdSpec {
    /// s: the levels above zero, at least 1 (7 levels: 4 bits a value).
    pub levels: u32,
    /// Keep what the quantization changed and add it to the next change.
    #[serde(default)]
    pub error_feedback: bool,
}

impl CompressorSettings for QsgdSpec {
    const EXAMPLE: &'static str = "{levels: 7}";

    fn validate(&self) -> Result<(), FieldError> {
        if self.levels == 0 {
            return Err(FieldError::new(
                "levels".into(),
                "must be at least 1 (s levels above zero; 7 gives 4 bits a value)".into(),
            ));
        }
        Ok(())
    }

    fn error_feedback(&self) -> bool {
        self.error_feedback
    }

    /// 4 + ⌈d·(1 + ⌈log₂(s + 1)⌉) / 8⌉: the norm; a sign bit and a level a value.
    fn bytes(&self, d: usize) -> u64 {
        VALUE_BYTES + packed(d as u64 * (1 + u64::from(bits_for(self.levels as usize + 1))))
    }

    fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng) {
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let s = f64::from(self.levels);
        for x in v.iter_mut() {
            let u: f64 = rng.gen();
            if norm == 0.0 {
                continue;
            }
            let r = x.abs() / norm * s;
            let level = r.floor() + f64::from(u8::from(u < r - r.floor()));
            *x = x.signum() * norm * level / s;
        }
    }
}
