//! The linear model's arithmetic on the CPU, in plain Rust: local SGD and the per-row losses of
//! FedEM's E-step, one run at a time, straight from the data set's rows.
//!
//! A linear model's work is a dot product per row and output, far too small for libtorch: its
//! batched products for N ≤ 10 outputs run at scalar speed and every minibatch had to be
//! gathered (and padded to the cohort's longest batch) first. Here each row is read in place,
//! once for its logits and once for its gradient, and each run is computed on its own. A
//! batch's rows are taken four at a time, their dot products overlapped (a model's outputs, or
//! FedEM's components, likewise), while the next four rows are fetched.
//!
//! The arithmetic is f32, in one fixed order: a dot product adds the product of index j to
//! partial sum j mod [`LANES`], then adds the partial sums pairwise (16 → 8 → 4 → 2 → 1); a
//! batch's gradient adds its rows in batch order; there is no fused multiply-add. It is
//! written once and compiled for SSE and for AVX (taken at run time where the CPU has it),
//! which make the same adds in the same order. So a run's result is the same whichever runs
//! share its call, on whichever thread, on any x86-64 or ARM CPU; alone and in a cohort alike.
//!
//! This room must not draw random numbers, use libtorch, or let one run's arithmetic depend on
//! another's.

use super::{Architecture, Layer};
use crate::data::SplitView;

/// Partial sums per dot product: 16 f32 (two AVX registers or four SSE ones), so the adds of
/// consecutive products do not wait for each other.
pub const LANES: usize = 16;

/// The vector instructions the arithmetic is written in, as the [`LANES`] partial sums of one
/// dot product held in registers. Each adds the same products to the same partial sums in the
/// same order (IEEE adds and multiplies, lane by lane, no fused multiply-add), so which one
/// runs changes the speed alone: [`Linear::train`] and [`Linear::sample_losses`] take the
/// widest the CPU has.
trait Isa: Copy {
    /// Sixteen zeros.
    fn zero() -> Self;
    /// Sixteen floats from `p` (unaligned).
    ///
    /// # Safety
    /// `p` points to 16 readable floats, and the CPU has the instructions.
    unsafe fn load(p: *const f32) -> Self;
    /// `self + x·y`, lane by lane: a multiply, then an add.
    ///
    /// # Safety
    /// The CPU has the instructions.
    unsafe fn add_product(self, x: Self, y: Self) -> Self;
    /// The sixteen lanes, in order.
    ///
    /// # Safety
    /// The CPU has the instructions.
    unsafe fn lanes(self) -> [f32; LANES];
}

/// SSE on x86-64 (part of the architecture): four registers.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Baseline([std::arch::x86_64::__m128; 4]);

#[cfg(target_arch = "x86_64")]
impl Isa for Baseline {
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: SSE is part of x86-64.
        Baseline([unsafe { std::arch::x86_64::_mm_setzero_ps() }; 4])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Baseline([0, 4, 8, 12].map(|q| std::arch::x86_64::_mm_loadu_ps(p.add(q))))
    }
    #[inline(always)]
    unsafe fn add_product(self, x: Self, y: Self) -> Self {
        use std::arch::x86_64::{_mm_add_ps, _mm_mul_ps};
        Baseline([0, 1, 2, 3].map(|q| _mm_add_ps(self.0[q], _mm_mul_ps(x.0[q], y.0[q]))))
    }
    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        std::mem::transmute(self.0)
    }
}

/// Elsewhere, the same adds one by one.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy)]
struct Baseline([f32; LANES]);

#[cfg(not(target_arch = "x86_64"))]
impl Isa for Baseline {
    #[inline(always)]
    fn zero() -> Self {
        Baseline([0.0; LANES])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Baseline(std::ptr::read_unaligned(p as *const [f32; LANES]))
    }
    #[inline(always)]
    unsafe fn add_product(self, x: Self, y: Self) -> Self {
        Baseline(std::array::from_fn(|l| self.0[l] + x.0[l] * y.0[l]))
    }
    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        self.0
    }
}

/// AVX: two registers (lanes 0–7 and 8–15). Only inside the functions compiled for it
/// (`#[target_feature(enable = "avx")]`), called where the CPU has it.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx([std::arch::x86_64::__m256; 2]);

