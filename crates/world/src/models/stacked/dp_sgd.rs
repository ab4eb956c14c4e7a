//! DP-SGD in a cohort: each row's gradient clipped, summed per run, plus each run's own noise,
//! taken in parts that bound memory; and a run alone trained as a cohort of one, so that both
//! take the same steps from the same draws.

use super::*;
use crate::data::SplitView;
use crate::models::sgd::{DpSgd, LocalPlan, Objective, TrainStats};
use crate::models::Architecture;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;
use tch::{Device, Tensor};

/// What DP-SGD needs of one local run besides its passes.
pub struct DpSgdRun {
    /// Where its noise comes from: one standard normal per coordinate per step, in parameter
    /// order (f64, scaled by σ·C, then rounded to f32).
    pub noise: ChaCha20Rng,
    /// q·n: what the noised sum of a step's clipped gradients is divided by.
    pub expected_batch: f64,
}

impl DpSgdRun {
    /// Under DP-SGD, a run over `n` rows whose noise stream is a fresh ChaCha stream seeded by
    /// 32 bytes drawn from the client's stream `rng` right after the run's passes (alone and
    /// in a cohort alike); `None`, drawing nothing, without DP-SGD.
    pub fn draw(plan: &LocalPlan, n: usize, rng: &mut impl Rng) -> Option<DpSgdRun> {
        plan.dp_sgd.map(|_| DpSgdRun {
            noise: ChaCha20Rng::from_seed(rng.gen::<[u8; 32]>()),
            expected_batch: plan.dp_sampling_rate(n) * n as f64,
        })
    }
}

/// [`crate::models::train_sgd`] under DP-SGD: the run trains as a cohort of one ([`train_sgd_stacked`]), so
/// alone and in a cohort a run takes the same steps from the same draws: its passes, its noise
/// stream ([`DpSgdRun::draw`]), then its dropout masks ([`dropout_stream`]), from `rng`.
#[allow(clippy::too_many_arguments)]
pub fn train_dp_sgd_alone(
    arch: &Architecture,
    params: &mut [f32],
    momentum: &mut Vec<f32>,
    data: SplitView<'_>,
    plan: &LocalPlan,
    lr: f64,
    rng: &mut ChaCha20Rng,
    objective: &Objective<'_>,
) -> TrainStats {
    assert!(
        objective.contrastive.is_none(),
        "DP-SGD takes no contrastive term"
    );
    let passes = plan.passes(data.len(), rng);
    let private = DpSgdRun::draw(plan, data.len(), rng);
    let dropout = dropout_stream(arch, &passes, rng);
    let steps = passes.iter().map(|(_, cuts)| cuts.len()).sum::<usize>() as u32;
    let mut trained = params.to_vec();
    let mut run = StackedRun {
        params: &mut trained,
        resident_momentum: None,
        resident_params: None,
        start: None,
        momentum: (plan.momentum != 0.0).then_some(momentum),
        sample_weights: objective.sample_weights,
        proximal: objective.proximal,
        correction: objective.correction,
        contrastive: None,
        first_row: 0,
        passes,
        dropout,
        private,
        lr,
    };
    train_sgd_stacked(arch, plan, data, None, std::slice::from_mut(&mut run));
    params.copy_from_slice(&trained);
    TrainStats { steps }
}

/// The most floats of per-row gradients (and of the per-row parameter copies behind them) that
/// a DP-SGD step holds at once: 2^28, 1 GiB. A step's rows are taken in parts of as many runs
/// as fit, or, where one run's batch does not fit, of as many of its rows as fit (one row at
/// least), so that a cohort of a large model does not ask for runs × rows × parameters at once
/// (FEMNIST's CNN, 200 runs of 128 rows: 690 GB). A fixed number, not the free memory, so the
/// parts (and the results) depend on the scenario only.
pub(super) const DP_SGD_ROW_FLOATS: i64 = 1 << 28;

