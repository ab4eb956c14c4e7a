//! Differential privacy: the mechanisms that clip and noise what clients send, and the
//! accountants that say what the noise spends (ε at δ).
//!
//! Mechanisms and accountants are separate pieces (as in pfl-research): [`accounting`] is
//! arithmetic only and draws nothing; [`central`] clips a client's update and noises the
//! server's sum from the streams its callers pass. Neither knows when a round happens: the
//! actors apply them (a client clips before it uploads, the server noises each aggregation and
//! asks the accountant after each round).

pub mod accounting;
pub mod central;

pub use accounting::{
    calibrate_noise_multiplier, default_orders, CalibrationError, RdpAccountant, Sampling,
    SubsampledGaussian,
};
pub use central::{CentralPrivacy, PrivacySpec};
