//! The linear model's arithmetic on the CPU, in plain Rust: local SGD and the per-row losses of
//! FedEM's E-step, one run and one row at a time, straight from the data set's rows.
//!
//! A linear model's work is a dot product per row and output, far too small for libtorch: its
//! batched products for N ≤ 10 outputs run at scalar speed and every minibatch had to be
//! gathered (and padded to the cohort's longest batch) first. Here each row is read in place,
//! once for its logits and once for its gradient, and each run is computed on its own.
//!
//! The arithmetic is f32, in one fixed order: a dot product adds the product of index j to
//! partial sum j mod [`LANES`], then adds the partial sums pairwise (16 → 8 → 4 → 2 → 1); a
//! batch's gradient adds its rows in batch order; there is no fused multiply-add. So a run's
//! result is the same whichever runs share its call, on whichever thread, on any x86-64 or ARM
//! CPU; alone and in a cohort alike.
//!
//! This room must not draw random numbers, use libtorch, or let one run's arithmetic depend on
//! another's.

use super::{Architecture, Layer};
use crate::data::SplitView;

/// Partial sums per dot product: 16 f32, four SSE registers, so the adds of consecutive
/// products do not wait for each other.
pub const LANES: usize = 16;

/// Σ a·b in fixed order: the product of index j is added to partial sum j mod [`LANES`] (in
/// increasing j), then the partial sums are added pairwise (16 → 8 → 4 → 2 → 1).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot product of unequal lengths");
    let whole = a.len() / LANES * LANES;
    let mut acc = lane_sums(&a[..whole], &b[..whole]);
    for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        acc[l] += x * y;
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            acc[l] += acc[l + width];
        }
    }
    acc[0]
}