/// DP-SGD's step direction for each of the active runs ([`LocalPlan::dp_sgd`]): every row's
/// gradient, clipped to L2 norm C, summed over the run's batch ([`clipped_sums`], taken in
/// parts of at most `max_row_floats` per-row gradient floats), plus N(0, (σC)²) on every
/// coordinate (drawn from the run's noise stream, [`dp_sgd_noise`]), divided by the run's
/// expected batch size: `[A, …]` per parameter tensor. A step that fits in one part runs as
/// one computation.
pub(super) fn dp_sgd_directions(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
    dp: DpSgd,
    runs: &mut [DpSgdRun],
    max_row_floats: i64,
) -> Vec<Tensor> {
    let (a, b) = (batch.x.size()[0], batch.x.size()[1]);
    let p = (arch.num_params() as i64).max(1);
    let part = |t: &Tensor, dim: i64, start: i64, len: i64| t.narrow(dim, start, len);
    let sub_batch = |dim: i64, start: i64, len: i64| StepBatch {
        x: part(&batch.x, dim, start, len),
        y: part(&batch.y, dim, start, len),
        weight: part(&batch.weight, dim, start, len),
        masks: (batch.masks.iter())
            .map(|m| part(m, dim, start, len))
            .collect(),
    };
    let sums = if a * b * p <= max_row_floats {
        clipped_sums(arch, ps, batch, dp.clip)
    } else {
        let concat = |parts: Vec<Vec<Tensor>>| -> Vec<Tensor> {
            (0..parts[0].len())
                .map(|j| Tensor::cat(&parts.iter().map(|g| &g[j]).collect::<Vec<_>>(), 0))
                .collect()
        };
        let runs_a_part = max_row_floats / (b * p);
        if runs_a_part >= 1 {
            let parts = (0..a).step_by(runs_a_part as usize).map(|start| {
                let len = runs_a_part.min(a - start);
                let sub_ps: Vec<Tensor> = ps.iter().map(|t| part(t, 0, start, len)).collect();
                clipped_sums(arch, &sub_ps, &sub_batch(0, start, len), dp.clip)
            });
            concat(parts.collect())
        } else {
            // One run's batch is too large: its rows in parts, their clipped sums added.
            let rows_a_part = (max_row_floats / p).max(1);
            let per_run = (0..a).map(|run| {
                let run_batch = StepBatch {
                    x: part(&batch.x, 0, run, 1),
                    y: part(&batch.y, 0, run, 1),
                    weight: part(&batch.weight, 0, run, 1),
                    masks: batch.masks.iter().map(|m| part(m, 0, run, 1)).collect(),
                };
                let run_ps: Vec<Tensor> = ps.iter().map(|t| part(t, 0, run, 1)).collect();
                let mut total: Option<Vec<Tensor>> = None;
                for start in (0..b).step_by(rows_a_part as usize) {
                    let len = rows_a_part.min(b - start);
                    let rows = StepBatch {
                        x: part(&run_batch.x, 1, start, len),
                        y: part(&run_batch.y, 1, start, len),
                        weight: part(&run_batch.weight, 1, start, len),
                        masks: (run_batch.masks.iter())
                            .map(|m| part(m, 1, start, len))
                            .collect(),
                    };
                    let sums = clipped_sums(arch, &run_ps, &rows, dp.clip);
                    total = Some(match total {
                        None => sums,
                        Some(t) => t.iter().zip(&sums).map(|(t, s)| t + s).collect(),
                    });
                }
                total.expect("a batch has rows")
            });
            concat(per_run.collect())
        }
    };
    let device = batch.x.device();
    let noise = dp_sgd_noise(arch, dp, runs, device);
    let expected: Vec<f32> = runs.iter().map(|r| r.expected_batch as f32).collect();
    tch::no_grad(|| {
        (sums.into_iter().enumerate())
            .map(|(j, mut sum)| {
                if let Some(noise) = &noise {
                    sum += &noise[j];
                }
                let dims = sum.dim();
                sum / per_run(&expected, dims, device)
            })
            .collect()
    })
}

