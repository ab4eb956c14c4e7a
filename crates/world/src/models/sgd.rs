//! Local minibatch SGD and evaluation on one client's data.

use super::contrastive::ContrastiveTerm;
use super::linear::{Linear, LinearRun};
use super::{flatten_into, Architecture};
use crate::data::SplitView;
use rand::seq::SliceRandom;
use rand::Rng;
use std::borrow::Cow;
use tch::{Device, Kind, Reduction, Tensor};

/// How much local work one round asks of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalWork {
    /// Full shuffled passes over the client's training data (the last batch may be short).
    Epochs(u32),
    /// Minibatch steps, drawing batches from successive shuffled passes.
    Steps(u32),
}

impl LocalWork {
    /// The part `fraction` (in (0, 1]) of this work: ⌈fraction · E⌉ epochs or ⌈fraction · S⌉
    /// steps, at least one and at most all.
    pub fn part(self, fraction: f64) -> LocalWork {
        let of = |n: u32| ((fraction * n as f64).ceil() as u32).clamp(1, n.max(1));
        match self {
            LocalWork::Epochs(e) => LocalWork::Epochs(of(e)),
            LocalWork::Steps(s) => LocalWork::Steps(of(s)),
        }
    }
}

/// Local solver settings (PyTorch `SGD` semantics: dampening 0, no Nesterov).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalPlan {
    pub work: LocalWork,
    pub batch_size: usize,
    pub momentum: f64,
    pub weight_decay: f64,
    /// Sample-level differential privacy inside the local runs (DP-SGD); `None`: plain SGD.
    pub dp_sgd: Option<DpSgd>,
}

/// DP-SGD (Abadi et al. 2016) as local training runs it, with Opacus's sampling: each step's
/// minibatch is a Poisson sample of the run's rows (each row independently with probability q
/// = 1/⌈n/B⌉, so B rows on average), every row's gradient is clipped to L2 norm `clip` (all
/// parameter tensors taken as one), the clipped gradients are summed, Gaussian noise of
/// standard deviation `noise_multiplier · clip` is added to every coordinate of the sum, and
/// the sum is divided by the expected batch size q·n. Weight decay, a proximal term and
/// momentum act on that direction as in plain SGD (they use no data). An epoch is ⌈n/B⌉ such
/// steps. Trained by [`super::train_sgd_stacked`], alone (one run) or in a cohort.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DpSgd {
    pub clip: f64,
    pub noise_multiplier: f64,
}

impl DpSgd {
    /// The standard deviation of the noise on a step's sum of clipped gradients: σ·C.
    pub fn noise_std(&self) -> f64 {
        self.noise_multiplier * self.clip
    }
}

impl LocalPlan {
    /// Samples processed for `n` training rows: what the device model charges time for.
    pub fn samples_processed(&self, n: usize) -> u64 {
        match self.work {
            LocalWork::Epochs(e) => e as u64 * n as u64,
            LocalWork::Steps(s) => s as u64 * self.batch_size.min(n) as u64,
        }
    }

    /// Minibatch steps a local run over `n` rows takes.
    pub fn steps(&self, n: usize) -> u64 {
        match self.work {
            _ if n == 0 => 0,
            LocalWork::Epochs(e) => e as u64 * n.div_ceil(self.batch_size) as u64,
            LocalWork::Steps(s) => s as u64,
        }
    }

    /// The L1 weight of a run's steps over `n` rows from a zero momentum buffer: its change is
    /// −lr·a times the weighted mean of its steps' directions (gradients, with weight decay
    /// and any proximal or correction term). Each step adds its direction to the buffer, and
    /// the buffer (PyTorch's: the first step's direction, then ρ·buf + d) moves the
    /// parameters, so step t's direction moves them at every later step: a = Σ_t c_t with
    /// c_t = ρ·c_{t−1} + 1, Σ_t (1 − ρᵗ)/(1 − ρ) over the steps; the number of steps without
    /// momentum. FedNova's normalizer a_i; SCAFFOLD's K in Option II.
    pub fn steps_weight(&self, n: usize) -> f64 {
        let (mut counter, mut sum) = (0.0, 0.0);
        for _ in 0..self.steps(n) {
            counter = self.momentum * counter + 1.0;
            sum += counter;
        }
        sum
    }

    /// Under DP-SGD, the chance that a row of a run over `n` rows joins a step's batch:
    /// 1/⌈n/B⌉ (one over the batches of an epoch, as Opacus samples).
    pub fn dp_sampling_rate(&self, n: usize) -> f64 {
        1.0 / n.max(1).div_ceil(self.batch_size) as f64
    }

    /// The shuffled passes over `n` rows of one local run: each pass is a permutation and the
    /// `(start, len)` batches cut from it, in order. [`train_sgd`] draws them first. Under
    /// DP-SGD, one pass per epoch (or one for all the steps) whose "permutation" lists each
    /// step's Poisson sample in turn (a row may be in several steps' samples, and a step's
    /// sample may be empty): each row of each step joins with probability
    /// [`LocalPlan::dp_sampling_rate`], one uniform draw per row and step, in row order.
    pub fn passes(&self, n: usize, rng: &mut impl Rng) -> Vec<Pass> {
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        if self.dp_sgd.is_some() {
            let q = self.dp_sampling_rate(n);
            let mut poisson_pass = |steps: u64| {
                let (mut order, mut batches) = (Vec::new(), Vec::new());
                for _ in 0..steps {
                    let start = order.len();
                    order.extend((0..n as i64).filter(|_| rng.gen::<f64>() < q));
                    batches.push((start, order.len() - start));
                }
                (order, batches)
            };
            match self.work {
                LocalWork::Epochs(e) => {
                    let per_epoch = n.div_ceil(self.batch_size) as u64;
                    out.extend((0..e).map(|_| poisson_pass(per_epoch)));
                }
                LocalWork::Steps(s) => out.push(poisson_pass(s as u64)),
            }
            return out;
        }
        let mut perm: Vec<i64> = (0..n as i64).collect();
        let cut = |from: usize, to: usize, b: usize| {
            (from..to)
                .step_by(b)
                .map(|s| (s, b.min(to - s)))
                .collect::<Vec<_>>()
        };
        match self.work {
            LocalWork::Epochs(e) => {
                for _ in 0..e {
                    perm.shuffle(rng);
                    out.push((perm.clone(), cut(0, n, self.batch_size)));
                }
            }
            LocalWork::Steps(s) => {
                let mut left = s as usize;
                while left > 0 {
                    perm.shuffle(rng);
                    let mut batches = cut(0, n, self.batch_size);
                    batches.truncate(left);
                    left -= batches.len();
                    out.push((perm.clone(), batches));
                }
            }
        }
        out
    }
}

