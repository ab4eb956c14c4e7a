//! `alie`: a little is enough (Baruch et al. 2019), μ + z·σ of the round's honest changes.

use super::catalogue::AttackSettings;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `alie` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlieSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub z: Option<f64>,
}

impl AttackSettings for AlieSpec {
    const CRAFTED: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        match self.z {
            Some(z) => super::finite("z", z),
            None => Ok(()),
        }
    }

    fn crafted(&self, honest: &[&[f64]], n: usize, malicious: usize) -> Vec<f64> {
        let h = honest.len() as f64;
        let mean = super::mean_of(honest);
        let z = self.z.unwrap_or_else(|| alie_z(n, malicious));
        (0..mean.len())
            .map(|j| {
                let var = honest.iter().map(|v| (v[j] - mean[j]).powi(2)).sum::<f64>() / h;
                // μ − z·σ of the gradients: changes point against them.
                mean[j] + z * var.sqrt()
            })
            .collect()
    }
}

/// Baruch et al.'s z for `n` updates of which `f` are malicious: Φ⁻¹((n − s)/n),
/// s = ⌊n/2 + 1⌋ − f (the honest clients the attackers need on their side); 0 when no z
/// leaves them enough.
pub fn alie_z(n: usize, f: usize) -> f64 {
    let s = (n / 2 + 1).saturating_sub(f);
    let p = (n - s.min(n)) as f64 / n.max(1) as f64;
    if p <= 0.0 || p >= 1.0 {
        return 0.0;
    }
    inverse_normal_cdf(p)
}

/// Φ⁻¹(p) for p in (0, 1), by Acklam's rational approximation (relative error below
/// 1.15e-9).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}
