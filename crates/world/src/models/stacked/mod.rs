//! Local SGD of many runs at once: a cohort's runs as one stacked computation per step.
//!
//! Every parameter tensor of the model is held as `[R, …]` for the R runs, each minibatch step
//! gathers the runs' batches into `[A, B, features]` (A runs that have a batch at that step, B
//! the longest of their batches) and runs one batched op per layer: `bmm`/`baddbmm` for dense
//! layers; for convolutions, one grouped convolution over the runs' channels side by side
//! (`[B, A·C, H, W]`, A times the layer's groups), as `vmap` does. A run takes exactly the
//! steps [`super::train_sgd`] would take for it alone, from its own passes, with its own
//! dropout masks ([`dropout_stream`]): rows padding a short batch weigh zero, and a run with no
//! batch left at a step is left out of that step (no weight decay, no momentum, no move). The
//! arithmetic per run is the same as alone, so results agree up to float rounding (batched
//! kernels sum in another order).
//!
//! Algorithms with their own update rule step their runs' minibatches the same way
//! ([`for_each_stacked_batch`]) and ask a [`StackedBatch`] for gradients at any parameters, one
//! vector per run, as a run alone asks its [`super::Batch`].
//!
//! Models stack where every layer has a stacked form ([`Architecture::stacks`]): the linear
//! model (with its closed-form gradient; from host rows without DP-SGD, each run goes through
//! [`super::linear`] instead, as alone, bit for bit), MLPs, the CNNs, MobileNet-v2 with group
//! norm and the LSTM (one batched cell per time step; autograd). This room draws no random numbers but each run's dropout masks, from the
//! run's own stream; the passes come in.

use super::device::DeviceRows;
use super::linear::{Linear, LinearRun};
use super::profile::{computed, crossed, timed, Crossing, Phase};
use super::sgd::{LocalPlan, Pass, Proximal};
use super::{Architecture, Contrastive};
use crate::data::SplitView;
use rand_chacha::ChaCha20Rng;
use tch::{Device, Kind, Tensor};

mod dp_sgd;
mod eval;
mod layers;

use dp_sgd::*;
pub use dp_sgd::{train_dp_sgd_alone, DpSgdRun};
pub use eval::{evaluate_stacked, sample_losses_stacked, EvalRequest, SplitModels};
use layers::*;

/// One local SGD run of a cohort, trained in place.
pub struct StackedRun<'a> {
    /// The run's parameters: where it starts (unless `start` says) and, trained, where it ends.
    pub params: &'a mut Vec<f32>,
    /// Where the run starts, where that is a vector other runs may start from too (the global
    /// model): each distinct one crosses to the device once (`stack_vectors`); `params` is
    /// then only written.
    pub start: Option<&'a [f32]>,
    /// Empty: no buffer yet (the first step starts it, as PyTorch's SGD does). `None`: plain
    /// SGD, whatever the plan's momentum.
    pub momentum: Option<&'a mut Vec<f32>>,
    /// Where the momentum buffer stays on the device between runs: given, the buffer starts
    /// from the slot's tensor where it holds one (else from `momentum`), and the trained buffer
    /// is left in the slot (a flat `[P]` tensor on the device) instead of crossing back into
    /// `momentum`, which is emptied. The linear model's plain-Rust path (rows on the host)
    /// trains the buffer in `momentum` and empties the slot.
    pub resident_momentum: Option<&'a mut Option<Tensor>>,
    /// Where the parameters stay on the device (an update for the server to sum there, a
    /// client's own model between rounds): given, the run starts from the slot's tensor where
    /// it holds one (else as `start` and `params` say), and the trained parameters are left in
    /// the slot as a flat `[P]` tensor instead of crossing back into `params`, which is left
    /// empty. The linear model's plain-Rust path trains on the host, writes `params` and leaves
    /// the slot empty.
    pub resident_params: Option<&'a mut Option<Tensor>>,
    /// One weight per training row of the run (FedEM's M-step).
    pub sample_weights: Option<&'a [f32]>,
    /// Adds (μ/2)·‖θ − anchor‖² to the loss (FedProx, Ditto).
    pub proximal: Option<Proximal<'a>>,
    /// Adds ⟨c, θ⟩ to the loss: c to every step's gradient (SCAFFOLD's c − c_i).
    pub correction: Option<&'a [f32]>,
    /// Adds μ times MOON's model-contrastive term (`models::contrastive`): every run of a
    /// stack has it or none does, and it takes no sample weights and no DP-SGD.
    pub contrastive: Option<Contrastive<'a>>,
    /// Index of the run's first training row among the rows given to [`train_sgd_stacked`].
    pub first_row: usize,
    /// The run's shuffled passes over its rows ([`LocalPlan::passes`], drawn from its client's
    /// stream).
    pub passes: Vec<Pass>,
    /// Where its dropout masks come from ([`dropout_stream`]).
    pub dropout: ChaCha20Rng,
    /// Under DP-SGD ([`LocalPlan::dp_sgd`]): its noise stream and expected batch size.
    pub private: Option<DpSgdRun>,
    pub lr: f64,
}

/// The stream a run's dropout masks come from, split off its client's stream `rng` right after
/// its `passes` were drawn: a copy of `rng` there, with `rng` moved past every word those
/// masks take. Alone, [`super::train_sgd`] draws each batch's masks from `rng` after the
/// passes, so the split stream gives the same masks, and `rng` then draws what it would after
/// the run trained alone (the next run's passes).
pub fn dropout_stream(arch: &Architecture, passes: &[Pass], rng: &mut ChaCha20Rng) -> ChaCha20Rng {
    let stream = rng.clone();
    let rows: usize = passes
        .iter()
        .flat_map(|(_, cuts)| cuts.iter().map(|&(_, len)| len))
        .sum();
    // One `u32` word per masked value (see `Architecture::dropout_masks`).
    let words = (rows * arch.dropout_words_per_row()) as u128;
    rng.set_word_pos(rng.get_word_pos() + words);
    stream
}