pub use super::linear::Pass;

/// What a local loss adds to the plain per-row loss.
#[derive(Clone, Copy, Debug, Default)]
pub struct Objective<'a> {
    /// One weight per row: a batch's loss is Σᵢ wᵢ·ℓᵢ / batch size (FedEM's M-step).
    pub sample_weights: Option<&'a [f32]>,
    /// Adds (μ/2)·‖θ − anchor‖² to the loss (FedProx, Ditto).
    pub proximal: Option<Proximal<'a>>,
    /// Adds ⟨c, θ⟩ to the loss: c to every step's gradient, after the proximal term and
    /// before weight decay (SCAFFOLD's correction c − c_i).
    pub correction: Option<&'a [f32]>,
    /// Adds μ times MOON's model-contrastive term (`models::contrastive`); the model must have
    /// a representation, and the run trains alone (no sample weights, no DP-SGD).
    pub contrastive: Option<super::Contrastive<'a>>,
}

/// The proximal term (μ/2)·‖θ − anchor‖² a run adds to its loss.
#[derive(Clone, Copy, Debug)]
pub struct Proximal<'a> {
    pub anchor: &'a [f32],
    pub mu: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainStats {
    pub steps: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalStats {
    pub n: usize,
    pub loss: f64,
    pub accuracy: f64,
}

/// Zero-copy tensor views of a split. The views must not outlive `view`.
pub(super) fn data_tensors(view: &SplitView<'_>) -> (Tensor, Tensor) {
    let (n, d) = (view.len() as i64, view.dim as i64);
    // SAFETY: the slices are valid for n·d f32 and n i64, outlive the returned tensors inside
    // this module's functions, and are only read.
    unsafe {
        let x = Tensor::from_blob(
            view.features.as_ptr() as *const u8,
            &[n, d],
            &[],
            Kind::Float,
            Device::Cpu,
        );
        let y = Tensor::from_blob(
            view.labels.as_ptr() as *const u8,
            &[n],
            &[],
            Kind::Int64,
            Device::Cpu,
        );
        (x, y)
    }
}

/// Targets as the loss wants them: `[n, 1]` floats for the logistic loss, integer classes
/// `[n]` otherwise.
pub(super) fn targets(arch: &Architecture, y: &Tensor) -> Tensor {
    if arch.is_binary() {
        y.to_kind(Kind::Float).unsqueeze(1)
    } else {
        y.shallow_clone()
    }
}

/// `y` as made by [`targets`].
pub(super) fn loss(
    arch: &Architecture,
    logits: &Tensor,
    y: &Tensor,
    reduction: Reduction,
) -> Tensor {
    if arch.is_binary() {
        logits.binary_cross_entropy_with_logits::<Tensor>(y, None, None, reduction)
    } else {
        logits.cross_entropy_loss::<Tensor>(y, None, reduction, -100, 0.0)
    }
}

fn correct(arch: &Architecture, logits: &Tensor, y: &Tensor) -> i64 {
    let pred = if arch.is_binary() {
        logits.squeeze_dim(1).gt(0.0).to_kind(Kind::Int64)
    } else {
        logits.argmax(1, false)
    };
    pred.eq_tensor(y).sum(Kind::Int64).int64_value(&[])
}

/// Runs local SGD on `params` in place, minimising the plain loss plus what `objective` adds.
/// `momentum` holds the momentum buffer between calls (empty: none yet; it is filled when the
/// plan uses momentum). Batches (and, after each batch is drawn, its dropout masks) come from
/// `rng`. A linear model trains in plain Rust (`models::linear`), as in a cohort.
#[allow(clippy::too_many_arguments)]
pub fn train_sgd(
    arch: &Architecture,
    params: &mut [f32],
    momentum: &mut Vec<f32>,
    data: SplitView<'_>,
    plan: &LocalPlan,
    lr: f64,
    rng: &mut impl Rng,
    objective: &Objective<'_>,
) -> TrainStats {
    assert!(
        plan.dp_sgd.is_none(),
        "DP-SGD trains through train_dp_sgd_alone"
    );
    let contrastive = (objective.contrastive.as_ref()).map(|c| ContrastiveTerm::new(arch, c));
    assert!(
        contrastive.is_none() || objective.sample_weights.is_none(),
        "the contrastive term takes no sample weights"
    );
    if let Some(linear) = Linear::of(arch) {
        let passes = plan.passes(data.len(), rng);
        let steps = linear.train(
            plan.momentum,
            plan.weight_decay,
            data,
            LinearRun {
                params,
                momentum: Some(momentum),
                sample_weights: objective.sample_weights,
                proximal: objective.proximal.map(|p| (p.anchor, p.mu)),
                correction: objective.correction,
                first_row: 0,
                passes: &passes,
                lr,
            },
        );
        return TrainStats { steps };
    }
    let (x, y) = data_tensors(&data);
    let y = targets(arch, &y);
    let w = objective.sample_weights.map(|w| {
        assert_eq!(w.len(), data.len(), "one weight per row");
        Tensor::from_slice(w).unsqueeze(1)
    });
    let ps = arch.params(params);
    let layers = arch.layers(&ps);
    let anchor: Option<(Vec<Tensor>, f64)> = objective.proximal.map(|p| {
        (
            arch.params(p.anchor).iter().map(Tensor::detach).collect(),
            p.mu,
        )
    });
    let correction: Option<Vec<Tensor>> = objective
        .correction
        .map(|c| arch.params(c).iter().map(Tensor::detach).collect());
    let mut bufs: Option<Vec<Tensor>> = (plan.momentum != 0.0 && !momentum.is_empty())
        .then(|| arch.params(momentum).iter().map(Tensor::detach).collect());
    let mut stats = TrainStats::default();
    for (order, batches) in plan.passes(data.len(), rng) {
        let perm = Tensor::from_slice(&order);
        let (xp, yp) = (x.index_select(0, &perm), y.index_select(0, &perm));
        let wp = w.as_ref().map(|w| w.index_select(0, &perm));
        for (start, len) in batches {
            let (s, l) = (start as i64, len as i64);
            let (xb, yb) = (xp.narrow(0, s, l), yp.narrow(0, s, l));
            let wb = wp.as_ref().map(|w| w.narrow(0, s, l));
            let masks = arch.dropout_masks(len, rng);
            let mut grads = match &contrastive {
                Some(term) => {
                    let (logits, contrastive) = term.forward(arch, &ps, &xb, &masks);
                    let total = loss(arch, &logits, &yb, Reduction::Mean) + contrastive;
                    Tensor::run_backward(&[&total], &ps, false, false)
                }
                None => arch.gradients(&ps, &layers, &xb, &yb, wb.as_ref(), &masks),
            };
            if let Some((anchors, mu)) = &anchor {
                tch::no_grad(|| {
                    // Not in place: autograd may hand summed parameters one gradient tensor.
                    for ((g, p), a) in grads.iter_mut().zip(&ps).zip(anchors) {
                        *g = &*g + (p - a) * *mu;
                    }
                });
            }
            if let Some(correction) = &correction {
                tch::no_grad(|| {
                    for (g, c) in grads.iter_mut().zip(correction) {
                        *g = &*g + c;
                    }
                });
            }
            sgd_update(&ps, grads, &mut bufs, plan, lr);
            stats.steps += 1;
        }
    }
    flatten_into(&ps, params);
    if let Some(bs) = bufs {
        momentum.resize(params.len(), 0.0);
        flatten_into(&bs, momentum);
    }
    stats
}

/// One minibatch of a local run, for algorithms with their own update rule (pFedMe,
/// Per-FedAvg, Ditto, APFL): it answers gradient queries at any parameters.
pub struct Batch<'a> {
    arch: &'a Architecture,
    x: Tensor,
    /// As [`targets`] makes them.
    y: Tensor,
    /// Dropout masks drawn for this batch (every gradient query uses the same ones).
    masks: Vec<Tensor>,
    weight_decay: f64,
}

