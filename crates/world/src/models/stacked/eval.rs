//! Stacked evaluation: many clients' models on their splits in stacked forward passes, in
//! bounded stacks and passes.

use super::*;
use crate::data::SplitView;
use crate::models::device::DeviceRows;
use crate::models::sgd::{loss, targets, EvalStats, Predictor};
use crate::models::Architecture;

use tch::{Device, Kind, Reduction, Tensor};

/// One model to evaluate on one client's split, in a stacked evaluation.
pub struct EvalRequest<'a> {
    pub model: &'a Predictor<'a>,
    /// The split's rows on the host.
    pub view: SplitView<'a>,
    /// Index of the split's first row in the resident rows (when given).
    pub first_row: usize,
}

/// Parameter vectors per stacked forward pass of an evaluation, and rows per vector in one
/// pass: bounds on memory that depend on the requests alone (64 FemnistCNNs are 420 MB of
/// parameters; 64 × 256 of its images about 2.5 GB of activations).
pub(super) const EVAL_RUNS_PER_STACK: usize = 64;
pub(super) const EVAL_ROWS_PER_PASS: usize = 256;

/// Mean loss and accuracy of each request's model on its split (each non-empty), as
/// [`Predictor::evaluate`] gives them alone up to float rounding, on `device` (rows gathered
/// from `resident` where given, else from the host): a parameter vector several requests name
/// (the same slice) is one model's forward passes over all their rows; the others are stacked,
/// at most 64 vectors and 256 rows per vector a pass, vectors of similar split lengths
/// together. Panics if the model does not stack.
pub fn evaluate_stacked(
    arch: &Architecture,
    device: Device,
    resident: Option<&DeviceRows>,
    requests: &[EvalRequest<'_>],
) -> Vec<EvalStats> {
    let splits: Vec<SplitModels<'_>> = requests
        .iter()
        .map(|r| SplitModels {
            vectors: r.model.parameter_vectors(),
            view: r.view,
            first_row: r.first_row,
        })
        .collect();
    let logits = stacked_split_logits(arch, device, resident, &splits);
    requests
        .iter()
        .zip(logits)
        .map(|(request, logits)| {
            let y = labels_on(device, resident, request.view, request.first_row);
            request
                .model
                .stats_of_logits(arch, logits, &y, request.view)
        })
        .collect()
}

/// Parameter vectors whose per-row losses are wanted on one client's split (FedEM's and
/// FedGMM's E-steps: every training row's loss under every component).
#[derive(Clone)]
pub struct SplitModels<'a> {
    pub vectors: Vec<&'a [f32]>,
    /// The split's rows on the host.
    pub view: SplitView<'a>,
    /// Index of the split's first row in the resident rows (when given).
    pub first_row: usize,
}

impl SplitModels<'_> {
    /// Rows times models: the forward passes of a row that scoring this request takes.
    pub fn forward_rows(&self) -> usize {
        self.view.len() * self.vectors.len()
    }
}

