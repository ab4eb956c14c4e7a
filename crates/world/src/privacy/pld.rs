//! Privacy-loss-distribution (PLD) accounting of the Poisson-subsampled Gaussian mechanism:
//! ε(δ) after any number of steps, tighter than Rényi DP ([`super::accounting`]) because the
//! composition is that of the privacy loss itself, not of a bound on its moments.
//!
//! The arithmetic is that of Google's `dp-accounting` (its `PLDAccountant`, version 0.6.0, at
//! its defaults), so that the two agree (the fixture `tests/data/privacy/dp_accounting_pld.csv`,
//! written by `scripts/dev/make_privacy_fixtures.py`; the unit test below needs no Python):
//! - One step, sensitivity 1 and noise N(0, σ²), neighbours adding or removing one member: the
//!   "remove" pair ((1 − q)·μ(x) + q·μ(x + 1), μ(x)) and the "add" pair (μ(x), (1 − q)·μ(x) +
//!   q·μ(x − 1)), each discretised by the pessimistic *connect-the-dots* algorithm (Doroshenko
//!   et al. 2022) on a grid of losses 1e-4 apart, the noise's tails beyond mass e^(−50) left out
//!   (pessimistically).
//! - k steps: the grid's distribution convolved with itself k times through one FFT raised to
//!   the k-th power, its tails beyond mass 1e-15 (found by a Chernoff bound) counted as an
//!   infinite loss. The FFT is ours (radix 2, in f64, twiddles from `libm`), so the figures do
//!   not depend on the machine's vector units.
//! - ε(δ): the smallest ε whose hockey-stick divergence is at most δ, the larger of the two
//!   pairs'.
//! - Without sampling (q = 1) the k steps are one Gaussian mechanism of multiplier σ/√k, whose
//!   δ(ε) is known exactly (Balle and Wang 2018): ε is solved for on that, with no grid.
//!
//! This room is pure arithmetic: it draws nothing and knows nothing of rounds or clients.

use super::accounting::{log_add, log_erfc};
use std::f64::consts::SQRT_2;

/// The most points a composed grid may take ([`PldAccountant::grid_points`]): 2²⁴, 256 MiB of
/// complex values and a few seconds an ε. A run whose rounds need more is refused (the RDP
/// accountant's cost does not grow with the rounds).
pub const MOST_GRID_POINTS: u64 = 1 << 24;

/// The grid's spacing, in units of privacy loss (dp-accounting's default).
const SPACING: f64 = 1e-4;
/// ln of the noise's mass left out of the one-step distribution (dp-accounting's default).
const LOG_TAIL_MASS: f64 = -50.0;
/// The mass a composition may move from its tails to an infinite loss.
const COMPOSED_TAIL_MASS: f64 = 1e-15;

/// ε at `delta` of `steps` steps of the Gaussian mechanism of multiplier `noise_multiplier`
/// (noise σ × the sensitivity) on a Poisson sample at `rate` (add-or-remove-one neighbours; at
/// rate 1, any neighbours whose sum moves by at most the sensitivity). ∞ without noise.
pub fn pld_epsilon(rate: f64, noise_multiplier: f64, steps: u64, delta: f64) -> f64 {
    PldAccountant::new(rate, noise_multiplier).epsilon(steps, delta)
}

/// One step of the Poisson-subsampled Gaussian, discretised once, ready to be composed any
/// number of times.
#[derive(Clone, Debug, PartialEq)]
pub struct PldAccountant {
    step: Step,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// Rate 0: nothing is released.
    Nothing,
    /// σ = 0: ε is infinite.
    NoNoise,
    /// Rate 1: the Gaussian mechanism of this multiplier, composed exactly.
    Gaussian(f64),
    /// The "remove" and "add" pairs on the grid, each with its [`Pmf::log_mgfs`].
    Sampled {
        remove: (Pmf, Vec<(f64, f64)>),
        add: (Pmf, Vec<(f64, f64)>),
    },
}

impl PldAccountant {
    /// One step at Poisson rate `rate` ∈ [0, 1] with noise multiplier `noise_multiplier` ≥ 0.
    pub fn new(rate: f64, noise_multiplier: f64) -> Self {
        assert!((0.0..=1.0).contains(&rate), "a rate in [0, 1], not {rate}");
        assert!(noise_multiplier >= 0.0, "σ ≥ 0, not {noise_multiplier}");
        let step = if rate == 0.0 {
            Step::Nothing
        } else if noise_multiplier == 0.0 {
            Step::NoNoise
        } else if rate == 1.0 {
            Step::Gaussian(noise_multiplier)
        } else {
            let pair = |pair| {
                let pmf = SampledGaussianLoss {
                    sigma: noise_multiplier,
                    rate,
                    pair,
                }
                .discretised();
                let log_mgfs = pmf.log_mgfs();
                (pmf, log_mgfs)
            };
            Step::Sampled {
                remove: pair(Pair::Remove),
                add: pair(Pair::Add),
            }
        };
        Self { step }
    }

