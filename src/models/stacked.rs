//! Local SGD of many runs at once: a cohort's runs as one stacked computation per step.
//!
//! Every parameter tensor of the model is held as `[R, …]` for the R runs, each minibatch step
//! gathers the runs' batches into `[A, B, features]` (A runs that have a batch at that step, B
//! the longest of their batches) and runs one batched op per layer (`bmm`, `baddbmm`). A run
//! takes exactly the steps [`super::train_sgd`] would take for it alone, from its own passes:
//! rows padding a short batch weigh zero, and a run with no batch left at a step is left out of
//! that step (no weight decay, no momentum, no move). The arithmetic per run is the same as
//! alone, so results agree up to float rounding (batched kernels sum in another order).
//!
//! Algorithms with their own update rule step their runs' minibatches the same way
//! ([`for_each_stacked_batch`]) and ask a [`StackedBatch`] for gradients at any parameters, one
//! vector per run, as a run alone asks its [`super::Batch`].
//!
//! Only models of dense layers with ReLUs between them stack
//! ([`Architecture::stacked_dense_layers`]): the linear model (with its closed-form gradient,
//! as alone) and the MLP (autograd). This room draws no random numbers: the passes come in.

use super::device::DeviceRows;
use super::sgd::{LocalPlan, Pass};
use super::Architecture;
use crate::data::SplitView;
use tch::{Device, Kind, Reduction, Tensor};

/// One local SGD run of a cohort, trained in place.
pub struct StackedRun<'a> {
    pub params: &'a mut Vec<f32>,
    /// Empty: no buffer yet (the first step starts it, as PyTorch's SGD does). `None`: plain
    /// SGD, whatever the plan's momentum.
    pub momentum: Option<&'a mut Vec<f32>>,
    /// One weight per training row of the run (FedEM's M-step).
    pub sample_weights: Option<&'a [f32]>,
    /// `(anchor, μ)`: adds (μ/2)·‖θ − anchor‖² to the loss (FedProx).
    pub proximal: Option<(&'a [f32], f64)>,
    /// Index of the run's first training row among the rows given to [`train_sgd_stacked`].
    pub first_row: usize,
    /// The run's shuffled passes over its rows ([`LocalPlan::passes`], drawn from its client's
    /// stream).
    pub passes: Vec<Pass>,
    pub lr: f64,
}

