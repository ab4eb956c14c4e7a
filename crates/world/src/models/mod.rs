//! Models in tch and the flat-parameter helpers.
//!
//! Parameters leave this module only as flat `Vec<f32>` in a fixed order (layer by layer,
//! weight then bias; a dense weight `out × in` row-major, a convolution's `out × in × k × k`, as
//! PyTorch's `state_dict` holds them), so aggregation elsewhere is plain arithmetic in a fixed
//! order. Initialisation and dropout draw from the ChaCha stream they are given, never from
//! libtorch's global RNG. This module (and the trainer pool that calls it) is the only place
//! that uses tch.

mod catalogue;
mod contrastive;
mod conv;
mod dense;
mod device;
mod gaussian;
mod layers;
mod lenet;
mod linear;
mod lstm;
mod mobilenet;
pub mod precision;
pub mod profile;
mod script;
mod sgd;
mod stacked;
mod walk;
mod weights;

pub use catalogue::{
    Inputs, ModelSettings, ModelSpec, Network, Registration as ModelRegistration, MODELS,
};
pub use contrastive::Contrastive;
pub use conv::{CnnSpec, SmallCnnSpec};
pub use dense::{LinearSpec, MlpSpec};
pub use device::{set_cublas_workspace, DeviceChoice, DeviceRows, Placement, DEVICE_ALLOWED};
pub use gaussian::{Encoder, Gaussian, GaussianInputs, Moments, Pool};
pub use layers::{Initialisation, LayerSpec, LayersSpec, Shape};
pub use lenet::Lenet5Spec;
pub use lstm::LstmSpec;
pub use mobilenet::MobilenetV2Spec;
pub use sgd::{
    activations, confidence, evaluate, evaluate_mixture, for_each_batch, full_gradient,
    highest_confidence, sample_losses, train_sgd, Batch, DpSgd, EvalStats, Gates, LocalPlan,
    LocalWork, MixtureGates, Objective, Pass, Predictor, Proximal, TrainStats,
};
pub use stacked::{
    dropout_stream, evaluate_stacked, for_each_stacked_batch, sample_losses_stacked,
    train_dp_sgd_alone, train_sgd_stacked, BatchwiseRun, DpSgdRun, EvalRequest, SplitModels,
    StackedBatch, StackedRun,
};

pub use weights::{
    client_models_to_safetensors, models_to_safetensors, read_models, ClientModels, InitialModels,
    ModelInit,
};

pub use crate::data::InputShape;
pub use script::{ScriptId, TorchScriptSpec};

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// The normalisation layers of a model that has them (MobileNet-v2).
///
/// Neither keeps running statistics. Batch norm's running mean and variance are state that no
/// gradient trains; held among the parameters, every algorithm's own arithmetic (proximal
/// terms, pFedMe's personal update, Clustered FL's update similarities, momentum, weight decay)
/// would have to treat them apart, and the FedEM authors' code averages them like weights.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Normalization {
    /// Batch norm with the batch's statistics in training and evaluation alike (PyTorch's
    /// `track_running_stats=False`): an evaluated row is normalised with the rows it is
    /// evaluated with (a client's whole split).
    #[default]
    Batch,
    /// Group norm (Wu and He 2018), gcd(channels, 32) groups: no dependence on other rows, as
    /// Hsieh et al. (2020) recommend for non-IID federated learning.
    Group,
}

/// One layer of a network, in forward order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layer {
    /// Affine map; a 4-D activation is flattened per row first.
    Dense {
        inputs: usize,
        outputs: usize,
    },
    /// 2-D convolution with a square kernel; `groups` split the channels (depthwise when it
    /// equals both channel counts); a bias when `bias`.
    Conv {
        inputs: usize,
        outputs: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    },
    /// Normalisation over `channels` channels with a trained scale and shift (see
    /// [`Normalization`]).
    Norm {
        channels: usize,
        kind: Normalization,
    },
    Relu,
    /// min(max(x, 0), 6).
    Relu6,
    /// The hyperbolic tangent.
    Tanh,
    /// x·Φ(x), Φ the standard normal CDF (PyTorch's exact `gelu`, no tanh approximation).
    Gelu,
    /// Keeps the activation for the next [`Layer::AddSaved`] (a residual connection's start).
    Save,
    /// Adds the activation kept by [`Layer::Save`].
    AddSaved,
    /// Mean over each channel's pixels: `[C, H, W]` to `[C, 1, 1]`.
    GlobalAvgPool,
    /// 2×2 max pooling, stride 2.
    MaxPool,
    /// Zeroes each activation with probability `p` in training (masks from the job's stream)
    /// and scales the others by 1/(1 − p); the identity when evaluating.
    Dropout {
        p: f64,
    },
    /// Token ids → vectors (PyTorch's `nn.Embedding`: weight only, initialised N(0, 1)).
    Embedding {
        vocab: usize,
        dim: usize,
    },
    /// A stack of LSTM layers over the window (PyTorch's `nn.LSTM`, batch first); passes on
    /// the last step's hidden state of the top layer.
    Lstm {
        inputs: usize,
        hidden: usize,
        layers: usize,
    },
    /// A TorchScript module, the whole network (see `script`): its parameters in its
    /// `named_parameters` order, its saved values the initial model.
    Script {
        id: ScriptId,
    },
}

impl Layer {
    /// Whether it has parameters (a layer a split of the layers can name).
    pub fn has_parameters(&self) -> bool {
        matches!(
            self,
            Layer::Dense { .. }
                | Layer::Conv { .. }
                | Layer::Norm { .. }
                | Layer::Embedding { .. }
                | Layer::Lstm { .. }
                | Layer::Script { .. }
        )
    }
}

/// How a parameter tensor is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Init {
    /// U(−b, b).
    Uniform(f32),
    /// N(0, σ²).
    Normal(f32),
    Constant(f32),
    /// The values a TorchScript module was saved with (see [`Architecture::init`]).
    Saved,
}

/// Which initialisation a model's layers follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InitScheme {
    /// PyTorch's layer defaults: U(−1/√fan_in, 1/√fan_in) for dense and conv weights and
    /// biases, U(−1/√hidden, 1/√hidden) for LSTM tensors, N(0, 1) for embeddings.
    LayerDefaults,
    /// torchvision's MobileNet-v2: conv weights N(0, 2/fan_out) (Kaiming, fan-out), dense
    /// weights N(0, 0.01²), biases 0.
    Torchvision,
}

