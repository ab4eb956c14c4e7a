//! Compressed updates (`compression:`): what a client does to its update before it goes on the
//! uplink, and how many bytes that puts on the wire.
//!
//! A compressor acts on the change each sent vector makes (its value minus the global vector it
//! moved from; FedEM: each component on its own), after clipping and local noise, so that the
//! update pipeline reads clip → noise → compress → link → aggregate. With error feedback, the
//! part of the change a compressor dropped is kept by the client and added to its next change
//! (Karimireddy et al. 2019). The bytes of every compressed vector follow the formulas of
//! [`Compressor::bytes`], which the link model turns into the upload's simulated time.
//!
//! This room is arithmetic on flat vectors: it draws only from the stream its caller passes
//! and never knows when a round happens (the client applies it before it uploads).

use crate::spec::FieldError;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// `compression:`: how updates are compressed on their way to the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompressionSpec {
    /// What each client does to its update's changes before uploading them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<Compressor>,
    /// What the server does to the model it sends: the clients' copy moves, after every
    /// aggregation, by the compressed difference between the server's model and it (what a
    /// broadcast drops, the next one carries, so `error_feedback` does not apply here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downlink: Option<Compressor>,
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

/// One compressor of the changes a client sends (a change: a sent vector minus the global
/// vector it moved from, d values).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Compressor {
    /// Top-k sparsification: the k = ⌈fraction·d⌉ values of largest magnitude (ties: the
    /// lower index), sent with their indices (⌈log₂ d⌉ bits each).
    TopK {
        /// The fraction of each vector's values sent, in (0, 1].
        fraction: f64,
        /// Keep what was not sent and add it to the next change.
        #[serde(default)]
        error_feedback: bool,
    },
    /// Random-k sparsification: k = ⌈fraction·d⌉ values at positions drawn uniformly from
    /// the job's `compression` stream; the indices travel as the 8-byte seed of that draw.
    /// Without error feedback the values are scaled by d/k (an unbiased estimate of the
    /// change); with it they are sent as they are (Stich et al. 2018).
    RandomK {
        /// The fraction of each vector's values sent, in (0, 1].
        fraction: f64,
        /// Keep what was not sent and add it to the next change.
        #[serde(default)]
        error_feedback: bool,
    },
    /// QSGD (Alistarh et al. 2017): each value becomes sign·‖v‖₂·l/s, l one of s + 1 levels,
    /// rounded up or down at random so that the estimate is unbiased; sent as the norm (4
    /// bytes) and, per value, a sign bit and ⌈log₂(s + 1)⌉ bits of level.
    Qsgd {
        /// s: the levels above zero, at least 1 (7 levels: 4 bits a value).
        levels: u32,
        /// Keep what the quantization changed and add it to the next change.
        #[serde(default)]
        error_feedback: bool,
    },
    /// Scaled sign (Karimireddy et al. 2019): every value becomes ±‖v‖₁/d (+ for 0); sent as
    /// the scale (4 bytes) and a bit per value.
    Sign {
        /// Keep what the sign dropped and add it to the next change (EF-SignSGD).
        #[serde(default)]
        error_feedback: bool,
    },
    /// Uniform quantization to b bits: 2^b levels evenly spaced between the vector's minimum
    /// and maximum, each value rounded to a neighbouring level at random (unbiased); sent as
    /// the minimum and the step (8 bytes) and b bits a value.
    Quantize {
        /// b, from 1 to 16.
        bits: u32,
        /// Keep what the quantization changed and add it to the next change.
        #[serde(default)]
        error_feedback: bool,
    },
}

/// Bytes of one f32 value on the wire.
const VALUE_BYTES: u64 = 4;
/// Bytes of the seed from which the server redraws random-k's positions.
const SEED_BYTES: u64 = 8;