/// Each run's sum over its batch of every row's gradient clipped to L2 norm `clip`: `[A, …]`
/// per parameter tensor. Per-row gradients come batched, not one backward per row: each row
/// becomes a run of its own, at a copy of its run's parameters, so one stacked gradient
/// computation ([`stacked_gradients`]) gives them all (`[A·B, …]`). A padding row weighs zero,
/// so its gradient is zero and it adds nothing.
pub(super) fn clipped_sums(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
    clip: f64,
) -> Vec<Tensor> {
    let (a, b) = (batch.x.size()[0], batch.x.size()[1]);
    let rows = a * b;
    let one_row_each = |t: &Tensor| {
        let mut shape = vec![rows, 1];
        shape.extend(&t.size()[2..]);
        t.reshape(&shape[..])
    };
    let per_row = StepBatch {
        x: one_row_each(&batch.x),
        y: batch.y.reshape([rows, 1]),
        weight: batch.weight.reshape([rows, 1]),
        masks: batch.masks.iter().map(one_row_each).collect(),
    };
    // Each row's copy of its run's parameters: for a run alone, views of them (no copy).
    let copies: Vec<Tensor> = tch::no_grad(|| {
        ps.iter()
            .map(|p| {
                let mut shape = p.size();
                shape.insert(1, b);
                let mut rows_shape = shape.clone();
                rows_shape.remove(0);
                rows_shape[0] = rows;
                p.unsqueeze(1)
                    .expand(&shape[..], false)
                    .reshape(&rows_shape[..])
            })
            .collect()
    });
    let grads = stacked_gradients(arch, &copies, &per_row);
    drop(copies);
    tch::no_grad(|| {
        // A dense weight's gradient comes transposed (`[R, out, in]` laid out as `[R, in, out]`):
        // work on that layout, without a copy, and transpose the sum back.
        let laid_out: Vec<(Tensor, bool)> = grads.iter().map(contiguous_rows).collect();
        let squares = laid_out
            .iter()
            .map(|(g, _)| {
                g.view([rows, -1])
                    .norm_scalaropt_dim(2, [1], false)
                    .square()
            })
            .reduce(|total, s| total + s)
            .expect("a model has parameters");
        // min(1, C/‖g‖); a zero gradient's factor is 1 (C/0 = ∞).
        let factor = (squares.sqrt().reciprocal() * clip)
            .clamp_max(1.0)
            .view([a, 1, b]);
        laid_out
            .iter()
            .map(|(g, swapped)| {
                let shape = &g.size()[1..];
                // Σ_rows factor·g, as one product per run: `[A, 1, B] × [A, B, n]`.
                let sum = (factor.bmm(&g.view([a, b, -1]))).view(&[&[a][..], shape].concat()[..]);
                if *swapped {
                    sum.transpose(-1, -2)
                } else {
                    sum
                }
            })
            .collect()
    })
}

/// `g` in a layout with contiguous rows: itself, its last two dimensions swapped (`true`) where
/// that is contiguous (a dense weight's gradient), or else a contiguous copy.
pub(super) fn contiguous_rows(g: &Tensor) -> (Tensor, bool) {
    if g.is_contiguous() {
        (g.shallow_clone(), false)
    } else if g.dim() >= 3 && g.transpose(-1, -2).is_contiguous() {
        (g.transpose(-1, -2), true)
    } else {
        (g.contiguous(), false)
    }
}

/// One step's DP-SGD noise for each of `runs`: σC times a standard normal per coordinate,
/// drawn in f64 from the run's noise stream in parameter order and rounded to f32, stacked
/// `[A, …]` per parameter tensor; `None` (nothing drawn) when σ = 0.
pub(super) fn dp_sgd_noise(
    arch: &Architecture,
    dp: DpSgd,
    runs: &mut [DpSgdRun],
    device: Device,
) -> Option<Vec<Tensor>> {
    let std = dp.noise_std();
    if std == 0.0 {
        return None;
    }
    let p = arch.num_params();
    let vectors: Vec<Vec<f32>> = runs
        .iter_mut()
        .map(|run| {
            (0..p)
                .map(|_| (std * run.noise.sample::<f64, _>(StandardNormal)) as f32)
                .collect()
        })
        .collect();
    let vectors: Vec<Option<&[f32]>> = vectors.iter().map(|v| Some(&v[..])).collect();
    Some(stack_vectors(&vectors, arch, device))
}