/// A layer that has parameters ([`Architecture::parameter_layers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParameterLayer {
    /// Its name: a layer list's own name for it, else its number.
    pub name: String,
    /// The k-th layer with parameters is number k (a TorchScript module's layers have names
    /// only); a split may name it so whatever its name.
    pub number: Option<usize>,
    /// Its values in the flat parameter vector.
    pub range: std::ops::Range<usize>,
    /// A normalisation layer's scale and shift.
    pub norm: bool,
}

/// One row of [`Architecture::layer_table`].
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRow {
    pub layer: String,
    /// The name a split of the layers reads ([`Architecture::parameter_layers`]), for a layer
    /// with parameters (a TorchScript module's are its modules', not listed here).
    pub name: Option<String>,
    /// One row's activation after the layer.
    pub output: Shape,
    pub parameters: usize,
    pub flops: u64,
}

/// A concrete model: layers for a given input shape and number of classes.
#[derive(Clone, Debug, PartialEq)]
pub struct Architecture {
    pub input_dim: usize,
    pub classes: usize,
    input: InputShape,
    layers: Vec<Layer>,
    init: InitScheme,
    /// What [`Architecture::summary`] says instead of listing the layers (a deep network's).
    name: Option<String>,
    /// The names a layer list gives its layers with parameters, by their number (the k-th
    /// such layer is `k` where it has no name).
    names: std::collections::BTreeMap<usize, String>,
}

impl Architecture {
    /// A model of flat inputs.
    pub fn new(spec: &ModelSpec, input_dim: usize, classes: usize) -> Self {
        Self::for_input(spec, InputShape::Flat(input_dim), classes)
    }

    /// A model of inputs of `input` (checked beforehand with [`ModelSpec::check_input`]).
    pub fn for_input(spec: &ModelSpec, input: InputShape, classes: usize) -> Self {
        let outputs = if classes == 2 { 1 } else { classes };
        let Network {
            mut layers,
            init,
            name,
            names,
        } = spec.network(input, outputs);
        // (No dropout has parameters: the numbers `names` is keyed by stay.)
        layers.retain(|l| !matches!(l, Layer::Dropout { p } if *p == 0.0));
        Architecture {
            input_dim: input.len(),
            classes,
            input,
            layers,
            init,
            name,
            names,
        }
    }

    /// Binary models have a single logit and use the logistic loss.
    pub fn is_binary(&self) -> bool {
        self.classes == 2
    }

    /// Every parameter tensor's shape and initialisation, in parameter order: a dense or conv
    /// layer's weight then bias; a normalisation's scale then shift; an embedding's weight;
    /// each LSTM layer's `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh` (PyTorch's order).
    fn parameter_shapes(&self) -> Vec<(Vec<i64>, Init)> {
        self.layers
            .iter()
            .flat_map(|l| self.layer_parameters(l))
            .collect()
    }

    /// The parameter tensors of one layer, as [`Architecture::parameter_shapes`] lists them.
    fn layer_parameters(&self, layer: &Layer) -> Vec<(Vec<i64>, Init)> {
        let torchvision = self.init == InitScheme::Torchvision;
        let mut out = Vec::new();
        match *layer {
            Layer::Dense { inputs, outputs } => {
                let bound = Init::Uniform(1.0 / (inputs as f32).sqrt());
                let (weight, bias) = match torchvision {
                    true => (Init::Normal(0.01), Init::Constant(0.0)),
                    false => (bound, bound),
                };
                out.push((vec![outputs as i64, inputs as i64], weight));
                out.push((vec![outputs as i64], bias));
            }
            Layer::Conv {
                inputs,
                outputs,
                kernel,
                groups,
                bias,
                ..
            } => {
                let fan_in = inputs / groups * kernel * kernel;
                let bound = Init::Uniform(1.0 / (fan_in as f32).sqrt());
                let (weight, shift) = match torchvision {
                    true => {
                        let fan_out = outputs * kernel * kernel;
                        (
                            Init::Normal((2.0 / fan_out as f32).sqrt()),
                            Init::Constant(0.0),
                        )
                    }
                    false => (bound, bound),
                };
                let (i, o, k) = ((inputs / groups) as i64, outputs as i64, kernel as i64);
                out.push((vec![o, i, k, k], weight));
                if bias {
                    out.push((vec![o], shift));
                }
            }
            Layer::Norm { channels, .. } => {
                out.push((vec![channels as i64], Init::Constant(1.0)));
                out.push((vec![channels as i64], Init::Constant(0.0)));
            }
            Layer::Embedding { vocab, dim } => {
                out.push((vec![vocab as i64, dim as i64], Init::Normal(1.0)))
            }
            Layer::Lstm {
                inputs,
                hidden,
                layers,
            } => {
                let bound = Init::Uniform(1.0 / (hidden as f32).sqrt());
                let (h4, h) = (4 * hidden as i64, hidden as i64);
                for l in 0..layers {
                    let i = if l == 0 { inputs as i64 } else { h };
                    out.push((vec![h4, i], bound));
                    out.push((vec![h4, h], bound));
                    out.push((vec![h4], bound));
                    out.push((vec![h4], bound));
                }
            }
            Layer::Script { id } => out.extend(
                script::script(id)
                    .shapes
                    .iter()
                    .map(|s| (s.clone(), Init::Saved)),
            ),
            Layer::Relu
            | Layer::Relu6
            | Layer::Tanh
            | Layer::Gelu
            | Layer::MaxPool
            | Layer::Dropout { .. }
            | Layer::Save
            | Layer::AddSaved
            | Layer::GlobalAvgPool => {}
        }
        out
    }