/// Each request's per-row losses, one vector of the split's length per parameter vector (in
/// request order), as [`super::super::sample_losses`] gives them alone up to float rounding,
/// from forward passes as [`evaluate_stacked`] makes them; an empty split has empty losses.
/// The linear model from host rows is scored as alone, bit for bit (in plain Rust, each
/// client on its own, as [`train_sgd_stacked`] trains it). Only the losses come back to the
/// host. Panics if the model does not stack.
pub fn sample_losses_stacked(
    arch: &Architecture,
    device: Device,
    resident: Option<&DeviceRows>,
    requests: &[SplitModels<'_>],
) -> Vec<Vec<Vec<f32>>> {
    if let (Some(linear), None) = (Linear::of(arch), resident) {
        return requests
            .iter()
            .map(|r| match r.view.len() {
                0 => vec![Vec::new(); r.vectors.len()],
                _ => linear.sample_losses(&r.vectors, r.view),
            })
            .collect();
    }
    let non_empty: Vec<SplitModels<'_>> = (requests.iter())
        .filter(|r| !r.view.is_empty())
        .cloned()
        .collect();
    let logits = stacked_split_logits(arch, device, resident, &non_empty);
    // Every loss of every request in one tensor, brought back in one transfer.
    let losses = tch::no_grad(|| {
        let each: Vec<Tensor> = (non_empty.iter().zip(&logits))
            .flat_map(|(r, logits)| {
                let y = targets(arch, &labels_on(device, resident, r.view, r.first_row));
                logits
                    .iter()
                    .map(move |l| loss(arch, l, &y, Reduction::None).view([-1]))
            })
            .collect();
        match each.is_empty() {
            true => Tensor::zeros([0], (Kind::Float, Device::Cpu)),
            false => Tensor::cat(&each, 0)
                .to_kind(Kind::Float)
                .to_device(Device::Cpu),
        }
    });
    let total = losses.numel();
    let mut flat = vec![0f32; total];
    losses.copy_data(&mut flat, total);
    crossed(Crossing::RowValuesOut, 4 * total);
    let mut rest = &flat[..];
    requests
        .iter()
        .map(|r| {
            (0..r.vectors.len())
                .map(|_| {
                    let (losses, after) = rest.split_at(r.view.len());
                    rest = after;
                    losses.to_vec()
                })
                .collect()
        })
        .collect()
}

/// A split's labels on `device`: a narrow of the resident labels where given, else uploaded.
fn labels_on(
    device: Device,
    resident: Option<&DeviceRows>,
    view: SplitView<'_>,
    first_row: usize,
) -> Tensor {
    match resident {
        Some(on) => on.y.narrow(0, first_row as i64, view.len() as i64),
        None => {
            crossed(Crossing::RowsIn, 8 * view.labels.len());
            Tensor::from_slice(view.labels).to_device(device)
        }
    }
}

/// Every parameter vector's logits (`[n, outputs]`) on its request's split (each non-empty),
/// in request order: stacked forward passes (no dropout) on `device`, vectors of similar split
/// lengths together (longest first, ties in request order), in stacks of at most 64 vectors
/// and passes of at most 256 rows per vector; rows are gathered from `resident` where given
/// (on `device`), else from the host. A vector that appears more than once in a stack (the
/// same global component for every client) crosses to the device once ([`stack_vectors`]).
pub(super) fn stacked_split_logits(
    arch: &Architecture,
    device: Device,
    resident: Option<&DeviceRows>,
    requests: &[SplitModels<'_>],
) -> Vec<Vec<Tensor>> {
    assert!(
        arch.stacks(),
        "the model stacks (checked before evaluations are stacked)"
    );
    let vectors: Vec<&Vec<&[f32]>> = requests.iter().map(|r| &r.vectors).collect();
    let len = |&(q, _): &(usize, usize)| requests[q].view.len();
    let mut logits: Vec<Vec<Option<Tensor>>> = vectors
        .iter()
        .map(|v| v.iter().map(|_| None).collect())
        .collect();
    // Runs (request, vector) by vector, in order of first appearance: a vector several runs
    // name (the same slice: a global component every client's mixture names) is one model's
    // forward passes over all their rows; the rest stack.
    let mut groups: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut group_of: std::collections::HashMap<(*const f32, usize), usize> = Default::default();
    for (q, v) in vectors.iter().enumerate() {
        for (m, vector) in v.iter().enumerate() {
            assert!(len(&(q, m)) > 0, "splits evaluated are not empty");
            let g = *group_of
                .entry((vector.as_ptr(), vector.len()))
                .or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
            groups[g].push((q, m));
        }
    }
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for members in groups {
        if members.len() == 1 {
            runs.extend(members);
            continue;
        }
        let (q, m) = members[0];
        let pieces = shared_model_logits(arch, device, resident, vectors[q][m], requests, &members);
        for (&(q, m), piece) in members.iter().zip(pieces) {
            logits[q][m] = Some(piece);
        }
    }
    runs.sort_by_key(|run| std::cmp::Reverse(len(run)));
    let dim = arch.input_dim as i64;
    let mut gathered: Vec<f32> = Vec::new();
    tch::no_grad(|| {
        for stack in runs.chunks(EVAL_RUNS_PER_STACK) {
            let stacked: Vec<Option<&[f32]>> =
                stack.iter().map(|&(q, m)| Some(vectors[q][m])).collect();
            let ps = stack_vectors(&stacked, arch, device);
            let mut pieces: Vec<Vec<Tensor>> = stack.iter().map(|_| Vec::new()).collect();
            for start in (0..len(&stack[0])).step_by(EVAL_ROWS_PER_PASS) {
                let active = stack.iter().take_while(|run| len(run) > start).count();
                let b = (len(&stack[0]) - start).min(EVAL_ROWS_PER_PASS);
                // Row i of run j: its split's row start + i, the last one again as padding.
                let rows: Vec<(usize, usize)> = (0..active)
                    .flat_map(|j| {
                        let (q, n) = (stack[j].0, len(&stack[j]));
                        (0..b).map(move |i| (q, start + i.min(n - start - 1)))
                    })
                    .collect();
                let x = gather_split_rows(requests, &rows, device, resident, &mut gathered);
                let ps_active: Vec<Tensor> =
                    ps.iter().map(|p| p.narrow(0, 0, active as i64)).collect();
                let h = stacked_logits(
                    arch,
                    &ps_active,
                    &x.view([active as i64, b as i64, dim]),
                    &[],
                );
                for (j, piece) in pieces.iter_mut().take(active).enumerate() {
                    let take = (len(&stack[j]) - start).min(b) as i64;
                    piece.push(h.get(j as i64).narrow(0, 0, take));
                }
            }
            for (&(q, m), piece) in stack.iter().zip(pieces) {
                logits[q][m] = Some(Tensor::cat(&piece, 0));
            }
        }
    });
    logits
        .into_iter()
        .map(|l| {
            l.into_iter()
                .map(|l| l.expect("every run evaluated"))
                .collect()
        })
        .collect()
}

/// The features of `rows` (each a request and a row of its split), one after another, on
/// `device`: gathered there from `resident` where given, else copied from the host through
/// `buffer`.
fn gather_split_rows(
    requests: &[SplitModels<'_>],
    rows: &[(usize, usize)],
    device: Device,
    resident: Option<&DeviceRows>,
    buffer: &mut Vec<f32>,
) -> Tensor {
    match resident {
        Some(on) => {
            let index: Vec<i64> = (rows.iter())
                .map(|&(q, i)| (requests[q].first_row + i) as i64)
                .collect();
            on.x.index_select(0, &Tensor::from_slice(&index).to_device(device))
        }
        None => {
            buffer.clear();
            for &(q, i) in rows {
                let view = requests[q].view;
                buffer.extend_from_slice(&view.features[i * view.dim..][..view.dim]);
            }
            crossed(Crossing::RowsIn, 4 * buffer.len());
            Tensor::from_slice(buffer).to_device(device)
        }
    }
}

/// Rows per forward pass of one model shared by many runs ([`shared_model_logits`]): on the
/// CPU a stacked pass's rows per vector (on 2 cores, a reduced FEMNIST FedEM round scored its
/// training rows in 7.5 s summed over threads with 256 rows a pass, 9.7 s with 1 024); on a GPU
/// a full stack's rows, to fill it.
fn shared_rows_per_pass(device: Device) -> usize {
    match device {
        Device::Cpu => EVAL_ROWS_PER_PASS,
        _ => EVAL_RUNS_PER_STACK * EVAL_ROWS_PER_PASS,
    }
}

/// The logits of one model (`vector`) on each member's split (`(request, vector)` of
/// `requests`, in order), from forward passes over the members' rows one after another, at
/// most [`shared_rows_per_pass`] rows a pass: the model crosses to `device` once, and each
/// pass is one plain convolution or product per layer.
fn shared_model_logits(
    arch: &Architecture,
    device: Device,
    resident: Option<&DeviceRows>,
    vector: &[f32],
    requests: &[SplitModels<'_>],
    members: &[(usize, usize)],
) -> Vec<Tensor> {
    let dim = arch.input_dim;
    // Every member's rows in turn, as (request, row of its split).
    let rows: Vec<(usize, usize)> = members
        .iter()
        .flat_map(|&(q, _)| (0..requests[q].view.len()).map(move |i| (q, i)))
        .collect();
    tch::no_grad(|| {
        let ps = stack_vectors(&[Some(vector)], arch, device);
        let mut gathered: Vec<f32> = Vec::new();
        let passes: Vec<Tensor> = rows
            .chunks(shared_rows_per_pass(device))
            .map(|chunk| {
                let x = gather_split_rows(requests, chunk, device, resident, &mut gathered);
                let b = chunk.len() as i64;
                stacked_logits(arch, &ps, &x.view([1, b, dim as i64]), &[]).get(0)
            })
            .collect();
        let all = Tensor::cat(&passes, 0);
        let mut at = 0;
        members
            .iter()
            .map(|&(q, _)| {
                let n = requests[q].view.len() as i64;
                let piece = all.narrow(0, at, n);
                at += n;
                piece
            })
            .collect()
    })
}