/// Trains every run of `runs` with `plan` as [`super::train_sgd`] would train it alone, as one
/// stacked computation per step. `rows` holds every run's training rows (a data set's rows);
/// `resident`, the same rows on the device to train on (the CPU without it: minibatches are
/// then gathered from `rows`; a linear model without DP-SGD then trains each run on its own in
/// plain Rust, `models::linear`). Panics if the model does not stack
/// ([`Architecture::stacks`]).
pub fn train_sgd_stacked(
    arch: &Architecture,
    plan: &LocalPlan,
    rows: SplitView<'_>,
    resident: Option<&DeviceRows>,
    runs: &mut [StackedRun<'_>],
) {
    assert!(
        arch.stacks(),
        "the model stacks (checked before a cohort is formed)"
    );
    if runs.is_empty() {
        return;
    }
    if let (Some(linear), None, None) = (Linear::of(arch), resident, plan.dp_sgd) {
        // Each run on its own, straight from the rows, in plain Rust.
        for run in runs.iter_mut() {
            assert!(
                run.contrastive.is_none(),
                "a linear model has no representation to contrast"
            );
            let trained: usize = (run.passes.iter())
                .flat_map(|(_, cuts)| cuts.iter().map(|&(_, len)| len))
                .sum();
            computed(
                Phase::Gradients,
                3 * arch.flops_per_sample() * trained as u64,
            );
            if let Some(start) = run.start {
                run.params.clear();
                run.params.extend_from_slice(start);
            }
            if let Some(kept) = run.resident_params.as_deref_mut().and_then(Option::take) {
                *run.params = flat_to_host(&kept);
            }
            if let (Some(slot), Some(momentum)) = (&mut run.resident_momentum, &mut run.momentum) {
                if let Some(kept) = slot.take() {
                    **momentum = flat_to_host(&kept);
                }
            }
            timed(Phase::Gradients, Device::Cpu, || {
                linear.train(
                    plan.momentum,
                    plan.weight_decay,
                    rows,
                    LinearRun {
                        params: &mut run.params[..],
                        momentum: run.momentum.as_deref_mut(),
                        sample_weights: run.sample_weights,
                        proximal: run.proximal.map(|p| (p.anchor, p.mu)),
                        correction: run.correction,
                        first_row: run.first_row,
                        passes: &run.passes,
                        lr: run.lr,
                    },
                )
            });
        }
        return;
    }
    // Runs sorted by their number of steps, longest first (ties in the given order): the runs
    // that still have a batch at a step are then a prefix of the stack.
    let steps_of =
        |run: &StackedRun<'_>| run.passes.iter().map(|(_, cuts)| cuts.len()).sum::<usize>();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(steps_of(&runs[k])));
    let sorted: Vec<&StackedRun<'_>> = order.iter().map(|&k| &runs[k]).collect();
    let device = resident.map_or(Device::Cpu, DeviceRows::device);
    let num_params = arch.num_params();
    fn start_of<'r>(run: &'r StackedRun<'_>) -> Option<&'r [f32]> {
        Some(run.start.unwrap_or(&run.params[..]))
    }
    fn kept_params<'r>(run: &'r StackedRun<'_>) -> Option<&'r Tensor> {
        run.resident_params.as_deref().and_then(Option::as_ref)
    }
    let params = timed(Phase::Stack, device, || {
        stack_runs(&sorted, arch, device, start_of, kept_params)
    });
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
    fn kept_on_device<'r>(run: &'r StackedRun<'_>) -> Option<&'r Tensor> {
        run.resident_momentum.as_deref().and_then(Option::as_ref)
    }
    let mut has_buffer: Vec<bool> = sorted
        .iter()
        .zip(&takes_momentum)
        .map(|(&run, &takes)| takes && (buffer_of(run).is_some() || kept_on_device(run).is_some()))
        .collect();
    let buffers = takes_momentum.iter().any(|&t| t).then(|| {
        timed(Phase::Stack, device, || {
            stack_runs(&sorted, arch, device, buffer_of, kept_on_device)
        })
    });
    let proximal = sorted.iter().any(|run| run.proximal.is_some()).then(|| {
        let anchors = timed(Phase::Stack, device, || {
            let vectors: Vec<_> = sorted
                .iter()
                .map(|run| run.proximal.map(|p| p.anchor))
                .collect();
            stack_vectors(&vectors, arch, device)
        });
        let mu: Vec<f32> = sorted
            .iter()
            .map(|run| run.proximal.map_or(0.0, |p| p.mu as f32))
            .collect();
        (anchors, mu)
    });
    // Runs without a correction add a row of zeros.
    let correction = sorted.iter().any(|run| run.correction.is_some()).then(|| {
        timed(Phase::Stack, device, || {
            let vectors: Vec<_> = sorted.iter().map(|run| run.correction).collect();
            stack_vectors(&vectors, arch, device)
        })
    });
    let contrastive = sorted.iter().any(|run| run.contrastive.is_some()).then(|| {
        assert!(plan.dp_sgd.is_none(), "DP-SGD takes no contrastive term");
        timed(Phase::Stack, device, || {
            StackedContrastive::new(arch, &sorted, device)
        })
    });
    let lr: Vec<f32> = sorted.iter().map(|run| run.lr as f32).collect();
    let mut private: Vec<DpSgdRun> = match plan.dp_sgd {
        None => Vec::new(),
        Some(_) => sorted
            .iter()
            .map(|run| {
                let p = run
                    .private
                    .as_ref()
                    .expect("a DP-SGD plan's runs are private");
                DpSgdRun {
                    noise: p.noise.clone(),
                    expected_batch: p.expected_batch,
                }
            })
            .collect(),
    };
    let mut steps = Steps::new(
        sorted.iter().map(|run| StepRun {
            passes: &run.passes,
            first_row: run.first_row,
            sample_weights: run.sample_weights,
            dropout: run.dropout.clone(),
        }),
        plan.dp_sgd.is_some(),
    );
    for step in 0..steps.count() {
        let active = steps.active(step);
        let a = active as i64;
        let batch = timed(Phase::Gather, device, || {
            steps.gather(step, arch, rows, resident)
        });
        let pick =
            |ts: &[Tensor]| -> Vec<Tensor> { ts.iter().map(|t| t.narrow(0, 0, a)).collect() };
        let ps = pick(&params);
        computed(
            Phase::Gradients,
            3 * arch.flops_per_sample() * steps.rows_at(step) as u64,
        );
        let grads = timed(Phase::Gradients, device, || match plan.dp_sgd {
            None => match &contrastive {
                Some(term) => contrastive_gradients(arch, &ps, &batch, term),
                None => stacked_gradients(arch, &ps, &batch),
            },
            Some(dp) => dp_sgd_directions(
                arch,
                &ps,
                &batch,
                dp,
                &mut private[..active],
                DP_SGD_ROW_FLOATS,
            ),
        });
        drop(batch);
        timed(Phase::Update, device, || {
            tch::no_grad(|| {
                let prox = proximal
                    .as_ref()
                    .map(|(anchors, mu)| (pick(anchors), &mu[..active]));
                let bufs = buffers.as_ref().map(|b| pick(b));
                let keep: Vec<f32> = has_buffer[..active]
                    .iter()
                    .map(|&has| if has { plan.momentum as f32 } else { 0.0 })
                    .collect();
                // The step moves the stacked parameters and buffers in place (the active runs'
                // rows), with the same operations in the same order as out of place, so the
                // same bits.
                for (j, (p, g)) in ps.iter().zip(grads).enumerate() {
                    let dims = p.dim();
                    // Never `g` in place: autograd hands summed parameters one gradient tensor
                    // (the LSTM's two biases).
                    let mut d = g;
                    if let Some((anchors, mu)) = &prox {
                        d = &d + (p - &anchors[j]) * per_run(mu, dims, device);
                    }
                    if let Some(correction) = &correction {
                        d = &d + correction[j].narrow(0, 0, a);
                    }
                    if plan.weight_decay != 0.0 {
                        d = &d + p * plan.weight_decay;
                    }
                    if let Some(bufs) = &bufs {
                        // buf ← keep·buf + d, the step's direction.
                        let mut buf = bufs[j].shallow_clone();
                        let _ = buf.g_mul_(&per_run(&keep, dims, device));
                        let _ = buf.g_add_(&d);
                        d = buf;
                    }
                    let _ = p
                        .shallow_clone()
                        .g_sub_(&(d * per_run(&lr[..active], dims, device)));
                }
            });
            if buffers.is_some() {
                has_buffer[..active].copy_from_slice(&takes_momentum[..active]);
            }
        });
    }
    timed(Phase::Unstack, device, || {
        // Parameters and buffers kept on the device stay there (copied out of the stack); the
        // others cross back.
        let (mut to_host, mut kept) = (Vec::new(), Vec::new());
        for (k, &run) in order.iter().enumerate() {
            match runs[run].resident_params.is_some() {
                true => kept.push(k),
                false => to_host.push(k),
            }
        }
        bring_back(
            &params,
            num_params,
            (&kept, Keep::Shared, &to_host),
            |k, row| {
                let run = &mut runs[order[k]];
                match row {
                    Row::Kept(tensor) => {
                        *run.params = Vec::new();
                        if let Some(slot) = run.resident_params.as_deref_mut() {
                            *slot = Some(tensor);
                        }
                    }
                    Row::Host(values) => {
                        run.params.clear();
                        run.params.extend_from_slice(values);
                    }
                }
            },
        );
        if let Some(bufs) = buffers {
            let (mut to_host, mut kept) = (Vec::new(), Vec::new());
            for (k, &run) in order.iter().enumerate() {
                match (has_buffer[k], runs[run].resident_momentum.is_some()) {
                    (false, _) => {}
                    (true, true) => kept.push(k),
                    (true, false) => to_host.push(k),
                }
            }
            bring_back(&bufs, num_params, (&kept, Keep::Own, &to_host), |k, row| {
                let run = &mut runs[order[k]];
                let Some(momentum) = run.momentum.as_deref_mut() else {
                    return;
                };
                match row {
                    // The buffer lives on the device now (it may have come from the host).
                    Row::Kept(tensor) => {
                        *momentum = Vec::new();
                        if let Some(slot) = run.resident_momentum.as_deref_mut() {
                            *slot = Some(tensor);
                        }
                    }
                    Row::Host(values) => {
                        momentum.clear();
                        momentum.extend_from_slice(values);
                    }
                }
            });
        }
    });
}

/// One vector per run stacked on `device`: where `on_device` gives a tensor, that (put into
/// its row there), else the host vector `on_host` gives (none: zeros). The way back is
/// [`bring_back`].
fn stack_runs<'r>(
    runs: &[&'r StackedRun<'_>],
    arch: &Architecture,
    device: Device,
    on_host: fn(&'r StackedRun<'_>) -> Option<&'r [f32]>,
    on_device: fn(&'r StackedRun<'_>) -> Option<&'r Tensor>,
) -> Vec<Tensor> {
    let vectors: Vec<_> = (runs.iter())
        .map(|&run| on_device(run).map_or_else(|| on_host(run), |_| None))
        .collect();
    let stacked = stack_vectors(&vectors, arch, device);
    let kept: Vec<(usize, &Tensor)> = (runs.iter().enumerate())
        .filter_map(|(row, &run)| on_device(run).map(|t| (row, t)))
        .collect();
    put_flat_rows(&stacked, &kept);
    stacked
}

/// A stacked row brought back ([`bring_back`]).
enum Row<'v> {
    /// Kept on the device, as a flat `[P]` tensor of its own.
    Kept(Tensor),
    /// Crossed to the host.
    Host(&'v [f32]),
}