impl Compressor {
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.into(), message));
        match *self {
            Compressor::TopK { fraction, .. } | Compressor::RandomK { fraction, .. }
                if !(fraction > 0.0 && fraction <= 1.0) =>
            {
                bad(
                    "fraction",
                    format!("must be in (0, 1] (the share of values sent), got {fraction}"),
                )
            }
            Compressor::Qsgd { levels: 0, .. } => bad(
                "levels",
                "must be at least 1 (s levels above zero; 7 gives 4 bits a value)".into(),
            ),
            Compressor::Quantize { bits, .. } if !(1..=16).contains(&bits) => bad(
                "bits",
                format!("must be from 1 to 16 (bits a value), got {bits}"),
            ),
            _ => Ok(()),
        }
    }

    /// Whether the client keeps what was not sent for its next update.
    pub fn error_feedback(&self) -> bool {
        match *self {
            Compressor::TopK { error_feedback, .. }
            | Compressor::RandomK { error_feedback, .. }
            | Compressor::Qsgd { error_feedback, .. }
            | Compressor::Sign { error_feedback }
            | Compressor::Quantize { error_feedback, .. } => error_feedback,
        }
    }

    /// Whether a compressed change is never longer (L2) than the change itself, so that a
    /// clipped update stays within its bound: top-k and scaled sign without error feedback.
    pub fn keeps_norm_bound(&self) -> bool {
        matches!(
            self,
            Compressor::TopK {
                error_feedback: false,
                ..
            } | Compressor::Sign {
                error_feedback: false
            }
        )
    }

    /// How many values top-k and random-k send of `d`: ⌈fraction·d⌉, at least 1.
    fn kept(fraction: f64, d: usize) -> usize {
        ((fraction * d as f64).ceil() as usize).clamp(1, d.max(1))
    }

    /// Bytes on the wire for one compressed vector of `d` values (no header: both sides know
    /// the model's shapes and the compressor's settings):
    /// - top-k: 4k + ⌈k·⌈log₂ d⌉ / 8⌉ (values, then indices packed at ⌈log₂ d⌉ bits);
    /// - random-k: 4k + 8 (values, and the seed of the positions);
    /// - QSGD: 4 + ⌈d·(1 + ⌈log₂(s + 1)⌉) / 8⌉ (the norm; a sign bit and a level a value);
    /// - sign: 4 + ⌈d / 8⌉ (the scale; a bit a value);
    /// - quantize: 8 + ⌈d·b / 8⌉ (minimum and step; b bits a value).
    pub fn bytes(&self, d: usize) -> u64 {
        let packed = |bits: u64| bits.div_ceil(8);
        let d64 = d as u64;
        match *self {
            Compressor::TopK { fraction, .. } => {
                let k = Self::kept(fraction, d) as u64;
                VALUE_BYTES * k + packed(k * u64::from(bits_for(d)))
            }
            Compressor::RandomK { fraction, .. } => {
                VALUE_BYTES * Self::kept(fraction, d) as u64 + SEED_BYTES
            }
            Compressor::Qsgd { levels, .. } => {
                VALUE_BYTES + packed(d64 * (1 + u64::from(bits_for(levels as usize + 1))))
            }
            Compressor::Sign { .. } => VALUE_BYTES + packed(d64),
            Compressor::Quantize { bits, .. } => 2 * VALUE_BYTES + packed(d64 * u64::from(bits)),
        }
    }

    /// Replaces `v` by its compressed form (what the server reconstructs), drawing from `rng`
    /// where the compressor is random. The work is in f64.
    pub fn compress(&self, v: &mut [f64], rng: &mut impl Rng) {
        let d = v.len();
        if d == 0 {
            return;
        }
        match *self {
            Compressor::TopK { fraction, .. } => {
                let k = Self::kept(fraction, d);
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
            Compressor::RandomK {
                fraction,
                error_feedback,
            } => {
                let k = Self::kept(fraction, d);
                let scale = if error_feedback {
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
            Compressor::Qsgd { levels, .. } => {
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                let s = f64::from(levels);
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
            Compressor::Sign { .. } => {
                let scale = v.iter().map(|x| x.abs()).sum::<f64>() / d as f64;
                for x in v.iter_mut() {
                    *x = if *x >= 0.0 { scale } else { -scale };
                }
            }
            Compressor::Quantize { bits, .. } => {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let step = (hi - lo) / ((1u64 << bits) - 1) as f64;
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
    }
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
    compressor: &Compressor,
    pairs: &mut [(&[f32], &mut [f32])],
    residual: &mut Vec<f32>,
    rng: &mut impl Rng,
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

    fn spec(text: &str) -> Compressor {
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
                match c {
                    Compressor::Qsgd { .. } => {
                        let norm = v0.iter().map(|x: &f64| x * x).sum::<f64>().sqrt();
                        for x in v {
                            let level = (x.abs() / norm * 2.0).round();
                            assert!((x.abs() - level * norm / 2.0).abs() < 1e-12);
                        }
                    }
                    Compressor::Quantize { .. } => {
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
        assert!(serde_yaml::from_str::<Compressor>("{kind: top_k, fraction: 0.1, k: 3}").is_err());
    }
}
