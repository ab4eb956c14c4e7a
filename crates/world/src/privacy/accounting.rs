//! Rényi-DP accounting of the subsampled Gaussian mechanism: ε(δ) after any number of rounds,
//! and the noise multiplier that spends a target ε.
//!
//! The arithmetic is that of Google's `dp-accounting` (its `RdpAccountant`, version 0.6.0), so
//! that the two agree (the fixture `tests/data/privacy/dp_accounting_rdp.csv`, written by
//! `scripts/dev/make_privacy_fixtures.py`, holds its ε over a grid; the unit test below needs no
//! Python):
//! - **Poisson sampling** (each client joins a round with probability q; neighbouring data sets
//!   add or remove one client): the RDP of Mironov, Talwar and Zhang (2019), exact for integer
//!   orders, their convergent series (Sec. 3.3) for fractional ones.
//! - **Fixed-size sampling** (m of n clients without replacement; neighbours replace one
//!   client): the bound of Wang, Balle and Kasiviswanathan (2019, Theorem 27), interpolated
//!   between integer orders (their Corollary 10).
//! - ε from RDP by the conversion of Balle et al. (2020, Prop. 12), minimised over the orders.
//!
//! This room is pure arithmetic: it draws nothing and knows nothing of rounds or clients.

use libm::{erfc, lgamma};
use std::f64::consts::{LN_2, PI};

/// The RDP orders tracked (`dp-accounting`'s defaults): 1.1, 1.2, …, 10.9, then 11 … 63,
/// 128, 256, 512 and 1024.
pub fn default_orders() -> Vec<f64> {
    let fractional = (1..100).map(|x| 1.0 + x as f64 / 10.0);
    let integer = (11..64).chain([128, 256, 512, 1024]).map(|a| a as f64);
    fractional.chain(integer).collect()
}

/// How the clients of one step (a round) are drawn, as the accountant models it (the
/// scenario's own selection is [`crate::sampling::Sampling`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Subsampling {
    /// Each client independently with probability `rate` (add-or-remove-one neighbours).
    Poisson { rate: f64 },
    /// `sample` of `population` clients without replacement (replace-one neighbours).
    FixedSize { sample: u64, population: u64 },
}

impl Subsampling {
    /// The fraction of the clients a step reaches (in expectation, for Poisson sampling).
    pub fn rate(&self) -> f64 {
        match *self {
            Subsampling::Poisson { rate } => rate,
            Subsampling::FixedSize { sample, population } => sample as f64 / population as f64,
        }
    }
}

/// One step of the subsampled Gaussian mechanism: the clients of a step drawn by `sampling`,
/// their clipped contributions summed, and Gaussian noise of standard deviation
/// `noise_multiplier` × the clipping norm added to the sum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubsampledGaussian {
    pub sampling: Subsampling,
    pub noise_multiplier: f64,
}

impl SubsampledGaussian {
    /// The RDP of one step at each order (∞ where the series for a fractional order does not
    /// converge; that order then never gives the ε).
    pub fn rdp(&self, orders: &[f64]) -> Vec<f64> {
        let (q, sigma) = (self.sampling.rate(), self.noise_multiplier);
        orders
            .iter()
            .map(|&alpha| {
                if q == 0.0 {
                    0.0
                } else if alpha.is_infinite() || sigma == 0.0 {
                    f64::INFINITY
                } else if q == 1.0 {
                    alpha / (2.0 * sigma * sigma)
                } else {
                    match self.sampling {
                        Subsampling::Poisson { .. } => {
                            poisson_log_a(q, sigma, alpha) / (alpha - 1.0)
                        }
                        Subsampling::FixedSize { .. } => fixed_size_rdp(q, sigma, alpha),
                    }
                }
            })
            .collect()
    }
}

/// The privacy spent so far: the RDP of the steps composed, at each order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RdpAccountant {
    orders: Vec<f64>,
    rdp: Vec<f64>,
}

impl Default for RdpAccountant {
    fn default() -> Self {
        Self::new(default_orders())
    }
}