/// Trains every run of `runs` with `plan` as [`super::train_sgd`] would train it alone, as one
/// stacked computation per step. `rows` holds every run's training rows (a data set's rows);
/// `resident`, the same rows on the device to train on (the CPU without it: minibatches are
/// then gathered from `rows`). Panics if the model does not stack (see
/// [`Architecture::stacked_dense_layers`]).
pub fn train_sgd_stacked(
    arch: &Architecture,
    plan: &LocalPlan,
    rows: SplitView<'_>,
    resident: Option<&DeviceRows>,
    runs: &mut [StackedRun<'_>],
) {
    let dense = arch
        .stacked_dense_layers()
        .expect("only dense models train stacked (checked before a cohort is formed)");
    if runs.is_empty() {
        return;
    }
    // Runs sorted by their number of steps, longest first (ties in the given order): the runs
    // that still have a batch at a step are then a prefix of the stack.
    let steps_of =
        |run: &StackedRun<'_>| run.passes.iter().map(|(_, cuts)| cuts.len()).sum::<usize>();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(steps_of(&runs[k])));
    let sorted: Vec<&StackedRun<'_>> = order.iter().map(|&k| &runs[k]).collect();
    let r = sorted.len() as i64;
    let device = resident.map_or(Device::Cpu, DeviceRows::device);
    let num_params = arch.num_params();
    let stack = |vectors: Vec<Option<&[f32]>>| {
        let mut all = Vec::with_capacity(sorted.len() * num_params);
        for v in vectors {
            match v {
                Some(v) => {
                    assert_eq!(v.len(), num_params, "vector of the wrong length");
                    all.extend_from_slice(v);
                }
                None => all.resize(all.len() + num_params, 0.0),
            }
        }
        unflatten(&all, r, &dense, device)
    };
    let mut params = stack(sorted.iter().map(|run| Some(&run.params[..])).collect());
    let use_momentum = plan.momentum != 0.0;
    let takes_momentum: Vec<bool> = sorted
        .iter()
        .map(|run| use_momentum && run.momentum.is_some())
        .collect();
    fn buffer_of<'r>(run: &'r StackedRun<'_>) -> Option<&'r [f32]> {
        run.momentum
            .as_deref()
            .filter(|m| !m.is_empty())
            .map(|m| &m[..])
    }
    let mut has_buffer: Vec<bool> = sorted
        .iter()
        .zip(&takes_momentum)
        .map(|(&run, &takes)| takes && buffer_of(run).is_some())
        .collect();
    let mut buffers = takes_momentum
        .iter()
        .any(|&t| t)
        .then(|| stack(sorted.iter().map(|&run| buffer_of(run)).collect()));
    let proximal = sorted.iter().any(|run| run.proximal.is_some()).then(|| {
        let anchors = stack(
            sorted
                .iter()
                .map(|run| run.proximal.map(|(a, _)| a))
                .collect(),
        );
        let mu: Vec<f32> = sorted
            .iter()
            .map(|run| run.proximal.map_or(0.0, |(_, mu)| mu as f32))
            .collect();
        (anchors, mu)
    });
    let lr: Vec<f32> = sorted.iter().map(|run| run.lr as f32).collect();
    let mut steps = Steps::new(sorted.iter().map(|run| StepRun {
        passes: &run.passes,
        first_row: run.first_row,
        sample_weights: run.sample_weights,
    }));
    for step in 0..steps.count() {
        let active = steps.active(step);
        let a = active as i64;
        let (x, y, weight) = steps.gather(step, rows, resident);
        let pick =
            |ts: &[Tensor]| -> Vec<Tensor> { ts.iter().map(|t| t.narrow(0, 0, a)).collect() };
        let ps = pick(&params);
        let grads = stacked_gradients(arch, &ps, &x, &y, &weight);
        drop(x);
        let next = tch::no_grad(|| {
            let mut next_params = Vec::with_capacity(ps.len());
            let mut next_buffers = Vec::with_capacity(ps.len());
            let prox = proximal
                .as_ref()
                .map(|(anchors, mu)| (pick(anchors), &mu[..active]));
            let bufs = buffers.as_ref().map(|b| pick(b));
            let keep: Vec<f32> = has_buffer[..active]
                .iter()
                .map(|&has| if has { plan.momentum as f32 } else { 0.0 })
                .collect();
            for (j, (p, g)) in ps.iter().zip(grads).enumerate() {
                let dims = p.dim();
                let mut d = g;
                if let Some((anchors, mu)) = &prox {
                    d += (p - &anchors[j]) * per_run(mu, dims, device);
                }
                if plan.weight_decay != 0.0 {
                    d += p * plan.weight_decay;
                }
                if let Some(bufs) = &bufs {
                    d = &bufs[j] * per_run(&keep, dims, device) + d;
                    next_buffers.push(d.shallow_clone());
                }
                next_params.push(p - d * per_run(&lr[..active], dims, device));
            }
            (next_params, next_buffers)
        });
        let (next_params, next_buffers) = next;
        put(&mut params, next_params, a);
        if let Some(bufs) = buffers.as_mut() {
            put(bufs, next_buffers, a);
            has_buffer[..active].copy_from_slice(&takes_momentum[..active]);
        }
    }
    let flat = flatten(&params, num_params);
    for (&k, values) in order.iter().zip(flat.chunks(num_params)) {
        runs[k].params.copy_from_slice(values);
    }
    if let Some(bufs) = buffers {
        let flat = flatten(&bufs, num_params);
        for ((&k, values), has) in order.iter().zip(flat.chunks(num_params)).zip(has_buffer) {
            if let (true, Some(momentum)) = (has, runs[k].momentum.as_mut()) {
                momentum.clear();
                momentum.extend_from_slice(values);
            }
        }
    }
}

/// The runs' minibatches step by step. Runs are taken sorted by their number of steps, longest
/// first (ties in the given order), so the runs that still have a batch at a step are a prefix
/// of them: the step's `active` runs. Each step's batch is `[A, B, …]` for its A active runs, B
/// the longest of their batches; a shorter batch is padded with rows of weight zero.
struct Steps<'r> {
    runs: Vec<StepRun<'r>>,
    /// Per run: every batch of its passes in order, as (pass, start, len).
    batches: Vec<Vec<(usize, usize, usize)>>,
    /// The host buffer minibatches are gathered into (reused from step to step).
    gathered: Vec<f32>,
}