/// The partial sums of whole chunks of [`LANES`] products, with SSE on x86-64 (part of the
/// architecture) and the same adds one by one elsewhere.
#[cfg(target_arch = "x86_64")]
#[inline]
fn lane_sums(a: &[f32], b: &[f32]) -> [f32; LANES] {
    use std::arch::x86_64::{_mm_add_ps, _mm_loadu_ps, _mm_mul_ps, _mm_setzero_ps, _mm_storeu_ps};
    let mut out = [0f32; LANES];
    // SAFETY: SSE is part of x86-64, and every load and store touches 4 floats inside a chunk
    // of 16 of `a`, `b` or `out`.
    unsafe {
        let mut sums = [_mm_setzero_ps(); LANES / 4];
        for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
            for (q, sum) in sums.iter_mut().enumerate() {
                let x = _mm_loadu_ps(ca.as_ptr().add(4 * q));
                let y = _mm_loadu_ps(cb.as_ptr().add(4 * q));
                *sum = _mm_add_ps(*sum, _mm_mul_ps(x, y));
            }
        }
        for (q, sum) in sums.into_iter().enumerate() {
            _mm_storeu_ps(out.as_mut_ptr().add(4 * q), sum);
        }
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn lane_sums(a: &[f32], b: &[f32]) -> [f32; LANES] {
    let mut acc = [0f32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
    acc
}

/// One shuffled pass over a client's rows: the permutation, and the `(start, len)` batches cut
/// from it (made by `LocalPlan::passes`).
pub type Pass = (Vec<i64>, Vec<(usize, usize)>);

/// How many rows ahead of the one in hand a pass asks the CPU to fetch: a pass visits its
/// run's rows in shuffled order, which the hardware prefetcher cannot foresee.
const PREFETCH_ROWS: usize = 2;

/// Asks the CPU to bring `values` into its caches, every cache line of them (a hint: no
/// effect on any result).
#[inline]
fn prefetch<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = std::mem::size_of_val(values);
        let start = values.as_ptr() as *const i8;
        for offset in (0..bytes).step_by(64) {
            // SAFETY: a prefetch hint reads nothing and cannot fault; the address is inside
            // `values`.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(start.add(offset));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

/// `y += a·x`, element by element.
#[inline]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// A linear model's shape: `outputs` rows of `inputs` weights (row-major, as the flat
/// parameter vector holds them), then `outputs` biases. One output is logistic regression
/// (labels 0 and 1); more are softmax regression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    pub inputs: usize,
    pub outputs: usize,
}

/// One local SGD run of a linear model, trained in place by [`Linear::train`].
pub struct LinearRun<'a> {
    pub params: &'a mut [f32],
    /// `None`: plain SGD. Empty: no buffer yet (the first step starts it).
    pub momentum: Option<&'a mut Vec<f32>>,
    pub sample_weights: Option<&'a [f32]>,
    /// Adds (μ/2)·‖θ − anchor‖² to the loss: (anchor, μ).
    pub proximal: Option<(&'a [f32], f64)>,
    /// Index of the run's first row among the rows given.
    pub first_row: usize,
    /// Its shuffled passes over its rows.
    pub passes: &'a [Pass],
    pub lr: f64,
}

impl Linear {
    /// The shape of `arch` where it is one dense layer.
    pub fn of(arch: &Architecture) -> Option<Linear> {
        match arch.layers[..] {
            [Layer::Dense { inputs, outputs }] => Some(Linear { inputs, outputs }),
            _ => None,
        }
    }

    fn num_params(&self) -> usize {
        (self.inputs + 1) * self.outputs
    }

    /// The logits of row `x` under `params` into `z`: each output's dot product, then its bias.
    #[inline]
    fn logits(&self, params: &[f32], x: &[f32], z: &mut [f32]) {
        let (i, o) = (self.inputs, self.outputs);
        for (k, z) in z.iter_mut().enumerate() {
            *z = dot(&params[k * i..(k + 1) * i], x) + params[o * i + k];
        }
    }

    /// Turns logits `z` into ∂ℓ/∂z for label `y`: σ(z) − y for one output, softmax(z) −
    /// onehot(y) for more.
    #[inline]
    fn residual(&self, z: &mut [f32], y: i64) {
        if let [z] = z {
            *z = 1.0 / (1.0 + (-*z).exp()) - y as f32;
            return;
        }
        let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0f32;
        for z in z.iter_mut() {
            *z = (*z - max).exp();
            total += *z;
        }
        for (k, z) in z.iter_mut().enumerate() {
            *z = *z / total - (k as i64 == y) as i32 as f32;
        }
    }

    /// The loss of logits `z` for label `y`: binary cross-entropy with logits for one output
    /// (max(z, 0) − z·y + ln(1 + e^−|z|)), softmax cross-entropy for more.
    #[inline]
    fn loss(&self, z: &[f32], y: i64) -> f32 {
        if let [z] = z {
            return z.max(0.0) - z * y as f32 + (1.0 + (-z.abs()).exp()).ln();
        }
        let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = z.iter().map(|&z| (z - max).exp()).sum();
        max + total.ln() - z[y as usize]
    }

    /// The loss of every row of `data` under each of `models`: `[model][row]`.
    pub fn sample_losses<M: AsRef<[f32]>>(
        &self,
        models: &[M],
        data: SplitView<'_>,
    ) -> Vec<Vec<f32>> {
        let mut losses: Vec<Vec<f32>> = (models.iter())
            .map(|_| Vec::with_capacity(data.len()))
            .collect();
        let mut z = vec![0f32; self.outputs];
        for (x, &y) in data.features.chunks_exact(self.inputs).zip(data.labels) {
            for (model, losses) in models.iter().zip(&mut losses) {
                self.logits(model.as_ref(), x, &mut z);
                losses.push(self.loss(&z, y));
            }
        }
        losses
    }

    /// Trains `run` by SGD with `momentum` and `weight_decay` (not DP-SGD): each batch's
    /// gradient of Σᵢ wᵢ·ℓᵢ / |batch| (wᵢ = 1 without sample weights), then, as PyTorch's SGD,
    /// d = g (+ μ·(θ − anchor)) (+ λ·θ), d = m·buffer + d once a buffer exists (the buffer
    /// becomes d), θ = θ − lr·d. Returns the number of steps.
    pub fn train(
        &self,
        momentum: f64,
        weight_decay: f64,
        rows: SplitView<'_>,
        run: LinearRun<'_>,
    ) -> u32 {
        assert_eq!(rows.dim, self.inputs, "rows of the model's width");
        let (i, o) = (self.inputs, self.outputs);
        let params = run.params;
        assert_eq!(
            params.len(),
            self.num_params(),
            "parameter vector of the wrong length"
        );
        let lr = run.lr as f32;
        let proximal = run.proximal.map(|(anchor, mu)| (anchor, mu as f32));
        let takes_momentum = momentum != 0.0 && run.momentum.is_some();
        let (keep, weight_decay) = (momentum as f32, weight_decay as f32);
        let mut buffer: Option<Vec<f32>> = match &run.momentum {
            Some(m) if takes_momentum && !m.is_empty() => Some(m.to_vec()),
            _ => None,
        };
        let mut grad = vec![0f32; params.len()];
        let mut z = vec![0f32; o];
        let mut steps = 0;
        // The run's rows are a block; its passes visit them in shuffled order. Fetched at
        // once, they are in cache when visited (a client's rows: 56 kB at the median of the
        // FedEM synthetic data).
        if let Some((order, _)) = run.passes.first() {
            let n = order.len();
            if let Some(w) = run.sample_weights {
                assert_eq!(w.len(), n, "one sample weight per row of the run");
            }
            prefetch(&rows.features[run.first_row * i..(run.first_row + n) * i]);
            prefetch(&rows.labels[run.first_row..run.first_row + n]);
        }
        for (order, cuts) in run.passes {
            for &(start, len) in cuts {
                grad.fill(0.0);
                let inv_len = (1.0 / len as f64) as f32;
                for (at, &r) in order.iter().enumerate().skip(start).take(len) {
                    if let Some(&ahead) = order.get(at + PREFETCH_ROWS) {
                        let ahead = run.first_row + ahead as usize;
                        prefetch(&rows.features[ahead * i..(ahead + 1) * i]);
                    }
                    let row = run.first_row + r as usize;
                    let x = &rows.features[row * i..(row + 1) * i];
                    self.logits(params, x, &mut z);
                    self.residual(&mut z, rows.labels[row]);
                    let w = run.sample_weights.map_or(1.0, |w| w[r as usize]) * inv_len;
                    for (k, &zk) in z.iter().enumerate() {
                        let rk = zk * w;
                        axpy(&mut grad[k * i..(k + 1) * i], rk, x);
                        grad[o * i + k] += rk;
                    }
                }
                let mut d = std::mem::take(&mut grad);
                if let Some((anchor, mu)) = proximal {
                    for ((d, &p), &a) in d.iter_mut().zip(&*params).zip(anchor) {
                        *d += (p - a) * mu;
                    }
                }
                if weight_decay != 0.0 {
                    for (d, &p) in d.iter_mut().zip(&*params) {
                        *d += p * weight_decay;
                    }
                }
                if takes_momentum {
                    if let Some(b) = &buffer {
                        for (d, &b) in d.iter_mut().zip(b) {
                            *d += b * keep;
                        }
                    }
                }
                for (p, &d) in params.iter_mut().zip(&d) {
                    *p -= d * lr;
                }
                grad = match takes_momentum {
                    true => buffer
                        .replace(d)
                        .unwrap_or_else(|| vec![0f32; self.num_params()]),
                    false => d,
                };
                steps += 1;
            }
        }
        if let (Some(momentum), Some(b)) = (run.momentum, buffer) {
            if takes_momentum {
                *momentum = b;
            }
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: 1e8 and eighteen ones (f32 spacing at 1e8 is 8). Lane 0 holds 1e8
    /// and, from the last three values, one lost 1; lanes 1 and 2 hold 2, lanes 3..16 hold 1.
    /// Pairwise: width 8 gives lane 0 = 1e8 (1 lost), lanes 1, 2 = 3, lanes 3..8 = 2; width 4
    /// gives 1e8 (2 lost), 5, 5, 4; width 2 gives 1e8 + 5 → 100 000 008 and 9; width 1 gives
    /// 100 000 017 → 100 000 016. From the left one by one, every 1 is lost.
    #[test]
    fn dot_fills_lanes_then_adds_them_pairwise() {
        let a: Vec<f32> = (0..19).map(|k| if k == 0 { 1e8 } else { 1.0 }).collect();
        let b = vec![1f32; 19];
        assert_eq!(dot(&a, &b), 100_000_016.0);
        let left_to_right: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(left_to_right, 1e8);
        // Fewer than 16 values: lanes hold one product each.
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
        assert_eq!(dot(&[], &[]), 0.0);
    }

    /// Logistic regression on two rows in one batch, then one more step, worked by hand in
    /// exact binary fractions: θ = 0 gives σ = 1/2 on both rows.
    #[test]
    fn logistic_steps_by_hand() {
        let features = [1.0, 2.0, 2.0, 0.0];
        let labels = [1, 0];
        let rows = SplitView {
            features: &features,
            labels: &labels,
            dim: 2,
        };
        let model = Linear {
            inputs: 2,
            outputs: 1,
        };
        // Batch of both rows: residuals −1/2 (y = 1) and +1/2 (y = 0), each over 2:
        // g_w = (−1/4)·(1, 2) + (1/4)·(2, 0) = (1/4, −1/2), g_b = 0. With lr 1/2: θ = (−1/8,
        // 1/4, 0). The momentum buffer starts as that gradient.
        let mut params = vec![0.0; 3];
        let mut momentum = Vec::new();
        let passes = vec![(vec![0, 1], vec![(0, 2)])];
        let steps = model.train(
            0.5,
            0.0,
            rows,
            LinearRun {
                params: &mut params,
                momentum: Some(&mut momentum),
                sample_weights: None,
                proximal: None,
                first_row: 0,
                passes: &passes,
                lr: 0.5,
            },
        );
        assert_eq!(steps, 1);
        assert_eq!(params, [-0.125, 0.25, 0.0]);
        assert_eq!(momentum, [0.25, -0.5, 0.0]);
        // Row 1 alone, weighted 2, from θ = 0 with proximal μ = 1 around (1, 0, 0) and weight
        // decay 1/2 (no effect at θ = 0): residual (1/2)·2 = 1, g = (2, 0, 1), plus μ·(θ −
        // anchor) = (−1, 0, 0): d = (1, 0, 1); θ = −lr·d = (−1/2, 0, −1/2).
        let mut params = vec![0.0; 3];
        let passes = vec![(vec![1, 0], vec![(0, 1)])];
        model.train(
            0.0,
            0.5,
            rows,
            LinearRun {
                params: &mut params,
                momentum: None,
                sample_weights: Some(&[0.0, 2.0]),
                proximal: Some((&[1.0, 0.0, 0.0], 1.0)),
                first_row: 0,
                passes: &passes,
                lr: 0.5,
            },
        );
        assert_eq!(params, [-0.5, 0.0, -0.5]);
    }

    /// Softmax regression's loss and residual, by hand: equal logits over 4 classes give
    /// probabilities 1/4, loss ln 4, and ∂ℓ/∂z = 1/4 − onehot(y).
    #[test]
    fn softmax_loss_and_residual_by_hand() {
        let model = Linear {
            inputs: 1,
            outputs: 4,
        };
        assert!((model.loss(&[0.5; 4], 2) - 4f32.ln()).abs() < 1e-7);
        let mut z = [0.5; 4];
        model.residual(&mut z, 2);
        assert_eq!(z, [0.25, 0.25, -0.75, 0.25]);
        // Binary: z = 0 gives ln 2 whatever the label; large |z| stays finite.
        let binary = Linear {
            inputs: 1,
            outputs: 1,
        };
        assert!((binary.loss(&[0.0], 1) - 2f32.ln()).abs() < 1e-7);
        assert_eq!(binary.loss(&[200.0], 0), 200.0);
        assert_eq!(binary.loss(&[200.0], 1), 0.0);
    }
}