impl RdpAccountant {
    /// Nothing spent yet, tracking the given orders (each > 1).
    pub fn new(orders: Vec<f64>) -> Self {
        let rdp = vec![0.0; orders.len()];
        Self { orders, rdp }
    }

    /// Adds `steps` steps of `mechanism`.
    pub fn compose(&mut self, mechanism: &SubsampledGaussian, steps: u64) {
        self.compose_rdp(&mechanism.rdp(&self.orders), steps);
    }

    /// Adds `steps` steps of a mechanism whose one-step RDP at each order is `rdp` (from
    /// [`SubsampledGaussian::rdp`] with this accountant's orders): what a run calls each round
    /// without recomputing the series.
    pub fn compose_rdp(&mut self, rdp: &[f64], steps: u64) {
        assert_eq!(rdp.len(), self.orders.len(), "one RDP value per order");
        for (total, &r) in self.rdp.iter_mut().zip(rdp) {
            *total += steps as f64 * r;
        }
    }

    /// The orders tracked.
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }

    /// The smallest ε for which the steps so far are (ε, δ)-DP, and the order that gives it.
    pub fn epsilon(&self, delta: f64) -> (f64, f64) {
        assert!(delta > 0.0 && delta < 1.0, "δ in (0, 1), not {delta}");
        let mut best = (f64::INFINITY, self.orders[0]);
        for (&a, &r) in self.orders.iter().zip(&self.rdp) {
            let eps = if r < 0.0 || delta * delta + (-r).exp_m1() > 0.0 {
                // Negative RDP (numerically extreme) or within the KL bound δ ≥ √(1 − e^(−r)).
                0.0
            } else if a > 1.01 {
                r + (-1.0 / a).ln_1p() - (delta * a).ln() / (a - 1.0)
            } else {
                f64::INFINITY
            };
            if eps < best.0 {
                best = (eps, a);
            }
        }
        (best.0.max(0.0), best.1)
    }
}

/// ε at `delta` of `steps` steps of the subsampled Gaussian with `noise_multiplier`, drawn by
/// `sampling`, at the default orders.
pub fn epsilon(sampling: Subsampling, noise_multiplier: f64, steps: u64, delta: f64) -> f64 {
    let mut accountant = RdpAccountant::default();
    let mechanism = SubsampledGaussian {
        sampling,
        noise_multiplier,
    };
    accountant.compose(&mechanism, steps);
    accountant.epsilon(delta).0
}

/// Why no noise multiplier spends the target ε.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    #[error("target ε must be a positive number, not {0}")]
    Epsilon(f64),
    #[error("δ must lie in (0, 1), not {0}")]
    Delta(f64),
    #[error(
        "no noise multiplier spends ε = {target}: the least ε one can be calibrated to here is \
         {smallest:.4} (σ = {sigma:.4e}){beyond}; ask for at least that, or give \
         `noise_multiplier` instead"
    )]
    Unreachable {
        target: f64,
        /// The smallest ε above the target that a noise multiplier spends.
        smallest: f64,
        /// The noise multiplier that spends it.
        sigma: f64,
        /// What happens past it, in words (where ε drops at once to less than the target).
        beyond: String,
    },
}

/// A noise multiplier solved for a target ε ([`calibrate`]), and the ε it spends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibrated {
    pub sigma: f64,
    pub epsilon: f64,
}

impl Calibrated {
    /// What to tell a user who asked for `target` and gets less spent (the smallest noise
    /// multiplier tried, [`SMALLEST_SIGMA`], spends less than 99 % of it), `None` otherwise.
    pub fn shortfall(&self, target: f64) -> Option<String> {
        (self.epsilon < 0.99 * target).then(|| {
            format!(
                "target_epsilon {target} is more than any noise multiplier fedsim calibrates \
                 to spends: the smallest, σ = {}, spends ε = {:.4}; give `noise_multiplier` \
                 for less noise",
                self.sigma, self.epsilon
            )
        })
    }
}