/// Brings back rows of `stacked` (of `p` values each): those of `kept` as flat tensors that
/// stay on the device (held as `keep` says), those of `to_host` across to the host; `take`
/// gets each row with its index.
fn bring_back(
    stacked: &[Tensor],
    p: usize,
    (kept, keep, to_host): (&[usize], Keep, &[usize]),
    mut take: impl FnMut(usize, Row<'_>),
) {
    for (&k, tensor) in kept.iter().zip(flat_rows(stacked, kept, keep)) {
        take(k, Row::Kept(tensor));
    }
    if to_host.is_empty() {
        return;
    }
    let rows = stacked[0].size()[0] as usize;
    let whole = to_host.len() == rows;
    let host_rows: Vec<Tensor> = match whole {
        true => stacked.iter().map(Tensor::shallow_clone).collect(),
        false => {
            let index = row_index(to_host, stacked[0].device());
            tch::no_grad(|| stacked.iter().map(|t| t.index_select(0, &index)).collect())
        }
    };
    unstack_vectors(&host_rows, p, |i, values| {
        take(to_host[i], Row::Host(values))
    });
}

/// The runs' minibatches step by step. Runs are taken sorted by their number of steps, longest
/// first (ties in the given order), so the runs that still have a batch at a step are a prefix
/// of them: the step's `active` runs. Each step's batch is `[A, B, …]` for its A active runs, B
/// the longest of their batches; a shorter batch is padded with rows of weight zero.
pub(super) struct Steps<'r> {
    runs: Vec<StepRun<'r>>,
    /// Per run: every batch of its passes in order, as (pass, start, len).
    batches: Vec<Vec<(usize, usize, usize)>>,
    /// The host buffer minibatches are gathered into (reused from step to step).
    gathered: Vec<f32>,
    /// DP-SGD: a row weighs its sample weight alone (not over its batch's length), and a
    /// step's batches may be empty.
    per_sample: bool,
}

/// What [`Steps`] needs of a run.
pub(super) struct StepRun<'r> {
    passes: &'r [Pass],
    /// The run's first row among the rows given.
    first_row: usize,
    sample_weights: Option<&'r [f32]>,
    /// Where its dropout masks come from.
    dropout: ChaCha20Rng,
}

/// One step's minibatches of the active runs, on the device trained on.
pub(super) struct StepBatch {
    /// `[A, B, dim]`.
    x: Tensor,
    /// `[A, B]`.
    y: Tensor,
    /// `[A, B]`: a row's weight over its run's batch length (under DP-SGD, the weight
    /// alone); zero on padding.
    weight: Tensor,
    /// Per dropout layer, `[A, B, …]`: each run's masks for its batch (zero on padding).
    masks: Vec<Tensor>,
}

impl<'r> Steps<'r> {
    /// `runs` already sorted longest first.
    fn new(runs: impl Iterator<Item = StepRun<'r>>, per_sample: bool) -> Self {
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
            per_sample,
        }
    }

    fn count(&self) -> usize {
        self.batches.first().map_or(0, Vec::len)
    }

    /// How many runs have a batch at `step` (the first ones).
    fn active(&self, step: usize) -> usize {
        self.batches.iter().take_while(|b| step < b.len()).count()
    }

    /// The rows of the active runs' batches at `step` (padding left out).
    fn rows_at(&self, step: usize) -> usize {
        (self.batches.iter())
            .take_while(|b| step < b.len())
            .map(|b| b[step].2)
            .sum()
    }

    /// The active runs' batch at `step`, with their dropout masks drawn, on the device of
    /// `resident` (the CPU without it). The features may borrow this value's buffer: drop them
    /// before the next call.
    fn gather(
        &mut self,
        step: usize,
        arch: &Architecture,
        rows: SplitView<'_>,
        resident: Option<&DeviceRows>,
    ) -> StepBatch {
        let device = resident.map_or(Device::Cpu, DeviceRows::device);
        let active = self.active(step);
        let (a, b) = (
            active as i64,
            self.batches[..active]
                .iter()
                .map(|bs| bs[step].2)
                .max()
                .unwrap_or(0)
                .max(1) as i64,
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
                // Padding repeats the batch's last row (its run's first row for an empty batch).
                let row = order.get(j.min(len.max(1) - 1)).map_or(0, |&r| r as usize);
                index.push(run.first_row + row);
                weight.push(match (j < len, run.sample_weights) {
                    (false, _) => 0.0,
                    (true, None) => 1.0,
                    (true, Some(w)) => w[row],
                });
            }
            inv_len.push(match self.per_sample {
                true => 1.0,
                false => (1.0 / len as f64) as f32,
            });
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
                crossed(Crossing::RowsIn, 4 * self.gathered.len() + 8 * index.len());
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
        let masks = self.masks(step, arch, b, device);
        StepBatch {
            x,
            y,
            weight,
            masks,
        }
    }

    /// The active runs' dropout masks at `step`, drawn from their streams as alone (for their
    /// own batch lengths), padded to `b` rows and stacked: `[A, B, …]` per dropout layer.
    fn masks(&mut self, step: usize, arch: &Architecture, b: i64, device: Device) -> Vec<Tensor> {
        if !arch.has_dropout() {
            return Vec::new();
        }
        let active = self.active(step);
        let per_run: Vec<Vec<Tensor>> = self.runs[..active]
            .iter_mut()
            .zip(&self.batches)
            .map(|(run, bs)| {
                let len = bs[step].2;
                let masks = arch.dropout_masks(len, &mut run.dropout);
                masks
                    .into_iter()
                    .map(|m| match b - len as i64 {
                        0 => m,
                        pad => {
                            let mut shape = m.size();
                            shape[0] = pad;
                            Tensor::cat(
                                &[m, Tensor::zeros(&shape[..], (Kind::Float, Device::Cpu))],
                                0,
                            )
                        }
                    })
                    .collect()
            })
            .collect();
        (0..per_run[0].len())
            .map(|layer| {
                let masks: Vec<&Tensor> = per_run.iter().map(|m| &m[layer]).collect();
                Tensor::stack(&masks, 0).to_device(device)
            })
            .collect()
    }
}

/// One run of a batchwise cohort (see [`for_each_stacked_batch`]): where its rows start among
/// the rows given, its shuffled passes over them, and where its dropout masks come from
/// ([`dropout_stream`]).
pub struct BatchwiseRun {
    pub first_row: usize,
    pub passes: Vec<Pass>,
    pub dropout: ChaCha20Rng,
}

/// One step's minibatches of a batchwise cohort's active runs: answers gradient queries at any
/// parameters, for all of them at once (the stacked [`super::Batch`]).
pub struct StackedBatch<'a> {
    arch: &'a Architecture,
    /// Every query uses the same masks, as alone.
    batch: StepBatch,
    weight_decay: f64,
}

impl StackedBatch<'_> {
    /// How many runs have a batch at this step.
    pub fn len(&self) -> usize {
        self.batch.x.size()[0] as usize
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
        let device = self.batch.x.device();
        let vectors: Vec<Option<&[f32]>> = params.iter().map(|&p| Some(p)).collect();
        let ps = stack_vectors(&vectors, self.arch, device);
        let grads = stacked_gradients(self.arch, &ps, &self.batch);
        let wd = self.weight_decay as f32;
        let mut out = Vec::with_capacity(params.len());
        unstack_vectors(&grads, num_params, |k, g| {
            let mut g = g.to_vec();
            if wd != 0.0 {
                g.iter_mut().zip(params[k]).for_each(|(g, p)| *g += wd * p);
            }
            out.push(g);
        });
        out
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
    assert!(
        arch.stacks(),
        "the model stacks (checked before a cohort is formed)"
    );
    let steps_of = |run: &BatchwiseRun| run.passes.iter().map(|(_, c)| c.len()).sum::<usize>();
    assert!(
        runs.windows(2).all(|w| steps_of(&w[0]) >= steps_of(&w[1])),
        "runs sorted by their number of steps, longest first"
    );
    let mut steps = Steps::new(
        runs.iter().map(|run| StepRun {
            passes: &run.passes,
            first_row: run.first_row,
            sample_weights: None,
            dropout: run.dropout.clone(),
        }),
        false,
    );
    for s in 0..steps.count() {
        let active = steps.active(s);
        let batch = StackedBatch {
            arch,
            batch: steps.gather(s, arch, rows, resident),
            weight_decay: plan.weight_decay,
        };
        step(active, &batch);
    }
}

/// The gradients of Σ weight·loss over every run's rows, per stacked parameter tensor: the
/// linear model's in closed form, deeper ones by autograd.
pub(super) fn stacked_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
) -> Vec<Tensor> {
    match arch.is_linear() {
        true => linear_gradients(arch, ps, &batch.x, &batch.y, &batch.weight),
        false => autograd_gradients(arch, ps, batch),
    }
}