impl Batch<'_> {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.x.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gradient of the mean minibatch loss at `params`, plus `weight_decay · params` (the L2
    /// term PyTorch's SGD adds).
    pub fn gradient(&self, params: &[f32]) -> Vec<f32> {
        let ps = self.arch.params(params);
        let layers = self.arch.layers(&ps);
        let grads = self
            .arch
            .gradients(&ps, &layers, &self.x, &self.y, None, &self.masks);
        let mut out = vec![0f32; params.len()];
        tch::no_grad(|| flatten_into(&grads, &mut out));
        if self.weight_decay != 0.0 {
            let wd = self.weight_decay as f32;
            out.iter_mut().zip(params).for_each(|(g, p)| *g += wd * p);
        }
        out
    }
}

/// The gradient of the mean loss over every row of `data` at `params` (no dropout, no weight
/// decay), from chunks of at most `chunk` rows, each chunk's mean gradient weighted by its
/// share of the rows and summed in f64, in row order: SCAFFOLD's Option I, the client's full
/// gradient at the server's model. Zeros for no rows.
pub fn full_gradient(
    arch: &Architecture,
    params: &[f32],
    data: SplitView<'_>,
    chunk: usize,
) -> Vec<f32> {
    let n = data.len();
    let mut sum = vec![0f64; params.len()];
    let ps = arch.params(params);
    let layers = arch.layers(&ps);
    let mut flat = vec![0f32; params.len()];
    for start in (0..n).step_by(chunk.max(1)) {
        let len = chunk.max(1).min(n - start);
        let part = SplitView {
            features: &data.features[start * data.dim..(start + len) * data.dim],
            labels: &data.labels[start..start + len],
            dim: data.dim,
        };
        let (x, y) = data_tensors(&part);
        let y = targets(arch, &y);
        let grads = arch.gradients(&ps, &layers, &x, &y, None, &[]);
        tch::no_grad(|| flatten_into(&grads, &mut flat));
        let share = len as f64 / n as f64;
        sum.iter_mut()
            .zip(&flat)
            .for_each(|(s, &g)| *s += share * g as f64);
    }
    sum.into_iter().map(|s| s as f32).collect()
}