/// The smallest noise multiplier [`calibrate`] tries.
pub const SMALLEST_SIGMA: f64 = 1e-3;
/// The largest noise multiplier [`calibrate`] tries.
pub const LARGEST_SIGMA: f64 = 1e6;
/// The most halvings of the bracket [`calibrate`] makes: past this many, its ends are adjacent
/// floating-point numbers.
const MOST_HALVINGS: usize = 2000;

/// The largest noise multiplier σ, to 1 % of ε, whose `steps` steps of `sampling` spend at
/// most `target_epsilon` at `delta` by RDP (see [`calibrate`]).
pub fn calibrate_noise_multiplier(
    sampling: Subsampling,
    steps: u64,
    target_epsilon: f64,
    delta: f64,
) -> Result<Calibrated, CalibrationError> {
    if !(delta > 0.0 && delta < 1.0) {
        return Err(CalibrationError::Delta(delta));
    }
    calibrate(
        |sigma| epsilon(sampling, sigma, steps, delta),
        target_epsilon,
    )
}

/// The largest noise multiplier σ, to 1 % of ε, with `epsilon_of(σ)` at most `target_epsilon`
/// (ε falling as σ grows, whichever accountant gives it): ε(σ) lies in [0.99 · target, target],
/// or σ is the smallest tried ([`SMALLEST_SIGMA`]) when even that spends less ([`Calibrated::
/// shortfall`] says so). It always ends: ε is not continuous everywhere (an accountant's ε
/// drops to 0 once the RDP is within δ², and it floors where its largest order does), so a
/// target that no σ up to [`LARGEST_SIGMA`] meets, or that falls in such a drop, is refused
/// with the least ε above it that a σ spends.
pub fn calibrate(
    epsilon_of: impl Fn(f64) -> f64,
    target_epsilon: f64,
) -> Result<Calibrated, CalibrationError> {
    if !(target_epsilon > 0.0 && target_epsilon.is_finite()) {
        return Err(CalibrationError::Epsilon(target_epsilon));
    }
    let epsilon = epsilon_of;
    // ε falls as σ grows: bracket the target between `low` (spends more) and `high` (spends
    // at most the target), then halve the bracket.
    let mut high = 1.0;
    let mut spent = epsilon(high);
    // The least ε above the target seen, with its σ (for the refusal).
    let mut least = (f64::INFINITY, high);
    while spent.is_nan() || spent > target_epsilon {
        if spent < least.0 {
            least = (spent, high);
        }
        if high >= LARGEST_SIGMA {
            return Err(CalibrationError::Unreachable {
                target: target_epsilon,
                smallest: least.0,
                sigma: least.1,
                beyond: format!(" and no σ up to {LARGEST_SIGMA:e} spends less"),
            });
        }
        high *= 2.0;
        spent = epsilon(high);
    }
    let mut low = high / 2.0;
    let mut at_low = epsilon(low);
    while at_low <= target_epsilon {
        if low <= SMALLEST_SIGMA {
            return Ok(Calibrated {
                sigma: low,
                epsilon: at_low,
            });
        }
        (high, spent) = (low, at_low);
        low /= 2.0;
        at_low = epsilon(low);
    }
    for _ in 0..MOST_HALVINGS {
        if spent >= 0.99 * target_epsilon {
            return Ok(Calibrated {
                sigma: high,
                epsilon: spent,
            });
        }
        let mid = 0.5 * (low + high);
        if mid <= low || mid >= high {
            break;
        }
        let at_mid = epsilon(mid);
        if at_mid.is_nan() || at_mid > target_epsilon {
            (low, at_low) = (mid, at_mid);
        } else {
            (high, spent) = (mid, at_mid);
        }
    }
    // The bracket closed on a drop: ε jumps from above the target to below 99 % of it.
    Err(CalibrationError::Unreachable {
        target: target_epsilon,
        smallest: at_low,
        sigma: low,
        beyond: format!(", and a larger σ spends {spent:.4} at once"),
    })
}