    /// The points of the grid composing `steps` steps takes (the FFT's length, each point two
    /// f64 values): it grows with the steps, fast at small σ and large q (0 without a grid).
    pub fn grid_points(&self, steps: u64) -> u64 {
        match &self.step {
            Step::Sampled { remove, add } if steps > 1 => [remove, add]
                .iter()
                .map(|(pmf, log_mgfs)| {
                    let (low, high) = pmf.chernoff_bounds(steps, log_mgfs);
                    let out_len = (high - low + 1).max(1) as u64;
                    out_len
                        .max(pmf.probs.len() as u64)
                        .checked_next_power_of_two()
                        .unwrap_or(u64::MAX)
                })
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// ε at `delta` after `steps` steps.
    pub fn epsilon(&self, steps: u64, delta: f64) -> f64 {
        self.epsilons(steps, &[delta])[0]
    }

    /// ε at each of `deltas` after `steps` steps (composing once).
    fn epsilons(&self, steps: u64, deltas: &[f64]) -> Vec<f64> {
        for delta in deltas {
            assert!(*delta > 0.0 && *delta < 1.0, "δ in (0, 1), not {delta}");
        }
        if steps == 0 {
            return vec![0.0; deltas.len()];
        }
        match &self.step {
            Step::Nothing => vec![0.0; deltas.len()],
            Step::NoNoise => vec![f64::INFINITY; deltas.len()],
            Step::Gaussian(sigma) => (deltas.iter())
                .map(|&delta| gaussian_epsilon(sigma / (steps as f64).sqrt(), delta))
                .collect(),
            Step::Sampled { remove, add } => {
                let remove = remove.0.self_compose_with(steps, &remove.1);
                let add = add.0.self_compose_with(steps, &add.1);
                (deltas.iter())
                    .map(|&delta| remove.epsilon(delta).max(add.epsilon(delta)))
                    .collect()
            }
        }
    }
}

/// Which of the two neighbouring pairs of a Poisson sample a distribution describes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pair {
    /// The data set with the member against the one without: ((1 − q)μ + qμ(· + 1), μ).
    Remove,
    /// The data set without the member against the one with: (μ, (1 − q)μ + qμ(· − 1)).
    Add,
}

/// ln Φ(z), Φ the standard normal CDF (accurate far into the lower tail).
fn log_normal_cdf(z: f64) -> f64 {
    0.5f64.ln() + log_erfc(-z / SQRT_2)
}

fn normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / SQRT_2)
}

/// The z with ln Φ(z) = `log_p`, by bisection (`log_p` < ln ½).
fn normal_quantile_of_log(log_p: f64) -> f64 {
    let (mut low, mut high) = (-60.0f64, 0.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if log_normal_cdf(mid) < log_p {
            low = mid;
        } else {
            high = mid;
        }
    }
    0.5 * (low + high)
}

/// The privacy loss of one step at outcome x, decreasing in x (sensitivity 1).
#[derive(Clone, Copy, Debug)]
struct SampledGaussianLoss {
    sigma: f64,
    rate: f64,
    pair: Pair,
}

impl SampledGaussianLoss {
    /// The loss of the unsampled "remove" pair, (−½ − x)/σ².
    fn unsampled(&self, x: f64) -> f64 {
        (-0.5 - x) / (self.sigma * self.sigma)
    }

    /// x at which the unsampled "remove" loss is `loss`.
    fn unsampled_inverse(&self, loss: f64) -> f64 {
        -0.5 - loss * self.sigma * self.sigma
    }

    fn loss(&self, x: f64) -> f64 {
        let q = self.rate;
        // ln(q·e^l + 1 − q), the loss of the sampled "remove" pair.
        let remove = |l: f64| log_add(q.ln() + l, (-q).ln_1p());
        match self.pair {
            Pair::Remove => remove(self.unsampled(x)),
            Pair::Add => -remove(self.unsampled(-x)),
        }
    }

