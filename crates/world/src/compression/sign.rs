//! `sign`: the mean magnitude, and a sign bit a value (Karimireddy et al. 2019).

use super::catalogue::CompressorSettings;
use super::{packed, VALUE_BYTES};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `sign` (what it does: its entry in [`super::COMPRESSORS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignSpec {
    /// Keep what the sign dropped and add it to the next change (EF-SignSGD).
    #[serde(default)]
    pub error_feedback: bool,
}

impl CompressorSettings for SignSpec {
    /// The sign's L2 norm is ‖v‖₁/√d ≤ ‖v‖₂.
    const KEEPS_NORM_BOUND: bool = true;

    fn error_feedback(&self) -> bool {
        self.error_feedback
    }

    /// 4 + ⌈d / 8⌉: the scale; a bit a value.
    fn bytes(&self, d: usize) -> u64 {
        VALUE_BYTES + packed(d as u64)
    }

    fn compress(&self, v: &mut [f64], _rng: &mut ChaCha20Rng) {
        let scale = v.iter().map(|x| x.abs()).sum::<f64>() / v.len() as f64;
        for x in v.iter_mut() {
            *x = if *x >= 0.0 { scale } else { -scale };
        }
    }
}
