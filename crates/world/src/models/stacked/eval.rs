//! Stacked evaluation: many clients' models on their splits in stacked forward passes, in
//! bounded stacks and passes.

use super::*;
use crate::data::SplitView;
use crate::models::device::DeviceRows;
use crate::models::sgd::{EvalStats, Predictor};
use crate::models::Architecture;

use tch::{Device, Tensor};

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
/// [`Predictor::evaluate`] gives them alone up to float rounding: every parameter vector's
/// logits on its split come from stacked forward passes (no dropout) on `device`, vectors of
/// similar split lengths together (longest first, ties in request order), in stacks of at most
/// 64 vectors and passes of at most 256 rows per vector; rows are gathered from `resident` where
/// given (on `device`), else from the host. Panics if the model does not stack.
pub fn evaluate_stacked(
    arch: &Architecture,
    device: Device,
    resident: Option<&DeviceRows>,
    requests: &[EvalRequest<'_>],
) -> Vec<EvalStats> {
    assert!(
        arch.stacks(),
        "the model stacks (checked before evaluations are stacked)"
    );
    // One run per parameter vector of every request: (request, vector).
    let vectors: Vec<Vec<&[f32]>> = requests
        .iter()
        .map(|r| r.model.parameter_vectors())
        .collect();
    let mut runs: Vec<(usize, usize)> = vectors
        .iter()
        .enumerate()
        .flat_map(|(q, v)| (0..v.len()).map(move |m| (q, m)))
        .collect();
    let len = |&(q, _): &(usize, usize)| requests[q].view.len();
    assert!(
        runs.iter().all(|run| len(run) > 0),
        "splits evaluated are not empty"
    );
    runs.sort_by_key(|run| std::cmp::Reverse(len(run)));
    let mut logits: Vec<Vec<Option<Tensor>>> = vectors
        .iter()
        .map(|v| v.iter().map(|_| None).collect())
        .collect();
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
                let rows_of = |j: usize| {
                    let n = len(&stack[j]);
                    (0..b).map(move |i| start + i.min(n - start - 1))
                };
                let x = match resident {
                    Some(on) => {
                        let index: Vec<i64> = (0..active)
                            .flat_map(|j| {
                                let first = requests[stack[j].0].first_row;
                                rows_of(j).map(move |i| (first + i) as i64)
                            })
                            .collect();
                        let index = Tensor::from_slice(&index).to_device(device);
                        on.x.index_select(0, &index)
                    }
                    None => {
                        gathered.clear();
                        for j in 0..active {
                            let view = requests[stack[j].0].view;
                            for row in rows_of(j) {
                                gathered.extend_from_slice(
                                    &view.features[row * view.dim..][..view.dim],
                                );
                            }
                        }
                        crossed(Crossing::RowsIn, 4 * gathered.len());
                        Tensor::from_slice(&gathered).to_device(device)
                    }
                };
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
    requests
        .iter()
        .zip(logits)
        .map(|(request, logits)| {
            let y = match resident {
                Some(on) => {
                    on.y.narrow(0, request.first_row as i64, request.view.len() as i64)
                }
                None => {
                    crossed(Crossing::RowsIn, 8 * request.view.labels.len());
                    Tensor::from_slice(request.view.labels).to_device(device)
                }
            };
            let logits = logits
                .into_iter()
                .map(|l| l.expect("every run evaluated"))
                .collect();
            request
                .model
                .stats_of_logits(arch, logits, &y, request.view)
        })
        .collect()
}