/// Rows `index` of `features` (rows of `dim` values) copied one after another into `out`.
/// The rows come in a shuffled order from a data set far larger than the caches, so the rows a
/// few places ahead are prefetched while one is copied (`index_select` waited on each).
pub(super) fn gather_rows(features: &[f32], dim: usize, index: &[usize], out: &mut Vec<f32>) {
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
pub(super) fn per_run(values: &[f32], dims: usize, device: Device) -> Tensor {
    let mut shape = vec![values.len() as i64];
    shape.extend(std::iter::repeat_n(1, dims - 1));
    Tensor::from_slice(values)
        .view(&shape[..])
        .to_device(device)
}

/// How many floats of parameter vectors cross between host and device at once (16 MB): the
/// vectors go in groups of about this size (at least one vector each), so a small model's
/// cross in one transfer, and no host copy of them all is made (for 539 clients × 3 of
/// FEMNIST's CNNs, 43 GB). Kept under glibc's largest `mmap` threshold (32 MB), so a group's
/// host buffers come back from the heap instead of as fresh pages each time: with 64 MB
/// groups, FEMNIST's CNN cohort bench ran 2.3 times slower on an H200.
pub(super) const TRANSFER_FLOATS: usize = 1 << 22;

/// The groups of `r` vectors of `p` floats that cross together.
pub(super) fn transfer_groups(r: usize, p: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let per = (TRANSFER_FLOATS / p.max(1)).max(1);
    (0..r)
        .step_by(per)
        .map(move |start| start..(start + per).min(r))
}

/// Flat parameter vectors (`None`: zeros) as one `[R, …]` tensor per parameter tensor of
/// `arch` (a dense weight `[R, out, in]`, a conv weight `[R, out, in/groups, k, k]`, …), on
/// `device`. Each distinct vector crosses once, in [`transfer_groups`] of consecutive rows: a
/// vector given again (the same slice of memory, such as the global component every client's
/// mixture names) and a row of zeros are copied or filled on the device, bit for bit.
pub(super) fn stack_vectors(
    vectors: &[Option<&[f32]>],
    arch: &Architecture,
    device: Device,
) -> Vec<Tensor> {
    let (r, p) = (vectors.len(), arch.num_params());
    let shapes: Vec<Vec<i64>> = arch
        .parameter_shapes()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    let stacked: Vec<Tensor> = shapes
        .iter()
        .map(|shape| {
            let mut dims = vec![r as i64];
            dims.extend(shape);
            Tensor::empty(&dims[..], (Kind::Float, device))
        })
        .collect();
    let sources = row_sources(vectors);
    // Rows of zeros: the whole stack filled once, not row by row.
    if sources.contains(&RowSource::Zeros) {
        tch::no_grad(|| stacked.iter().for_each(|t| drop(t.shallow_clone().zero_())));
    }
    let mut staging: Vec<f32> = Vec::new();
    tch::no_grad(|| {
        let mut k = 0;
        while k < r {
            if sources[k] != RowSource::Upload {
                k += 1;
                continue;
            }
            let end = (k..r)
                .find(|&j| sources[j] != RowSource::Upload)
                .unwrap_or(r);
            for group in transfer_groups(end - k, p) {
                let group = k + group.start..k + group.end;
                staging.clear();
                for v in vectors[group.clone()].iter().flatten() {
                    assert_eq!(v.len(), p, "vector of the wrong length");
                    staging.extend_from_slice(v);
                }
                let c = group.len() as i64;
                crossed(Crossing::VectorsIn, 4 * staging.len());
                let rows = Tensor::from_slice(&staging)
                    .view([c, p as i64])
                    .to_device(device);
                let mut at = 0;
                for (t, shape) in stacked.iter().zip(&shapes) {
                    let n: i64 = shape.iter().product();
                    t.narrow(0, group.start as i64, c)
                        .view([c, n])
                        .copy_(&rows.narrow(1, at, n));
                    at += n;
                }
            }
            k = end;
        }
        for (row, source) in sources.iter().enumerate() {
            if let RowSource::SameAs(first) = *source {
                for t in &stacked {
                    t.narrow(0, row as i64, 1)
                        .copy_(&t.narrow(0, first as i64, 1));
                }
            }
        }
    });
    stacked
}

/// `rows` as an index tensor on `device`.
fn row_index(rows: &[usize], device: Device) -> Tensor {
    let rows: Vec<i64> = rows.iter().map(|&k| k as i64).collect();
    Tensor::from_slice(&rows).to_device(device)
}

/// Rows `rows` of stacked parameter tensors, each as one flat `[P]` tensor on their device:
/// one gather per parameter tensor (none where `rows` are all the rows, in order), then each
/// row a copy of its own (`Own`), or a view of one `[k, P]` tensor they share (`Shared`: rows
/// that are dropped together, as a round's updates are at its aggregation).
fn flat_rows(stacked: &[Tensor], rows: &[usize], keep: Keep) -> Vec<Tensor> {
    if rows.is_empty() {
        return Vec::new();
    }
    tch::no_grad(|| {
        let k = rows.len() as i64;
        let every_row = rows.iter().enumerate().all(|(i, &r)| i == r) && stacked[0].size()[0] == k;
        let pieces: Vec<Tensor> = match every_row {
            true => stacked.iter().map(|t| t.reshape([k, -1])).collect(),
            false => {
                let index = row_index(rows, stacked[0].device());
                (stacked.iter())
                    .map(|t| t.index_select(0, &index).reshape([k, -1]))
                    .collect()
            }
        };
        let all = Tensor::cat(&pieces, 1);
        (0..k)
            .map(|i| match keep {
                Keep::Own => all.get(i).copy(),
                Keep::Shared => all.get(i),
            })
            .collect()
    })
}

/// How rows brought back to stay on the device hold their memory ([`flat_rows`]).
#[derive(Clone, Copy)]
enum Keep {
    /// Each its own copy (momentum buffers, replaced one client at a time).
    Own,
    /// Views of one tensor (a round's updates).
    Shared,
}

/// Writes flat `[P]` tensors into rows of stacked tensors (`(row, values)`; any device, moved
/// to the stack's): one scatter per parameter tensor.
fn put_flat_rows(stacked: &[Tensor], rows: &[(usize, &Tensor)]) {
    if rows.is_empty() {
        return;
    }
    tch::no_grad(|| {
        let device = stacked[0].device();
        let index = row_index(
            &rows.iter().map(|(row, _)| *row).collect::<Vec<_>>(),
            device,
        );
        let values: Vec<Tensor> = rows.iter().map(|(_, v)| v.to_device(device)).collect();
        let values = Tensor::stack(&values, 0);
        let k = rows.len() as i64;
        let mut at = 0;
        for t in stacked {
            let mut shape = t.size();
            let n: i64 = shape[1..].iter().product();
            shape[0] = k;
            let _ = t.shallow_clone().index_copy_(
                0,
                &index,
                &values.narrow(1, at, n).reshape(&shape[..]),
            );
            at += n;
        }
    });
}

/// A flat tensor's values on the host (crossing back).
fn flat_to_host(flat: &Tensor) -> Vec<f32> {
    let n = flat.numel();
    let mut values = vec![0f32; n];
    flat.to_device(Device::Cpu).copy_data(&mut values, n);
    crossed(Crossing::VectorsOut, 4 * n);
    values
}

/// Where a stacked row's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowSource {
    /// Its vector crosses from the host.
    Upload,
    /// No vector: zeros, filled on the device.
    Zeros,
    /// The same slice as an earlier row's: copied from that row on the device.
    SameAs(usize),
}

/// Each row's source: the first row of each distinct slice (by address and length: the same
/// memory, so the same values) crosses, later ones copy it.
fn row_sources(vectors: &[Option<&[f32]>]) -> Vec<RowSource> {
    let mut first: std::collections::HashMap<(*const f32, usize), usize> = Default::default();
    vectors
        .iter()
        .enumerate()
        .map(|(row, vector)| match vector {
            None => RowSource::Zeros,
            Some(v) => match first.entry((v.as_ptr(), v.len())) {
                std::collections::hash_map::Entry::Occupied(e) => RowSource::SameAs(*e.get()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(row);
                    RowSource::Upload
                }
            },
        })
        .collect()
}

