//! Compressed updates (`compression:`): what a client does to its update before it goes on the
//! uplink, and how many bytes that puts on the wire.
//!
//! A compressor acts on the change each sent vector makes (its value minus the global vector it
//! moved from; FedEM: each component on its own), after clipping and local noise, so that the
//! update pipeline reads clip → noise → compress → link → aggregate. With error feedback, the
//! part of the change a compressor dropped is kept by the client and added to its next change
//! (Karimireddy et al. 2019). The bytes of every compressed vector follow the formulas of
//! [`CompressorSettings::bytes`], which the link model turns into the upload's simulated time.
//!
//! This room is arithmetic on flat vectors: it draws only from the stream its caller passes
//! and never knows when a round happens (the client applies it before it uploads).

mod catalogue;
mod qsgd;
mod quantize;
mod random_k;
mod sign;
mod top_k;

pub use catalogue::{
    CompressorSettings, CompressorSpec, Compressors, Registration as CompressorRegistration,
    COMPRESSORS,
};
pub use qsgd::QsgdSpec;
pub use quantize::QuantizeSpec;
pub use random_k::RandomKSpec;
pub use sign::SignSpec;
pub use top_k::TopKSpec;

use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// `compression:`: how updates are compressed on their way to the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompressionSpec {
    /// What each client does to its update's changes before uploading them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<CompressorSpec>,
    /// What the server does to the model it sends: the clients' copy moves, after every
    /// aggregation, by the compressed difference between the server's model and it (what a
    /// broadcast drops, the next one carries, so `error_feedback` does not apply here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downlink: Option<CompressorSpec>,
}