    /// The shape of one row's activation after `layer`, from its shape before: `[features]`
    /// for flat activations, `[channels, height, width]` for images.
    fn next_shape(layer: &Layer, shape: &[usize]) -> Vec<usize> {
        match *layer {
            Layer::Dense { outputs, .. } => vec![outputs],
            Layer::Conv {
                outputs,
                kernel,
                stride,
                padding,
                ..
            } => {
                let side = |s: usize| (s + 2 * padding - kernel) / stride + 1;
                vec![outputs, side(shape[1]), side(shape[2])]
            }
            Layer::MaxPool => vec![shape[0], shape[1] / 2, shape[2] / 2],
            Layer::GlobalAvgPool => vec![shape[0], 1, 1],
            Layer::Lstm { hidden, .. } => vec![hidden],
            Layer::Script { id } => vec![script::script(id).outputs],
            Layer::Embedding { .. }
            | Layer::Relu
            | Layer::Relu6
            | Layer::Tanh
            | Layer::Gelu
            | Layer::Norm { .. }
            | Layer::Dropout { .. }
            | Layer::Save
            | Layer::AddSaved => shape.to_vec(),
        }
    }

    /// One row's input shape as [`Architecture::next_shape`] takes it.
    fn input_shape(&self) -> Vec<usize> {
        match self.input {
            InputShape::Flat(d) => vec![d],
            InputShape::Image(s) => s.to_vec(),
            InputShape::Tokens { .. } => vec![1],
        }
    }

