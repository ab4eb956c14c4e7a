//! The one walk through a network's layers, for one model ([`Single`]) and for a cohort's
//! models side by side (`stacked::Stacked`): which parameter tensors each layer takes, in
//! which order, where a residual is saved and added back, where dropout masks apply. A
//! [`LayerOps`] supplies only what depends on the layout (dense products, convolutions,
//! normalisation, embeddings, LSTMs, masks); the layers that act element-wise or per channel
//! are the same ops in both layouts and are applied here. A new layer is one arm here and one
//! method in each layout; both matches are exhaustive, so it does not compile until it has
//! them. This room must not draw random numbers: masks come in from the caller's stream.

use super::{Architecture, InputShape, Layer, Normalization};
use tch::Tensor;

/// What a layout does at the layers whose tensors it lays out its own way.
pub(super) trait LayerOps {
    /// The input `x` in the layout the first layer takes.
    fn input(&mut self, x: &Tensor, shape: InputShape) -> Tensor;
    /// `h·wᵀ + b`, flattening image activations first.
    fn dense(&mut self, h: Tensor, weight: &Tensor, bias: &Tensor) -> Tensor;
    /// A 2-d convolution with square stride and padding, in `groups` groups.
    fn conv(&mut self, h: Tensor, conv: Conv, weight: &Tensor, bias: Option<&Tensor>) -> Tensor;
    /// Batch or group normalisation over `channels` channels, with its affine scale and shift.
    fn norm(&mut self, h: Tensor, norm: Norm, scale: &Tensor, shift: &Tensor) -> Tensor;
    /// `h` times a dropout mask (already scaled by 1 / (1 − p)).
    fn dropout(&mut self, h: Tensor, mask: &Tensor) -> Tensor;
    /// Rows of the embedding `table` (`vocab` rows per model) for the token ids `h`.
    fn embedding(&mut self, h: Tensor, table: &Tensor, vocab: usize) -> Tensor;
    /// A stacked LSTM's last hidden state; `tensors`: per layer `w_ih, w_hh, b_ih, b_hh`.
    fn lstm(&mut self, h: Tensor, tensors: &[&Tensor], hidden: usize, layers: usize) -> Tensor;
}

/// A convolution's settings, as its layer holds them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Conv {
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
}

/// A normalisation layer's settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct Norm {
    pub channels: usize,
    pub kind: Normalization,
}

/// The logits of `x` through `arch`'s layers with the parameter tensors `params` (one per
/// parameter, in [`Architecture::layers`] order) and, in training, the dropout `masks` (one
/// per dropout layer; none when evaluating: dropout then passes everything).
pub(super) fn forward(
    arch: &Architecture,
    ops: &mut impl LayerOps,
    params: &[Tensor],
    x: &Tensor,
    masks: &[Tensor],
) -> Tensor {
    let mut h = ops.input(x, arch.input);
    let (mut params, mut masks) = (params.iter(), masks.iter());
    let mut next = || params.next().expect("one tensor per parameter");
    let mut saved: Option<Tensor> = None;
    for l in &arch.layers {
        h = match *l {
            Layer::Dense { .. } => {
                let (weight, bias) = (next(), next());
                ops.dense(h, weight, bias)
            }
            Layer::Conv {
                stride,
                padding,
                groups,
                bias,
                ..
            } => {
                let weight = next();
                let bias = bias.then(&mut next);
                let conv = Conv {
                    stride,
                    padding,
                    groups,
                };
                ops.conv(h, conv, weight, bias)
            }
            Layer::Norm { channels, kind } => {
                let (scale, shift) = (next(), next());
                ops.norm(h, Norm { channels, kind }, scale, shift)
            }
            Layer::Relu => h.relu(),
            Layer::Relu6 => h.relu6(),
            Layer::Tanh => h.tanh(),
            Layer::Gelu => h.gelu("none"),
            Layer::Save => {
                saved = Some(h.shallow_clone());
                h
            }
            Layer::AddSaved => h + saved.take().expect("a residual starts before it ends"),
            Layer::GlobalAvgPool => h.adaptive_avg_pool2d([1, 1]),
            Layer::MaxPool => h.max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false),
            Layer::Dropout { .. } => match masks.next() {
                Some(mask) => ops.dropout(h, mask),
                None => h,
            },
            Layer::Embedding { vocab, .. } => ops.embedding(h, next(), vocab),
            Layer::Lstm { hidden, layers, .. } => {
                let tensors: Vec<&Tensor> = (0..4 * layers).map(|_| next()).collect();
                ops.lstm(h, &tensors, hidden, layers)
            }
            Layer::Script { .. } => unreachable!("a TorchScript module runs by script::forward"),
        };
    }
    h
}

/// One model: tensors as PyTorch's modules hold them, a batch `[B, …]`.
pub(super) struct Single;

impl LayerOps for Single {
    fn input(&mut self, x: &Tensor, shape: InputShape) -> Tensor {
        match shape {
            InputShape::Image([c, hh, w]) => x.view([-1, c as i64, hh as i64, w as i64]),
            InputShape::Flat(_) => x.shallow_clone(),
            InputShape::Tokens { .. } => x.to_kind(tch::Kind::Int64),
        }
    }

    fn dense(&mut self, mut h: Tensor, weight: &Tensor, bias: &Tensor) -> Tensor {
        if h.dim() > 2 {
            h = h.flatten(1, -1);
        }
        bias.addmm(&h, weight)
    }

    fn conv(&mut self, h: Tensor, conv: Conv, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
        let (s, p) = (conv.stride as i64, conv.padding as i64);
        h.conv2d(weight, bias, [s, s], [p, p], [1, 1], conv.groups as i64)
    }

    fn norm(&mut self, h: Tensor, norm: Norm, scale: &Tensor, shift: &Tensor) -> Tensor {
        let (scale, shift) = (Some(scale), Some(shift));
        match norm.kind {
            Normalization::Batch => h.batch_norm(
                scale,
                shift,
                None::<&Tensor>,
                None::<&Tensor>,
                true,
                0.1,
                1e-5,
                true,
            ),
            Normalization::Group => {
                let groups = super::mobilenet::norm_groups(norm.channels) as i64;
                h.group_norm(groups, scale, shift, 1e-5, true)
            }
        }
    }

    fn dropout(&mut self, h: Tensor, mask: &Tensor) -> Tensor {
        h * mask
    }

    fn embedding(&mut self, h: Tensor, table: &Tensor, _vocab: usize) -> Tensor {
        Tensor::embedding(table, &h, -1, false, false)
    }

    fn lstm(&mut self, h: Tensor, tensors: &[&Tensor], hidden: usize, layers: usize) -> Tensor {
        let zeros = Tensor::zeros(
            [layers as i64, h.size()[0], hidden as i64],
            (tch::Kind::Float, h.device()),
        );
        let (out, _, _) = h.lstm(
            &[&zeros, &zeros],
            tensors,
            true,
            layers as i64,
            0.0,
            true,
            false,
            true,
        );
        out.select(1, -1)
    }
}