#[cfg(target_arch = "x86_64")]
impl Isa for Avx {
    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: only used where the CPU has AVX (see the type).
        Avx([unsafe { std::arch::x86_64::_mm256_setzero_ps() }; 2])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Avx([0, 8].map(|h| std::arch::x86_64::_mm256_loadu_ps(p.add(h))))
    }
    #[inline(always)]
    unsafe fn add_product(self, x: Self, y: Self) -> Self {
        use std::arch::x86_64::{_mm256_add_ps, _mm256_mul_ps};
        Avx([0, 1].map(|h| _mm256_add_ps(self.0[h], _mm256_mul_ps(x.0[h], y.0[h]))))
    }
    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        std::mem::transmute(self.0)
    }
}

/// The partial sums of whole chunks of [`LANES`] products of K pairs (each `a[k]` and `b[k]`
/// a whole number of chunks, all alike): product j into sum j mod [`LANES`], in increasing j.
#[inline(always)]
fn lane_sums<I: Isa, const K: usize>(a: [&[f32]; K], b: [&[f32]; K]) -> [[f32; LANES]; K] {
    let chunks = a.first().map_or(0, |a| a.len() / LANES);
    let mut sums = [I::zero(); K];
    // SAFETY: every load reads one chunk of 16 floats inside an `a[k]` or `b[k]` (all
    // `chunks` chunks long), and `I` runs only where the CPU has its instructions.
    unsafe {
        for c in 0..chunks {
            for (k, sum) in sums.iter_mut().enumerate() {
                let x = I::load(a[k].as_ptr().add(c * LANES));
                let y = I::load(b[k].as_ptr().add(c * LANES));
                *sum = sum.add_product(x, y);
            }
        }
        sums.map(|sum| sum.lanes())
    }
}

/// Σ a·b in fixed order: the product of index j is added to partial sum j mod [`LANES`] (in
/// increasing j), then the partial sums are added pairwise (16 → 8 → 4 → 2 → 1).
#[cfg(test)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    dots::<Baseline, 1>([a], [b])[0]
}

/// K dot products at once, each Σ a[k]·b[k] in the order of [`LANES`]: one product's adds
/// wait for each other, so the CPU overlaps K of them.
#[inline(always)]
fn dots<I: Isa, const K: usize>(a: [&[f32]; K], b: [&[f32]; K]) -> [f32; K] {
    let len = a.first().map_or(0, |a| a.len());
    for (a, b) in a.iter().zip(&b) {
        assert!(
            a.len() == len && b.len() == len,
            "dot products of unequal lengths"
        );
    }
    let whole = len / LANES * LANES;
    let mut acc = lane_sums::<I, K>(a.map(|a| &a[..whole]), b.map(|b| &b[..whole]));
    for (acc, (a, b)) in acc.iter_mut().zip(a.iter().zip(&b)) {
        for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
            acc[l] += x * y;
        }
    }
    acc.map(|mut acc| {
        let mut width = LANES;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                acc[l] += acc[l + width];
            }
        }
        acc[0]
    })
}

/// `out[p] = dot(a, b)` with `(a, b) = pair(p)`, for every p: [`dots`] four at a time.
#[inline(always)]
fn dots_into<'a, I: Isa>(out: &mut [f32], pair: impl Fn(usize) -> (&'a [f32], &'a [f32])) {
    fn put<const K: usize>(out: &mut [f32], values: [f32; K]) -> usize {
        out[..K].copy_from_slice(&values);
        K
    }
    let mut at = 0;
    while at < out.len() {
        let p = |k| pair(at + k);
        at += match out.len() - at {
            1 => put(&mut out[at..], dots::<I, _>([p(0).0], [p(0).1])),
            2 => put(
                &mut out[at..],
                dots::<I, _>([p(0).0, p(1).0], [p(0).1, p(1).1]),
            ),
            3 => {
                let (x, y, z) = (p(0), p(1), p(2));
                put(
                    &mut out[at..],
                    dots::<I, _>([x.0, y.0, z.0], [x.1, y.1, z.1]),
                )
            }
            _ => {
                let (x, y, z, w) = (p(0), p(1), p(2), p(3));
                put(
                    &mut out[at..],
                    dots::<I, 4>([x.0, y.0, z.0, w.0], [x.1, y.1, z.1, w.1]),
                )
            }
        };
    }
}

/// One shuffled pass over a client's rows: the permutation, and the `(start, len)` batches cut
/// from it (made by `LocalPlan::passes`).
pub type Pass = (Vec<i64>, Vec<(usize, usize)>);