    /// The largest x whose loss is at least `loss`.
    fn inverse(&self, loss: f64) -> f64 {
        let q = self.rate;
        // l with ln(q·e^l + 1 − q) = `loss`: ln(e^loss/q + 1 − 1/q).
        let unsampled = |loss: f64| {
            let (a, c) = (1.0 / q, 1.0 - 1.0 / q);
            // a·e^loss + c with c < 0: ln(a·e^loss − |c|) = ln a + loss + ln(1 − |c|·e^−loss/a).
            let d = a.ln() + loss;
            d + (-((-c).ln() - d).exp()).ln_1p()
        };
        match self.pair {
            Pair::Remove => self.unsampled_inverse(unsampled(loss)),
            Pair::Add => 1.0 + self.unsampled_inverse(-unsampled(-loss)),
        }
    }

    /// The CDF of the upper distribution (the one outcomes are drawn from).
    fn upper_cdf(&self, x: f64) -> f64 {
        let (q, s) = (self.rate, self.sigma);
        match self.pair {
            Pair::Add => normal_cdf(x / s),
            Pair::Remove => (1.0 - q) * normal_cdf(x / s) + q * normal_cdf((x + 1.0) / s),
        }
    }

    /// ln of the CDF of the lower distribution.
    fn lower_log_cdf(&self, x: f64) -> f64 {
        let (q, s) = (self.rate, self.sigma);
        match self.pair {
            Pair::Remove => log_normal_cdf(x / s),
            Pair::Add => log_add(
                (-q).ln_1p() + log_normal_cdf(x / s),
                q.ln() + log_normal_cdf((x - 1.0) / s),
            ),
        }
    }

    /// The hockey-stick divergence of the pair at `epsilon`: the δ of (ε, δ)-DP.
    fn delta(&self, epsilon: f64) -> f64 {
        let q = self.rate;
        let delta = match self.pair {
            Pair::Add if epsilon >= -(-q).ln_1p() => 0.0,
            Pair::Remove if epsilon <= (-q).ln_1p() => -epsilon.exp_m1(),
            _ => {
                let x = self.inverse(epsilon);
                self.upper_cdf(x) - (epsilon + self.lower_log_cdf(x)).exp()
            }
        };
        delta.clamp(0.0, 1.0)
    }

    /// The one-step distribution on the grid, by pessimistic connect-the-dots.
    fn discretised(&self) -> Pmf {
        let mut lower_x = self.sigma * normal_quantile_of_log(0.5f64.ln() + LOG_TAIL_MASS);
        let mut upper_x = -lower_x;
        match self.pair {
            Pair::Add => upper_x += 1.0,
            Pair::Remove => lower_x -= 1.0,
        }
        let first = (self.loss(upper_x) / SPACING).floor() as i64;
        let last = (self.loss(lower_x) / SPACING).ceil() as i64;
        let mut deltas: Vec<f64> = (first..=last)
            .map(|k| self.delta(k as f64 * SPACING))
            .collect();
        Pmf::connect_the_dots(first, &mut deltas)
    }
}

/// A distribution of privacy losses on the grid: mass `probs[i]` at loss (`first` + i)·spacing,
/// and `infinite` at +∞.
#[derive(Clone, Debug, PartialEq)]
struct Pmf {
    first: i64,
    probs: Vec<f64>,
    infinite: f64,
}

impl Pmf {
    /// The pessimistic connect-the-dots distribution whose hockey-stick divergence at the
    /// grid's losses `first`, `first` + 1, … is `deltas` (made non-increasing first).
    fn connect_the_dots(first: i64, deltas: &mut [f64]) -> Pmf {
        for i in 1..deltas.len() {
            deltas[i] = deltas[i].min(deltas[i - 1]);
        }
        let n = deltas.len();
        let last_delta = deltas[n - 1];
        if n == 1 {
            return Pmf {
                first,
                probs: vec![1.0 - deltas[0]],
                infinite: last_delta,
            };
        }
        let grow = SPACING.exp_m1();
        let diff = |i: usize| deltas[i + 1] - deltas[i];
        let mut probs = vec![0.0; n];
        probs[0] = 1.0 - deltas[0] + diff(0) / grow;
        for (i, p) in probs.iter_mut().enumerate().take(n - 1).skip(1) {
            *p = (diff(i) - diff(i - 1) * SPACING.exp()) / grow;
        }
        probs[n - 1] = diff(n - 2) / (-SPACING).exp_m1();
        for p in &mut probs {
            *p = p.max(0.0);
        }
        Pmf {
            first,
            probs,
            infinite: last_delta,
        }
    }