/// What [`Steps`] needs of a run.
struct StepRun<'r> {
    passes: &'r [Pass],
    /// The run's first row among the rows given.
    first_row: usize,
    sample_weights: Option<&'r [f32]>,
}

impl<'r> Steps<'r> {
    /// `runs` already sorted longest first.
    fn new(runs: impl Iterator<Item = StepRun<'r>>) -> Self {
        let runs: Vec<_> = runs.collect();
        let batches = runs
            .iter()
            .map(|run| {
                run.passes
                    .iter()
                    .enumerate()
                    .flat_map(|(p, (_, cuts))| cuts.iter().map(move |&(s, l)| (p, s, l)))
                    .collect::<Vec<_>>()
            })
            .collect();
        Steps {
            runs,
            batches,
            gathered: Vec::new(),
        }
    }

    fn count(&self) -> usize {
        self.batches.first().map_or(0, Vec::len)
    }

    /// How many runs have a batch at `step` (the first ones).
    fn active(&self, step: usize) -> usize {
        self.batches.iter().take_while(|b| step < b.len()).count()
    }

    /// The active runs' batch at `step`: features `[A, B, dim]`, labels `[A, B]` and row
    /// weights `[A, B]` (a row's weight over its run's batch length; zero on padding), on the
    /// device of `resident` (the CPU without it). The features may borrow this value's buffer:
    /// drop them before the next call.
    fn gather(
        &mut self,
        step: usize,
        rows: SplitView<'_>,
        resident: Option<&DeviceRows>,
    ) -> (Tensor, Tensor, Tensor) {
        let device = resident.map_or(Device::Cpu, DeviceRows::device);
        let active = self.active(step);
        let (a, b) = (
            active as i64,
            self.batches[..active]
                .iter()
                .map(|bs| bs[step].2)
                .max()
                .unwrap_or(0) as i64,
        );
        let mut index: Vec<usize> = Vec::with_capacity((a * b) as usize);
        let mut weight = Vec::with_capacity((a * b) as usize);
        let mut inv_len = Vec::with_capacity(active);
        for (run, bs) in self.runs.iter().zip(&self.batches) {
            if step >= bs.len() {
                break;
            }
            let (pass, start, len) = bs[step];
            let order = &run.passes[pass].0[start..start + len];
            for j in 0..b as usize {
                let row = order[j.min(len - 1)] as usize;
                index.push(run.first_row + row);
                weight.push(match (j < len, run.sample_weights) {
                    (false, _) => 0.0,
                    (true, None) => 1.0,
                    (true, Some(w)) => w[row],
                });
            }
            inv_len.push((1.0 / len as f64) as f32);
        }
        let dim = rows.dim as i64;
        let (x, y) = match resident {
            Some(on) => {
                let index: Vec<i64> = index.iter().map(|&row| row as i64).collect();
                let index = Tensor::from_slice(&index).to_device(device);
                (
                    on.x.index_select(0, &index).view([a, b, dim]),
                    on.y.index_select(0, &index).view([a, b]),
                )
            }
            None => {
                gather_rows(rows.features, rows.dim, &index, &mut self.gathered);
                // SAFETY: `gathered` holds a·b·dim values and is not touched again until the
                // next call, before which the caller drops `x` (and anything built from it).
                let x = unsafe {
                    Tensor::from_blob(
                        self.gathered.as_ptr() as *const u8,
                        &[a, b, dim],
                        &[],
                        Kind::Float,
                        Device::Cpu,
                    )
                };
                let labels: Vec<i64> = index.iter().map(|&row| rows.labels[row]).collect();
                (x, Tensor::from_slice(&labels).view([a, b]))
            }
        };
        let weight = Tensor::from_slice(&weight).view([a, b]).to_device(device)
            * per_run(&inv_len, 2, device);
        (x, y, weight)
    }
}

/// One run of a batchwise cohort (see [`for_each_stacked_batch`]): where its rows start among
/// the rows given, and its shuffled passes over them.
pub struct BatchwiseRun {
    pub first_row: usize,
    pub passes: Vec<Pass>,
}