/// A batch's rows are taken this many at a time: their dot products overlap, and the
/// gradient's elements are read and written once for them all. While a group is in hand, the
/// next group's rows are fetched: a pass visits its run's rows in shuffled order, which the
/// hardware prefetcher cannot foresee.
const ROWS_AT_ONCE: usize = 4;

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

/// `y += a[0]·x[0]`, then `+= a[1]·x[1]`, …, element by element: each element takes its terms
/// in order, as N calls of one term would.
#[inline]
fn axpys<const N: usize>(y: &mut [f32], a: [f32; N], x: [&[f32]; N]) {
    let x = x.map(|x| &x[..y.len()]);
    for (j, y) in y.iter_mut().enumerate() {
        let mut v = *y;
        for n in 0..N {
            v += a[n] * x[n][j];
        }
        *y = v;
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
    /// Adds ⟨c, θ⟩ to the loss: c to every step's gradient.
    pub correction: Option<&'a [f32]>,
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
    #[inline(always)]
    fn logits<I: Isa>(&self, params: &[f32], x: &[f32], z: &mut [f32]) {
        let (i, o) = (self.inputs, self.outputs);
        dots_into::<I>(z, |k| (&params[k * i..(k + 1) * i], x));
        for (z, &bias) in z.iter_mut().zip(&params[o * i..]) {
            *z += bias;
        }
    }

    /// The logits of each row of `xs` under `params`, one row's after another's into `z`; with
    /// one output, the rows' dot products overlapped.
    #[inline(always)]
    fn rows_logits<I: Isa>(&self, params: &[f32], xs: &[&[f32]], z: &mut [f32]) {
        let i = self.inputs;
        if self.outputs > 1 {
            for (x, z) in xs.iter().zip(z.chunks_exact_mut(self.outputs)) {
                self.logits::<I>(params, x, z);
            }
            return;
        }
        dots_into::<I>(z, |r| (&params[..i], xs[r]));
        for z in z {
            *z += params[i];
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
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx") {
                // SAFETY: the CPU has AVX.
                return unsafe { self.sample_losses_avx(models, data) };
            }
        }
        self.sample_losses_in::<Baseline, M>(models, data)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx")]
    unsafe fn sample_losses_avx<M: AsRef<[f32]>>(
        &self,
        models: &[M],
        data: SplitView<'_>,
    ) -> Vec<Vec<f32>> {
        self.sample_losses_in::<Avx, M>(models, data)
    }

    #[inline(always)]
    fn sample_losses_in<I: Isa, M: AsRef<[f32]>>(
        &self,
        models: &[M],
        data: SplitView<'_>,
    ) -> Vec<Vec<f32>> {
        let mut losses: Vec<Vec<f32>> = (models.iter())
            .map(|_| Vec::with_capacity(data.len()))
            .collect();
        let (i, o) = (self.inputs, self.outputs);
        let mut z = vec![0f32; models.len() * o];
        for (x, &y) in data.features.chunks_exact(i).zip(data.labels) {
            dots_into::<I>(&mut z, |p| (&models[p / o].as_ref()[p % o * i..][..i], x));
            for ((model, z), losses) in models.iter().zip(z.chunks_exact_mut(o)).zip(&mut losses) {
                for (z, &bias) in z.iter_mut().zip(&model.as_ref()[o * i..]) {
                    *z += bias;
                }
                losses.push(self.loss(z, y));
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
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx") {
                // SAFETY: the CPU has AVX.
                return unsafe { self.train_avx(momentum, weight_decay, rows, run) };
            }
        }
        self.train_in::<Baseline>(momentum, weight_decay, rows, run)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx")]
    unsafe fn train_avx(
        &self,
        momentum: f64,
        weight_decay: f64,
        rows: SplitView<'_>,
        run: LinearRun<'_>,
    ) -> u32 {
        self.train_in::<Avx>(momentum, weight_decay, rows, run)
    }

    #[inline(always)]
    fn train_in<I: Isa>(
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
        let mut z = vec![0f32; ROWS_AT_ONCE * o];
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
        let x_of = |r: i64| {
            let row = run.first_row + r as usize;
            &rows.features[row * i..(row + 1) * i]
        };
        for (order, cuts) in run.passes {
            for &(start, len) in cuts {
                grad.fill(0.0);
                let inv_len = (1.0 / len as f64) as f32;
                let batch = &order[start..(start + len).min(order.len())];
                for (g, group) in batch.chunks(ROWS_AT_ONCE).enumerate() {
                    let next = start + (g + 1) * ROWS_AT_ONCE;
                    for &ahead in order.iter().skip(next).take(ROWS_AT_ONCE) {
                        prefetch(x_of(ahead));
                    }
                    let mut xs = [&[][..]; ROWS_AT_ONCE];
                    for (x, &r) in xs.iter_mut().zip(group) {
                        *x = x_of(r);
                    }
                    let (xs, z) = (&xs[..group.len()], &mut z[..group.len() * o]);
                    self.rows_logits::<I>(params, xs, z);
                    for (z, &r) in z.chunks_exact_mut(o).zip(group) {
                        self.residual(z, rows.labels[run.first_row + r as usize]);
                        let w = run.sample_weights.map_or(1.0, |w| w[r as usize]) * inv_len;
                        for z in z {
                            *z *= w;
                        }
                    }
                    // Each output's gradient takes the rows in batch order, as one row at a
                    // time would, each element read and written once for the group.
                    for k in 0..o {
                        let g = &mut grad[k * i..(k + 1) * i];
                        let r = |n: usize| z[n * o + k];
                        match xs {
                            [a] => axpys(g, [r(0)], [a]),
                            [a, b] => axpys(g, [r(0), r(1)], [a, b]),
                            [a, b, c] => axpys(g, [r(0), r(1), r(2)], [a, b, c]),
                            [a, b, c, d] => axpys(g, [r(0), r(1), r(2), r(3)], [a, b, c, d]),
                            _ => unreachable!("{ROWS_AT_ONCE} rows at once"),
                        }
                    }
                    for z in z.chunks_exact(o) {
                        for (g, &rk) in grad[o * i..].iter_mut().zip(z) {
                            *g += rk;
                        }
                    }
                }
                let mut d = std::mem::take(&mut grad);
                if let Some((anchor, mu)) = proximal {
                    for ((d, &p), &a) in d.iter_mut().zip(&*params).zip(anchor) {
                        *d += (p - a) * mu;
                    }
                }
                if let Some(correction) = run.correction {
                    for (d, &c) in d.iter_mut().zip(correction) {
                        *d += c;
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
                correction: None,
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
                correction: None,
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

    /// Random rows of width 150 (nine chunks of 16 and a tail of 6), labels for `classes`.
    fn random_rows(n: usize, classes: i64, seed: u64) -> (Vec<f32>, Vec<i64>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        let x = (0..n * 150).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let y = (0..n).map(|_| rng.gen_range(0..classes)).collect();
        (x, y)
    }

    /// Trains `model` from `init` over rows 3.. of `x` in two shuffled passes of batches of
    /// 16, 16 and 5, with momentum, weight decay, sample weights and a proximal term, through
    /// `train`; returns the parameters and the momentum buffer.
    fn trained(
        model: Linear,
        x: &[f32],
        y: &[i64],
        init: &[f32],
        train: impl Fn(&Linear, SplitView<'_>, LinearRun<'_>) -> u32,
    ) -> (Vec<f32>, Vec<f32>) {
        let rows = SplitView {
            features: x,
            labels: y,
            dim: 150,
        };
        let order: Vec<i64> = (0..37).map(|r| (r * 11) % 37).collect();
        let reversed = order.iter().rev().copied().collect();
        let cuts = vec![(0, 16), (16, 16), (32, 5)];
        let passes = vec![(order, cuts.clone()), (reversed, cuts)];
        let weights: Vec<f32> = (0..37).map(|r| 0.5 + (r % 3) as f32 * 0.25).collect();
        let anchor: Vec<f32> = init.iter().map(|v| v * 0.5).collect();
        let (mut params, mut momentum) = (init.to_vec(), Vec::new());
        let run = LinearRun {
            params: &mut params,
            momentum: Some(&mut momentum),
            sample_weights: Some(&weights),
            proximal: Some((&anchor, 0.01)),
            correction: None,
            first_row: 3,
            passes: &passes,
            lr: 0.1,
        };
        assert_eq!(train(&model, rows, run), 6);
        (params, momentum)
    }

    /// The same SGD as `Linear::train`, written plainly, one row at a time: each row's logits
    /// by `dot`, its residual, then its terms added to the gradient.
    fn one_row_at_a_time(model: &Linear, rows: SplitView<'_>, run: LinearRun<'_>) -> u32 {
        let (i, o) = (model.inputs, model.outputs);
        let params = run.params;
        let (anchor, mu) = run.proximal.unwrap();
        let mut buffer: Option<Vec<f32>> = None;
        let mut steps = 0;
        for (order, cuts) in run.passes {
            for &(start, len) in cuts {
                let mut grad = vec![0f32; params.len()];
                let inv_len = (1.0 / len as f64) as f32;
                for &r in &order[start..start + len] {
                    let row = run.first_row + r as usize;
                    let x = &rows.features[row * i..(row + 1) * i];
                    let mut z: Vec<f32> = (0..o)
                        .map(|k| dot(&params[k * i..(k + 1) * i], x) + params[o * i + k])
                        .collect();
                    model.residual(&mut z, rows.labels[row]);
                    let w = run.sample_weights.unwrap()[r as usize] * inv_len;
                    for (k, &zk) in z.iter().enumerate() {
                        let rk = zk * w;
                        for (g, &v) in grad[k * i..(k + 1) * i].iter_mut().zip(x) {
                            *g += rk * v;
                        }
                        grad[o * i + k] += rk;
                    }
                }
                for ((d, &p), &a) in grad.iter_mut().zip(&*params).zip(anchor) {
                    *d += (p - a) * mu as f32;
                    *d += p * 5e-4;
                }
                if let Some(b) = &buffer {
                    for (d, &b) in grad.iter_mut().zip(b) {
                        *d += b * 0.9;
                    }
                }
                for (p, &d) in params.iter_mut().zip(&grad) {
                    *p -= d * 0.1;
                }
                buffer = Some(grad);
                steps += 1;
            }
        }
        *run.momentum.unwrap() = buffer.unwrap();
        steps
    }

    /// Rows taken four at a time (overlapped dot products, one pass over the gradient for
    /// them all) give the bits of the plain row-by-row loop, for logistic and softmax models.
    #[test]
    fn rows_at_once_train_as_one_at_a_time() {
        for (outputs, classes) in [(1, 2), (3, 3)] {
            let model = Linear {
                inputs: 150,
                outputs,
            };
            let (x, y) = random_rows(40, classes, 5);
            let init: Vec<f32> = (0..model.num_params())
                .map(|k| ((k * 7919) % 101) as f32 / 500.0 - 0.1)
                .collect();
            let fast = trained(model, &x, &y, &init, |m, rows, run| {
                m.train(0.9, 5e-4, rows, run)
            });
            let plain = trained(model, &x, &y, &init, one_row_at_a_time);
            assert_eq!(fast, plain, "{outputs} outputs");
        }
    }

    /// AVX trains and scores to the same bits as the baseline (SSE) where the CPU has it (the
    /// machines fedsim is tested on do; the test says what it compared). Elsewhere there is
    /// one path only.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        for (outputs, classes) in [(1, 2), (3, 3)] {
            let model = Linear {
                inputs: 150,
                outputs,
            };
            let (x, y) = random_rows(40, classes, 6);
            let init: Vec<f32> = (0..model.num_params())
                .map(|k| ((k * 104_729) % 97) as f32 / 400.0 - 0.12)
                .collect();
            let others: Vec<f32> = init.iter().map(|v| -v).collect();
            let models = [init.as_slice(), others.as_slice()];
            let data = SplitView {
                features: &x,
                labels: &y,
                dim: 150,
            };
            let baseline = trained(model, &x, &y, &init, |m, rows, run| {
                m.train_in::<Baseline>(0.9, 5e-4, rows, run)
            });
            let losses = model.sample_losses_in::<Baseline, _>(&models, data);
            let mut compared = Vec::new();
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx") {
                    // SAFETY: the CPU has AVX.
                    let wide = trained(model, &x, &y, &init, |m, rows, run| unsafe {
                        m.train_avx(0.9, 5e-4, rows, run)
                    });
                    assert_eq!(wide, baseline, "AVX training, {outputs} outputs");
                    let wide = unsafe { model.sample_losses_avx(&models, data) };
                    assert_eq!(wide, losses, "AVX losses, {outputs} outputs");
                    compared.push("AVX");
                }
            }
            eprintln!("compared with the baseline: {compared:?}");
        }
    }
}