    /// The distribution of the sum of `times` independent copies, its tails beyond
    /// [`COMPOSED_TAIL_MASS`] moved to +∞.
    #[cfg(test)]
    fn self_compose(&self, times: u64) -> Pmf {
        self.self_compose_with(times, &self.log_mgfs())
    }

    /// [`Pmf::self_compose`] with this distribution's [`Pmf::log_mgfs`] already at hand (they
    /// do not depend on `times`; a run composes one step for every round).
    fn self_compose_with(&self, times: u64, log_mgfs: &[(f64, f64)]) -> Pmf {
        if times == 1 {
            return self.clone();
        }
        let (low, high) = self.chernoff_bounds(times, log_mgfs);
        let out_len = (high - low + 1) as usize;
        let size = out_len.max(self.probs.len()).next_power_of_two();
        let mut re = vec![0.0; size];
        re[..self.probs.len()].copy_from_slice(&self.probs);
        let mut im = vec![0.0; size];
        let fft = Fft::new(size);
        fft.transform(&mut re, &mut im, false);
        for (r, i) in re.iter_mut().zip(im.iter_mut()) {
            (*r, *i) = complex_power(*r, *i, times);
        }
        fft.transform(&mut re, &mut im, true);
        let scale = 1.0 / size as f64;
        let probs = (0..out_len)
            .map(|j| re[(j as i64 + low).rem_euclid(size as i64) as usize] * scale)
            .collect();
        Pmf {
            first: self.first * times as i64 + low,
            probs,
            infinite: COMPOSED_TAIL_MASS - (times as f64 * (-self.infinite).ln_1p()).exp_m1(),
        }
    }

    /// The log moment-generating function of the grid index, ln Σ pᵢ·e^(i·λ), at the 40 orders
    /// λ = ±1 … ±20 over the grid's length that the Chernoff bounds use.
    fn log_mgfs(&self) -> Vec<(f64, f64)> {
        let n = self.probs.len();
        let orders = (-20..0).chain(1..21).map(|k| k as f64 / n as f64);
        orders
            .map(|order| {
                let log_mgf = (self.probs.iter().enumerate())
                    .filter(|(_, &p)| p > 0.0)
                    .map(|(i, &p)| p.ln() + i as f64 * order)
                    .fold(f64::NEG_INFINITY, log_add);
                (order, log_mgf)
            })
            .collect()
    }

    /// Offsets (in grid steps, from `times` × `first`) outside which the sum of `times`
    /// copies has at most [`COMPOSED_TAIL_MASS`], by Chernoff bounds at the orders of
    /// `log_mgfs`.
    fn chernoff_bounds(&self, times: u64, log_mgfs: &[(f64, f64)]) -> (i64, i64) {
        let n = self.probs.len();
        let (mut low, mut high) = (0i64, (n as i64 - 1) * times as i64);
        for &(order, log_mgf) in log_mgfs {
            let bound = (times as f64 * log_mgf + (2.0 / COMPOSED_TAIL_MASS).ln()) / order;
            if !bound.is_finite() {
                continue;
            }
            if order > 0.0 {
                high = high.min(bound.ceil() as i64);
            } else {
                low = low.max(bound.floor() as i64);
            }
        }
        (low, high)
    }

    /// The smallest ε ≥ 0 whose hockey-stick divergence is at most `delta` (∞ if none).
    fn epsilon(&self, delta: f64) -> f64 {
        if self.infinite > delta {
            return f64::INFINITY;
        }
        let (mut upper, mut lower) = (self.infinite, 0.0f64);
        let top = self.first + self.probs.len() as i64 - 1;
        for (i, &p) in self.probs.iter().enumerate().rev() {
            let loss = (top - (self.probs.len() - 1 - i) as i64) as f64 * SPACING;
            if upper > delta && lower > 0.0 && ((upper - delta) / lower).ln() >= loss {
                break;
            }
            upper += p;
            lower += (-loss).exp() * p;
            if upper >= delta && lower == 0.0 {
                return loss.max(0.0);
            }
        }
        if upper <= lower + delta {
            0.0
        } else {
            ((upper - delta) / lower).ln()
        }
    }
}