    /// The parameter tensors' names, in parameter order (see `models::weights`): `K.weight`,
    /// `K.bias`, … for the K-th layer that has parameters; PyTorch's names for an LSTM's.
    pub fn parameter_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut k = 0;
        for l in &self.layers {
            let names: Vec<String> = match *l {
                Layer::Dense { .. } | Layer::Norm { .. } | Layer::Conv { bias: true, .. } => {
                    vec!["weight".into(), "bias".into()]
                }
                Layer::Conv { bias: false, .. } | Layer::Embedding { .. } => vec!["weight".into()],
                Layer::Lstm { layers, .. } => (0..layers)
                    .flat_map(|j| {
                        ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
                            .map(|n| format!("{n}_l{j}"))
                    })
                    .collect(),
                // A module's own names (`conv1.weight`), as its `state_dict` has them.
                Layer::Script { id } => return script::script(id).names.clone(),
                _ => continue,
            };
            out.extend(names.into_iter().map(|n| format!("{k}.{n}")));
            k += 1;
        }
        out
    }

    /// The layers that have parameters, in parameter order: each one's name (`K` for the K-th,
    /// as the model file's tensor names `K.weight` begin; a TorchScript module's own module
    /// names), where its values lie in the flat parameter vector, and whether it is a
    /// normalisation layer. Consecutive ranges: together they cover the vector.
    pub fn parameter_layers(&self) -> Vec<ParameterLayer> {
        let mut out: Vec<ParameterLayer> = Vec::new();
        let mut at = 0;
        let mut k = 0;
        for l in &self.layers {
            let shapes = self.layer_parameters(l);
            if shapes.is_empty() {
                continue;
            }
            if let Layer::Script { id } = *l {
                // One layer per module: tensors `conv1.weight`, `conv1.bias` are `conv1`'s.
                let script = script::script(id);
                for (name, shape) in script.names.iter().zip(&script.shapes) {
                    let module = name.rsplit_once('.').map_or(&name[..], |(m, _)| m);
                    let len = shape.iter().product::<i64>() as usize;
                    match out.last_mut() {
                        Some(last) if last.name == module => last.range.end += len,
                        _ => out.push(ParameterLayer {
                            name: module.to_string(),
                            number: None,
                            range: at..at + len,
                            norm: false,
                        }),
                    }
                    at += len;
                }
                continue;
            }
            let len: usize = shapes
                .iter()
                .map(|(s, _)| s.iter().product::<i64>() as usize)
                .sum();
            out.push(ParameterLayer {
                name: self.names.get(&k).cloned().unwrap_or_else(|| k.to_string()),
                number: Some(k),
                range: at..at + len,
                norm: matches!(l, Layer::Norm { .. }),
            });
            at += len;
            k += 1;
        }
        out
    }

    /// The parameter ranges of the layers `names` selects (sorted, merged where adjacent): a
    /// layer's own name ([`Architecture::parameter_layers`]), `head` (the last layer with
    /// parameters: the classifier), `body` (every other), `norm` (every normalisation layer).
    /// Refused: a name the model does not have, or a selection of no layer.
    pub fn select_layers(&self, names: &[String]) -> Result<Vec<std::ops::Range<usize>>, String> {
        if names.is_empty() {
            return Err("no layer named; name at least one (`head`, `body`, `norm`, ...)".into());
        }
        let layers = self.parameter_layers();
        let last = layers.len().saturating_sub(1);
        let mut chosen = vec![false; layers.len()];
        for name in names {
            let picks: Vec<usize> = match name.as_str() {
                "head" => vec![last],
                "body" => (0..last).collect(),
                "norm" => (0..layers.len()).filter(|&i| layers[i].norm).collect(),
                own => (0..layers.len())
                    .filter(|&i| {
                        layers[i].name == own
                            || layers[i].number.is_some_and(|k| k.to_string() == own)
                    })
                    .collect(),
            };
            if picks.is_empty() {
                let own: Vec<String> = layers.iter().map(|l| format!("`{}`", l.name)).collect();
                return Err(match name.as_str() {
                    "body" => format!(
                        "`body` is every layer with parameters but the last, and this model has \
                         one ({}); use a model with more layers",
                        self.summary()
                    ),
                    "norm" => format!(
                        "`norm` is every normalisation layer, and this model has none ({}); \
                         add `batch_norm` or `group_norm` layers",
                        self.summary()
                    ),
                    _ => format!(
                        "this model has no layer `{name}`: expected `head`, `body`, `norm` or a \
                         layer's name ({})",
                        own.join(", ")
                    ),
                });
            }
            picks.into_iter().for_each(|i| chosen[i] = true);
        }
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for (layer, _) in layers.iter().zip(&chosen).filter(|(_, &c)| c) {
            match ranges.last_mut() {
                Some(r) if r.end == layer.range.start => r.end = layer.range.end,
                _ => ranges.push(layer.range.clone()),
            }
        }
        Ok(ranges)
    }

    /// The parameter tensors' shapes, in parameter order (PyTorch's `state_dict` shapes).
    pub fn parameter_tensor_shapes(&self) -> Vec<Vec<i64>> {
        self.parameter_shapes()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    /// [`Architecture::num_params`] in floating point: never overflows, for memory estimates
    /// of models too large to build.
    pub fn num_params_f64(&self) -> f64 {
        self.parameter_shapes()
            .iter()
            .map(|(s, _)| s.iter().map(|&d| d as f64).product::<f64>())
            .sum()
    }

    /// The network cut after layer `last` (counted from 0 as `fedsim describe` lists the
    /// layers): its output is that layer's activation, and its parameters are the first
    /// [`Architecture::num_params`] of the whole network's (parameters follow the layers).
    pub fn cut_after(&self, last: usize) -> Architecture {
        let mut cut = self.clone();
        cut.layers.truncate(last + 1);
        cut.name = None;
        cut
    }

    /// How many layers it has (the rows of [`Architecture::layer_table`]).
    pub fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// The shape of one row's activation after the last layer: `[features]`, or `[channels,
    /// height, width]` for an image.
    pub fn output_shape(&self) -> Vec<usize> {
        (self.layers.iter()).fold(self.input_shape(), |s, l| Self::next_shape(l, &s))
    }

    pub fn num_params(&self) -> usize {
        self.parameter_shapes()
            .iter()
            .map(|(s, _)| s.iter().product::<i64>() as usize)
            .sum()
    }

    /// The values one row's forward pass produces, layer by layer (what backpropagation keeps),
    /// in floating point: for memory estimates. An LSTM's are counted once per time step.
    pub fn activations_per_sample(&self) -> f64 {
        let steps = match self.input {
            InputShape::Tokens { len, .. } => len.max(1) as f64,
            _ => 1.0,
        };
        let mut shape = self.input_shape();
        let mut values = 0.0;
        for l in &self.layers {
            let next = Self::next_shape(l, &shape);
            let per_row: f64 = next.iter().map(|&d| d as f64).product();
            values += match l {
                Layer::Lstm { .. } => per_row * steps,
                _ => per_row,
            };
            shape = next;
        }
        values
    }

    /// Multiply-adds ×2 of one forward pass of one row (a training step costs about three
    /// times this): what `describe` reports and `flops_per_second` devices are charged.
    /// Normalisation, activations and pooling are not counted.
    pub fn flops_per_sample(&self) -> u64 {
        let mut shape = self.input_shape();
        let mut flops = 0u64;
        for l in &self.layers {
            let next = Self::next_shape(l, &shape);
            flops += self.layer_flops(l, &next);
            shape = next;
        }
        flops
    }

    /// [`Architecture::flops_per_sample`] of one layer, whose output is `next`.
    fn layer_flops(&self, layer: &Layer, next: &[usize]) -> u64 {
        let steps = match self.input {
            InputShape::Tokens { len, .. } => len,
            _ => 1,
        };
        match *layer {
            Layer::Dense { inputs, outputs } => 2 * (inputs * outputs) as u64,
            Layer::Conv {
                inputs,
                outputs,
                kernel,
                groups,
                ..
            } => {
                let per_pixel = inputs / groups * kernel * kernel * outputs;
                2 * (per_pixel * next[1] * next[2]) as u64
            }
            Layer::Lstm {
                inputs,
                hidden,
                layers,
            } => {
                let per_step: usize = (0..layers)
                    .map(|l| {
                        let i = if l == 0 { inputs } else { hidden };
                        4 * hidden * (i + hidden)
                    })
                    .sum();
                2 * (per_step * steps) as u64
            }
            Layer::Script { id } => script::script(id).flops,
            _ => 0,
        }
    }

    /// A short description of the layers, for `describe`.
    pub fn summary(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let parts: Vec<String> = self.layers.iter().map(Self::layer_label).collect();
        parts.join(", ")
    }

    /// One layer in words: `conv 5×5 1→32`.
    fn layer_label(layer: &Layer) -> String {
        match *layer {
            Layer::Dense { inputs, outputs } => format!("dense {inputs}→{outputs}"),
            Layer::Conv {
                inputs,
                outputs,
                kernel,
                stride,
                groups,
                ..
            } => {
                let mut s = format!("conv {kernel}×{kernel} {inputs}→{outputs}");
                if stride > 1 {
                    s += &format!(" stride {stride}");
                }
                if groups > 1 {
                    s += &format!(" in {groups} groups");
                }
                s
            }
            Layer::Norm { kind, .. } => format!("{kind:?} norm").to_lowercase(),
            Layer::Relu => "relu".into(),
            Layer::Relu6 => "relu6".into(),
            Layer::Tanh => "tanh".into(),
            Layer::Gelu => "gelu".into(),
            Layer::MaxPool => "max-pool 2".into(),
            Layer::GlobalAvgPool => "global average pool".into(),
            Layer::Save => "(residual".into(),
            Layer::AddSaved => "+ residual)".into(),
            Layer::Dropout { p } => format!("dropout {p}"),
            Layer::Embedding { vocab, dim } => format!("embedding {vocab}→{dim}"),
            Layer::Lstm {
                inputs,
                hidden,
                layers,
            } => format!("lstm {inputs}→{hidden} ×{layers} layers, last step"),
            Layer::Script { .. } => "TorchScript module".into(),
        }
    }

    /// The layers with the shape of one row after each, their parameters and their FLOPs (as
    /// [`Architecture::flops_per_sample`] counts them): `fedsim describe`'s table.
    pub fn layer_table(&self) -> Vec<LayerRow> {
        let mut shape = self.input_shape();
        let mut display = Shape::of(self.input);
        let mut rows = Vec::with_capacity(self.layers.len());
        let mut named = 0;
        for l in &self.layers {
            let next = Self::next_shape(l, &shape);
            display = display.after(l);
            let has_parameters = !self.layer_parameters(l).is_empty();
            let name = (has_parameters && !matches!(l, Layer::Script { .. })).then(|| {
                named += 1;
                (named - 1).to_string()
            });
            rows.push(LayerRow {
                layer: Self::layer_label(l),
                name,
                output: display,
                parameters: self
                    .layer_parameters(l)
                    .iter()
                    .map(|(s, _)| s.iter().product::<i64>() as usize)
                    .sum(),
                flops: self.layer_flops(l, &next),
            });
            shape = next;
        }
        rows
    }

    /// The initial parameters, drawn from `rng` in parameter order (see `InitScheme`).
    pub fn init(&self, rng: &mut impl Rng) -> Vec<f32> {
        if let [Layer::Script { id }] = self.layers[..] {
            return script::script(id).saved.clone();
        }
        let mut flat = Vec::with_capacity(self.num_params());
        for (shape, init) in self.parameter_shapes() {
            let n = shape.iter().product::<i64>() as usize;
            match init {
                Init::Uniform(bound) => flat.extend((0..n).map(|_| rng.gen_range(-bound..bound))),
                Init::Normal(sigma) => flat.extend((0..n).map(|_| {
                    let z: f32 = StandardNormal.sample(rng);
                    z * sigma
                })),
                Init::Constant(c) => flat.resize(flat.len() + n, c),
                Init::Saved => unreachable!("a TorchScript module is the whole network"),
            }
        }
        flat
    }

    /// Whether the model trains stacked in a cohort ([`train_sgd_stacked`]): every layer has a
    /// form over `[R, …]` parameters. Not batch norm (a short batch's padding rows would enter
    /// its statistics; see docs/src/design/cohorts.md on a masked version).
    pub fn stacks(&self) -> bool {
        let mut shape = self.input_shape();
        self.layers.iter().all(|l| {
            let image = shape.len() == 3;
            shape = Self::next_shape(l, &shape);
            match l {
                // Group norm stacks over images side by side; a flat row's does not.
                Layer::Norm { kind, .. } => *kind == Normalization::Group && image,
                Layer::Script { .. } => false,
                _ => true,
            }
        })
    }

    /// Whether the model is dense layers with ReLUs between them: the linear model, the MLP.
    pub fn is_dense(&self) -> bool {
        self.layers
            .iter()
            .all(|l| matches!(l, Layer::Dense { .. } | Layer::Relu))
    }

    /// Linear models are trained with hand-written gradients on one flat tensor; deeper models
    /// with autograd on one leaf tensor per parameter tensor. Both hold `flat` in its order.
    fn is_linear(&self) -> bool {
        matches!(self.layers[..], [Layer::Dense { .. }])
    }

    /// Whether training draws dropout masks.
    fn has_dropout(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, Layer::Dropout { .. }))
    }

    /// How many random words the dropout masks of one row take ([`Architecture::dropout_masks`]
    /// draws one `u32` per masked value).
    fn dropout_words_per_row(&self) -> usize {
        let mut shape = self.input_shape();
        let mut words = 0;
        for l in &self.layers {
            shape = Self::next_shape(l, &shape);
            if let Layer::Dropout { .. } = l {
                words += shape.iter().product::<usize>();
            }
        }
        words
    }

    /// The tensors training updates, holding a copy of `flat`.
    fn params(&self, flat: &[f32]) -> Vec<Tensor> {
        assert_eq!(
            flat.len(),
            self.num_params(),
            "parameter vector of the wrong length"
        );
        if self.is_linear() {
            return vec![Tensor::from_slice(flat)];
        }
        let mut out = Vec::new();
        let mut at = 0;
        for (shape, _) in self.parameter_shapes() {
            let len = shape.iter().product::<i64>() as usize;
            out.push(
                Tensor::from_slice(&flat[at..at + len])
                    .view(&shape[..])
                    .set_requires_grad(true),
            );
            at += len;
        }
        out
    }

    /// The parameter tensors as the forward pass uses them, views of `params` (a dense weight
    /// transposed, `[in, out]`): updates to `params` show through, so training computes them
    /// once per job.
    fn layers(&self, params: &[Tensor]) -> Vec<Tensor> {
        if self.is_linear() {
            let Layer::Dense { inputs, outputs } = self.layers[0] else {
                unreachable!("a linear model is one dense layer")
            };
            let (i, o) = (inputs as i64, outputs as i64);
            let flat = &params[0];
            return vec![
                flat.narrow(0, 0, i * o).view([o, i]).tr(),
                flat.narrow(0, i * o, o),
            ];
        }
        let mut out = Vec::with_capacity(params.len());
        let mut rest = params.iter();
        for l in &self.layers {
            match l {
                Layer::Dense { .. } => {
                    out.push(rest.next().expect("a weight").tr());
                    out.push(rest.next().expect("a bias").shallow_clone());
                }
                Layer::Conv { bias, .. } => {
                    let tensors = 1 + *bias as usize;
                    out.extend(rest.by_ref().take(tensors).map(Tensor::shallow_clone));
                }
                Layer::Norm { .. } => {
                    out.extend(rest.by_ref().take(2).map(Tensor::shallow_clone));
                }
                Layer::Embedding { .. } => {
                    out.push(rest.next().expect("a weight").shallow_clone());
                }
                Layer::Lstm { layers, .. } => {
                    out.extend(rest.by_ref().take(4 * layers).map(Tensor::shallow_clone));
                }
                Layer::Script { .. } => out.extend(rest.by_ref().map(Tensor::shallow_clone)),
                Layer::Relu
                | Layer::Relu6
                | Layer::Tanh
                | Layer::Gelu
                | Layer::MaxPool
                | Layer::Dropout { .. }
                | Layer::Save
                | Layer::AddSaved
                | Layer::GlobalAvgPool => {}
            }
        }
        out
    }

    /// Dropout masks for a batch of `rows` (one per dropout layer, already scaled by 1/(1 −
    /// p)), drawn from `rng`; empty for models without dropout.
    fn dropout_masks(&self, rows: usize, rng: &mut impl Rng) -> Vec<Tensor> {
        if !self.has_dropout() {
            return Vec::new();
        }
        let mut shape = self.input_shape();
        let mut masks = Vec::new();
        for l in &self.layers {
            shape = Self::next_shape(l, &shape);
            if let Layer::Dropout { p } = *l {
                let n: usize = rows * shape.iter().product::<usize>();
                let threshold = (p * 4_294_967_296.0).min(u32::MAX as f64) as u32;
                let scale = (1.0 / (1.0 - p)) as f32;
                let values: Vec<f32> = (0..n)
                    .map(|_| {
                        if rng.gen::<u32>() < threshold {
                            0.0
                        } else {
                            scale
                        }
                    })
                    .collect();
                let mut dims = vec![rows as i64];
                dims.extend(shape.iter().map(|&d| d as i64));
                masks.push(Tensor::from_slice(&values).view(&dims[..]));
            }
        }
        masks
    }

    /// Logits `[batch, outputs]`. `weights` are [`Architecture::layers`] of the parameters;
    /// `masks`: dropout masks in training (see [`Architecture::dropout_masks`]), empty when
    /// evaluating. The layers are walked by [`walk::forward`], which a cohort's stacked runs
    /// share.
    fn forward(&self, weights: &[Tensor], x: &Tensor, masks: &[Tensor]) -> Tensor {
        if let [Layer::Script { id }] = self.layers[..] {
            return script::forward(id, self.input, weights, x);
        }
        walk::forward(self, &mut walk::Single, weights, x, masks)
    }

    /// Gradients of the minibatch loss Σᵢ wᵢ·ℓᵢ / B (wᵢ = 1 without weights), one per tensor of
    /// `params`. `layers` are [`Architecture::layers`] of `params`; `y` as [`sgd::targets`]
    /// makes it; `w` is `[B, 1]`; `masks` the batch's dropout masks.
    fn gradients(
        &self,
        params: &[Tensor],
        layers: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
        masks: &[Tensor],
    ) -> Vec<Tensor> {
        if self.is_linear() {
            vec![self.linear_gradient(layers, x, y, w)]
        } else {
            self.autograd_gradients(params, x, y, w, masks)
        }
    }

    /// For logits z = xWᵀ + b, the logistic and the softmax cross-entropy losses both have
    /// ∂L/∂z = (p − onehot(y)) / B, so ∂L/∂W = (∂L/∂z)ᵀ x and ∂L/∂b = Σ_rows ∂L/∂z.
    fn linear_gradient(
        &self,
        layers: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
    ) -> Tensor {
        let z = self.forward(layers, x, &[]);
        let batch = x.size()[0] as f64;
        let mut r = if self.is_binary() {
            z.sigmoid() - y
        } else {
            z.softmax(1, Kind::Float) - y.one_hot(self.classes as i64).to_kind(Kind::Float)
        };
        if let Some(w) = w {
            let _ = r.g_mul_(w);
        }
        let _ = r.g_mul_scalar_(1.0 / batch);
        let gw = r.tr().mm(x);
        let gb = r.sum_dim_intlist(0, false, Kind::Float);
        Tensor::cat(&[gw.view(-1), gb], 0)
    }

    fn autograd_gradients(
        &self,
        params: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
        masks: &[Tensor],
    ) -> Vec<Tensor> {
        let loss = |logits: &Tensor| match w {
            None => sgd::loss(self, logits, y, tch::Reduction::Mean),
            Some(w) => {
                let per_row = sgd::loss(self, logits, y, tch::Reduction::None);
                (per_row.view([-1]) * w.view([-1])).sum(Kind::Float) / x.size()[0] as f64
            }
        };
        if let [Layer::Script { id }] = self.layers[..] {
            return script::gradients(id, self.input, params, x, loss);
        }
        let logits = self.forward(&self.layers(params), x, masks);
        Tensor::run_backward(&[&loss(&logits)], params, false, false)
    }
}