/// One step's minibatches of a batchwise cohort's active runs: answers gradient queries at any
/// parameters, for all of them at once (the stacked [`super::Batch`]).
pub struct StackedBatch<'a> {
    arch: &'a Architecture,
    dense: &'a [(usize, usize)],
    x: Tensor,
    y: Tensor,
    weight: Tensor,
    weight_decay: f64,
}

impl StackedBatch<'_> {
    /// How many runs have a batch at this step.
    pub fn len(&self) -> usize {
        self.x.size()[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// For each active run `k`, the gradient of its mean minibatch loss at `params[k]`, plus
    /// `weight_decay · params[k]`: what [`super::Batch::gradient`] gives for that run alone,
    /// up to float rounding.
    pub fn gradients(&self, params: &[&[f32]]) -> Vec<Vec<f32>> {
        assert_eq!(
            params.len(),
            self.len(),
            "one parameter vector per active run"
        );
        let num_params = self.arch.num_params();
        let mut all = Vec::with_capacity(params.len() * num_params);
        for p in params {
            assert_eq!(p.len(), num_params, "vector of the wrong length");
            all.extend_from_slice(p);
        }
        let device = self.x.device();
        let ps: Vec<Tensor> = unflatten(&all, params.len() as i64, self.dense, device)
            .iter()
            .map(Tensor::contiguous)
            .collect();
        let grads = stacked_gradients(self.arch, &ps, &self.x, &self.y, &self.weight);
        let flat = tch::no_grad(|| flatten(&grads, num_params));
        let wd = self.weight_decay as f32;
        flat.chunks(num_params)
            .zip(params)
            .map(|(g, p)| {
                let mut g = g.to_vec();
                if wd != 0.0 {
                    g.iter_mut().zip(p.iter()).for_each(|(g, p)| *g += wd * p);
                }
                g
            })
            .collect()
    }
}

/// Calls `step` once per minibatch step of `runs` with `plan`'s batch settings, every run's
/// batch of that step stacked: for algorithms with their own update rule (pFedMe, APFL,
/// Per-FedAvg), the stacked [`super::for_each_batch`]. `runs` come sorted by their number of
/// steps, longest first (panics otherwise), so the runs with a batch at a step are the first
/// ones: `step` gets how many, and their batches. Panics if the model does not stack.
pub fn for_each_stacked_batch(
    arch: &Architecture,
    plan: &LocalPlan,
    rows: SplitView<'_>,
    resident: Option<&DeviceRows>,
    runs: &[BatchwiseRun],
    mut step: impl FnMut(usize, &StackedBatch<'_>),
) {
    let dense = arch
        .stacked_dense_layers()
        .expect("only dense models train stacked (checked before a cohort is formed)");
    let steps_of = |run: &BatchwiseRun| run.passes.iter().map(|(_, c)| c.len()).sum::<usize>();
    assert!(
        runs.windows(2).all(|w| steps_of(&w[0]) >= steps_of(&w[1])),
        "runs sorted by their number of steps, longest first"
    );
    let mut steps = Steps::new(runs.iter().map(|run| StepRun {
        passes: &run.passes,
        first_row: run.first_row,
        sample_weights: None,
    }));
    for s in 0..steps.count() {
        let active = steps.active(s);
        let (x, y, weight) = steps.gather(s, rows, resident);
        let batch = StackedBatch {
            arch,
            dense: &dense,
            x,
            y,
            weight,
            weight_decay: plan.weight_decay,
        };
        step(active, &batch);
    }
}

/// The gradients of Σ weight·loss over every run's rows, per stacked parameter tensor: the
/// linear model's in closed form, deeper ones by autograd.
fn stacked_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    x: &Tensor,
    y: &Tensor,
    weight: &Tensor,
) -> Vec<Tensor> {
    match ps.len() {
        2 => linear_gradients(arch, ps, x, y, weight),
        _ => autograd_gradients(arch, ps, x, y, weight),
    }
}

/// Rows `index` of `features` (rows of `dim` values) copied one after another into `out`.
/// The rows come in a shuffled order from a data set far larger than the caches, so the rows a
/// few places ahead are prefetched while one is copied (`index_select` waited on each).
fn gather_rows(features: &[f32], dim: usize, index: &[usize], out: &mut Vec<f32>) {
    const AHEAD: usize = 8;
    out.clear();
    out.reserve(index.len() * dim);
    for (k, &row) in index.iter().enumerate() {
        #[cfg(target_arch = "x86_64")]
        if let Some(&next) = index.get(k + AHEAD) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let row_start = next * dim;
            // 16 values: one 64-byte cache line.
            for at in (row_start..row_start + dim).step_by(16) {
                // SAFETY: `at` is inside `features` (`next` is one of its rows), and a
                // prefetch reads nothing.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(features.as_ptr().add(at) as *const i8) }
            }
        }
        out.extend_from_slice(&features[row * dim..(row + 1) * dim]);
    }
}