/// (re + i·im)^n by repeated squaring.
fn complex_power(re: f64, im: f64, mut n: u64) -> (f64, f64) {
    let (mut acc_re, mut acc_im) = (1.0, 0.0);
    let (mut base_re, mut base_im) = (re, im);
    while n > 0 {
        if n & 1 == 1 {
            (acc_re, acc_im) = (
                acc_re * base_re - acc_im * base_im,
                acc_re * base_im + acc_im * base_re,
            );
        }
        (base_re, base_im) = (
            base_re * base_re - base_im * base_im,
            2.0 * base_re * base_im,
        );
        n >>= 1;
    }
    (acc_re, acc_im)
}

/// An in-place radix-2 FFT of one power-of-two size, in f64 and plain arithmetic (no FMA, no
/// vector units), so its results are the same bits on every machine.
struct Fft {
    size: usize,
    cos: Vec<f64>,
    sin: Vec<f64>,
}

impl Fft {
    fn new(size: usize) -> Fft {
        assert!(size.is_power_of_two());
        let half = size / 2;
        let angle = |k: usize| -2.0 * std::f64::consts::PI * k as f64 / size as f64;
        Fft {
            size,
            cos: (0..half).map(|k| libm::cos(angle(k))).collect(),
            sin: (0..half).map(|k| libm::sin(angle(k))).collect(),
        }
    }

    /// The forward transform (Σ x_j e^(−2πijk/n)), or the inverse without the 1/n.
    fn transform(&self, re: &mut [f64], im: &mut [f64], inverse: bool) {
        let n = self.size;
        let bits = n.trailing_zeros();
        if bits == 0 {
            return;
        }
        for i in 0..n {
            let j = i.reverse_bits() >> (usize::BITS - bits);
            if i < j {
                re.swap(i, j);
                im.swap(i, j);
            }
        }
        let sign = if inverse { -1.0 } else { 1.0 };
        let mut len = 2;
        while len <= n {
            let stride = n / len;
            for start in (0..n).step_by(len) {
                for k in 0..len / 2 {
                    let (w_re, w_im) = (self.cos[k * stride], sign * self.sin[k * stride]);
                    let (a, b) = (start + k, start + k + len / 2);
                    let t_re = re[b] * w_re - im[b] * w_im;
                    let t_im = re[b] * w_im + im[b] * w_re;
                    re[b] = re[a] - t_re;
                    im[b] = im[a] - t_im;
                    re[a] += t_re;
                    im[a] += t_im;
                }
            }
            len *= 2;
        }
    }
}