/// The change `sent − base` of a flat vector, element by element in f64 (what clipping,
/// attacks and compressors work on; adding it back to `base` in f64 and rounding gives `sent`
/// again).
pub fn change(base: &[f32], sent: &[f32]) -> Vec<f64> {
    assert_eq!(
        base.len(),
        sent.len(),
        "a vector and its base differ in length"
    );
    base.iter()
        .zip(sent)
        .map(|(&b, &s)| s as f64 - b as f64)
        .collect()
}

/// Copies tensors back into a flat vector, in parameter order.
fn flatten_into(params: &[Tensor], flat: &mut [f32]) {
    let mut at = 0;
    for p in params {
        let n = p.numel();
        p.to_kind(Kind::Float).copy_data(&mut flat[at..at + n], n);
        at += n;
    }
    assert_eq!(at, flat.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn shapes_and_parameter_counts() {
        let lin = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 150, 2);
        assert_eq!(lin.num_params(), 151);
        let soft = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 60, 10);
        assert_eq!(soft.num_params(), 610);
        let mlp = Architecture::new(
            &ModelSpec::of(MlpSpec {
                hidden: vec![64, 32],
            }),
            10,
            3,
        );
        assert_eq!(mlp.num_params(), 10 * 64 + 64 + 64 * 32 + 32 + 32 * 3 + 3);
    }

    #[test]
    fn normalisation_of_flat_rows_normalises_each_feature_over_the_batch() {
        // Batch norm over a flat row's 2 features (PyTorch's BatchNorm1d, the batch's
        // statistics): rows (1, 10) and (3, 30) become (−1, −1) and (1, 1) (to within ε), times
        // the scale 1 plus the shift 0; then a dense layer 2 → 1 with weight (1, 2), bias 0.5.
        let spec = ModelSpec::from_yaml("{kind: layers, layers: [batch_norm, dense]}").unwrap();
        let arch = Architecture::new(&spec, 2, 2);
        assert_eq!(arch.num_params(), 4 + 3);
        assert!(!arch.stacks(), "a flat row's normalisation trains alone");
        let params = [1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 0.5];
        let ps = arch.params(&params);
        let layers = arch.layers(&ps);
        let x = Tensor::from_slice(&[1.0f32, 10.0, 3.0, 30.0]).view([2, 2]);
        let logits = tch::no_grad(|| arch.forward(&layers, &x, &[]));
        let got: Vec<f32> = Vec::try_from(logits.reshape([-1])).unwrap();
        assert!(
            (got[0] + 2.5).abs() < 1e-3 && (got[1] - 3.5).abs() < 1e-3,
            "{got:?}"
        );
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // lists of ranges, one long
    fn layers_are_selected_by_name_and_role() {
        // On 1×4×4 images: conv 1→2 3×3 (20 values), batch norm over 2 (4), dense 8→1 (9).
        let spec = ModelSpec::from_yaml(
            "{kind: layers, layers: [{kind: conv, channels: 2, kernel: 3}, batch_norm, relu, dense]}",
        )
        .unwrap();
        let arch = Architecture::for_input(&spec, InputShape::Image([1, 4, 4]), 2);
        let layers = arch.parameter_layers();
        let names: Vec<&str> = layers.iter().map(|l| &l.name[..]).collect();
        assert_eq!(names, ["0", "1", "2"]);
        assert_eq!(layers[1].range, 20..24);
        assert!(layers[1].norm && !layers[0].norm);
        let select = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            arch.select_layers(&names)
        };
        assert_eq!(select(&["head"]), Ok(vec![24..33]));
        assert_eq!(select(&["body"]), Ok(vec![0..24]));
        assert_eq!(select(&["norm"]), Ok(vec![20..24]));
        assert_eq!(select(&["0", "head"]), Ok(vec![0..20, 24..33]));
        assert_eq!(select(&["head", "1"]), Ok(vec![20..33]));
        let e = select(&["fc"]).unwrap_err();
        assert!(
            e.contains("no layer `fc`") && e.contains("`0`, `1`, `2`"),
            "{e}"
        );
        assert!(select(&[]).is_err());
        // A linear model has one layer: no body, no normalisation.
        let linear = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 3, 2);
        let names = ["body".to_string()];
        assert!(linear.select_layers(&names).unwrap_err().contains("`body`"));
        let names = ["norm".to_string()];
        assert!(linear
            .select_layers(&names)
            .unwrap_err()
            .contains("`batch_norm`"));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // lists of ranges, one long
    fn a_layer_list_names_its_layers() {
        // On 1×4×4 images: conv 1→2 3×3 (20 values) named `stem`, a residual block holding
        // a batch norm over 2 (4) named `bn` and an unnamed conv 2→2 3×3 padded (38), dense
        // 32→1 (33) named `classifier`.
        let spec = ModelSpec::from_yaml(
            "{kind: layers, layers: [{kind: conv, channels: 2, kernel: 3, name: stem}, \
             {kind: residual, layers: [{kind: batch_norm, name: bn}, relu, \
             {kind: conv, channels: 2, kernel: 3, padding: 1}]}, \
             {kind: dense, name: classifier}]}",
        )
        .unwrap();
        spec.validate().unwrap();
        let arch = Architecture::for_input(&spec, InputShape::Image([1, 4, 4]), 2);
        let layers = arch.parameter_layers();
        let names: Vec<&str> = layers.iter().map(|l| &l.name[..]).collect();
        assert_eq!(names, ["stem", "bn", "2", "classifier"]);
        let select = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            arch.select_layers(&names)
        };
        // A named layer is read by its name or its number.
        assert_eq!(select(&["classifier"]), Ok(vec![62..71]));
        assert_eq!(select(&["3"]), select(&["classifier"]));
        assert_eq!(select(&["bn", "2"]), Ok(vec![20..62]));
        let e = select(&["fc"]).unwrap_err();
        assert!(e.contains("`stem`, `bn`, `2`, `classifier`"), "{e}");
        // Written back as a list, the names stay.
        let text = serde_yaml::to_string(&ModelSpec::of(layers::LayersSpec::of(
            &spec.network(InputShape::Image([1, 4, 4]), 1),
        )))
        .unwrap();
        assert!(
            text.contains("name: stem")
                && text.contains("name: bn")
                && text.contains("name: classifier"),
            "{text}"
        );
        // Refused names, with the path of the layer's `name`.
        let refused = |layers: &str| {
            let spec =
                ModelSpec::from_yaml(&format!("{{kind: layers, layers: {layers}}}")).unwrap();
            let e = spec.validate().unwrap_err();
            (e.path, e.message)
        };
        let (path, message) = refused("[{kind: dense, units: 4, name: head}, dense]");
        assert_eq!(path, "layers[0].name");
        assert!(message.contains("role"), "{message}");
        let (path, message) =
            refused("[{kind: dense, units: 4, name: fc}, {kind: dense, name: fc}]");
        assert_eq!(path, "layers[1].name");
        assert!(message.contains("also the name of layers[0]"), "{message}");
        let (_, message) = refused("[{kind: dense, units: 4, name: '7'}, dense]");
        assert!(message.contains("is a number"), "{message}");
        let (_, message) = refused("[{kind: dense, units: 4, name: my layer}, dense]");
        assert!(message.contains("letters, digits and `_`"), "{message}");
        let (path, _) =
            refused("[{kind: residual, layers: [{kind: batch_norm, name: 'a-b'}]}, dense]");
        assert_eq!(path, "layers[0].layers[0].name");
    }

    #[test]
    fn cnn_parameter_counts_match_pytorch() {
        // FedEM's FemnistCNN on 28×28 grey images, 62 classes: conv1 1·32·25 + 32, conv2
        // 32·64·25 + 64, fc1 1024·2048 + 2048, output 2048·62 + 62 (what PyTorch counts).
        let image = InputShape::Image([1, 28, 28]);
        let cnn = Architecture::for_input(&ModelSpec::from_yaml("{kind: cnn}").unwrap(), image, 62);
        assert_eq!(cnn.num_params(), 832 + 51_264 + 2_099_200 + 127_038);
        // Forward flops: 2·(25·32·24·24 + 32·25·64·8·8 + 1024·2048 + 2048·62).
        assert_eq!(
            cnn.flops_per_sample(),
            2 * (25 * 32 * 576 + 800 * 64 * 64 + 1024 * 2048 + 2048 * 62)
        );
        // The App. I.1 small CNN, 10 classes: 32·9 + 32, 32·64·9 + 64, 9216·128 + 128, 1290.
        let small = Architecture::for_input(
            &ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap(),
            image,
            10,
        );
        assert_eq!(small.num_params(), 320 + 18_496 + 1_179_776 + 1_290);
        assert!(small.summary().contains("dropout 0.5"));
    }

    #[test]
    fn cnn_checks_its_input() {
        assert!(ModelSpec::from_yaml("{kind: cnn}")
            .unwrap()
            .check_input(InputShape::Flat(784))
            .is_err());
        assert!(ModelSpec::from_yaml("{kind: cnn}")
            .unwrap()
            .check_input(InputShape::Image([1, 8, 8]))
            .is_err());
        assert!(ModelSpec::from_yaml("{kind: cnn}")
            .unwrap()
            .check_input(InputShape::Image([3, 32, 32]))
            .is_ok());
        assert!(ModelSpec::from_yaml("{kind: linear}")
            .unwrap()
            .check_input(InputShape::Image([1, 8, 8]))
            .is_ok());
        assert!(ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.6}")
            .unwrap()
            .validate()
            .is_err());
    }

    #[test]
    fn cnn_gradients_match_finite_differences() {
        // A tiny image (1×16×16, so the FemnistCNN shapes work out to 1×1 after two pools),
        // 3 classes: the autograd gradient of one conv weight against a central difference.
        let arch = Architecture::for_input(
            &ModelSpec::from_yaml("{kind: cnn}").unwrap(),
            InputShape::Image([1, 16, 16]),
            3,
        );
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let flat: Vec<f64> = arch.init(&mut rng).iter().map(|&v| v as f64).collect();
        let xs: Vec<f32> = (0..2 * 256).map(|_| rng.gen_range(0.0..1.0)).collect();
        let x = Tensor::from_slice(&xs).view([2, 256]).to_kind(Kind::Double);
        let y = Tensor::from_slice(&[0i64, 2]);
        let loss_at = |flat: &[f64]| {
            let ps: Vec<Tensor> = arch
                .params(&flat.iter().map(|&v| v as f32).collect::<Vec<_>>())
                .iter()
                .map(|p| p.detach().to_kind(Kind::Double))
                .collect();
            let logits = arch.forward(&arch.layers(&ps), &x, &[]);
            sgd::loss(&arch, &logits, &y, tch::Reduction::Mean).double_value(&[])
        };
        let ps: Vec<Tensor> = arch
            .params(&flat.iter().map(|&v| v as f32).collect::<Vec<_>>())
            .iter()
            .map(|p| p.detach().to_kind(Kind::Double).set_requires_grad(true))
            .collect();
        let grads = arch.autograd_gradients(&ps, &x, &y, None, &[]);
        let mut g0 = vec![0f64; 5];
        grads[0].view([-1]).narrow(0, 0, 5).copy_data(&mut g0, 5);
        for (i, g) in g0.iter().enumerate() {
            let (mut up, mut down) = (flat.clone(), flat.clone());
            up[i] += 1e-3;
            down[i] -= 1e-3;
            let numeric = (loss_at(&up) - loss_at(&down)) / 2e-3;
            assert!((numeric - g).abs() < 1e-3, "weight {i}: {numeric} vs {g}");
        }
    }

    #[test]
    fn dropout_masks_are_seeded_and_scaled() {
        let arch = Architecture::for_input(
            &ModelSpec::from_yaml("{kind: small_cnn, dropout: 0.25}").unwrap(),
            InputShape::Image([1, 10, 10]),
            10,
        );
        let draw = |seed| {
            let masks = arch.dropout_masks(4, &mut rand_chacha::ChaCha20Rng::seed_from_u64(seed));
            masks
                .iter()
                .map(|m| {
                    let n = m.numel();
                    let mut v = vec![0f32; n];
                    m.view([-1]).copy_data(&mut v, n);
                    (m.size(), v)
                })
                .collect::<Vec<_>>()
        };
        let a = draw(1);
        assert_eq!(a, draw(1));
        assert_ne!(a, draw(2));
        // After two 3×3 convs and a pool, 64×3×3 per row; then 128 after the dense layer.
        assert_eq!(a[0].0, vec![4, 64, 3, 3]);
        assert_eq!(a[1].0, vec![4, 128]);
        for ((_, v), p) in a.iter().zip([0.25f32, 0.5]) {
            assert!(v
                .iter()
                .all(|&m| m == 0.0 || (m - 1.0 / (1.0 - p)).abs() < 1e-6));
            let dropped = v.iter().filter(|&&m| m == 0.0).count() as f32 / v.len() as f32;
            assert!((dropped - p).abs() < 0.08, "dropped {dropped}, p {p}");
        }
    }

    #[test]
    fn init_is_bounded_and_seeded() {
        let arch = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 100, 2);
        let mut r = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let p = arch.init(&mut r);
        assert!(p.iter().all(|v| v.abs() <= 0.1));
        let mut r2 = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        assert_eq!(p, arch.init(&mut r2));
    }

    #[test]
    fn flat_round_trip() {
        for arch in [
            Architecture::new(
                &ModelSpec::from_yaml("{kind: mlp, hidden: [4]}").unwrap(),
                3,
                3,
            ),
            Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 3, 4),
        ] {
            let flat: Vec<f32> = (0..arch.num_params()).map(|i| i as f32 * 0.5).collect();
            let t = arch.params(&flat);
            let mut back = vec![0.0; flat.len()];
            flatten_into(&t, &mut back);
            assert_eq!(flat, back);
        }
    }

    #[test]
    fn linear_gradients_equal_autograd() {
        // Binary (logistic) and 4-class (softmax) linear models, random data and sample weights.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        for classes in [2usize, 4] {
            let arch =
                Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 5, classes);
            let flat: Vec<f32> = (0..arch.num_params())
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            let xs: Vec<f32> = (0..7 * 5).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let ys: Vec<i64> = (0..7).map(|_| rng.gen_range(0..classes as i64)).collect();
            let x = Tensor::from_slice(&xs).view([7, 5]);
            let y = sgd::targets(&arch, &Tensor::from_slice(&ys));
            let ws: Vec<f32> = (0..7).map(|_| rng.gen_range(0.0..1.0)).collect();
            let w = Tensor::from_slice(&ws).unsqueeze(1);
            let manual = arch.linear_gradient(&arch.layers(&arch.params(&flat)), &x, &y, Some(&w));
            // Autograd through the same views of a flat leaf tensor holding the same values.
            let leaf = Tensor::from_slice(&flat).set_requires_grad(true);
            let auto = arch
                .autograd_gradients(&[leaf], &x, &y, Some(&w), &[])
                .remove(0);
            let diff = (manual - auto).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "{classes} classes: max difference {diff}");
        }
    }
}
