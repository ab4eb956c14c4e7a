//! The stacked form of each layer family (dense, convolution, normalisation, pooling,
//! dropout, embedding, LSTM) for [`walk::forward`], and the gradients of a stacked step: the
//! linear model's in closed form, deeper ones by autograd.

use super::*;
use crate::data::InputShape;
use crate::models::walk::{self, Conv, LayerOps, Norm};
use crate::models::{mobilenet, Architecture, Normalization};
use tch::{Kind, Reduction, Tensor};

/// The linear model's gradients in closed form, as alone: (p − y)·weight per row, then
/// `[A, out, in]` and `[A, out]`.
pub(super) fn linear_gradients(
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

/// MOON's term for a stack of runs ([`StackedRun::contrastive`]): the body that makes
/// representations, how many of the model's tensors and dropout masks it takes, the runs'
/// global and previous models stacked (without gradient), and their μ and τ, in stack order.
pub(super) struct StackedContrastive {
    body: Architecture,
    body_tensors: usize,
    body_masks: usize,
    global: Vec<Tensor>,
    previous: Vec<Tensor>,
    mu: Vec<f32>,
    temperature: Vec<f32>,
}

impl StackedContrastive {
    /// The term of `runs`, every one of which has it; the model must have a representation
    /// ([`Architecture::representation`]).
    pub(super) fn new(arch: &Architecture, runs: &[&StackedRun<'_>], device: Device) -> Self {
        let terms: Vec<&Contrastive<'_>> = (runs.iter())
            .map(|run| {
                (run.contrastive.as_ref()).expect("every run of a stack has the term, or none")
            })
            .collect();
        let body = (arch.representation()).expect("a model with a representation");
        let body_masks = (body.layers.iter())
            .filter(|l| matches!(l, crate::models::Layer::Dropout { .. }))
            .count();
        let stacked = |vectors: Vec<Option<&[f32]>>| stack_vectors(&vectors, arch, device);
        StackedContrastive {
            body_tensors: body.parameter_shapes().len(),
            body,
            body_masks,
            global: stacked(terms.iter().map(|t| Some(t.global)).collect()),
            previous: stacked(terms.iter().map(|t| Some(t.previous)).collect()),
            mu: terms.iter().map(|t| t.mu as f32).collect(),
            temperature: terms.iter().map(|t| t.temperature as f32).collect(),
        }
    }

    /// Each run's representations `[A, B, F]` of its batch under `layers` (the stacked
    /// parameters of the first `a` runs), with `masks` (none: no dropout).
    fn represent(&self, layers: &[Tensor], x: &Tensor, masks: &[Tensor]) -> Tensor {
        let z = stacked_logits(&self.body, &layers[..self.body_tensors], x, masks);
        assert_eq!(
            z.dim(),
            3,
            "MOON's representation is flat: [runs, rows, features]"
        );
        z
    }
}

impl StackedContrastive {
    /// μ times MOON's term of each row `[A, B]` of `batch` at the stacked parameters `leaves`
    /// (of its `A` runs): −log(e^{s_g/τ} / (e^{s_g/τ} + e^{s_p/τ})), s the cosine similarity of
    /// the row's representation to the global and previous models' (as `models::contrastive`
    /// alone); weighted as the plain loss, a run's term is its batch's mean.
    fn per_row(&self, leaves: &[Tensor], batch: &StepBatch) -> Tensor {
        let (a, b) = (batch.x.size()[0], batch.x.size()[1]);
        let z = self.represent(leaves, &batch.x, &batch.masks[..self.body_masks]);
        let pick =
            |ts: &[Tensor]| -> Vec<Tensor> { ts.iter().map(|t| t.narrow(0, 0, a)).collect() };
        let (positive, negative) = tch::no_grad(|| {
            let positive = self.represent(&pick(&self.global), &batch.x, &[]);
            (
                positive,
                self.represent(&pick(&self.previous), &batch.x, &[]),
            )
        });
        let device = batch.x.device();
        let tau = per_run(&self.temperature[..a as usize], 2, device);
        let similarity = |other: &Tensor| Tensor::cosine_similarity(&z, other, 2, 1e-8) / &tau;
        let pair = Tensor::stack(&[similarity(&positive), similarity(&negative)], 2);
        let first = Tensor::zeros([a * b], (Kind::Int64, device));
        let con = (pair.view([a * b, 2]))
            .cross_entropy_loss::<Tensor>(&first, None, Reduction::None, -100, 0.0)
            .view([a, b]);
        con * per_run(&self.mu[..a as usize], 2, device)
    }
}

/// [`autograd_gradients`] with MOON's term added to each row's loss
/// ([`StackedContrastive::per_row`]).
pub(super) fn contrastive_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
    term: &StackedContrastive,
) -> Vec<Tensor> {
    gradients_of(arch, ps, batch, Some(term))
}

/// Each row's plain loss `[A, B]` under the stacked parameters `leaves`.
fn stacked_loss(arch: &Architecture, leaves: &[Tensor], batch: &StepBatch) -> Tensor {
    let h = stacked_logits(arch, leaves, &batch.x, &batch.masks);
    let (a, b) = (batch.x.size()[0], batch.x.size()[1]);
    let y = &batch.y;
    if arch.is_binary() {
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
    }
}

/// Gradients by autograd on the stacked parameters: Σ weight·loss over every run's rows (runs'
/// parameters are independent, so each gets its own gradient).
pub(super) fn autograd_gradients(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
) -> Vec<Tensor> {
    gradients_of(arch, ps, batch, None)
}

/// Σ weight·(loss + the term's) over every run's rows, by autograd.
fn gradients_of(
    arch: &Architecture,
    ps: &[Tensor],
    batch: &StepBatch,
    term: Option<&StackedContrastive>,
) -> Vec<Tensor> {
    let leaves: Vec<Tensor> = ps
        .iter()
        .map(|p| p.detach().set_requires_grad(true))
        .collect();
    let plain = stacked_loss(arch, &leaves, batch);
    let per_row = match term {
        Some(term) => plain + term.per_row(&leaves, batch),
        None => plain,
    };
    let total = (per_row * &batch.weight).sum(Kind::Float);
    Tensor::run_backward(&[&total], &leaves, false, false)
}

/// The logits `[A, B, outputs]` of each run's batch under its parameters (`ps`, `[A, …]` per
/// parameter tensor), with `masks` as [`StepBatch`] holds them. Flat activations are `[A, B,
/// F]`; images are `[B, A·C, H, W]`, each run's channels side by side, so that a convolution
/// is one grouped convolution (A times the layer's groups), a normalisation over groups of
/// channels one group norm (A times the groups), and pooling is per channel as alone. Without
/// masks, dropout layers pass everything (evaluation). The layers are walked by
/// [`walk::forward`], as a model alone walks them, with the [`Stacked`] layout.
pub(super) fn stacked_logits(
    arch: &Architecture,
    ps: &[Tensor],
    x: &Tensor,
    masks: &[Tensor],
) -> Tensor {
    let (runs, batch) = (x.size()[0], x.size()[1]);
    let mut ops = Stacked {
        runs,
        batch,
        images: false,
    };
    walk::forward(arch, &mut ops, ps, x, masks)
}

/// A cohort's runs side by side: `A` runs of `B` rows each. Images travel as `[B, A·C, H, W]`
/// (each run's channels one group of a grouped convolution) until the first dense layer,
/// which turns them into `[A, B, features]`; everything else is `[A, B, …]`.
pub(super) struct Stacked {
    runs: i64,
    batch: i64,
    /// The activations are images side by side (`[B, A·C, H, W]`).
    images: bool,
}

impl Stacked {
    /// `[A, B, C, H, W]` → `[B, A·C, H, W]`.
    fn side_by_side(&self, t: &Tensor) -> Tensor {
        let s = t.size();
        t.transpose(0, 1)
            .reshape([self.batch, self.runs * s[2], s[3], s[4]])
    }
}

impl LayerOps for Stacked {
    fn input(&mut self, x: &Tensor, shape: InputShape) -> Tensor {
        match shape {
            InputShape::Image([c, hh, w]) => {
                self.images = true;
                let (a, b) = (self.runs, self.batch);
                self.side_by_side(&x.view([a, b, c as i64, hh as i64, w as i64]))
            }
            InputShape::Flat(_) => x.shallow_clone(),
            // Token ids `[A, B, L]`.
            InputShape::Tokens { .. } => x.to_kind(Kind::Int64),
        }
    }

    fn dense(&mut self, mut h: Tensor, weight: &Tensor, bias: &Tensor) -> Tensor {
        if self.images {
            h = h.view([self.batch, self.runs, -1]).transpose(0, 1);
            self.images = false;
        }
        bias.unsqueeze(1)
            .baddbmm(&h, &weight.transpose(1, 2), 1.0, 1.0)
    }

    fn conv(&mut self, h: Tensor, conv: Conv, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let s = weight.size();
        let w = weight.reshape([self.runs * s[1], s[2], s[3], s[4]]);
        let bias = bias.map(|b| b.reshape([-1]));
        let (st, p) = (conv.stride as i64, conv.padding as i64);
        h.conv2d(
            &w,
            bias.as_ref(),
            [st, st],
            [p, p],
            [1, 1],
            self.runs * conv.groups as i64,
        )
    }

    fn norm(&mut self, h: Tensor, norm: Norm, scale: &Tensor, shift: &Tensor) -> Tensor {
        assert_eq!(norm.kind, Normalization::Group, "batch norm does not stack");
        let (scale, shift) = (scale.reshape([-1]), shift.reshape([-1]));
        let groups = self.runs * mobilenet::norm_groups(norm.channels) as i64;
        h.group_norm(groups, Some(&scale), Some(&shift), 1e-5, true)
    }

    fn dropout(&mut self, h: Tensor, mask: &Tensor) -> Tensor {
        if self.images {
            h * self.side_by_side(mask)
        } else {
            h * mask
        }
    }

    fn embedding(&mut self, h: Tensor, table: &Tensor, vocab: usize) -> Tensor {
        // Run k's token t is row k·vocab + t of the runs' tables one after another.
        let offsets = Tensor::arange(self.runs, (Kind::Int64, h.device())) * vocab as i64;
        let rows = &h + offsets.view([self.runs, 1, 1]);
        Tensor::embedding(
            &table.reshape([self.runs * vocab as i64, -1]),
            &rows,
            -1,
            false,
            false,
        )
    }

    fn lstm(&mut self, h: Tensor, tensors: &[&Tensor], hidden: usize, _layers: usize) -> Tensor {
        stacked_lstm(&h, tensors, hidden as i64)
    }
}

/// PyTorch's `nn.LSTM` (batch first, gates in the order input, forget, cell, output, zero
/// initial states) of each run over its sequences `[A, B, L, I]`, layer after layer, one
/// batched cell per time step: the top layer's hidden state after the last step, `[A, B,
/// hidden]`. `tensors`: per layer `[A, 4·hidden, in]`, `[A, 4·hidden, hidden]` and the two
/// biases `[A, 4·hidden]`.
pub(super) fn stacked_lstm(x: &Tensor, tensors: &[&Tensor], hidden: i64) -> Tensor {
    let s = x.size();
    let (a, b, steps) = (s[0], s[1], s[2]);
    let mut input = x.shallow_clone();
    let mut last = Tensor::zeros([a, b, hidden], (Kind::Float, x.device()));
    let layers = tensors.len() / 4;
    for (l, layer) in tensors.chunks(4).enumerate() {
        let (w_ih, w_hh, b_ih, b_hh) = (layer[0], layer[1], layer[2], layer[3]);
        // Every step's input projection at once: `[A, B·L, 4·hidden]`.
        let projected = (b_ih + b_hh)
            .unsqueeze(1)
            .baddbmm(
                &input.reshape([a, b * steps, -1]),
                &w_ih.transpose(1, 2),
                1.0,
                1.0,
            )
            .view([a, b, steps, 4 * hidden]);
        let w_hh = w_hh.transpose(1, 2);
        let mut h = Tensor::zeros([a, b, hidden], (Kind::Float, x.device()));
        let mut c = h.zeros_like();
        let mut outputs = Vec::with_capacity(steps as usize);
        for t in 0..steps {
            let gates = projected.select(2, t).baddbmm(&h, &w_hh, 1.0, 1.0);
            let g = gates.chunk(4, -1);
            c = g[1].sigmoid() * &c + g[0].sigmoid() * g[2].tanh();
            h = g[3].sigmoid() * c.tanh();
            if l + 1 < layers {
                outputs.push(h.shallow_clone());
            }
        }
        if l + 1 < layers {
            input = Tensor::stack(&outputs, 2);
        } else {
            last = h;
        }
    }
    last
}