/// ε at `delta` of the Gaussian mechanism of multiplier `sigma` (sensitivity 1): the root of
/// δ(ε) = Φ(−εσ + 1/(2σ)) − e^ε·Φ(−εσ − 1/(2σ)) (Balle and Wang 2018, Theorem 8), by
/// bisection to a relative 1e-12.
pub(super) fn gaussian_epsilon(sigma: f64, delta: f64) -> f64 {
    let delta_at = |eps: f64| {
        let a = normal_cdf(-eps * sigma + 0.5 / sigma);
        a - (eps + log_normal_cdf(-eps * sigma - 0.5 / sigma)).exp()
    };
    if delta_at(0.0) <= delta {
        return 0.0;
    }
    let mut high = 1.0;
    while delta_at(high) > delta {
        high *= 2.0;
    }
    let mut low = 0.0;
    while high - low > 1e-12 * high {
        let mid = 0.5 * (low + high);
        if delta_at(mid) > delta {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dp-accounting's PLD ε over the fixture's grid (Poisson rates 1e-3 … 1, σ 0.5 … 5,
    /// 1 … 10 000 steps, δ 1e-5 and 1e-6), within the 1 %.
    #[test]
    fn epsilon_matches_dp_accountings_pld_within_one_percent() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/privacy/dp_accounting_pld.csv"
        );
        let text = std::fs::read_to_string(path).expect("the fixture");
        // (q, σ, steps) → [(δ, ε)], composing each once for both δ.
        type Cell = ((f64, f64, u64), Vec<(f64, f64)>);
        let mut grid: Vec<Cell> = Vec::new();
        for line in text.lines().skip(1) {
            let f: Vec<f64> = line.split(',').map(|x| x.parse().unwrap()).collect();
            let key = (f[0], f[1], f[2] as u64);
            match grid.last_mut() {
                Some((k, rows)) if *k == key => rows.push((f[3], f[4])),
                _ => grid.push((key, vec![(f[3], f[4])])),
            }
        }
        let mut worst = 0.0f64;
        let mut rows = 0;
        for ((q, sigma, steps), expected) in grid {
            let deltas: Vec<f64> = expected.iter().map(|&(d, _)| d).collect();
            let got = PldAccountant::new(q, sigma).epsilons(steps, &deltas);
            for ((delta, want), eps) in expected.into_iter().zip(got) {
                let error = (eps - want).abs() / want;
                worst = worst.max(error);
                assert!(
                    error <= 0.01,
                    "q {q} σ {sigma} steps {steps} δ {delta}: fedsim ε = {eps}, \
                     dp-accounting {want}, relative error {error:e}"
                );
                rows += 1;
            }
        }
        assert_eq!(rows, 96, "the whole grid");
        // Measured: 6.6e-4 (q = 1, 10 000 steps: the exact Gaussian against the grid's
        // pessimistic rounding); sampled rows within 4e-8.
        assert!(worst < 1e-3, "largest relative gap {worst:e}");
    }

    /// The FFT of (1, 2, 3, 4) by hand: (10, −2 + 2i, −2, −2 − 2i); back again with 1/n.
    #[test]
    fn fft_by_hand() {
        let fft = Fft::new(4);
        let (mut re, mut im) = (vec![1.0, 2.0, 3.0, 4.0], vec![0.0; 4]);
        fft.transform(&mut re, &mut im, false);
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(&re, &[10.0, -2.0, -2.0, -2.0]), "{re:?}");
        assert!(close(&im, &[0.0, 2.0, 0.0, -2.0]), "{im:?}");
        fft.transform(&mut re, &mut im, true);
        let back: Vec<f64> = re.iter().map(|x| x / 4.0).collect();
        assert!(close(&back, &[1.0, 2.0, 3.0, 4.0]), "{back:?}");
    }

    /// Two fair coins of losses {0, 1}·spacing: the sum is {0, 1, 2} with ¼, ½, ¼.
    #[test]
    fn self_composition_of_a_coin_by_hand() {
        let coin = Pmf {
            first: 3,
            probs: vec![0.5, 0.5],
            infinite: 0.0,
        };
        let two = coin.self_compose(2);
        assert_eq!(two.first, 6);
        let expected = [0.25, 0.5, 0.25];
        assert_eq!(two.probs.len(), 3);
        for (p, e) in two.probs.iter().zip(expected) {
            assert!((p - e).abs() < 1e-15, "{:?}", two.probs);
        }
        assert_eq!(two.infinite, COMPOSED_TAIL_MASS);
        assert_eq!(complex_power(0.0, 1.0, 3), (0.0, -1.0));
    }

    /// A loss of 1 with probability 1: δ(ε) = 1 − e^(ε − 1) for ε < 1, so ε(δ) = 1 + ln(1 − δ).
    #[test]
    fn epsilon_of_a_point_mass_by_hand() {
        let pmf = Pmf {
            first: 10_000,
            probs: vec![1.0],
            infinite: 0.0,
        };
        let eps = pmf.epsilon(0.1);
        assert!((eps - (1.0 + 0.9f64.ln())).abs() < 1e-12, "{eps}");
        assert_eq!(pmf.epsilon(1.0), 0.0);
    }

    /// Composing k Gaussians of σ is the Gaussian of σ/√k; and PLD is never looser than RDP
    /// on the same mechanism (it is the tighter accountant).
    #[test]
    fn gaussian_limits_and_pld_below_rdp() {
        // One step of σ = 1 at δ = 1e-5: the analytic Gaussian's ε is 4.3772 (dp-accounting's PLD:
        // 4.37717810; RDP: 4.75).
        let eps = pld_epsilon(1.0, 1.0, 1, 1e-5);
        assert!((eps - 4.37717810).abs() < 1e-6, "{eps}");
        assert_eq!(
            pld_epsilon(1.0, 2.0, 4, 1e-5),
            pld_epsilon(1.0, 1.0, 1, 1e-5)
        );
        assert_eq!(pld_epsilon(0.01, 0.0, 10, 1e-5), f64::INFINITY);
        assert_eq!(pld_epsilon(0.0, 1.0, 10, 1e-5), 0.0);
        for (q, sigma, steps) in [(0.01, 1.0, 1000), (0.1, 2.0, 100), (1.0, 5.0, 50)] {
            let pld = pld_epsilon(q, sigma, steps, 1e-5);
            let rdp = super::super::epsilon(
                super::super::Subsampling::Poisson { rate: q },
                sigma,
                steps,
                1e-5,
            );
            assert!(
                pld < rdp,
                "q {q} σ {sigma} steps {steps}: PLD {pld}, RDP {rdp}"
            );
        }
    }
}