/// Calls `step` once per minibatch of `plan` over `data`, in order, the batches drawn from `rng`
/// exactly as [`train_sgd`] draws them (with their dropout masks).
pub fn for_each_batch(
    arch: &Architecture,
    data: SplitView<'_>,
    plan: &LocalPlan,
    rng: &mut impl Rng,
    mut step: impl FnMut(&Batch<'_>),
) {
    let (x, y) = data_tensors(&data);
    let y = targets(arch, &y);
    for (order, batches) in plan.passes(data.len(), rng) {
        let perm = Tensor::from_slice(&order);
        let (xp, yp) = (x.index_select(0, &perm), y.index_select(0, &perm));
        for (start, len) in batches {
            let (s, l) = (start as i64, len as i64);
            let masks = arch.dropout_masks(len, rng);
            step(&Batch {
                arch,
                x: xp.narrow(0, s, l),
                y: yp.narrow(0, s, l),
                masks,
                weight_decay: plan.weight_decay,
            });
        }
    }
}

/// One PyTorch SGD step: d = g + wd·p; with momentum, buf = μ·buf + d (buf = d at first) and
/// d = buf; then p −= lr·d.
fn sgd_update(
    ps: &[Tensor],
    grads: Vec<Tensor>,
    bufs: &mut Option<Vec<Tensor>>,
    plan: &LocalPlan,
    lr: f64,
) {
    tch::no_grad(|| {
        let mut directions = grads;
        if plan.weight_decay != 0.0 {
            // Not in place, as for the proximal term above.
            for (d, p) in directions.iter_mut().zip(ps) {
                *d = &*d + p * plan.weight_decay;
            }
        }
        if plan.momentum != 0.0 {
            match bufs.as_mut() {
                None => *bufs = Some(directions.iter().map(Tensor::copy).collect()),
                Some(bs) => {
                    for (b, d) in bs.iter_mut().zip(&directions) {
                        let _ = b.g_mul_scalar_(plan.momentum).g_add_(d);
                    }
                }
            }
            directions = bufs
                .as_ref()
                .expect("set above")
                .iter()
                .map(Tensor::shallow_clone)
                .collect();
        }
        for (p, d) in ps.iter().zip(&directions) {
            let _ = p.shallow_clone().g_sub_(&(d * lr));
        }
    })
}

/// The loss of every row of a split under each of `models` (FedEM's E-step): `[model][row]`.
/// Linear models go through `models::linear`, in plain Rust.
pub fn sample_losses<M: AsRef<[f32]>>(
    arch: &Architecture,
    models: &[M],
    data: SplitView<'_>,
) -> Vec<Vec<f32>> {
    let n = data.len();
    if n == 0 || models.is_empty() {
        return vec![Vec::new(); models.len()];
    }
    if let Some(linear) = Linear::of(arch) {
        return linear.sample_losses(models, data);
    }
    let (x, y) = data_tensors(&data);
    let y = targets(arch, &y);
    let losses = tch::no_grad(|| {
        let each: Vec<Tensor> = models
            .iter()
            .map(|params| {
                let ps: Vec<Tensor> = (arch.params(params.as_ref()).iter())
                    .map(Tensor::detach)
                    .collect();
                loss(
                    arch,
                    &arch.forward(&arch.layers(&ps), &x, &[]),
                    &y,
                    Reduction::None,
                )
                .view([-1])
            })
            .collect();
        Tensor::cat(&each, 0)
    });
    let mut flat = vec![0f32; models.len() * n];
    losses
        .to_kind(Kind::Float)
        .copy_data(&mut flat, models.len() * n);
    flat.chunks(n).map(<[f32]>::to_vec).collect()
}

/// Loss and accuracy of class probabilities `prob` (`[n, 1]` for two classes: P(y = 1)).
pub(super) fn mixture_stats(arch: &Architecture, prob: Tensor, y: &Tensor, n: usize) -> EvalStats {
    {
        let prob = prob.clamp(1e-12, 1.0 - 1e-12);
        let (loss_sum, hits) = if arch.is_binary() {
            let p1 = prob.squeeze_dim(1);
            // libtorch refuses NaN probabilities (a diverged model's): their loss is NaN.
            let nll = if p1.isnan().any().int64_value(&[]) != 0 {
                f64::NAN
            } else {
                p1.binary_cross_entropy::<Tensor>(&y.to_kind(Kind::Float), None, Reduction::Sum)
                    .double_value(&[])
            };
            let hits = p1
                .gt(0.5)
                .to_kind(Kind::Int64)
                .eq_tensor(y)
                .sum(Kind::Int64);
            (nll, hits.int64_value(&[]))
        } else {
            let nll = -prob
                .log()
                .gather(1, &y.unsqueeze(1), false)
                .sum(Kind::Double);
            let hits = prob.argmax(1, false).eq_tensor(y).sum(Kind::Int64);
            (nll.double_value(&[]), hits.int64_value(&[]))
        };
        EvalStats {
            n,
            loss: loss_sum / n as f64,
            accuracy: hits as f64 / n as f64,
        }
    }
}

/// How much each component of a mixture counts.
#[derive(Clone, Copy, Debug)]
pub enum Gates<'a> {
    /// The same weight on every row (FedEM's π; one model with weight 1).
    Fixed(&'a [f64]),
    /// A weight per component and row, `[m][i]` (FedGMM's Σ_k p(k, m | x)).
    PerRow(&'a [Vec<f64>]),
}

/// Σₘ gₘ(x)·p(y | x; θₘ) of the components' `logits` (each `[n, outputs]`): class
/// probabilities, `[n, 1]` (P(y = 1)) for two classes.
pub(super) fn mixture_of_logits(
    arch: &Architecture,
    logits: impl IntoIterator<Item = Tensor>,
    gates: Gates<'_>,
) -> Tensor {
    let mut prob: Option<Tensor> = None;
    for (m, logits) in logits.into_iter().enumerate() {
        let n = logits.size()[0];
        let p = if arch.is_binary() {
            logits.sigmoid()
        } else {
            logits.softmax(1, Kind::Float)
        };
        let p = match gates {
            Gates::Fixed(weights) => p * weights[m],
            Gates::PerRow(gates) => {
                let g: Vec<f32> = gates[m].iter().map(|&v| v as f32).collect();
                let g = Tensor::from_slice(&g).reshape([n, 1]).to_device(p.device());
                p * g
            }
        };
        prob = Some(match prob {
            None => p,
            Some(acc) => acc + p,
        });
    }
    prob.expect("at least one component")
}

/// Σₘ gₘ(x)·p(y | x; θₘ) on rows `x`: class probabilities, `[n, 1]` (P(y = 1)) for two
/// classes.
fn mixture_probabilities(
    arch: &Architecture,
    components: &[&[f32]],
    gates: Gates<'_>,
    x: &Tensor,
) -> Tensor {
    let logits = components.iter().map(|theta| {
        let ps: Vec<Tensor> = arch.params(theta).iter().map(Tensor::detach).collect();
        arch.forward(&arch.layers(&ps), x, &[])
    });
    mixture_of_logits(arch, logits, gates)
}

/// Loss and accuracy of the mixture Σₘ gₘ(x)·p(y | x; θₘ) on a split: class probabilities
/// (sigmoid for two classes, softmax otherwise) averaged with the gates.
pub fn evaluate_mixture(
    arch: &Architecture,
    components: &[&[f32]],
    gates: Gates<'_>,
    data: SplitView<'_>,
) -> EvalStats {
    let n = data.len();
    if n == 0 {
        return EvalStats::default();
    }
    let (x, y) = data_tensors(&data);
    tch::no_grad(|| {
        let prob = mixture_probabilities(arch, components, gates, &x);
        mixture_stats(arch, prob, &y, n)
    })
}

/// The confidence maxᵧ p(y | x) of the mixture on each row (the baselines' novelty score; a
/// plain model is one component with `Gates::Fixed(&[1.0])`).
pub fn confidence(
    arch: &Architecture,
    components: &[&[f32]],
    gates: Gates<'_>,
    data: SplitView<'_>,
) -> Vec<f64> {
    let n = data.len();
    if n == 0 {
        return Vec::new();
    }
    let (x, _) = data_tensors(&data);
    let top = tch::no_grad(|| {
        top_probability(arch, mixture_probabilities(arch, components, gates, &x), n)
    });
    top.into_iter().map(f64::from).collect()
}

/// The highest confidence maxᵧ p(y | x) any of `models` gives each row (NaN passed over): the
/// novelty score over several clients' classifiers (`evaluation.novelty: max_over_clients`).
/// Each model's confidence is [`confidence`]'s, the rows made into a tensor once.
pub fn highest_confidence(arch: &Architecture, models: &[&[f32]], data: SplitView<'_>) -> Vec<f64> {
    let n = data.len();
    if n == 0 {
        return Vec::new();
    }
    let (x, _) = data_tensors(&data);
    let mut highest = vec![f32::NAN; n];
    for model in models {
        let top = tch::no_grad(|| {
            let prob = mixture_probabilities(arch, &[model], Gates::Fixed(&[1.0]), &x);
            top_probability(arch, prob, n)
        });
        highest.iter_mut().zip(top).for_each(|(h, t)| *h = h.max(t));
    }
    highest.into_iter().map(f64::from).collect()
}

/// Each row's highest class probability, from the `[n, classes]` probabilities `prob` (one
/// column, p(y = 1), for two classes).
fn top_probability(arch: &Architecture, prob: Tensor, n: usize) -> Vec<f32> {
    let top = if arch.is_binary() {
        let p1 = prob.squeeze_dim(1);
        p1.maximum(&(p1.ones_like() - &p1))
    } else {
        prob.max_dim(1, false).0
    };
    let mut out = vec![0f32; n];
    top.to_kind(Kind::Float).copy_data(&mut out, n);
    out
}

/// The activation of `arch`'s last layer on each row of `data`: `[n, ...]` (a network cut
/// after a hidden layer, [`Architecture::cut_after`], gives a representation of the rows).
/// Computed on one thread, as the trainers compute, so its bits do not depend on where it
/// runs.
pub fn activations(arch: &Architecture, params: &[f32], data: SplitView<'_>) -> Tensor {
    let shape: Vec<i64> = std::iter::once(data.len())
        .chain(arch.output_shape())
        .map(|d| d as i64)
        .collect();
    if data.is_empty() {
        return Tensor::zeros(shape, (Kind::Float, Device::Cpu));
    }
    tch::set_num_threads(1);
    let (x, _) = data_tensors(&data);
    tch::no_grad(|| {
        let ps: Vec<Tensor> = arch.params(params).iter().map(Tensor::detach).collect();
        let out = arch.forward(&arch.layers(&ps), &x, &[]);
        out.reshape(shape).to_kind(Kind::Float).copy()
    })
}

/// Mean loss and accuracy of `params` on a split.
pub fn evaluate(arch: &Architecture, params: &[f32], data: SplitView<'_>) -> EvalStats {
    let n = data.len();
    if n == 0 {
        return EvalStats::default();
    }
    let (x, y) = data_tensors(&data);
    tch::no_grad(|| {
        let ps: Vec<Tensor> = arch.params(params).iter().map(Tensor::detach).collect();
        logit_stats(arch, &arch.forward(&arch.layers(&ps), &x, &[]), &y)
    })
}

/// Mean loss and accuracy of `logits` (`[n, outputs]`) for labels `y` (`[n]`).
pub(super) fn logit_stats(arch: &Architecture, logits: &Tensor, y: &Tensor) -> EvalStats {
    let n = y.size()[0] as usize;
    let loss_sum = loss(arch, logits, &targets(arch, y), Reduction::Sum).double_value(&[]);
    let hits = correct(arch, logits, y);
    EvalStats {
        n,
        loss: loss_sum / n as f64,
        accuracy: hits as f64 / n as f64,
    }
}

/// A model to evaluate: one parameter vector, or a mixture of components under gates.
pub enum Predictor<'a> {
    Params(Cow<'a, [f32]>),
    Mixture {
        components: Vec<&'a [f32]>,
        gates: MixtureGates<'a>,
    },
}

/// Makes a split's per-row gates, `[m][i]`, from the split.
pub type RowGates<'a> = Box<dyn Fn(SplitView<'_>) -> Vec<Vec<f64>> + 'a>;

/// The gates of a [`Predictor::Mixture`].
pub enum MixtureGates<'a> {
    /// The same weight on every row (FedEM's π).
    Fixed(&'a [f64]),
    /// A weight per component and row of the split evaluated, `[m][i]`, made from the split
    /// (FedGMM's Σ_k p(k, m | x)).
    PerRow(RowGates<'a>),
}

impl Predictor<'_> {
    /// Its parameter vectors: one, or one per component.
    pub fn parameter_vectors(&self) -> Vec<&[f32]> {
        match self {
            Predictor::Params(params) => vec![&params[..]],
            Predictor::Mixture { components, .. } => components.clone(),
        }
    }

    /// Mean loss and accuracy on a split (alone: [`evaluate`] or [`evaluate_mixture`]).
    pub fn evaluate(&self, arch: &Architecture, data: SplitView<'_>) -> EvalStats {
        match self {
            Predictor::Params(params) => evaluate(arch, params, data),
            Predictor::Mixture { components, gates } => match gates {
                MixtureGates::Fixed(pi) => {
                    evaluate_mixture(arch, components, Gates::Fixed(pi), data)
                }
                MixtureGates::PerRow(of) => {
                    evaluate_mixture(arch, components, Gates::PerRow(&of(data)), data)
                }
            },
        }
    }

    /// Mean loss and accuracy on a split from its parameter vectors' logits there (`[n,
    /// outputs]` each, in [`Predictor::parameter_vectors`] order) and its labels `y`, on
    /// whatever device they are; `data` is the split on the host (per-row gates are made
    /// from it).
    pub fn stats_of_logits(
        &self,
        arch: &Architecture,
        logits: Vec<Tensor>,
        y: &Tensor,
        data: SplitView<'_>,
    ) -> EvalStats {
        let n = data.len();
        tch::no_grad(|| match self {
            Predictor::Params(_) => logit_stats(arch, &logits[0], y),
            Predictor::Mixture { gates, .. } => {
                let prob = match gates {
                    MixtureGates::Fixed(pi) => mixture_of_logits(arch, logits, Gates::Fixed(pi)),
                    MixtureGates::PerRow(of) => {
                        mixture_of_logits(arch, logits, Gates::PerRow(&of(data)))
                    }
                };
                mixture_stats(arch, prob, y, n)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelSpec;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    fn plan(work: LocalWork, momentum: f64, wd: f64) -> LocalPlan {
        LocalPlan {
            work,
            batch_size: 4,
            momentum,
            weight_decay: wd,
            dp_sgd: None,
        }
    }

    /// `start` after `train_sgd` with `plan`, `lr` and `objective`, from zero momentum, its
    /// minibatches drawn from the stream of seed 0.
    fn trained(
        arch: &Architecture,
        start: &[f32],
        view: SplitView<'_>,
        plan: &LocalPlan,
        lr: f64,
        objective: &Objective<'_>,
    ) -> Vec<f32> {
        let mut p = start.to_vec();
        let mut stream = ChaCha20Rng::seed_from_u64(0);
        train_sgd(
            arch,
            &mut p,
            &mut Vec::new(),
            view,
            plan,
            lr,
            &mut stream,
            objective,
        );
        p
    }

    #[test]
    fn a_part_of_the_work_rounds_up() {
        // ⌈f · n⌉, at least 1 and at most all.
        assert_eq!(LocalWork::Epochs(5).part(0.2), LocalWork::Epochs(1));
        assert_eq!(LocalWork::Epochs(5).part(0.21), LocalWork::Epochs(2));
        assert_eq!(LocalWork::Steps(10).part(1e-9), LocalWork::Steps(1));
        assert_eq!(LocalWork::Steps(10).part(1.0), LocalWork::Steps(10));
    }

    #[test]
    fn steps_weights_by_hand() {
        // ρ = 0.5, three steps: c = 1, 1.5, 1.75, a = 4.25 = [3 − 0.5·(1 − 0.125)/0.5] / 0.5.
        assert_eq!(plan(LocalWork::Steps(3), 0.5, 0.0).steps_weight(10), 4.25);
        assert_eq!(plan(LocalWork::Steps(7), 0.0, 0.0).steps_weight(10), 7.0);
        // Two epochs of ⌈10/4⌉ = 3 batches; no rows, no steps.
        assert_eq!(plan(LocalWork::Epochs(2), 0.0, 0.0).steps_weight(10), 6.0);
        assert_eq!(plan(LocalWork::Epochs(2), 0.9, 0.0).steps_weight(0), 0.0);
    }

    /// With every row weighing 0 the data's gradient is 0, so a run's only direction is its
    /// correction c: K steps with momentum ρ from a zero buffer move θ by exactly
    /// −lr·steps_weight·c (the linear model in plain Rust and an MLP through LibTorch alike).
    #[test]
    fn a_runs_change_is_its_steps_weight_times_its_mean_direction() {
        let (x, y) = (vec![1.0f32, 2.0, 2.0, 0.0], vec![1i64, 0]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let zero = [0.0f32; 2];
        for model in ["{kind: linear}", "{kind: mlp, hidden: [3]}"] {
            let arch = Architecture::new(&ModelSpec::from_yaml(model).unwrap(), 2, 2);
            let start = arch.init(&mut ChaCha20Rng::seed_from_u64(1));
            let c: Vec<f32> = (0..start.len()).map(|j| 0.125 * (j % 5) as f32).collect();
            let pl = LocalPlan {
                batch_size: 1,
                ..plan(LocalWork::Steps(4), 0.5, 0.0)
            };
            let objective = Objective {
                sample_weights: Some(&zero),
                correction: Some(&c),
                ..Default::default()
            };
            let p = trained(&arch, &start, view, &pl, 0.1, &objective);
            // c_t = 1, 1.5, 1.75, 1.875: a = 6.125.
            assert_eq!(pl.steps_weight(2), 6.125);
            for ((p, s), c) in p.iter().zip(&start).zip(&c) {
                let want = s - 0.1 * 6.125 * c;
                assert!((p - want).abs() < 1e-5, "{model}: {p} vs {want}");
            }
        }
    }

    #[test]
    fn highest_confidence_by_hand() {
        // Logistic models on rows (1, 0) and (0, 1): w = (2, 0) is sure of row 0 (σ(2)) and
        // unsure of row 1 (σ(0) = ½); w = (0, −3) the other way round (1 − σ(−3) = σ(3)); a
        // diverged model's NaN confidences are passed over.
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        let (x, y) = (vec![1.0f32, 0.0, 0.0, 1.0], vec![0i64, 0]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let (a, b, nan) = ([2.0f32, 0.0, 0.0], [0.0f32, -3.0, 0.0], [f32::NAN; 3]);
        let highest = highest_confidence(&arch, &[&a, &nan, &b], view);
        let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
        assert!((highest[0] - sigmoid(2.0)).abs() < 1e-6, "{highest:?}");
        assert!((highest[1] - sigmoid(3.0)).abs() < 1e-6, "{highest:?}");
        // Each model's own confidence, the highest taken row by row.
        let one = |m: &[f32]| confidence(&arch, &[m], Gates::Fixed(&[1.0]), view);
        let (ca, cb) = (one(&a), one(&b));
        assert_eq!(highest, vec![ca[0].max(cb[0]), ca[1].max(cb[1])]);
        assert!(one(&nan).iter().all(|c| c.is_nan()));
    }

    #[test]
    fn one_step_matches_hand_computed_logistic_gradient() {
        // One sample x = (1, 2), y = 1, w = 0, b = 0: sigmoid(0) = 0.5, dL/dw = (0.5 − 1)·x.
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        let mut p = vec![0.0f32; 3];
        let (x, y) = (vec![1.0f32, 2.0], vec![1i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let mut mom = Vec::new();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        train_sgd(
            &arch,
            &mut p,
            &mut mom,
            view,
            &plan(LocalWork::Steps(1), 0.0, 0.0),
            0.1,
            &mut rng,
            &Objective::default(),
        );
        let expect = [0.05f32, 0.1, 0.05];
        for (a, b) in p.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
        assert!(mom.is_empty());
    }

    #[test]
    fn proximal_term_pulls_towards_the_anchor() {
        // As above (logistic gradient (−0.5, −1, −0.5)), plus μ(θ − a) with μ = 0.5 and
        // a = (0.2, 0.2, 0.2): −0.1 each. One step of lr 0.1: θ = (0.06, 0.11, 0.06).
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        let (x, y) = (vec![1.0f32, 2.0], vec![1i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let mut p = vec![0.0f32; 3];
        let anchor = [0.2f32; 3];
        let objective = Objective {
            proximal: Some(Proximal {
                anchor: &anchor,
                mu: 0.5,
            }),
            ..Default::default()
        };
        let pl = plan(LocalWork::Steps(1), 0.0, 0.0);
        train_sgd(
            &arch,
            &mut p,
            &mut Vec::new(),
            view,
            &pl,
            0.1,
            &mut ChaCha20Rng::seed_from_u64(0),
            &objective,
        );
        for (a, b) in p.iter().zip([0.06f32, 0.11, 0.06]) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
    }

    #[test]
    fn a_full_gradient_is_the_mean_of_the_rows_whatever_the_chunks() {
        // At θ = 0 (p = 0.5): row (1, 2) with label 1 gives (−0.5, −1, −0.5), row (2, 0) with
        // label 0 gives (1, 0, 0.5); their mean is (0.25, −0.5, 0).
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        let (x, y) = (vec![1.0f32, 2.0, 2.0, 0.0], vec![1i64, 0]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        for chunk in [1, 2, 64] {
            let g = full_gradient(&arch, &[0.0; 3], view, chunk);
            for (a, b) in g.iter().zip([0.25f32, -0.5, 0.0]) {
                assert!((a - b).abs() < 1e-6, "chunk {chunk}: {g:?}");
            }
        }
    }

    #[test]
    fn a_correction_adds_to_every_steps_gradient() {
        // As above (logistic gradient (−0.5, −1, −0.5)), plus c = (0.3, −0.2, 0.1). One step
        // of lr 0.1: θ = −0.1·(−0.2, −1.2, −0.4) = (0.02, 0.12, 0.04).
        let (x, y) = (vec![1.0f32, 2.0], vec![1i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let step = |model: &str, correction: Option<&[f32]>| {
            let spec = ModelSpec::from_yaml(model).unwrap();
            let arch = Architecture::new(&spec, 2, 2);
            let mut rng = ChaCha20Rng::seed_from_u64(3);
            let mut p = arch.init(&mut rng);
            if model == "{kind: linear}" {
                p.fill(0.0);
            }
            let objective = Objective {
                correction,
                ..Default::default()
            };
            let pl = plan(LocalWork::Steps(1), 0.0, 0.0);
            trained(&arch, &p, view, &pl, 0.1, &objective)
        };
        let linear = step("{kind: linear}", Some(&[0.3, -0.2, 0.1]));
        for (a, b) in linear.iter().zip([0.02f32, 0.12, 0.04]) {
            assert!((a - b).abs() < 1e-6, "{linear:?}");
        }
        // Through LibTorch (an MLP): the step moves by −lr·c more than without it.
        let mlp = "{kind: mlp, hidden: [3]}";
        let n = step(mlp, None).len();
        let c: Vec<f32> = (0..n).map(|j| (j as f32 - 8.0) / 10.0).collect();
        let (plain, corrected) = (step(mlp, None), step(mlp, Some(&c)));
        for ((p, q), c) in plain.iter().zip(&corrected).zip(&c) {
            assert!((p - 0.1 * c - q).abs() < 1e-6, "{p} − 0.1·{c} vs {q}");
        }
    }

    #[test]
    fn momentum_and_weight_decay_follow_pytorch() {
        // Two steps on the same sample with momentum 0.9 and weight decay 0.5.
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 1, 2);
        let (x, y) = (vec![1.0f32], vec![0i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 1,
        };
        let mut p = vec![1.0f32, 0.0];
        let mut mom = Vec::new();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let pl = plan(LocalWork::Steps(2), 0.9, 0.5);
        train_sgd(
            &arch,
            &mut p,
            &mut mom,
            view,
            &pl,
            0.1,
            &mut rng,
            &Objective::default(),
        );
        // By hand: step 1 at (w, b) = (1, 0): s = σ(1) = 0.731059, g = (s, s) + 0.5·(w, b).
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let (mut w, mut b) = (1.0f64, 0.0f64);
        let s = sig(w + b);
        let (mut bw, mut bb) = (s + 0.5 * w, s + 0.5 * b);
        w -= 0.1 * bw;
        b -= 0.1 * bb;
        let s = sig(w + b);
        bw = 0.9 * bw + s + 0.5 * w;
        bb = 0.9 * bb + s + 0.5 * b;
        w -= 0.1 * bw;
        b -= 0.1 * bb;
        assert!(
            (p[0] as f64 - w).abs() < 1e-6 && (p[1] as f64 - b).abs() < 1e-6,
            "{p:?}"
        );
        assert!((mom[0] as f64 - bw).abs() < 1e-6 && (mom[1] as f64 - bb).abs() < 1e-6);
    }

    #[test]
    fn epochs_cover_every_row_once_per_epoch() {
        let pl = LocalPlan {
            work: LocalWork::Epochs(2),
            batch_size: 3,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: None,
        };
        let passes = pl.passes(7, &mut ChaCha20Rng::seed_from_u64(5));
        assert_eq!(passes.len(), 2);
        for (order, batches) in &passes {
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..7).collect::<Vec<_>>());
            assert_eq!(batches, &[(0, 3), (3, 3), (6, 1)]);
        }
        assert_ne!(passes[0].0, passes[1].0, "each epoch reshuffles");
        assert_eq!(pl.samples_processed(7), 14);
    }

    /// DP-SGD's batches: ⌈n/B⌉ steps an epoch (or the steps asked), each a Poisson sample of
    /// the rows at q = 1/⌈n/B⌉ in row order (so B rows on average, sometimes none), drawn
    /// from the stream alone.
    #[test]
    fn dp_sgd_batches_are_poisson_samples_of_the_rows() {
        let dp_sgd = Some(DpSgd {
            clip: 1.0,
            noise_multiplier: 1.0,
        });
        let plan = |work| LocalPlan {
            work,
            batch_size: 4,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd,
        };
        let epochs = plan(LocalWork::Epochs(2));
        assert_eq!(epochs.dp_sampling_rate(10), 1.0 / 3.0);
        assert_eq!(epochs.dp_sampling_rate(4), 1.0);
        assert_eq!((epochs.steps(10), epochs.steps(0)), (6, 0));
        assert_eq!(plan(LocalWork::Steps(5)).steps(10), 5);
        let passes = epochs.passes(10, &mut ChaCha20Rng::seed_from_u64(3));
        assert_eq!(
            passes,
            epochs.passes(10, &mut ChaCha20Rng::seed_from_u64(3))
        );
        assert_eq!(passes.len(), 2);
        for (order, batches) in &passes {
            assert_eq!(batches.len(), 3);
            let mut at = 0;
            for &(start, len) in batches {
                assert_eq!(start, at);
                let rows = &order[start..start + len];
                assert!(rows.windows(2).all(|w| w[0] < w[1]), "{rows:?}");
                at += len;
            }
            assert_eq!(at, order.len());
        }
        // Every row joins a step with probability 1/3: over 3 000 steps of 10 rows, each row's
        // count within 5 standard deviations (√(3000·2/9) ≈ 26) of 1 000; some steps empty.
        let long = plan(LocalWork::Steps(3_000)).passes(10, &mut ChaCha20Rng::seed_from_u64(4));
        let mut joined = [0usize; 10];
        long[0].0.iter().for_each(|&r| joined[r as usize] += 1);
        assert!(
            joined.iter().all(|&k| k.abs_diff(1_000) < 130),
            "{joined:?}"
        );
        assert!(long[0].1.iter().any(|&(_, len)| len == 0));
        // n ≤ B: every row every step.
        let all = plan(LocalWork::Steps(3)).passes(4, &mut ChaCha20Rng::seed_from_u64(5));
        assert_eq!(all[0].1, [(0, 4), (4, 4), (8, 4)]);
    }

    #[test]
    fn steps_continue_across_passes() {
        let pl = LocalPlan {
            work: LocalWork::Steps(4),
            batch_size: 3,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: None,
        };
        let passes = pl.passes(7, &mut ChaCha20Rng::seed_from_u64(5));
        let batches: Vec<_> = passes.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(batches, [(0, 3), (3, 3), (6, 1), (0, 3)]);
        assert_eq!(pl.samples_processed(7), 12);
    }

    #[test]
    fn mlp_training_lowers_the_loss() {
        // Autograd path: a small MLP on a problem no linear model separates.
        let arch = Architecture::new(
            &ModelSpec::from_yaml("{kind: mlp, hidden: [16]}").unwrap(),
            2,
            2,
        );
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let xs: Vec<f32> = (0..200 * 2).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let ys: Vec<i64> = xs.chunks(2).map(|p| (p[0] * p[1] > 0.0) as i64).collect();
        let view = SplitView {
            features: &xs,
            labels: &ys,
            dim: 2,
        };
        let mut p = arch.init(&mut rng);
        let before = evaluate(&arch, &p, view).loss;
        let pl = LocalPlan {
            work: LocalWork::Epochs(100),
            batch_size: 16,
            momentum: 0.9,
            weight_decay: 0.0,
            dp_sgd: None,
        };
        train_sgd(
            &arch,
            &mut p,
            &mut Vec::new(),
            view,
            &pl,
            0.1,
            &mut rng,
            &Objective::default(),
        );
        let after = evaluate(&arch, &p, view);
        assert!(after.loss < 0.5 * before, "loss {before} -> {}", after.loss);
        assert!(after.accuracy > 0.85, "accuracy {}", after.accuracy);
    }

    #[test]
    fn evaluate_counts_hits() {
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 1, 2);
        let (x, y) = (vec![1.0f32, -1.0, 2.0], vec![1i64, 0, 0]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 1,
        };
        let s = evaluate(&arch, &[1.0, 0.0], view);
        assert_eq!(s.n, 3);
        assert!((s.accuracy - 2.0 / 3.0).abs() < 1e-12);
    }
}
