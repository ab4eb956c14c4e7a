//! Round policies at run time (the settings are [`crate::settings::PolicySpec`]).

/// (1 + staleness)^(−exponent).
pub fn staleness_factor(staleness: u32, exponent: f64) -> f64 {
    (1.0 + staleness as f64).powf(-exponent)
}
