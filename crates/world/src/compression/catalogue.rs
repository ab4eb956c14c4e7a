//! The compressors a `compression:` section can name (`uplink: {kind: ...}`, `downlink: {kind:
//! ...}`), one entry each in [`COMPRESSORS`]. A compressor is its file (its settings type,
//! implementing [`CompressorSettings`]) plus one entry here.

use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;

/// The catalogue: every compressor a scenario can name, in the order the docs list them.
pub static COMPRESSORS: &[Registration] = &[
    entry::<super::TopKSpec>(
        "top_k",
        "Top-k sparsification: the k = ⌈fraction·d⌉ values of largest magnitude (ties: the \
         lower index), sent with their indices (⌈log₂ d⌉ bits each).",
    ),
    entry::<super::RandomKSpec>(
        "random_k",
        "Random-k sparsification: k = ⌈fraction·d⌉ values at positions drawn uniformly from the \
         job's `compression` stream; the indices travel as the 8-byte seed of that draw. \
         Without error feedback the values are scaled by d/k (an unbiased estimate of the \
         change); with it they are sent as they are (Stich et al. 2018).",
    ),
    entry::<super::QsgdSpec>(
        "qsgd",
        "QSGD (Alistarh et al. 2017): each value becomes sign·‖v‖₂·l/s, l one of s + 1 levels, \
         rounded up or down at random so that the estimate is unbiased; sent as the norm (4 \
         bytes) and, per value, a sign bit and ⌈log₂(s + 1)⌉ bits of level.",
    ),
    entry::<super::SignSpec>(
        "sign",
        "Scaled sign (Karimireddy et al. 2019): every value becomes ±‖v‖₁/d (+ for 0); sent as \
         the scale (4 bytes) and a bit per value.",
    ),
    entry::<super::QuantizeSpec>(
        "quantize",
        "Uniform quantization to b bits: 2^b levels evenly spaced between the vector's minimum \
         and maximum, each value rounded to a neighbouring level at random (unbiased); sent as \
         the minimum and the step (8 bytes) and b bits a value.",
    ),
];

/// A compressor's settings, as its section holds them (besides `kind`), and what it does to
/// one change (a sent vector minus the global vector it moved from, d values).
pub trait CompressorSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Checks the settings; a path is below the compressor's section.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// Whether, without error feedback, a compressed change is never longer (L2) than the
    /// change itself, so that a clipped update stays within its bound. (With error feedback
    /// the residual comes back and can make it longer.)
    const KEEPS_NORM_BOUND: bool = false;

    /// Whether the client keeps what was not sent for its next update.
    fn error_feedback(&self) -> bool;

    /// Bytes on the wire for one compressed vector of `d` values (no header: both sides know
    /// the model's shapes and the compressor's settings).
    fn bytes(&self, d: usize) -> u64;

    /// Replaces `v` (d ≥ 1 values) by its compressed form (what the server reconstructs),
    /// drawing from `rng` where the compressor is random. The work is in f64.
    fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng);
}

catalogue! {
    /// The catalogue of compressors.
    pub struct Compressors {
        tag: "kind",
        example: "{kind: top_k, fraction: 0.01}",
        schema: "CompressorSpec",
        declared: Declared,
        items: COMPRESSORS,
    }
    /// Settings of some registered compressor, their type erased.
    erases CompressorSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn error_feedback(&self) -> bool;
        fn bytes(&self, d: usize) -> u64;
        fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng);
    }
    /// One compressor of the changes a client (or, on the downlink, the server) sends: the item of
    /// [`COMPRESSORS`] its section names, with its settings.
    section CompressorSpec;
}

/// What the catalogue declares of a compressor.
pub struct Declared {
    /// Without error feedback, it never lengthens a change
    /// ([`CompressorSettings::KEEPS_NORM_BOUND`]).
    pub keeps_norm_bound: bool,
}

/// The entry of the compressor whose settings are `S`.
const fn entry<S: CompressorSettings>(kind: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        keeps_norm_bound: S::KEEPS_NORM_BOUND,
    };
    Registration::new::<S>(kind, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl CompressorSpec {
    /// Checks the settings; an error's path is below the compressor's section.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Whether the client keeps what was not sent for its next update.
    pub fn error_feedback(&self) -> bool {
        self.erased().error_feedback()
    }

    /// Whether a compressed change is never longer (L2) than the change itself, so that a
    /// clipped update stays within its bound: a compressor that declares it
    /// ([`CompressorSettings::KEEPS_NORM_BOUND`]), without error feedback.
    pub fn keeps_norm_bound(&self) -> bool {
        self.declared().keeps_norm_bound && !self.error_feedback()
    }

    /// Bytes on the wire for one compressed vector of `d` values.
    pub fn bytes(&self, d: usize) -> u64 {
        self.erased().bytes(d)
    }

    /// Replaces `v` by its compressed form (what the server reconstructs), drawing from `rng`
    /// where the compressor is random. An empty vector stays as it is.
    pub fn compress(&self, v: &mut [f64], rng: &mut ChaCha20Rng) {
        if !v.is_empty() {
            self.erased().compress(v, rng);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compressor_round_trips() {
        crate::settings::catalogue::check_catalogue::<Compressors>(|spec| {
            CompressorSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