/// log(e^x + e^y).
pub(super) fn log_add(x: f64, y: f64) -> f64 {
    let (a, b) = (x.min(y), x.max(y));
    if a == f64::NEG_INFINITY {
        return b;
    }
    (a - b).exp().ln_1p() + b
}

/// log|e^x − e^y| and whether e^x ≥ e^y.
fn log_sub_sign(x: f64, y: f64) -> (bool, f64) {
    if x > y {
        (true, x + (-(y - x).exp()).ln_1p())
    } else if x < y {
        (false, y + (-(x - y).exp()).ln_1p())
    } else {
        (true, f64::NEG_INFINITY)
    }
}

/// log |binomial(n, k)| for real n and k.
fn log_comb(n: f64, k: f64) -> f64 {
    lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0)
}

/// log erfc(x), accurate in the far tail where erfc underflows.
pub(super) fn log_erfc(x: f64) -> f64 {
    if x < 25.0 {
        erfc(x).ln()
    } else {
        // erfc(x) ~ exp(−x² − 0.5/x² + 0.625/x⁴ − …)/(x √π), the series at infinity.
        -PI.ln() / 2.0 - x.ln() - x * x - 0.5 * x.powi(-2) + 0.625 * x.powi(-4)
            - 37.0 / 24.0 * x.powi(-6)
            + 353.0 / 64.0 * x.powi(-8)
    }
}

/// log A_α of the Poisson-subsampled Gaussian (0 < q < 1).
fn poisson_log_a(q: f64, sigma: f64, alpha: f64) -> f64 {
    if alpha.fract() == 0.0 {
        poisson_log_a_integer(q, sigma, alpha as u64)
    } else {
        poisson_log_a_fractional(q, sigma, alpha)
    }
}

fn poisson_log_a_integer(q: f64, sigma: f64, alpha: u64) -> f64 {
    let log1mq = (-q).ln_1p();
    let mut log_a = f64::NEG_INFINITY;
    for i in 0..=alpha {
        let i = i as f64;
        let log_coef = log_comb(alpha as f64, i) + i * q.ln() + (alpha as f64 - i) * log1mq;
        log_a = log_add(log_a, log_coef + (i * i - i) / (2.0 * sigma * sigma));
    }
    log_a
}