/// Per-run values shaped `[R, 1, …]` to broadcast against a `[R, …]` tensor of `dims` dims,
/// on `device`.
fn per_run(values: &[f32], dims: usize, device: Device) -> Tensor {
    let mut shape = vec![values.len() as i64];
    shape.extend(std::iter::repeat_n(1, dims - 1));
    Tensor::from_slice(values)
        .view(&shape[..])
        .to_device(device)
}

/// Writes the new tensors of the first `active` runs into the stacked ones.
fn put(stacked: &mut [Tensor], new: Vec<Tensor>, active: i64) {
    for (t, n) in stacked.iter_mut().zip(new) {
        if t.size()[0] == active {
            *t = n;
        } else {
            let mut head = t.narrow(0, 0, active);
            head.copy_(&n);
        }
    }
}

/// `[R × P]` flat vectors (each layer's weight `out × in` row-major, then its bias) as one
/// weight `[R, out, in]` and one bias `[R, out]` per dense layer, on `device`.
fn unflatten(all: &[f32], r: i64, dense: &[(usize, usize)], device: Device) -> Vec<Tensor> {
    let t = Tensor::from_slice(all).view([r, -1]).to_device(device);
    let mut out = Vec::with_capacity(2 * dense.len());
    let mut at = 0;
    for &(inputs, outputs) in dense {
        let (i, o) = (inputs as i64, outputs as i64);
        out.push(t.narrow(1, at, o * i).reshape([r, o, i]));
        out.push(t.narrow(1, at + o * i, o).contiguous());
        at += o * i + o;
    }
    out
}

/// The inverse of [`unflatten`]: `[R × P]` values.
fn flatten(stacked: &[Tensor], num_params: usize) -> Vec<f32> {
    let r = stacked[0].size()[0];
    let rows: Vec<Tensor> = stacked.iter().map(|t| t.reshape([r, -1])).collect();
    let all = Tensor::cat(&rows, 1).to_device(Device::Cpu);
    let n = r as usize * num_params;
    let mut out = vec![0f32; n];
    all.copy_data(&mut out, n);
    out
}

/// The linear model's gradients in closed form, as alone: (p − y)·weight per row, then
/// `[A, out, in]` and `[A, out]`.
fn linear_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    x: &Tensor,
    y: &Tensor,
    weight: &Tensor,
) -> Vec<Tensor> {
    tch::no_grad(|| {
        let z = x.bmm(&ps[0].transpose(1, 2)) + ps[1].unsqueeze(1);
        let residual = if arch.is_binary() {
            z.sigmoid() - y.to_kind(Kind::Float).unsqueeze(-1)
        } else {
            z.softmax(-1, Kind::Float) - y.one_hot(arch.classes as i64).to_kind(Kind::Float)
        };
        let residual = residual * weight.unsqueeze(-1);
        vec![
            residual.transpose(1, 2).bmm(x),
            residual.sum_dim_intlist(1, false, Kind::Float),
        ]
    })
}

