//! Differential privacy: the mechanisms that clip and noise what clients send, and the
//! accountants that say what the noise spends (ε at δ).
//!
//! Mechanisms and accountants are separate pieces (as in pfl-research): [`accounting`] is
//! arithmetic only and draws nothing; [`client_level`] clips a client's update and noises the
//! server's sum or the update itself, from the streams its callers pass; [`sample_level`]
//! accounts DP-SGD, which local training itself runs ([`crate::models::DpSgd`]). Neither knows when a
//! round happens: the actors apply them (a client clips, and under the local mechanism noises,
//! before it uploads; the server noises each aggregation under the central one, moves an
//! adaptive bound, and asks the accountant after each round).

pub mod accounting;
pub mod client_level;
pub mod pld;
pub mod sample_level;
pub mod tree;

pub use accounting::{
    calibrate, calibrate_noise_multiplier, default_orders, epsilon, Calibrated, CalibrationError,
    RdpAccountant, SubsampledGaussian, Subsampling, SMALLEST_SIGMA,
};
pub use client_level::{
    Accountant, AdaptiveClipSpec, AdaptiveClipping, ClientLevelPrivacy, Mechanism, Neighbours,
    NoiseAt, Participation, PrivacySpec, ShareAccountant,
};
pub use pld::{pld_epsilon, PldAccountant, MOST_GRID_POINTS};
pub use sample_level::{RecordAccountant, SampleLevelPrivacy};
pub use tree::TreeAccountant;