impl CompressionSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.uplink.is_none() && self.downlink.is_none() {
            return Err(FieldError::new(
                String::new(),
                "give `uplink`, `downlink` or both (each a compressor: `{kind: top_k, \
                 fraction: 0.01}`, …)"
                    .into(),
            ));
        }
        if let Some(uplink) = &self.uplink {
            uplink.validate().map_err(|e| e.within("uplink"))?;
        }
        if let Some(downlink) = &self.downlink {
            downlink.validate().map_err(|e| e.within("downlink"))?;
            if downlink.error_feedback() {
                return Err(FieldError::new(
                    "downlink.error_feedback".into(),
                    "the downlink always carries what it dropped: the clients' copy moves by \
                     the compressed difference between the server's model and it, so the next \
                     broadcast sends what this one did not; remove `error_feedback`"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

/// Bytes of one f32 value on the wire.
const VALUE_BYTES: u64 = 4;
/// Bytes of the seed from which the server redraws random-k's positions.
const SEED_BYTES: u64 = 8;

/// Bytes that hold `bits` bits.
fn packed(bits: u64) -> u64 {
    bits.div_ceil(8)
}

/// How many values top-k and random-k send of `d`: ⌈fraction·d⌉, at least 1.
fn kept(fraction: f64, d: usize) -> usize {
    ((fraction * d as f64).ceil() as usize).clamp(1, d.max(1))
}

/// Top-k's and random-k's `fraction`: in (0, 1].
fn valid_fraction(fraction: f64) -> Result<(), FieldError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(FieldError::new(
            "fraction".into(),
            format!("must be in (0, 1] (the share of values sent), got {fraction}"),
        ));
    }
    Ok(())
}

/// ⌈log₂ n⌉: the bits that tell n things apart (0 for n ≤ 1).
fn bits_for(n: usize) -> u32 {
    if n <= 1 {
        0
    } else {
        usize::BITS - (n - 1).leading_zeros()
    }
}

/// The changes of `(base, sent)` pairs compressed in place, each vector on its own: the change
/// `sent − base` plus the vector's part of `residual` (error feedback) is compressed, `sent`
/// becomes `base` plus the compressed change, and `residual` what the compression dropped.
/// Returns the bytes of the compressed vectors. `residual` holds every sent vector's values in
/// order; an empty one (a client's first compressed update) counts as zeros.
pub fn compress_changes(
    compressor: &CompressorSpec,
    pairs: &mut [(&[f32], &mut [f32])],
    residual: &mut Vec<f32>,
    rng: &mut ChaCha20Rng,
) -> u64 {
    let total: usize = pairs.iter().map(|(b, _)| b.len()).sum();
    let feedback = compressor.error_feedback();
    if feedback && residual.is_empty() {
        residual.resize(total, 0.0);
    }
    assert!(
        !feedback || residual.len() == total,
        "a client's residual has the length of what it sends"
    );
    let mut bytes = 0;
    let mut at = 0;
    for (base, sent) in pairs.iter_mut() {
        let d = base.len();
        let mut change = crate::models::change(base, sent);
        if feedback {
            for (c, &e) in change.iter_mut().zip(&residual[at..at + d]) {
                *c += e as f64;
            }
        }
        let wanted = feedback.then(|| change.clone());
        compressor.compress(&mut change, rng);
        if let Some(wanted) = wanted {
            for ((e, w), c) in residual[at..at + d].iter_mut().zip(wanted).zip(&change) {
                *e = (w - c) as f32;
            }
        }
        for ((s, &b), c) in sent.iter_mut().zip(base.iter()).zip(&change) {
            *s = (b as f64 + c) as f32;
        }
        bytes += compressor.bytes(d);
        at += d;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn rng() -> ChaCha20Rng {
        ChaCha20Rng::seed_from_u64(7)
    }

    fn spec(text: &str) -> CompressorSpec {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn bytes_by_hand() {
        // d = 1000: ⌈log₂ 1000⌉ = 10 bits an index.
        let top = spec("{kind: top_k, fraction: 0.01}");
        assert_eq!(top.bytes(1000), 4 * 10 + 13); // 100 bits → 13 bytes
        let random = spec("{kind: random_k, fraction: 0.01}");
        assert_eq!(random.bytes(1000), 4 * 10 + 8);
        // 7 levels: 3 bits of level and a sign bit.
        let qsgd = spec("{kind: qsgd, levels: 7}");
        assert_eq!(qsgd.bytes(1000), 4 + 500);
        // 1 level: 1 bit of level (0 or 1) and a sign bit.
        assert_eq!(spec("{kind: qsgd, levels: 1}").bytes(3), 4 + 1);
        assert_eq!(spec("{kind: sign}").bytes(1000), 4 + 125);
        assert_eq!(spec("{kind: sign}").bytes(9), 4 + 2);
        assert_eq!(spec("{kind: quantize, bits: 8}").bytes(1000), 8 + 1000);
        assert_eq!(spec("{kind: quantize, bits: 3}").bytes(5), 8 + 2);
        // k is at least 1; a one-value vector needs no index bits.
        assert_eq!(spec("{kind: top_k, fraction: 0.001}").bytes(10), 4 + 1);
        assert_eq!(top.bytes(1), 4);
        assert_eq!(bits_for(1024), 10);
        assert_eq!(bits_for(1025), 11);
    }

    #[test]
    fn top_k_keeps_the_largest_and_feeds_back_the_rest() {
        let c = spec("{kind: top_k, fraction: 0.5, error_feedback: true}");
        let base = [1.0f32, 1.0, 1.0, 1.0];
        let mut sent = [1.5f32, 0.0, 1.25, 4.0]; // changes 0.5, -1, 0.25, 3
        let mut residual = Vec::new();
        let bytes = compress_changes(&c, &mut [(&base, &mut sent)], &mut residual, &mut rng());
        assert_eq!(sent, [1.0, 0.0, 1.0, 4.0]);
        assert_eq!(residual, [0.5, 0.0, 0.25, 0.0]);
        assert_eq!(bytes, 8 + 1); // two values, two 2-bit indices
                                  // The next change adds the residual: 1, -1, 0.25, 0; the two largest are sent.
        let mut sent = [1.5f32, 0.0, 1.0, 1.0]; // changes 0.5, -1, 0, 0 (+ residual)
        compress_changes(&c, &mut [(&base, &mut sent)], &mut residual, &mut rng());
        assert_eq!(sent, [2.0, 0.0, 1.0, 1.0]);
        assert_eq!(residual, [0.0, 0.0, 0.25, 0.0]);
    }

    #[test]
    fn sign_sends_the_mean_magnitude() {
        let mut v = [0.5, -1.5, 0.0, 2.0];
        spec("{kind: sign}").compress(&mut v, &mut rng());
        assert_eq!(v, [1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn quantizers_are_unbiased_and_on_their_grid() {
        let v0 = [0.3, -0.7, 0.1, 0.0, 0.55];
        for c in [
            spec("{kind: qsgd, levels: 2}"),
            spec("{kind: quantize, bits: 2}"),
            spec("{kind: random_k, fraction: 0.4}"),
        ] {
            let mut r = rng();
            let mut mean = [0.0; 5];
            let n = 20_000;
            for _ in 0..n {
                let mut v = v0;
                c.compress(&mut v, &mut r);
                match c.name() {
                    "qsgd" => {
                        let norm = v0.iter().map(|x: &f64| x * x).sum::<f64>().sqrt();
                        for x in v {
                            let level = (x.abs() / norm * 2.0).round();
                            assert!((x.abs() - level * norm / 2.0).abs() < 1e-12);
                        }
                    }
                    "quantize" => {
                        for x in v {
                            let level = (x + 0.7) / (1.25 / 3.0);
                            assert!((level - level.round()).abs() < 1e-9, "{x}");
                        }
                    }
                    _ => {
                        // k = 2 of 5 kept, scaled by 5/2 (v0[3] is itself 0).
                        assert!(v.iter().filter(|x| **x != 0.0).count() <= 2);
                        for (x, x0) in v.iter().zip(v0) {
                            assert!(*x == 0.0 || *x == x0 * 2.5, "{x} from {x0}");
                        }
                    }
                }
                for (m, x) in mean.iter_mut().zip(v) {
                    *m += x / n as f64;
                }
            }
            for (m, x) in mean.iter().zip(v0) {
                assert!((m - x).abs() < 0.02, "{c:?}: mean {m} for {x}");
            }
        }
    }

    #[test]
    fn only_top_k_and_sign_without_feedback_keep_the_bound() {
        assert!(spec("{kind: top_k, fraction: 0.1}").keeps_norm_bound());
        assert!(spec("{kind: sign}").keeps_norm_bound());
        assert!(!spec("{kind: sign, error_feedback: true}").keeps_norm_bound());
        assert!(!spec("{kind: qsgd, levels: 4}").keeps_norm_bound());
        // The sign's L2 norm is ‖v‖₁/√d ≤ ‖v‖₂.
        let mut v = [3.0, -4.0, 0.0, 0.0];
        spec("{kind: sign}").compress(&mut v, &mut rng());
        assert!(v.iter().map(|x| x * x).sum::<f64>().sqrt() <= 5.0);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let err = |text: &str| spec(text).validate().unwrap_err();
        assert_eq!(err("{kind: top_k, fraction: 0}").path, "fraction");
        assert_eq!(err("{kind: random_k, fraction: 1.5}").path, "fraction");
        assert_eq!(err("{kind: qsgd, levels: 0}").path, "levels");
        assert_eq!(err("{kind: quantize, bits: 17}").path, "bits");
        assert!(
            serde_yaml::from_str::<CompressorSpec>("{kind: top_k, fraction: 0.1, k: 3}").is_err()
        );
    }
}