/// The MLP's gradients by autograd on the stacked parameters: Σ weight·loss over every run's
/// rows (runs' parameters are independent, so each gets its own gradient).
fn autograd_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    x: &Tensor,
    y: &Tensor,
    weight: &Tensor,
) -> Vec<Tensor> {
    let leaves: Vec<Tensor> = ps
        .iter()
        .map(|p| p.detach().set_requires_grad(true))
        .collect();
    let mut h = x.shallow_clone();
    for (l, layer) in leaves.chunks(2).enumerate() {
        if l > 0 {
            h = h.relu();
        }
        h = layer[1]
            .unsqueeze(1)
            .baddbmm(&h, &layer[0].transpose(1, 2), 1.0, 1.0);
    }
    let (a, b) = (x.size()[0], x.size()[1]);
    let per_row = if arch.is_binary() {
        h.squeeze_dim(-1)
            .binary_cross_entropy_with_logits::<Tensor>(
                &y.to_kind(Kind::Float),
                None,
                None,
                Reduction::None,
            )
    } else {
        h.view([a * b, -1])
            .cross_entropy_loss::<Tensor>(&y.view([-1]), None, Reduction::None, -100, 0.0)
            .view([a, b])
    };
    let total = (per_row * weight).sum(Kind::Float);
    Tensor::run_backward(&[&total], &leaves, false, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{train_sgd, LocalWork, ModelSpec, Objective};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    /// Three runs over 5, 37 and 16 rows (batches of 8: runs of 1, 5 and 2 steps, short last
    /// batches): one with a momentum buffer already, one with row weights, one proximal in
    /// plain SGD (Ditto's personal model: no momentum whatever the plan).
    fn check(spec: ModelSpec, classes: usize, plan: LocalPlan) {
        let dim = 6;
        let sizes = [5usize, 37, 16];
        let total: usize = sizes.iter().sum();
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let features: Vec<f32> = (0..total * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let labels: Vec<i64> = (0..total)
            .map(|_| rng.gen_range(0..classes as i64))
            .collect();
        let rows = SplitView {
            features: &features,
            labels: &labels,
            dim,
        };
        let arch = Architecture::new(&spec, dim, classes);
        let firsts = [0, sizes[0], sizes[0] + sizes[1]];
        let view = |k: usize| SplitView {
            features: &features[firsts[k] * dim..(firsts[k] + sizes[k]) * dim],
            labels: &labels[firsts[k]..firsts[k] + sizes[k]],
            dim,
        };
        let start: Vec<Vec<f32>> = (0..3).map(|_| arch.init(&mut rng)).collect();
        let anchor = arch.init(&mut rng);
        let buffer: Vec<f32> = (0..arch.num_params())
            .map(|_| rng.gen_range(-0.1..0.1))
            .collect();
        let weights: Vec<f32> = (0..sizes[1]).map(|_| rng.gen_range(0.0..1.0)).collect();
        let momenta = [Vec::new(), buffer.clone(), Vec::new()];
        let objective = |k: usize| Objective {
            sample_weights: (k == 1).then_some(&weights[..]),
            proximal: (k == 2).then_some((&anchor[..], 0.3)),
        };
        // Alone.
        let mut alone = start.clone();
        let mut alone_momenta = momenta.clone();
        for k in 0..3 {
            let mut stream = ChaCha20Rng::seed_from_u64(k as u64);
            let lr = 0.1 + 0.05 * k as f64;
            let (p, m) = (&mut alone[k], &mut alone_momenta[k]);
            let plan = LocalPlan {
                momentum: if k == 2 { 0.0 } else { plan.momentum },
                ..plan
            };
            train_sgd(&arch, p, m, view(k), &plan, lr, &mut stream, &objective(k));
        }
        // Stacked: minibatches gathered on the host, or from rows resident on a device (the
        // CUDA path, here with the CPU as the device): the same values, so the same bits.
        let stacked_on = |resident: Option<&DeviceRows>| {
            let mut stacked = start.clone();
            let mut stacked_momenta = momenta.clone();
            let mut runs: Vec<StackedRun<'_>> = stacked
                .iter_mut()
                .zip(stacked_momenta.iter_mut())
                .enumerate()
                .map(|(k, (params, momentum))| {
                    let mut stream = ChaCha20Rng::seed_from_u64(k as u64);
                    let o = objective(k);
                    StackedRun {
                        params,
                        momentum: (k != 2).then_some(momentum),
                        sample_weights: o.sample_weights,
                        proximal: o.proximal,
                        first_row: firsts[k],
                        passes: plan.passes(sizes[k], &mut stream),
                        lr: 0.1 + 0.05 * k as f64,
                    }
                })
                .collect();
            train_sgd_stacked(&arch, &plan, rows, resident, &mut runs);
            drop(runs);
            (stacked, stacked_momenta)
        };
        let (stacked, stacked_momenta) = stacked_on(None);
        let resident = DeviceRows::upload(&rows, tch::Device::Cpu);
        assert_eq!(
            stacked_on(Some(&resident)),
            (stacked.clone(), stacked_momenta.clone()),
            "resident rows train as gathered ones"
        );
        for k in 0..3 {
            assert_ne!(alone[k], start[k], "run {k} trained");
            for (a, b) in [
                (&alone[k], &stacked[k]),
                (&alone_momenta[k], &stacked_momenta[k]),
            ] {
                assert_eq!(a.len(), b.len(), "run {k}");
                for (x, y) in a.iter().zip(b.iter()) {
                    assert!(
                        (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                        "run {k}: {x} vs {y}"
                    );
                }
            }
        }
    }

    fn plan(work: LocalWork, momentum: f64, weight_decay: f64) -> LocalPlan {
        LocalPlan {
            work,
            batch_size: 8,
            momentum,
            weight_decay,
        }
    }

    #[test]
    fn stacked_runs_train_as_each_would_alone() {
        let mlp = ModelSpec::Mlp { hidden: vec![5, 4] };
        for (spec, classes) in [
            (ModelSpec::Linear, 2),
            (ModelSpec::Linear, 4),
            (mlp.clone(), 2),
            (mlp, 3),
        ] {
            check(spec.clone(), classes, plan(LocalWork::Epochs(2), 0.9, 5e-4));
            check(spec.clone(), classes, plan(LocalWork::Steps(3), 0.0, 0.0));
            check(spec, classes, plan(LocalWork::Epochs(1), 0.5, 0.0));
        }
    }

    #[test]
    fn stacked_batches_answer_gradient_queries_as_each_batch_alone() {
        // Runs over 37, 16 and 5 rows (batches of 8: 5, 2 and 1 steps, sorted longest first),
        // weight decay on; at every step each run asks at its own parameters.
        let (dim, sizes) = (6, [37usize, 16, 5]);
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let total: usize = sizes.iter().sum();
        let features: Vec<f32> = (0..total * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let labels: Vec<i64> = (0..total).map(|_| rng.gen_range(0..3)).collect();
        let rows = SplitView {
            features: &features,
            labels: &labels,
            dim,
        };
        let firsts = [0, sizes[0], sizes[0] + sizes[1]];
        let plan = plan(LocalWork::Epochs(1), 0.0, 0.01);
        for spec in [ModelSpec::Linear, ModelSpec::Mlp { hidden: vec![5] }] {
            let arch = Architecture::new(&spec, dim, 3);
            let params: Vec<Vec<f32>> = (0..3).map(|_| arch.init(&mut rng)).collect();
            let mut alone: Vec<Vec<Vec<f32>>> = Vec::new();
            for k in 0..3 {
                let view = SplitView {
                    features: &features[firsts[k] * dim..(firsts[k] + sizes[k]) * dim],
                    labels: &labels[firsts[k]..firsts[k] + sizes[k]],
                    dim,
                };
                let mut steps = Vec::new();
                let mut stream = ChaCha20Rng::seed_from_u64(k as u64);
                crate::models::for_each_batch(&arch, view, &plan, &mut stream, |batch| {
                    steps.push(batch.gradient(&params[k]))
                });
                alone.push(steps);
            }
            let runs: Vec<BatchwiseRun> = (0..3)
                .map(|k| BatchwiseRun {
                    first_row: firsts[k],
                    passes: plan.passes(sizes[k], &mut ChaCha20Rng::seed_from_u64(k as u64)),
                })
                .collect();
            let mut step = 0;
            for_each_stacked_batch(&arch, &plan, rows, None, &runs, |active, batch| {
                assert_eq!(active, [3, 2, 1, 1, 1][step]);
                let asked: Vec<&[f32]> = params[..active].iter().map(|p| &p[..]).collect();
                for (k, g) in batch.gradients(&asked).iter().enumerate() {
                    for (x, y) in alone[k][step].iter().zip(g) {
                        assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{spec:?} run {k}");
                    }
                }
                step += 1;
            });
            assert_eq!(step, 5);
        }
    }

    #[test]
    fn only_dense_models_stack() {
        let image = crate::data::InputShape::Image([1, 28, 28]);
        assert!(Architecture::for_input(&ModelSpec::Cnn, image, 10)
            .stacked_dense_layers()
            .is_none());
        assert_eq!(
            Architecture::new(&ModelSpec::Mlp { hidden: vec![5] }, 3, 2).stacked_dense_layers(),
            Some(vec![(3, 5), (5, 1)])
        );
        assert_eq!(
            Architecture::for_input(&ModelSpec::Linear, image, 10).stacked_dense_layers(),
            Some(vec![(784, 10)])
        );
    }
}