/// The inverse of [`stack_vectors`]: each run's flat vector of `p` floats, in run order, handed
/// to `take(k, values)`, crossing in [`transfer_groups`].
pub(super) fn unstack_vectors(stacked: &[Tensor], p: usize, mut take: impl FnMut(usize, &[f32])) {
    let r = stacked[0].size()[0] as usize;
    let mut staging: Vec<f32> = Vec::new();
    tch::no_grad(|| {
        for group in transfer_groups(r, p) {
            let c = group.len() as i64;
            let pieces: Vec<Tensor> = stacked
                .iter()
                .map(|t| t.narrow(0, group.start as i64, c).reshape([c, -1]))
                .collect();
            let rows = Tensor::cat(&pieces, 1).to_device(Device::Cpu);
            assert_eq!(rows.size(), [c, p as i64], "vectors of the wrong length");
            staging.resize(group.len() * p, 0.0);
            rows.copy_data(&mut staging, group.len() * p);
            crossed(Crossing::VectorsOut, 4 * staging.len());
            for (k, values) in group.zip(staging.chunks(p)) {
                take(k, values);
            }
        }
    });
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::InputShape;
    use crate::models::sgd::{DpSgd, Predictor};
    use crate::models::LstmSpec;
    use crate::models::MobilenetV2Spec;
    use crate::models::Normalization;
    use crate::models::Proximal;
    use crate::models::{train_sgd, LocalWork, MixtureGates, ModelSpec, Objective};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;
    use rand_distr::StandardNormal;

    /// `rows` random rows of `input` (token ids below the vocabulary, else values in [−1, 1))
    /// and their labels below `classes`, drawn in that order.
    fn random_rows(
        input: InputShape,
        rows: usize,
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> (Vec<f32>, Vec<i64>) {
        let features = (0..rows * input.len())
            .map(|_| match input {
                InputShape::Tokens { vocab, .. } => rng.gen_range(0..vocab) as f32,
                _ => rng.gen_range(-1.0..1.0),
            })
            .collect();
        let labels = (0..rows)
            .map(|_| rng.gen_range(0..classes as i64))
            .collect();
        (features, labels)
    }

    /// Three runs over 5, 37 and 16 rows (batches of 8: runs of 1, 5 and 2 steps, short last
    /// batches): one with a momentum buffer already, one with row weights, one proximal in
    /// plain SGD (Ditto's personal model: no momentum whatever the plan). Rows of `input`.
    /// Parameters agree within `tolerance` (relative).
    fn check(spec: ModelSpec, input: InputShape, classes: usize, plan: LocalPlan, tolerance: f32) {
        let dim = input.len();
        let sizes = [5usize, 37, 16];
        let total: usize = sizes.iter().sum();
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let (features, labels) = random_rows(input, total, classes, &mut rng);
        let rows = SplitView {
            features: &features,
            labels: &labels,
            dim,
        };
        let arch = Architecture::for_input(&spec, input, classes);
        assert!(arch.stacks());
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
        let correction: Vec<f32> = (0..arch.num_params())
            .map(|_| rng.gen_range(-0.1..0.1))
            .collect();
        let momenta = [Vec::new(), buffer.clone(), Vec::new()];
        let objective = |k: usize| Objective {
            sample_weights: (k == 1).then_some(&weights[..]),
            proximal: (k == 2).then_some(Proximal {
                anchor: &anchor[..],
                mu: 0.3,
            }),
            correction: (k == 0).then_some(&correction[..]),
            contrastive: None,
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
        // Each run's parameters given as a copy of its start, or (`shared`) as the start
        // itself, with `params` only written; its momentum buffer on the host, or (`kept`)
        // left in a slot on the device, run 1's given there (`Device`) or on the host
        // (`Host`): the same bits.
        #[derive(Clone, Copy, PartialEq)]
        enum Kept {
            No,
            Device,
            Host,
        }
        let stacked_from = |resident: Option<&DeviceRows>, shared: bool, kept: Kept| {
            let mut stacked = match shared {
                false => start.clone(),
                true => vec![Vec::new(); 3],
            };
            let mut stacked_momenta = momenta.clone();
            let mut slots: Vec<Option<Tensor>> = (0..3).map(|_| None).collect();
            // Run 0's parameters start from the device and stay there too where buffers do
            // (its own `params` empty and no `start`: only the slot has them).
            let mut param_slots: Vec<Option<Tensor>> = (0..3).map(|_| None).collect();
            if kept == Kept::Device {
                param_slots[0] = Some(Tensor::from_slice(&start[0]));
                stacked[0] = Vec::new();
                slots[1] = Some(Tensor::from_slice(&stacked_momenta[1]));
                stacked_momenta[1].clear();
            }
            let mut runs: Vec<StackedRun<'_>> = stacked
                .iter_mut()
                .zip(stacked_momenta.iter_mut())
                .zip(slots.iter_mut().zip(param_slots.iter_mut()))
                .enumerate()
                .map(|(k, ((params, momentum), (slot, param_slot)))| {
                    let mut stream = ChaCha20Rng::seed_from_u64(k as u64);
                    let o = objective(k);
                    let passes = plan.passes(sizes[k], &mut stream);
                    StackedRun {
                        params,
                        resident_momentum: (kept != Kept::No).then_some(slot),
                        resident_params: (kept == Kept::Device && k == 0).then_some(param_slot),
                        start: (shared && !(kept == Kept::Device && k == 0))
                            .then_some(&start[k][..]),
                        momentum: (k != 2).then_some(momentum),
                        sample_weights: o.sample_weights,
                        proximal: o.proximal,
                        correction: o.correction,
                        contrastive: o.contrastive,
                        first_row: firsts[k],
                        dropout: dropout_stream(&arch, &passes, &mut stream),
                        passes,
                        private: None,
                        lr: 0.1 + 0.05 * k as f64,
                    }
                })
                .collect();
            train_sgd_stacked(&arch, &plan, rows, resident, &mut runs);
            drop(runs);
            for (momentum, slot) in stacked_momenta.iter_mut().zip(&slots) {
                if let Some(buffer) = slot {
                    assert!(
                        momentum.is_empty(),
                        "a buffer kept on the device is not written"
                    );
                    *momentum = Vec::<f32>::try_from(buffer).unwrap();
                }
            }
            let plain_rust = arch.is_linear() && resident.is_none();
            assert_eq!(
                param_slots[0].is_some(),
                kept == Kept::Device && !plain_rust,
                "trained parameters stay on the device where asked, unless trained in Rust"
            );
            for (params, slot) in stacked.iter_mut().zip(&param_slots) {
                if let Some(trained) = slot {
                    assert!(
                        params.is_empty(),
                        "parameters kept on the device are not written"
                    );
                    *params = Vec::<f32>::try_from(trained).unwrap();
                }
            }
            (stacked, stacked_momenta)
        };
        let stacked_on = |resident| stacked_from(resident, false, Kept::No);
        let (stacked, stacked_momenta) = stacked_on(None);
        let resident = DeviceRows::upload(&rows, tch::Device::Cpu);
        let (on_device, on_device_momenta) = stacked_on(Some(&resident));
        for resident in [None, Some(&resident)] {
            assert_eq!(
                stacked_from(resident, true, Kept::No),
                stacked_on(resident),
                "runs from shared starts train as from copies"
            );
            for kept in [Kept::Device, Kept::Host] {
                assert_eq!(
                    stacked_from(resident, true, kept),
                    stacked_on(resident),
                    "buffers and parameters kept on the device train as from the host"
                );
            }
        }
        if arch.is_linear() {
            // From host rows a linear model trains in plain Rust (`super::linear`), alone and
            // in a cohort alike; from rows on a device through libtorch, up to rounding.
            assert_eq!(
                (&alone, &alone_momenta),
                (&stacked, &stacked_momenta),
                "a linear run trains alone as in a cohort"
            );
        } else {
            assert_eq!(
                (&on_device, &on_device_momenta),
                (&stacked, &stacked_momenta),
                "resident rows train as gathered ones"
            );
        }
        for k in 0..3 {
            assert_ne!(alone[k], start[k], "run {k} trained");
            for (a, b) in [
                (&alone[k], &stacked[k]),
                (&alone_momenta[k], &stacked_momenta[k]),
                (&on_device[k], &stacked[k]),
                (&on_device_momenta[k], &stacked_momenta[k]),
            ] {
                assert_eq!(a.len(), b.len(), "run {k}");
                for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                    assert!(
                        (x - y).abs() <= tolerance * x.abs().max(1.0),
                        "{spec:?} run {k}: {x} vs {y} at {i} (start {})",
                        start[k][i]
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
            dp_sgd: None,
        }
    }

    #[test]
    fn stacked_runs_train_as_each_would_alone() {
        let mlp = ModelSpec::from_yaml("{kind: mlp, hidden: [5, 4]}").unwrap();
        let flat = InputShape::Flat(6);
        for (spec, classes) in [
            (ModelSpec::from_yaml("{kind: linear}").unwrap(), 2),
            (ModelSpec::from_yaml("{kind: linear}").unwrap(), 4),
            (mlp.clone(), 2),
            (mlp, 3),
        ] {
            check(
                spec.clone(),
                flat,
                classes,
                plan(LocalWork::Epochs(2), 0.9, 5e-4),
                1e-5,
            );
            check(
                spec.clone(),
                flat,
                classes,
                plan(LocalWork::Steps(3), 0.0, 0.0),
                1e-5,
            );
            check(
                spec,
                flat,
                classes,
                plan(LocalWork::Epochs(1), 0.5, 0.0),
                1e-5,
            );
        }
    }

    #[test]
    fn transfer_groups_cover_every_vector_once_in_order() {
        let p = TRANSFER_FLOATS / 3 + 1; // two vectors a group
        let groups: Vec<_> = transfer_groups(5, p).collect();
        assert_eq!(groups, [0..2, 2..4, 4..5]);
        assert!(transfer_groups(7, 10).eq(std::iter::once(0..7)));
        let huge: Vec<_> = transfer_groups(2, TRANSFER_FLOATS * 2).collect();
        assert_eq!(huge, [0..1, 1..2]);
    }

    #[test]
    fn a_vector_given_again_crosses_once_and_stacks_the_same() {
        let spec = ModelSpec::from_yaml("{kind: mlp, hidden: [3]}").unwrap();
        let arch = Architecture::for_input(&spec, InputShape::Flat(4), 2);
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let (a, b) = (arch.init(&mut rng), arch.init(&mut rng));
        let a_again = a.clone(); // the same values in other memory: crosses
        let given = [
            Some(&a[..]),
            None,
            Some(&a[..]),
            Some(&b[..]),
            Some(&a_again[..]),
        ];
        use RowSource::*;
        assert_eq!(
            row_sources(&given),
            [Upload, Zeros, SameAs(0), Upload, Upload]
        );
        let zeros = vec![0f32; a.len()];
        let copies = [&a, &zeros, &a_again, &b, &a_again].map(|v| Some(&v[..]));
        let (deduped, plain) = (
            stack_vectors(&given, &arch, Device::Cpu),
            stack_vectors(&copies, &arch, Device::Cpu),
        );
        for (x, y) in deduped.iter().zip(&plain) {
            assert!(x.equal(y), "{x} vs {y}");
        }
    }

    #[test]
    fn vectors_stack_and_unstack_unchanged_across_transfer_groups() {
        // A dense layer of more than a third of TRANSFER_FLOATS: groups of two vectors.
        let spec = ModelSpec::from_yaml("{kind: mlp, hidden: [1000]}").unwrap();
        let arch = Architecture::for_input(&spec, InputShape::Flat(1500), 10);
        let p = arch.num_params();
        assert!(p > TRANSFER_FLOATS / 3 && p < TRANSFER_FLOATS / 2);
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let vectors: Vec<Vec<f32>> = (0..5).map(|_| arch.init(&mut rng)).collect();
        let given: Vec<Option<&[f32]>> = vectors
            .iter()
            .enumerate()
            .map(|(k, v)| (k != 3).then_some(&v[..]))
            .collect();
        let stacked = stack_vectors(&given, &arch, Device::Cpu);
        // Run 1's first layer: its first weight row in row 1 of the stacked tensor.
        let first = Vec::<f32>::try_from(stacked[0].get(1).get(0)).unwrap();
        assert_eq!(first, vectors[1][..1500]);
        let mut back = Vec::new();
        unstack_vectors(&stacked, p, |k, values| back.push((k, values.to_vec())));
        assert_eq!(back.len(), 5);
        for (k, values) in back {
            match given[k] {
                Some(v) => assert!(values == v, "vector {k} changed"),
                None => assert!(values.iter().all(|&x| x == 0.0), "vector {k} not zeros"),
            }
        }
    }

    /// Convolutions stack as one grouped convolution: FedEM's CNN, the small CNN with its two
    /// dropout layers (each run's masks from its own stream, as alone), and MobileNet-v2 with
    /// group norm (depthwise convolutions, residuals, global pooling). MobileNet over one
    /// step, on 64×64 images, within 5e-5: on random data from its initialisation, its group
    /// norms magnify rounding so much that scaling a seventh of the parameters by 1 + 1e-7
    /// moves them by 1e-4 (relative) after two steps of training alone; on 32×32 images
    /// (1×1 pixel in the last blocks, groups of 5 values) even one gradient differs by 1e-4
    /// of its scale between the grouped and the plain convolution, against 5e-6 here.
    #[test]
    fn stacked_convolutions_train_as_each_would_alone() {
        let small = ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap();
        check(
            small.clone(),
            InputShape::Image([2, 8, 8]),
            3,
            plan(LocalWork::Epochs(2), 0.9, 5e-4),
            1e-5,
        );
        check(
            small,
            InputShape::Image([1, 8, 8]),
            2,
            plan(LocalWork::Steps(3), 0.0, 0.0),
            1e-5,
        );
        check(
            ModelSpec::from_yaml("{kind: cnn}").unwrap(),
            InputShape::Image([1, 16, 16]),
            5,
            plan(LocalWork::Epochs(1), 0.5, 0.0),
            1e-5,
        );
        let mobilenet = ModelSpec::of(MobilenetV2Spec {
            width: 0.25,
            norm: Normalization::Group,
            dropout: 0.2,
        });
        check(
            mobilenet,
            InputShape::Image([3, 64, 64]),
            4,
            plan(LocalWork::Steps(1), 0.9, 5e-4),
            5e-5,
        );
    }

    /// The LSTM stacks as one batched cell per step, embeddings as one lookup in the runs'
    /// tables one after another: two layers over windows of 6 tokens.
    #[test]
    fn stacked_lstms_train_as_each_would_alone() {
        let lstm = ModelSpec::of(LstmSpec {
            embedding: 4,
            hidden: 6,
            layers: 2,
        });
        let tokens = InputShape::Tokens { len: 6, vocab: 7 };
        check(
            lstm.clone(),
            tokens,
            7,
            plan(LocalWork::Steps(2), 0.9, 0.0),
            1e-5,
        );
        check(lstm, tokens, 7, plan(LocalWork::Steps(3), 0.0, 0.0), 1e-5);
    }

    #[test]
    fn dropout_streams_leave_the_client_stream_where_training_alone_does() {
        let arch = Architecture::for_input(
            &ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.3}").unwrap(),
            InputShape::Image([1, 8, 8]),
            3,
        );
        let (rows, plan) = (13, plan(LocalWork::Epochs(2), 0.0, 0.0));
        let mut alone = ChaCha20Rng::seed_from_u64(9);
        let mut masks = Vec::new();
        for (_, cuts) in plan.passes(rows, &mut alone) {
            for (_, len) in cuts {
                masks.push(arch.dropout_masks(len, &mut alone));
            }
        }
        let mut split = ChaCha20Rng::seed_from_u64(9);
        let passes = plan.passes(rows, &mut split);
        let mut stream = dropout_stream(&arch, &passes, &mut split);
        let lens = passes.iter().flat_map(|(_, cuts)| cuts.iter().map(|c| c.1));
        for (len, alone) in lens.zip(&masks) {
            let drawn = arch.dropout_masks(len, &mut stream);
            assert!(drawn.iter().zip(alone).all(|(a, b)| a.equal(b)));
        }
        // The masks' stream ends where the client's stream goes on.
        assert_eq!(stream.get_word_pos(), split.get_word_pos());
        assert_eq!(split.gen::<u64>(), alone.gen::<u64>(), "the next draw");
    }

    fn dp_plan(work: LocalWork, batch_size: usize, clip: f64, noise_multiplier: f64) -> LocalPlan {
        LocalPlan {
            work,
            batch_size,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: Some(DpSgd {
                clip,
                noise_multiplier,
            }),
        }
    }

    /// One DP-SGD step by hand. Logistic regression at θ = 0 (p = ½): row 1, x = (2, 2), y = 0,
    /// has gradient ½·(2, 2, 1) (weights, then bias), norm 1.5; row 2, x = (4, 8), y = 1, has
    /// −½·(4, 8, 1), norm 4.5. With C = 1.5 the first stays, the second is scaled by ⅓ to
    /// (−⅔, −4⁄3, −⅙); their sum is (⅓, −⅓, ⅓). Two rows in batches of 2: q = 1, so both rows
    /// every step and an expected batch of 2: the direction is (⅙, −⅙, ⅙), and one step at
    /// lr 1 (σ = 0) lands at (−⅙, ⅙, −⅙).
    #[test]
    fn dp_sgd_step_by_hand() {
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        let (features, labels) = ([2.0f32, 2.0, 4.0, 8.0], [0i64, 1]);
        let data = SplitView {
            features: &features,
            labels: &labels,
            dim: 2,
        };
        let plan = dp_plan(LocalWork::Steps(1), 2, 1.5, 0.0);
        let mut params = vec![0.0f32; 3];
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let stats = train_dp_sgd_alone(
            &arch,
            &mut params,
            &mut Vec::new(),
            data,
            &plan,
            1.0,
            &mut rng,
            &Objective::default(),
        );
        assert_eq!(stats.steps, 1);
        let sixth = 1.0 / 6.0;
        for (got, want) in params.iter().zip([-sixth, sixth, -sixth]) {
            assert!((got - want).abs() < 1e-6, "{params:?}");
        }
        // σ = 2: the same step plus N(0, (σC)²)/2 per coordinate, from the run's noise stream.
        let noisy = dp_plan(LocalWork::Steps(1), 2, 1.5, 2.0);
        let mut params = vec![0.0f32; 3];
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let objective = Objective::default();
        train_dp_sgd_alone(
            &arch,
            &mut params,
            &mut Vec::new(),
            data,
            &noisy,
            1.0,
            &mut rng,
            &objective,
        );
        let mut client = ChaCha20Rng::seed_from_u64(1);
        let _ = noisy.passes(2, &mut client);
        let mut noise = DpSgdRun::draw(&noisy, 2, &mut client).unwrap().noise;
        for (got, want) in params.iter().zip([-sixth, sixth, -sixth]) {
            let z: f64 = noise.sample(StandardNormal);
            let expected = want as f64 - ((3.0 * z) as f32 / 2.0) as f64;
            assert!((*got as f64 - expected).abs() < 1e-5, "{got} vs {expected}");
        }
    }

    /// The batched per-row gradients (each row a run of its own) clip and sum as one backward
    /// per row would: two runs of a CNN with dropout, three rows each, the second run's last
    /// row padding (weight zero), C below most rows' norms.
    #[test]
    fn dp_sgd_directions_match_one_backward_per_row() {
        let input = InputShape::Image([1, 8, 8]);
        let spec = ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap();
        let arch = Architecture::for_input(&spec, input, 4);
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let (features, labels) = random_rows(input, 6, 4, &mut rng);
        let params: Vec<Vec<f32>> = (0..2).map(|_| arch.init(&mut rng)).collect();
        let vectors: Vec<Option<&[f32]>> = params.iter().map(|p| Some(&p[..])).collect();
        let ps = stack_vectors(&vectors, &arch, Device::Cpu);
        let weights = [1.0f32, 0.5, 1.0, 1.0, 1.0, 0.0];
        let masks: Vec<Vec<Tensor>> = (0..2).map(|_| arch.dropout_masks(3, &mut rng)).collect();
        let stacked_masks: Vec<Tensor> = (0..masks[0].len())
            .map(|l| Tensor::stack(&[&masks[0][l], &masks[1][l]], 0))
            .collect();
        let dim = input.len() as i64;
        let batch = StepBatch {
            x: Tensor::from_slice(&features).view([2, 3, dim]),
            y: Tensor::from_slice(&labels).view([2, 3]),
            weight: Tensor::from_slice(&weights).view([2, 3]),
            masks: stacked_masks,
        };
        let clip = 0.05;
        let dp = DpSgd {
            clip,
            noise_multiplier: 0.0,
        };
        let mut runs: Vec<DpSgdRun> = [2.5, 1.5]
            .iter()
            .map(|&expected_batch| DpSgdRun {
                noise: ChaCha20Rng::seed_from_u64(0),
                expected_batch,
            })
            .collect();
        let batched = dp_sgd_directions(&arch, &ps, &batch, dp, &mut runs, DP_SGD_ROW_FLOATS);
        // In parts, with noise from each run's own stream: the same directions as all runs at
        // once.
        let noisy = DpSgd {
            clip,
            noise_multiplier: 1.0,
        };
        let fresh = || -> Vec<DpSgdRun> {
            (0..2)
                .map(|seed| DpSgdRun {
                    noise: ChaCha20Rng::seed_from_u64(seed),
                    expected_batch: 2.0,
                })
                .collect()
        };
        let at_once = dp_sgd_directions(&arch, &ps, &batch, noisy, &mut fresh(), i64::MAX);
        // Parts of one run each, then of one row each (the rows' clipped sums added).
        for max_row_floats in [3 * arch.num_params() as i64, 1] {
            let parts = dp_sgd_directions(&arch, &ps, &batch, noisy, &mut fresh(), max_row_floats);
            for (g, b) in parts.iter().zip(&at_once) {
                assert_eq!(g.size(), b.size());
                let gap = f64::try_from((g - b).abs().max()).unwrap();
                assert!(gap < 1e-6, "parts of {max_row_floats} vs at once: {gap}");
            }
        }
        let flat = |ts: &[Tensor], run: i64| -> Vec<f64> {
            let pieces: Vec<Tensor> = ts.iter().map(|t| t.get(run).reshape([-1])).collect();
            Vec::<f64>::try_from(Tensor::cat(&pieces, 0).to_kind(Kind::Double)).unwrap()
        };
        let mut clipped_rows = 0;
        for run in 0..2i64 {
            let mut sum = vec![0.0f64; arch.num_params()];
            for row in 0..3i64 {
                let one = StepBatch {
                    x: batch.x.get(run).get(row).view([1, 1, dim]),
                    y: batch.y.get(run).get(row).view([1, 1]),
                    weight: batch.weight.get(run).get(row).view([1, 1]),
                    masks: (batch.masks.iter())
                        .map(|m| m.get(run).get(row).unsqueeze(0).unsqueeze(0))
                        .collect(),
                };
                let own: Vec<Tensor> = ps.iter().map(|p| p.get(run).unsqueeze(0)).collect();
                let g = flat(&stacked_gradients(&arch, &own, &one), 0);
                let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
                let factor = if norm > clip { clip / norm } else { 1.0 };
                clipped_rows += usize::from(norm > clip);
                sum.iter_mut().zip(&g).for_each(|(s, v)| *s += factor * v);
            }
            let expected = [2.5, 1.5][run as usize];
            let got = flat(&batched, run);
            for (g, s) in got.iter().zip(&sum) {
                assert!(
                    (g - s / expected).abs() < 1e-6,
                    "run {run}: {g} vs {}",
                    s / expected
                );
            }
        }
        assert!(clipped_rows >= 3, "C clips most rows ({clipped_rows})");
    }

    #[test]
    fn stacked_batches_answer_gradient_queries_as_each_batch_alone() {
        // Runs over 37, 16 and 5 rows (batches of 8: 5, 2 and 1 steps, sorted longest first),
        // weight decay on; at every step each run asks at its own parameters, twice (a batch's
        // dropout masks hold for all its queries).
        let sizes = [37usize, 16, 5];
        let total: usize = sizes.iter().sum();
        let firsts = [0, sizes[0], sizes[0] + sizes[1]];
        let plan = plan(LocalWork::Epochs(1), 0.0, 0.01);
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        for (spec, input) in [
            (
                ModelSpec::from_yaml("{kind: linear}").unwrap(),
                InputShape::Flat(6),
            ),
            (
                ModelSpec::from_yaml("{kind: mlp, hidden: [5]}").unwrap(),
                InputShape::Flat(6),
            ),
            (
                ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap(),
                InputShape::Image([1, 8, 8]),
            ),
            (
                ModelSpec::of(LstmSpec {
                    embedding: 4,
                    hidden: 6,
                    layers: 2,
                }),
                InputShape::Tokens { len: 6, vocab: 7 },
            ),
        ] {
            let dim = input.len();
            let (features, labels) = random_rows(input, total, 3, &mut rng);
            let rows = SplitView {
                features: &features,
                labels: &labels,
                dim,
            };
            let arch = Architecture::for_input(&spec, input, 3);
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
                .map(|k| {
                    let mut stream = ChaCha20Rng::seed_from_u64(k as u64);
                    let passes = plan.passes(sizes[k], &mut stream);
                    BatchwiseRun {
                        first_row: firsts[k],
                        dropout: dropout_stream(&arch, &passes, &mut stream),
                        passes,
                    }
                })
                .collect();
            let mut step = 0;
            for_each_stacked_batch(&arch, &plan, rows, None, &runs, |active, batch| {
                assert_eq!(active, [3, 2, 1, 1, 1][step]);
                let asked: Vec<&[f32]> = params[..active].iter().map(|p| &p[..]).collect();
                assert_eq!(
                    batch.gradients(&asked),
                    batch.gradients(&asked),
                    "same masks"
                );
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
    fn models_without_batch_statistics_stack() {
        let image = InputShape::Image([3, 32, 32]);
        let tokens = InputShape::Tokens { len: 10, vocab: 20 };
        let lstm = ModelSpec::of(LstmSpec {
            embedding: 8,
            hidden: 16,
            layers: 2,
        });
        let mobilenet = |norm| {
            ModelSpec::of(MobilenetV2Spec {
                width: 0.25,
                norm,
                dropout: 0.2,
            })
        };
        for (spec, input, stacks, dense) in [
            (
                ModelSpec::from_yaml("{kind: linear}").unwrap(),
                image,
                true,
                true,
            ),
            (
                ModelSpec::from_yaml("{kind: mlp, hidden: [5]}").unwrap(),
                InputShape::Flat(3),
                true,
                true,
            ),
            (
                ModelSpec::from_yaml("{kind: cnn}").unwrap(),
                image,
                true,
                false,
            ),
            (
                ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap(),
                image,
                true,
                false,
            ),
            (mobilenet(Normalization::Group), image, true, false),
            (mobilenet(Normalization::Batch), image, false, false),
            (lstm, tokens, true, false),
        ] {
            let arch = Architecture::for_input(&spec, input, 10);
            assert_eq!(
                (arch.stacks(), arch.is_dense()),
                (stacks, dense),
                "{spec:?}"
            );
        }
    }

    /// The models of the stacked evaluation tests: (model, input, classes, requests).
    fn evaluated_models() -> Vec<(ModelSpec, InputShape, usize, usize)> {
        let mobilenet = ModelSpec::of(MobilenetV2Spec {
            width: 0.25,
            norm: Normalization::Group,
            dropout: 0.2,
        });
        let lstm = ModelSpec::of(LstmSpec {
            embedding: 4,
            hidden: 6,
            layers: 2,
        });
        vec![
            (
                ModelSpec::from_yaml("{kind: linear}").unwrap(),
                InputShape::Flat(6),
                2,
                70,
            ),
            (
                ModelSpec::from_yaml("{kind: mlp, hidden: [5]}").unwrap(),
                InputShape::Flat(6),
                4,
                70,
            ),
            (
                ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap(),
                InputShape::Image([1, 8, 8]),
                3,
                6,
            ),
            (mobilenet, InputShape::Image([3, 32, 32]), 3, 3),
            (lstm, InputShape::Tokens { len: 5, vocab: 7 }, 7, 6),
        ]
    }

    /// Random splits of given lengths, one after another.
    struct Splits {
        features: Vec<f32>,
        labels: Vec<i64>,
        dim: usize,
        lens: Vec<usize>,
        /// Each split's first row.
        firsts: Vec<usize>,
    }

    impl Splits {
        fn new(input: InputShape, lens: &[usize], classes: usize, rng: &mut ChaCha20Rng) -> Self {
            let total: usize = lens.iter().sum();
            let (features, labels) = random_rows(input, total, classes, rng);
            let firsts = lens
                .iter()
                .scan(0, |at, &n| {
                    *at += n;
                    Some(*at - n)
                })
                .collect();
            let (dim, lens) = (input.len(), lens.to_vec());
            Splits {
                features,
                labels,
                dim,
                lens,
                firsts,
            }
        }

        fn view(&self, k: usize) -> SplitView<'_> {
            let (first, n, dim) = (self.firsts[k], self.lens[k], self.dim);
            SplitView {
                features: &self.features[first * dim..(first + n) * dim],
                labels: &self.labels[first..first + n],
                dim,
            }
        }

        /// Every split's rows, resident as a device holds them (the CPU here).
        fn resident(&self) -> DeviceRows {
            let all = SplitView {
                features: &self.features,
                labels: &self.labels,
                dim: self.dim,
            };
            DeviceRows::upload(&all, Device::Cpu)
        }
    }

    #[test]
    fn stacked_sample_losses_match_each_model_alone() {
        // Every request scored under the same three components (one model's passes over all
        // their rows) and under a model of its own (stacked), splits of 0 to 300 rows; from
        // host rows and from resident ones.
        let mut rng = ChaCha20Rng::seed_from_u64(22);
        for (spec, input, classes, requests) in evaluated_models() {
            let arch = Architecture::for_input(&spec, input, classes);
            let lens: Vec<usize> = (0..requests)
                .map(|k| [300, 1, 0, 17, 256, 40][k % 6])
                .collect();
            let splits = Splits::new(input, &lens, classes, &mut rng);
            let shared: Vec<Vec<f32>> = (0..3).map(|_| arch.init(&mut rng)).collect();
            let own: Vec<Vec<f32>> = (0..requests).map(|_| arch.init(&mut rng)).collect();
            let requests: Vec<SplitModels<'_>> = (0..requests)
                .map(|k| SplitModels {
                    vectors: vec![&shared[0], &own[k], &shared[1], &shared[2]]
                        .into_iter()
                        .map(Vec::as_slice)
                        .collect(),
                    view: splits.view(k),
                    first_row: splits.firsts[k],
                })
                .collect();
            let stacked = sample_losses_stacked(&arch, Device::Cpu, None, &requests);
            // MobileNet-v2's group norms magnify rounding row by row (its mean loss agrees to
            // 1e-5, as in the evaluation test).
            let tolerance = if spec.kind() == "mobilenet_v2" {
                1e-4
            } else {
                1e-5
            };
            for (k, (request, got)) in requests.iter().zip(&stacked).enumerate() {
                let alone = super::super::sample_losses(&arch, &request.vectors, request.view);
                assert_eq!(got.len(), alone.len(), "{spec:?} {k}");
                for (got, alone) in got.iter().zip(&alone) {
                    assert_eq!(got.len(), request.view.len(), "{spec:?} {k}");
                    for (a, b) in got.iter().zip(alone) {
                        assert!(
                            (a - b).abs() <= tolerance * b.abs().max(1.0),
                            "{spec:?} request {k}: {a} vs {b}"
                        );
                    }
                }
            }
            let resident = splits.resident();
            let from_device = sample_losses_stacked(&arch, Device::Cpu, Some(&resident), &requests);
            if Linear::of(&arch).is_none() {
                // The same passes from resident rows: the same bits.
                assert_eq!(from_device, stacked, "{spec:?}");
            }
            for (got, want) in from_device.iter().flatten().zip(stacked.iter().flatten()) {
                for (a, b) in got.iter().zip(want) {
                    assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{spec:?}");
                }
            }
        }
    }

    #[test]
    fn stacked_evaluation_matches_each_model_alone() {
        // Splits of 1 to 300 rows (passes of 256 rows: some take two), plain models of their
        // own (stacked) and mixtures of shared components (one model's passes over all their
        // rows) under fixed and per-row gates; 70 requests of the small models (two stacks of
        // parameter vectors), a few of the others.
        let mut rng = ChaCha20Rng::seed_from_u64(21);
        for (spec, input, classes, requests) in evaluated_models() {
            let arch = Architecture::for_input(&spec, input, classes);
            let lens: Vec<usize> = (0..requests)
                .map(|k| [300, 1, 17, 256, 40, 3][k % 6])
                .collect();
            let splits = Splits::new(input, &lens, classes, &mut rng);
            let models: Vec<Vec<f32>> = (0..3).map(|_| arch.init(&mut rng)).collect();
            let own: Vec<Vec<f32>> = (0..requests).map(|_| arch.init(&mut rng)).collect();
            let pi = [0.2, 0.5, 0.3];
            let predictors: Vec<Predictor<'_>> = (0..requests)
                .map(|k| match k % 3 {
                    0 => Predictor::Params(own[k][..].into()),
                    1 => Predictor::Mixture {
                        components: models.iter().map(Vec::as_slice).collect(),
                        gates: MixtureGates::Fixed(&pi),
                    },
                    _ => Predictor::Mixture {
                        components: models[..2].iter().map(Vec::as_slice).collect(),
                        gates: MixtureGates::PerRow(Box::new(|v: SplitView<'_>| {
                            let g: Vec<f64> = (0..v.len()).map(|i| (i % 5) as f64 / 4.0).collect();
                            vec![g.iter().map(|x| 1.0 - x).collect(), g]
                        })),
                    },
                })
                .collect();
            let requests: Vec<EvalRequest<'_>> = predictors
                .iter()
                .enumerate()
                .map(|(k, model)| EvalRequest {
                    model,
                    view: splits.view(k),
                    first_row: splits.firsts[k],
                })
                .collect();
            let stacked = evaluate_stacked(&arch, Device::Cpu, None, &requests);
            for (k, (request, got)) in requests.iter().zip(&stacked).enumerate() {
                let alone = request.model.evaluate(&arch, request.view);
                assert_eq!(
                    (got.n, got.accuracy),
                    (alone.n, alone.accuracy),
                    "{spec:?} {k}"
                );
                let gap = (got.loss - alone.loss).abs() / alone.loss.abs().max(1e-12);
                assert!(
                    gap < 1e-5,
                    "{spec:?} request {k}: {} vs {}",
                    got.loss,
                    alone.loss
                );
            }
            // From rows resident on a device (the CUDA path, the CPU here): the same bits.
            let resident = splits.resident();
            let from_device = evaluate_stacked(&arch, Device::Cpu, Some(&resident), &requests);
            assert_eq!(from_device, stacked, "{spec:?}");
        }
    }
}