/// The two-sided series of Mironov et al. (2019, Sec. 3.3); ∞ when 1 000 terms do not settle.
fn poisson_log_a_fractional(q: f64, sigma: f64, alpha: f64) -> f64 {
    let (mut log_a0, mut log_a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let log1mq = (-q).ln_1p();
    let (mut last_s0, mut last_s1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..1000 {
        let i = i as f64;
        let log_coef = log_comb(alpha, i);
        let j = alpha - i;
        let log_t0 = log_coef + i * q.ln() + j * log1mq;
        let log_t1 = log_coef + j * q.ln() + i * log1mq;
        let log_e0 = 0.5f64.ln() + log_erfc((i - z0) / (2f64.sqrt() * sigma));
        let log_e1 = 0.5f64.ln() + log_erfc((z0 - j) / (2f64.sqrt() * sigma));
        let log_s0 = log_t0 + (i * i - i) / (2.0 * sigma * sigma) + log_e0;
        let log_s1 = log_t1 + (j * j - j) / (2.0 * sigma * sigma) + log_e1;
        log_a0 = log_add(log_a0, log_s0);
        log_a1 = log_add(log_a1, log_s1);
        let total = log_add(log_a0, log_a1);
        if log_s0 < last_s0 && log_s1 < last_s1 && log_s0.max(log_s1) < total - 30.0 {
            return total;
        }
        (last_s0, last_s1) = (log_s0, log_s1);
    }
    f64::INFINITY
}

/// RDP at order α of the Gaussian subsampled without replacement (0 < q < 1).
fn fixed_size_rdp(q: f64, sigma: f64, alpha: f64) -> f64 {
    if alpha.fract() == 0.0 {
        fixed_size_log_a(q, sigma, alpha as u64) / (alpha - 1.0)
    } else {
        let (floor, ceil) = (alpha.floor(), alpha.ceil());
        let x = fixed_size_log_a(q, sigma, floor as u64);
        let y = fixed_size_log_a(q, sigma, ceil as u64);
        let t = alpha - floor;
        ((1.0 - t) * x + t * y) / (alpha - 1.0)
    }
}

/// Wang et al.'s Theorem 27 bound on (α − 1)·RDP(α), exact up to α = 256, beyond with the
/// simpler term bound (their Stirling branch).
fn fixed_size_log_a(q: f64, sigma: f64, alpha: u64) -> f64 {
    if alpha == 1 {
        return 0.0;
    }
    let cgf = |x: f64| x * (x + 1.0) / (2.0 * sigma * sigma);
    let gaussian_rdp = |x: f64| x / (2.0 * sigma * sigma);
    let log_f2m1 = gaussian_rdp(2.0) + (-(-gaussian_rdp(2.0)).exp()).ln_1p();
    let term_two = 2.0 * q.ln()
        + log_comb(alpha as f64, 2.0)
        + (4f64.ln() + log_f2m1).min(gaussian_rdp(2.0) + LN_2);
    let exact = alpha <= 256;
    let deltas = if exact {
        forward_differences(cgf, alpha as usize)
    } else {
        Vec::new()
    };
    let mut log_a = 0.0;
    for i in 2..=alpha {
        let s = if i == 2 {
            term_two
        } else {
            let bound = LN_2 + cgf((i - 1) as f64);
            let s = if exact {
                let lo = deltas[(2 * (i / 2)) as usize - 1];
                let hi = deltas[(2 * i.div_ceil(2)) as usize - 1];
                (4f64.ln() + 0.5 * (lo + hi)).min(bound)
            } else {
                bound
            };
            s + i as f64 * q.ln() + log_comb(alpha as f64, i as f64)
        };
        log_a = log_add(log_a, s);
    }
    log_a
}

/// log |Δ^(k+1) a|(0) for k = 0 … n + 1, the forward differences at 0 of the sequence
/// a = (1, e^f(0), e^f(1), …, e^f(n+1)): a_j = e^f(j−1) for the CGF f, whose f(−1) is 0 (signs
/// kept only while differencing).
fn forward_differences(f: impl Fn(f64) -> f64, n: usize) -> Vec<f64> {
    let mut values = vec![0.0; n + 3];
    let mut signs = vec![true; n + 3];
    for (i, v) in values.iter_mut().enumerate().skip(1) {
        *v = f((i - 1) as f64);
    }
    let mut deltas = vec![0.0; n + 2];
    for (i, delta) in deltas.iter_mut().enumerate() {
        // One more difference of the first n + 2 − i entries, in log space.
        for j in 0..n + 2 - i {
            if signs[j] == signs[j + 1] {
                let (sign, magnitude) = log_sub_sign(values[j + 1], values[j]);
                values[j] = magnitude;
                signs[j] = if signs[j + 1] { sign } else { !sign };
            } else {
                values[j] = log_add(values[j], values[j + 1]);
                signs[j] = signs[j + 1];
            }
        }
        *delta = values[0];
    }
    deltas
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dp-accounting's ε over the grid of the fixture (q, σ, steps, δ, both samplings). The
    /// issue asks for 1 %; the same arithmetic gives the same order and ε to 1e-9 (the largest
    /// gap seen is 2.5e-11, from lgamma and erfc of libm against scipy's).
    #[test]
    fn epsilon_matches_dp_accounting_within_one_percent() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/privacy/dp_accounting_rdp.csv"
        );
        let text = std::fs::read_to_string(path).expect("the fixture");
        let mut rows = 0;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let num = |i: usize| f[i].parse::<f64>().expect("a number");
            let (q, sigma, steps, delta, expected) =
                (num(1), num(2), num(3) as u64, num(4), num(5));
            let sampling = match f[0] {
                "poisson" => Subsampling::Poisson { rate: q },
                "fixed_size" => Subsampling::FixedSize {
                    sample: (q * 10_000.0).round() as u64,
                    population: 10_000,
                },
                other => panic!("unknown sampling {other}"),
            };
            let mut accountant = RdpAccountant::default();
            accountant.compose(
                &SubsampledGaussian {
                    sampling,
                    noise_multiplier: sigma,
                },
                steps,
            );
            let (eps, order) = accountant.epsilon(delta);
            let error = (eps - expected).abs() / expected;
            assert!(
                error <= 1e-9,
                "{line}: fedsim ε = {eps}, relative error {error:e}"
            );
            assert_eq!(order, num(6), "{line}: the order that gives ε");
            rows += 1;
        }
        assert_eq!(rows, 192, "the whole grid");
    }

    /// Without subsampling, one step of σ = 1 is the Gaussian mechanism: RDP α/(2σ²) at every
    /// order, so ε(δ) = min over α of α/2 + log(1 − 1/α) − log(δα)/(α − 1), by hand at α = 5
    /// for δ = 1e-5 being the grid's best: 2.5 + ln 0.8 + ln(2e4)/4 = 4.7528…
    #[test]
    fn unsampled_gaussian_by_hand() {
        let mut accountant = RdpAccountant::new(vec![4.0, 5.0, 6.0]);
        let mechanism = SubsampledGaussian {
            sampling: Subsampling::Poisson { rate: 1.0 },
            noise_multiplier: 1.0,
        };
        assert_eq!(mechanism.rdp(&[5.0]), vec![2.5]);
        accountant.compose(&mechanism, 1);
        let at = |a: f64| a / 2.0 + (1.0 - 1.0 / a).ln() - (1e-5 * a).ln() / (a - 1.0);
        assert!(at(5.0) < at(4.0) && at(5.0) < at(6.0));
        let (eps, order) = accountant.epsilon(1e-5);
        assert_eq!(order, 5.0);
        assert!(
            (eps - at(5.0)).abs() < 1e-12 && (eps - 4.7528).abs() < 1e-4,
            "{eps}"
        );
        // Two steps spend twice the RDP.
        accountant.compose(&mechanism, 1);
        assert_eq!(accountant.rdp, vec![4.0, 5.0, 6.0]);
    }

    #[test]
    fn no_noise_or_no_sampling_are_the_limits() {
        let orders = default_orders();
        let poisson = |rate, sigma| SubsampledGaussian {
            sampling: Subsampling::Poisson { rate },
            noise_multiplier: sigma,
        };
        assert!(poisson(0.1, 0.0)
            .rdp(&orders)
            .iter()
            .all(|r| r.is_infinite()));
        assert!(poisson(0.0, 1.0).rdp(&orders).iter().all(|&r| r == 0.0));
        let mut accountant = RdpAccountant::default();
        accountant.compose(&poisson(0.0, 1.0), 1000);
        assert_eq!(accountant.epsilon(1e-5).0, 0.0);
    }

    #[test]
    fn default_orders_are_dp_accountings() {
        let orders = default_orders();
        assert_eq!(orders.len(), 99 + 53 + 4);
        assert_eq!((orders[0], orders[9], orders[98]), (1.1, 2.0, 10.9));
        assert_eq!(&orders[99..101], &[11.0, 12.0]);
        assert_eq!(orders.last(), Some(&1024.0));
    }

    #[test]
    fn calibration_spends_the_target_within_one_percent_never_more() {
        for (sampling, steps) in [
            (Subsampling::Poisson { rate: 0.01 }, 1000),
            (
                Subsampling::FixedSize {
                    sample: 100,
                    population: 1000,
                },
                200,
            ),
            (Subsampling::Poisson { rate: 1.0 }, 10),
        ] {
            for target in [1.0, 4.0, 8.0] {
                let solved = calibrate_noise_multiplier(sampling, steps, target, 1e-5).unwrap();
                let eps = epsilon(sampling, solved.sigma, steps, 1e-5);
                assert_eq!(eps, solved.epsilon);
                assert!(
                    eps <= target && eps >= 0.99 * target,
                    "{sampling:?} {target}: {eps}"
                );
                assert_eq!(solved.shortfall(target), None);
            }
        }
        assert_eq!(
            calibrate_noise_multiplier(Subsampling::Poisson { rate: 0.1 }, 10, 0.0, 1e-5),
            Err(CalibrationError::Epsilon(0.0))
        );
        assert_eq!(
            calibrate_noise_multiplier(Subsampling::Poisson { rate: 0.1 }, 10, 1.0, 1.0),
            Err(CalibrationError::Delta(1.0))
        );
    }

    /// ε by hand as a function of σ with a drop, and one that floors: the calibration ends,
    /// refusing a target in the drop or below the floor with the least ε above it.
    #[test]
    fn calibration_ends_on_a_drop_or_a_floor_and_says_what_is_reachable() {
        // ε = 1/σ down to 0.05 at σ = 20, then 0 from σ = 40 on (the KL bound's drop).
        let dropping = |sigma: f64| {
            if sigma >= 40.0 {
                0.0
            } else {
                (1.0 / sigma).max(0.05)
            }
        };
        let e = calibrate(dropping, 0.01).unwrap_err();
        let CalibrationError::Unreachable {
            smallest, sigma, ..
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(*smallest, 0.05, "the floor above the drop");
        assert!((20.0..40.0).contains(sigma), "{sigma}");
        assert!(
            e.to_string().contains("a larger σ spends 0.0000 at once"),
            "{e}"
        );
        // Above the floor, the target is met within 1 %.
        let met = calibrate(dropping, 0.2).unwrap();
        assert!(met.epsilon <= 0.2 && met.epsilon >= 0.198, "{met:?}");
        // ε that never falls below 0.5: refused after σ = 1e6, with 0.5 named.
        let e = calibrate(|s| 0.5 + 1.0 / s, 0.1).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "no noise multiplier spends ε = 0.1: the least ε one can be calibrated to here \
                 is 0.5000"
            ),
            "{e}"
        );
        // A target above what the least noise spends: σ stops at the smallest, and says so.
        let loose = calibrate(|s| 1.0 / s, 1e9).unwrap();
        assert!(
            loose.sigma <= SMALLEST_SIGMA && loose.epsilon < 1e4,
            "{loose:?}"
        );
        let note = loose.shortfall(1e9).unwrap();
        assert!(
            note.contains("give `noise_multiplier` for less noise"),
            "{note}"
        );
        // Real accountants: K of N, and Poisson at q = 1e-9, end with a refusal.
        let fixed = Subsampling::FixedSize {
            sample: 10,
            population: 100,
        };
        let e = calibrate_noise_multiplier(fixed, 10, 0.01, 1e-5).unwrap_err();
        assert!(matches!(e, CalibrationError::Unreachable { smallest, .. } if smallest > 0.01));
        let rare = Subsampling::Poisson { rate: 1e-9 };
        let e = calibrate_noise_multiplier(rare, 10, 0.01, 1e-5).unwrap_err();
        assert!(matches!(e, CalibrationError::Unreachable { .. }), "{e}");
    }

    #[test]
    fn forward_differences_of_a_line_by_hand() {
        // a = (1, 2, 4, 8, 16) for f(x) = (x + 1)·ln 2: every difference of 2^j is 2^j, so
        // Δ¹a(0) = 2 − 1 = 1, Δ²a(0) = 4 − 4 + 1 = 1, Δ³a(0) = 8 − 12 + 6 − 1 = 1, …
        let deltas = forward_differences(|x| (x + 1.0) * LN_2, 3);
        assert_eq!(deltas.len(), 5);
        for d in deltas {
            assert!(d.abs() < 1e-12, "log 1 = 0, got {d}");
        }
    }
}
