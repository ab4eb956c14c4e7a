//! `layers`: a model the scenario writes as a list of layers, and the built-in families
//! written the same way.
//!
//! ```yaml
//! model:
//!   kind: layers
//!   layers:
//!     - {kind: conv, channels: 32, kernel: 5}
//!     - relu
//!     - max_pool
//!     - {kind: dense, units: 2048}
//!     - relu
//!     - dense            # the last layer: one output per class (one for two classes)
//! ```
//!
//! Every shape is inferred from the data's rows: a layer names only what it adds (a
//! convolution its output channels, a dense layer its units), and a layer that cannot take
//! what reaches it is refused at `fedsim check` with its index and field. The built-in families
//! are such lists ([`LayersSpec::of`] writes any of them back), so there is one model code
//! path. This room only reads, checks and writes lists; what a layer computes is in `walk`.

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InitScheme, InputShape, Layer, Normalization};
use crate::settings::catalogue::{read_settings, split_tag, tagged, unknown};
use crate::settings::FieldError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};
use std::fmt;

/// A network written as its layers, in forward order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayersSpec {
    /// The layers, input side first. A layer with no settings may be written as its kind
    /// alone (`relu`); the last layer is `dense` without `units`: one output per class (one
    /// for two classes).
    pub layers: Vec<LayerSpec>,
    /// How the parameters are drawn: `pytorch` (each layer's PyTorch default) or
    /// `torchvision` (torchvision's MobileNet-v2: conv weights Kaiming fan-out normal, dense
    /// weights N(0, 0.01²), biases 0).
    #[serde(default)]
    pub initialisation: Initialisation,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// How a layer list's parameters are drawn ([`InitScheme`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Initialisation {
    #[default]
    Pytorch,
    Torchvision,
}

/// Every layer kind in one table, in the order the reference lists them: its variant and
/// settings type, its name, whether it may be written as its name alone, and what it is. The
/// enum, reading, writing and the schema of a layer all come from this table.
macro_rules! layer_kinds {
    ($($variant:ident($settings:ty) = $kind:literal, alone: $alone:literal, $summary:literal;)*) => {
        /// One layer of a [`LayersSpec`]: `{kind: conv, channels: 32, kernel: 5}`, or a kind
        /// alone.
        #[derive(Clone, Debug, PartialEq)]
        pub enum LayerSpec {
            $($variant($settings),)*
        }

        /// The layer kinds: name, whether it may be written alone, what it is.
        const KINDS: &[(&str, bool, &str)] = &[$(($kind, $alone, $summary),)*];

        impl LayerSpec {
            /// The kind, as a list writes it.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(LayerSpec::$variant(_) => $kind,)*
                }
            }

            /// The layer `kind` with `fields` (its settings, without `kind`).
            fn parse(kind: &str, fields: Value) -> Result<LayerSpec, String> {
                Ok(match kind {
                    $($kind => LayerSpec::$variant(read_settings(fields)?),)*
                    other => return Err(unknown(other, KINDS.iter().map(|k| k.0))),
                })
            }

            /// The settings as a mapping (empty for a layer without settings).
            fn fields(&self) -> Value {
                let value = match self {
                    $(LayerSpec::$variant(s) => serde_yaml::to_value(s),)*
                };
                value.unwrap_or(Value::Null)
            }

            /// The JSON Schema of the kind's settings.
            fn settings_schema(
                kind: &str,
                generator: &mut schemars::SchemaGenerator,
            ) -> schemars::Schema {
                match kind {
                    $($kind => generator.subschema_for::<$settings>(),)*
                    other => unreachable!("`{other}` is not a layer kind"),
                }
            }
        }
    };
}

layer_kinds! {
    Dense(Dense) = "dense", alone: true,
        "fully connected layer; `units` (left out on the last layer)";
    Conv(Conv) = "conv", alone: false,
        "2-d convolution; `channels`, `kernel`, `stride` 1, `padding` 0, `groups` 1, `bias` true";
    BatchNorm(Norm) = "batch_norm", alone: true,
        "batch normalisation (of channels, or of a flat row's features) with the batch's statistics, trained scale and shift";
    GroupNorm(Norm) = "group_norm", alone: true,
        "group normalisation in gcd(channels, 32) groups (a flat row's features: channels), trained scale and shift";
    Relu(NoSettings) = "relu", alone: true, "max(x, 0)";
    Relu6(NoSettings) = "relu6", alone: true, "min(max(x, 0), 6)";
    Tanh(NoSettings) = "tanh", alone: true, "the hyperbolic tangent";
    Gelu(NoSettings) = "gelu", alone: true, "x·Φ(x), Φ the standard normal CDF (exact GELU)";
    MaxPool(NoSettings) = "max_pool", alone: true, "2×2 max pooling, stride 2";
    GlobalAvgPool(NoSettings) = "global_avg_pool", alone: true,
        "mean over each channel's pixels: C×H×W to C×1×1";
    Flatten(NoSettings) = "flatten", alone: true,
        "an image activation as one vector (a dense layer flattens on its own)";
    Dropout(Dropout) = "dropout", alone: false, "dropout with `rate` in training";
    Embedding(Embedding) = "embedding", alone: false, "token ids to vectors of `dim`";
    Lstm(Lstm) = "lstm", alone: false,
        "stacked LSTM (`hidden`, `layers` 1), the last step's hidden state";
    Residual(Residual) = "residual", alone: false, "`layers` whose output is added to their input";
}

/// A fully connected layer (a bias included); an image activation is flattened first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dense {
    /// Output units; left out on the last layer, whose units are the data's classes (one for
    /// two classes), and given on every other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<usize>,
    /// The layer's name, for settings that name layers (`personal: [NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A 2-d convolution with a square kernel (PyTorch's `nn.Conv2d`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Conv {
    /// Output channels.
    pub channels: usize,
    /// The kernel's side.
    pub kernel: usize,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub stride: usize,
    /// Zero padding on each side.
    #[serde(default, skip_serializing_if = "is_default")]
    pub padding: usize,
    /// Channel groups (depthwise when it equals both channel counts); both channel counts
    /// are multiples of it.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub groups: usize,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub bias: bool,
    /// The layer's name, for settings that name layers (`personal: [NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Zeroes each activation with probability `rate` in training (masks from the job's stream)
/// and scales the rest by 1 / (1 − rate); passes everything when evaluating.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Dropout {
    /// In [0, 1); 0 is no layer at all.
    pub rate: f64,
}

/// Token ids to vectors of `dim` (PyTorch's `nn.Embedding`); the first layer of a model of
/// token windows, the vocabulary the data's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Embedding {
    pub dim: usize,
    /// The layer's name, for settings that name layers (`personal: [NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Stacked LSTM layers over an embedded window (PyTorch's `nn.LSTM`, batch first), passing on
/// the last step's hidden state of the top layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Lstm {
    /// The hidden state's width.
    pub hidden: usize,
    /// Stacked layers.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub layers: usize,
    /// The layer's name, for settings that name layers (`personal: [NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Layers whose output is added to their input (an identity shortcut): they keep the shape
/// of what enters. Blocks do not nest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Residual {
    pub layers: Vec<LayerSpec>,
}

/// A layer without settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// A normalisation layer: no settings but its name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Norm {
    /// The layer's name, for settings that name layers (`personal: [NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

fn one() -> usize {
    1
}
fn is_one(v: &usize) -> bool {
    *v == 1
}
fn yes() -> bool {
    true
}
fn is_true(v: &bool) -> bool {
    *v
}

impl Serialize for LayerSpec {
    /// A layer without settings as its kind alone, any other as `{kind: …, settings…}`.
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        match self.fields() {
            Value::Mapping(m) if m.is_empty() => serializer.serialize_str(self.kind()),
            fields => tagged("kind", self.kind(), &fields).serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for LayerSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let item = match Value::deserialize(deserializer)? {
            Value::String(kind) => {
                Value::Mapping(Mapping::from_iter([("kind".into(), Value::String(kind))]))
            }
            other => other,
        };
        let (kind, fields) = split_tag(item, "kind", "{kind: conv, channels: 32, kernel: 5}")
            .map_err(D::Error::custom)?;
        LayerSpec::parse(&kind, fields).map_err(D::Error::custom)
    }
}

impl JsonSchema for LayerSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LayerSpec".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let settings: Vec<(&'static str, &'static str, schemars::Schema)> = KINDS
            .iter()
            .map(|&(kind, _, summary)| (kind, summary, Self::settings_schema(kind, generator)))
            .collect();
        let bare: Vec<&str> = KINDS
            .iter()
            .filter(|(_, alone, _)| *alone)
            .map(|(kind, _, _)| *kind)
            .collect();
        let mut variants = vec![serde_json::json!({
            "description": "a layer without settings (or a last `dense`), by its kind alone",
            "type": "string",
            "enum": bare,
        })];
        for (kind, summary, schema) in settings {
            let mut schema = schema.to_value();
            if let Some(serde_json::Value::String(r)) = schema.get("$ref") {
                let name = r.rsplit('/').next().unwrap_or(r).to_string();
                schema = generator
                    .definitions()
                    .get(&name)
                    .cloned()
                    .unwrap_or(schema);
            }
            let mut properties = serde_json::Map::from_iter([(
                "kind".to_string(),
                serde_json::json!({"const": kind, "description": summary}),
            )]);
            if let Some(serde_json::Value::Object(own)) = schema.get("properties") {
                properties.extend(own.clone());
            }
            let mut required = vec![serde_json::json!("kind")];
            if let Some(serde_json::Value::Array(own)) = schema.get("required") {
                required.extend(own.iter().cloned());
            }
            variants.push(serde_json::json!({
                "title": kind,
                "description": summary,
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            }));
        }
        schemars::json_schema!({
            "description": "One layer: its kind alone, or a mapping with `kind` and its settings.",
            "oneOf": variants,
        })
    }
}

/// What one row is between two layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A vector of features.
    Flat(usize),
    /// `[channels, height, width]`.
    Image([usize; 3]),
    /// A window of `len` token ids below `vocab`.
    Tokens { len: usize, vocab: usize },
    /// A window of `len` vectors of `dim`.
    Sequence { len: usize, dim: usize },
}

impl Shape {
    pub fn of(input: InputShape) -> Shape {
        match input {
            InputShape::Flat(d) => Shape::Flat(d),
            InputShape::Image(s) => Shape::Image(s),
            InputShape::Tokens { len, vocab } => Shape::Tokens { len, vocab },
        }
    }
}

impl Shape {
    /// The shape after `layer`, which takes rows of this shape.
    pub fn after(self, layer: &Layer) -> Shape {
        match (*layer, self) {
            (Layer::Dense { outputs, .. }, _) => Shape::Flat(outputs),
            (
                Layer::Conv {
                    outputs,
                    kernel,
                    stride,
                    padding,
                    ..
                },
                Shape::Image([_, h, w]),
            ) => {
                let side = |s: usize| (s + 2 * padding - kernel) / stride + 1;
                Shape::Image([outputs, side(h), side(w)])
            }
            (Layer::MaxPool, Shape::Image([c, h, w])) => Shape::Image([c, h / 2, w / 2]),
            (Layer::GlobalAvgPool, Shape::Image([c, _, _])) => Shape::Image([c, 1, 1]),
            (Layer::Embedding { dim, .. }, Shape::Tokens { len, .. }) => {
                Shape::Sequence { len, dim }
            }
            (Layer::Lstm { hidden, .. }, _) => Shape::Flat(hidden),
            (Layer::Script { id }, _) => Shape::Flat(super::script::script(id).outputs),
            _ => self,
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Shape::Flat(d) => write!(f, "{d}"),
            Shape::Image([c, h, w]) => write!(f, "{c}×{h}×{w}"),
            Shape::Tokens { len, .. } => write!(f, "{len} tokens"),
            Shape::Sequence { len, dim } => write!(f, "{len}×{dim}"),
        }
    }
}

/// A layer list's error: the path below `layers` (`[3].kernel`) and what is wrong.
struct LayerError {
    path: String,
    message: String,
}

impl LayerError {
    fn at(index: usize, field: Option<&str>, message: String) -> LayerError {
        let path = match field {
            Some(f) => format!("[{index}].{f}"),
            None => format!("[{index}]"),
        };
        LayerError { path, message }
    }

    /// This error of a residual block's layers, the block at `index`.
    fn within(self, index: usize) -> LayerError {
        LayerError {
            path: format!("[{index}].layers{}", self.path),
            message: self.message,
        }
    }

    fn into_field(self) -> FieldError {
        FieldError::new(format!("layers{}", self.path), self.message)
    }
}

impl LayerSpec {
    /// For a layer with parameters (the layers that take a `name:`), the name given to it;
    /// `None` for a layer without parameters (a residual block's are its layers').
    fn parameter_name(&self) -> Option<Option<&str>> {
        match self {
            LayerSpec::Dense(Dense { name, .. })
            | LayerSpec::Conv(Conv { name, .. })
            | LayerSpec::BatchNorm(Norm { name })
            | LayerSpec::GroupNorm(Norm { name })
            | LayerSpec::Embedding(Embedding { name, .. })
            | LayerSpec::Lstm(Lstm { name, .. }) => Some(name.as_deref()),
            _ => None,
        }
    }
}

/// Every layer of `list` that has parameters (a residual block's included), in the order their
/// parameters come: its path below `layers` (`[2]`, `[3].layers[1]`) and its name where given.
fn parameter_layers(list: &[LayerSpec]) -> Vec<(String, Option<&str>)> {
    let mut out = Vec::new();
    for (i, layer) in list.iter().enumerate() {
        match layer {
            LayerSpec::Residual(block) => out.extend(
                parameter_layers(&block.layers)
                    .into_iter()
                    .map(|(path, name)| (format!("[{i}].layers{path}"), name)),
            ),
            _ => out.extend(layer.parameter_name().map(|name| (format!("[{i}]"), name))),
        }
    }
    out
}

/// Names a split can read besides the layers' own: not a layer's name.
const ROLES: [&str; 3] = ["head", "body", "norm"];

/// The layers' names: letters, digits and `_`, not only digits (a number is a layer's
/// number), not a role, each once.
fn check_names(list: &[LayerSpec]) -> Result<(), LayerError> {
    let layers = parameter_layers(list);
    for (i, (path, name)) in layers.iter().enumerate() {
        let Some(name) = name else { continue };
        let refuse = |message: String| {
            Err(LayerError {
                path: format!("{path}.name"),
                message,
            })
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            refuse(format!(
                "`{name}` is not a layer name: use letters, digits and `_` (e.g. `encoder`)"
            ))?;
        }
        if name.chars().all(|c| c.is_ascii_digit()) {
            refuse(format!(
                "`{name}` is a number, and a number already names the layer with parameters it \
                 counts to; use letters too (e.g. `fc{name}`)"
            ))?;
        }
        if ROLES.contains(name) {
            refuse(format!(
                "`{name}` names a role of layers (`head`, `body`, `norm`); choose another name"
            ))?;
        }
        if let Some((first, _)) = layers[..i].iter().find(|(_, n)| *n == Some(*name)) {
            refuse(format!(
                "`{name}` is also the name of layers{first}; each name once"
            ))?;
        }
    }
    Ok(())
}

/// The layers of `list` for rows of `shape`, appended to `out`, and the shape they leave;
/// `outputs` is the last dense layer's units.
fn infer(
    list: &[LayerSpec],
    mut shape: Shape,
    outputs: usize,
    out: &mut Vec<Layer>,
) -> Result<Shape, LayerError> {
    for (i, layer) in list.iter().enumerate() {
        let err = |field: Option<&str>, message: String| LayerError::at(i, field, message);
        let needs_image = |what: &str| {
            err(
                None,
                format!(
                    "{what} takes images (channels × height × width), but {} reach it{}",
                    describe(shape),
                    match shape {
                        Shape::Flat(_) => {
                            " (after a dense or flatten layer; a Parquet file declares its \
                             image shape with `data.shape`)"
                        }
                        _ => "",
                    }
                ),
            )
        };
        let features = match shape {
            Shape::Flat(d) => Some(d),
            Shape::Image([c, h, w]) => Some(c * h * w),
            Shape::Tokens { .. } | Shape::Sequence { .. } => None,
        };
        let kind = layer.kind();
        let built = match layer {
            LayerSpec::Dense(dense) => {
                let Some(inputs) = features else {
                    return Err(err(
                        None,
                        format!(
                            "a dense layer takes flat rows or images, but {} reach it (put an \
                             `lstm` before it{})",
                            describe(shape),
                            match shape {
                                Shape::Tokens { .. } => ", after an `embedding`",
                                _ => "",
                            }
                        ),
                    ));
                };
                Layer::Dense {
                    inputs,
                    outputs: dense.units.unwrap_or(outputs),
                }
            }
            LayerSpec::Conv(conv) => {
                let Shape::Image([c, h, w]) = shape else {
                    return Err(needs_image("a convolution"));
                };
                if c % conv.groups != 0 {
                    return Err(err(
                        Some("groups"),
                        format!(
                            "{} does not divide the {c} channels that reach this layer",
                            conv.groups
                        ),
                    ));
                }
                let reach = |side: usize| side + 2 * conv.padding;
                if conv.kernel > reach(h) || conv.kernel > reach(w) {
                    return Err(err(
                        Some("kernel"),
                        format!(
                            "{} is larger than the {h}×{w} input of this layer{}",
                            conv.kernel,
                            match conv.padding {
                                0 => String::new(),
                                p => format!(" with padding {p} ({}×{})", reach(h), reach(w)),
                            }
                        ),
                    ));
                }
                Layer::Conv {
                    inputs: c,
                    outputs: conv.channels,
                    kernel: conv.kernel,
                    stride: conv.stride,
                    padding: conv.padding,
                    groups: conv.groups,
                    bias: conv.bias,
                }
            }
            LayerSpec::BatchNorm(_) | LayerSpec::GroupNorm(_) => {
                // Over an image's channels, or over a flat row's features (PyTorch's
                // BatchNorm1d; a group norm's groups of features).
                let c = match shape {
                    Shape::Image([c, _, _]) => c,
                    Shape::Flat(d) => d,
                    _ => {
                        let message = format!(
                            "normalisation takes images or flat rows, but {} reach it",
                            describe(shape)
                        );
                        return Err(err(None, message));
                    }
                };
                let norm = match layer {
                    LayerSpec::BatchNorm(_) => Normalization::Batch,
                    _ => Normalization::Group,
                };
                Layer::Norm {
                    channels: c,
                    kind: norm,
                }
            }
            LayerSpec::Relu(_)
            | LayerSpec::Relu6(_)
            | LayerSpec::Tanh(_)
            | LayerSpec::Gelu(_)
            | LayerSpec::Dropout(_) => {
                if features.is_none() {
                    return Err(err(
                        None,
                        format!(
                            "`{kind}` takes flat rows or images, but {} reach it",
                            describe(shape)
                        ),
                    ));
                }
                match layer {
                    LayerSpec::Relu(_) => Layer::Relu,
                    LayerSpec::Relu6(_) => Layer::Relu6,
                    LayerSpec::Tanh(_) => Layer::Tanh,
                    LayerSpec::Gelu(_) => Layer::Gelu,
                    LayerSpec::Dropout(d) => Layer::Dropout { p: d.rate },
                    _ => unreachable!("matched above"),
                }
            }
            LayerSpec::MaxPool(_) => {
                let Shape::Image([_, h, w]) = shape else {
                    return Err(needs_image("max pooling"));
                };
                if h < 2 || w < 2 {
                    return Err(err(
                        None,
                        format!("2×2 max pooling needs at least 2×2 pixels, {h}×{w} reach it"),
                    ));
                }
                Layer::MaxPool
            }
            LayerSpec::GlobalAvgPool(_) => {
                if !matches!(shape, Shape::Image(_)) {
                    return Err(needs_image("global average pooling"));
                }
                Layer::GlobalAvgPool
            }
            LayerSpec::Flatten(_) => match features {
                Some(d) => {
                    shape = Shape::Flat(d);
                    continue;
                }
                None => {
                    return Err(err(
                        None,
                        format!("flatten takes images, but {} reach it", describe(shape)),
                    ))
                }
            },
            LayerSpec::Embedding(e) => {
                let Shape::Tokens { vocab, .. } = shape else {
                    return Err(err(
                        None,
                        format!(
                            "an embedding takes token ids (a text data set such as \
                             `shakespeare`), but {} reach it",
                            describe(shape)
                        ),
                    ));
                };
                Layer::Embedding { vocab, dim: e.dim }
            }
            LayerSpec::Lstm(lstm) => {
                let Shape::Sequence { dim, .. } = shape else {
                    return Err(err(
                        None,
                        format!(
                            "an LSTM takes a window of vectors (after an `embedding`), but {} \
                             reach it",
                            describe(shape)
                        ),
                    ));
                };
                Layer::Lstm {
                    inputs: dim,
                    hidden: lstm.hidden,
                    layers: lstm.layers,
                }
            }
            LayerSpec::Residual(block) => {
                out.push(Layer::Save);
                let after = infer(&block.layers, shape, outputs, out).map_err(|e| e.within(i))?;
                if after != shape {
                    return Err(err(
                        Some("layers"),
                        format!(
                            "the block turns rows of {shape} into {after}; a residual block \
                             adds its output to its input, so it must keep the shape"
                        ),
                    ));
                }
                out.push(Layer::AddSaved);
                continue;
            }
        };
        shape = shape.after(&built);
        out.push(built);
    }
    Ok(shape)
}

/// "rows of 3×32×32", as an error says what reaches a layer.
fn describe(shape: Shape) -> String {
    match shape {
        Shape::Flat(0) => "flat rows".into(),
        Shape::Flat(d) => format!("flat rows of {d}"),
        Shape::Image(_) => format!("images of {shape}"),
        Shape::Tokens { len, .. } => format!("token ids (windows of {len})"),
        Shape::Sequence { len, dim } => format!("windows of {len} vectors of {dim}"),
    }
}

/// Checks what needs no input shape: sizes, rates, where `units` is left out, nesting.
fn check_list(list: &[LayerSpec], top: bool) -> Result<(), LayerError> {
    if list.is_empty() {
        return Err(LayerError {
            path: String::new(),
            message: match top {
                true => "must list at least one layer (the last a `dense` without `units`)".into(),
                false => "a residual block must hold at least one layer".into(),
            },
        });
    }
    let last = list.len() - 1;
    for (i, layer) in list.iter().enumerate() {
        let err = |field: &str, message: &str| Err(LayerError::at(i, Some(field), message.into()));
        let positive = |fields: &[(&str, usize)]| match fields.iter().find(|(_, v)| *v == 0) {
            Some((field, _)) => err(field, "must be at least 1"),
            None => Ok(()),
        };
        match layer {
            LayerSpec::Dense(Dense { units, .. }) => match (top && i == last, units) {
                (true, Some(_)) => err(
                    "units",
                    "leave it out on the last layer: its units are the data's classes (one \
                     for two classes)",
                )?,
                (false, None) => err(
                    "units",
                    "missing: every dense layer but the last gives its units (the last one's \
                     are the data's classes)",
                )?,
                (_, Some(0)) => err("units", "must be at least 1")?,
                _ => {}
            },
            LayerSpec::Conv(c) => {
                positive(&[
                    ("channels", c.channels),
                    ("kernel", c.kernel),
                    ("stride", c.stride),
                    ("groups", c.groups),
                ])?;
                if c.channels % c.groups != 0 {
                    err(
                        "groups",
                        &format!(
                            "{} does not divide the {} output channels",
                            c.groups, c.channels
                        ),
                    )?;
                }
            }
            LayerSpec::Dropout(d) if !(0.0..1.0).contains(&d.rate) => {
                err("rate", &format!("must be in [0, 1), got {}", d.rate))?
            }
            LayerSpec::Embedding(e) => positive(&[("dim", e.dim)])?,
            LayerSpec::Lstm(l) => positive(&[("hidden", l.hidden), ("layers", l.layers)])?,
            LayerSpec::Residual(block) => {
                if !top {
                    return Err(LayerError::at(
                        i,
                        None,
                        "residual blocks do not nest: write the inner block's layers in the \
                         outer block, or the blocks one after another"
                            .into(),
                    ));
                }
                check_list(&block.layers, false).map_err(|e| e.within(i))?;
            }
            _ => {}
        }
        if top && i == last && !matches!(layer, LayerSpec::Dense(_)) {
            return Err(LayerError::at(
                i,
                None,
                format!(
                    "the last layer is `{}`; it must be `dense` without `units` (one output per \
                     class)",
                    layer.kind()
                ),
            ));
        }
    }
    Ok(())
}

impl LayersSpec {
    /// The network of rows of `input` with `outputs` outputs, or where the list cannot take
    /// such rows (a path below `model`).
    pub fn build(&self, input: InputShape, outputs: usize) -> Result<Network, FieldError> {
        let mut layers = Vec::new();
        infer(&self.layers, Shape::of(input), outputs, &mut layers)
            .map_err(LayerError::into_field)?;
        let names = parameter_layers(&self.layers)
            .into_iter()
            .enumerate()
            .filter_map(|(k, (_, name))| Some((k, name?.to_string())))
            .collect();
        Ok(Network {
            layers,
            init: match self.initialisation {
                Initialisation::Pytorch => InitScheme::LayerDefaults,
                Initialisation::Torchvision => InitScheme::Torchvision,
            },
            name: None,
            names,
        })
    }

    /// `network` written as a layer list: the same layers, parameters and initialisation
    /// when built for the input it was made for.
    pub fn of(network: &Network) -> LayersSpec {
        let mut top: Vec<LayerSpec> = Vec::new();
        let mut block: Option<Vec<LayerSpec>> = None;
        let none = NoSettings::default;
        // The k-th layer with parameters is named `network.names[k]` where it has a name.
        let mut k = 0;
        for layer in &network.layers {
            let name = || network.names.get(&k).cloned();
            let spec = match *layer {
                Layer::Save => {
                    block = Some(Vec::new());
                    continue;
                }
                Layer::AddSaved => LayerSpec::Residual(Residual {
                    layers: block.take().expect("a residual starts before it ends"),
                }),
                Layer::Dense { outputs, .. } => LayerSpec::Dense(Dense {
                    units: Some(outputs),
                    name: name(),
                }),
                Layer::Conv {
                    outputs,
                    kernel,
                    stride,
                    padding,
                    groups,
                    bias,
                    ..
                } => LayerSpec::Conv(Conv {
                    channels: outputs,
                    kernel,
                    stride,
                    padding,
                    groups,
                    bias,
                    name: name(),
                }),
                Layer::Norm {
                    kind: Normalization::Batch,
                    ..
                } => LayerSpec::BatchNorm(Norm { name: name() }),
                Layer::Norm {
                    kind: Normalization::Group,
                    ..
                } => LayerSpec::GroupNorm(Norm { name: name() }),
                Layer::Relu => LayerSpec::Relu(none()),
                Layer::Relu6 => LayerSpec::Relu6(none()),
                Layer::Tanh => LayerSpec::Tanh(none()),
                Layer::Gelu => LayerSpec::Gelu(none()),
                Layer::MaxPool => LayerSpec::MaxPool(none()),
                Layer::GlobalAvgPool => LayerSpec::GlobalAvgPool(none()),
                Layer::Dropout { p } => LayerSpec::Dropout(Dropout { rate: p }),
                Layer::Embedding { dim, .. } => {
                    LayerSpec::Embedding(Embedding { dim, name: name() })
                }
                Layer::Lstm { hidden, layers, .. } => LayerSpec::Lstm(Lstm {
                    hidden,
                    layers,
                    name: name(),
                }),
                Layer::Script { .. } => panic!("a TorchScript module is not a layer list"),
            };
            k += layer.has_parameters() as usize;
            match &mut block {
                Some(inner) => inner.push(spec),
                None => top.push(spec),
            }
        }
        if let Some(LayerSpec::Dense(last)) = top.last_mut() {
            last.units = None;
        }
        LayersSpec {
            layers: top,
            initialisation: match network.init {
                InitScheme::LayerDefaults => Initialisation::Pytorch,
                InitScheme::Torchvision => Initialisation::Torchvision,
            },
        }
    }
}

impl ModelSettings for LayersSpec {
    const INPUTS: Inputs = Inputs::Any;
    const EXAMPLE: &'static str = "{layers: [{kind: dense, units: 16}, relu, dense]}";

    fn validate(&self) -> Result<(), FieldError> {
        check_list(&self.layers, true).map_err(LayerError::into_field)?;
        check_names(&self.layers).map_err(LayerError::into_field)
    }

    fn check_shape(&self, input: InputShape, _outputs: Option<usize>) -> Result<(), FieldError> {
        self.build(input, 1).map(|_| ())
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        self.build(input, outputs)
            .unwrap_or_else(|e| panic!("a layer list is checked against its data: {e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Architecture, ModelSpec, MODELS};
    use tch::Tensor;

    /// Every built-in family is a layer list: its network, written back by [`LayersSpec::of`]
    /// and read from YAML, builds the same layers with the same initialisation, for every input
    /// it takes and for one output and ten.
    #[test]
    fn every_family_is_a_layer_list() {
        for r in MODELS
            .iter()
            .filter(|r| r.name != "layers" && !r.declared.reads_file)
        {
            let spec = ModelSpec::from_yaml(&r.example_section()).unwrap();
            let inputs = match r.declared.inputs {
                Inputs::Any => vec![InputShape::Flat(6), InputShape::Image([1, 28, 28])],
                Inputs::Images { min_side } => vec![
                    InputShape::Image([1, min_side.max(28), min_side.max(28)]),
                    InputShape::Image([3, min_side.max(32), min_side.max(32)]),
                ],
                Inputs::Tokens => vec![InputShape::Tokens { len: 5, vocab: 7 }],
            };
            for input in inputs {
                for outputs in [1, 10] {
                    let network = spec.network(input, outputs);
                    let text =
                        serde_yaml::to_string(&ModelSpec::of(LayersSpec::of(&network))).unwrap();
                    let list = ModelSpec::from_yaml(&text).unwrap();
                    list.validate().unwrap();
                    list.check_shape(input, None).unwrap();
                    let rebuilt = list.network(input, outputs);
                    let what = format!("{} on {input:?}:\n{text}", r.name);
                    assert!(rebuilt.layers == network.layers, "{what}");
                    assert!(rebuilt.init == network.init, "{what}");
                }
            }
        }
    }

    /// Shapes, parameters and FLOPs of a small residual network worked by hand, on 3×8×8
    /// images and 3 classes.
    #[test]
    fn a_residual_list_by_hand() {
        let spec = ModelSpec::from_yaml(
            "{kind: layers, layers: [{kind: conv, channels: 4, kernel: 3, padding: 1}, \
             {kind: residual, layers: [relu, {kind: conv, channels: 4, kernel: 3, padding: 1, \
             bias: false}]}, max_pool, flatten, {kind: dropout, rate: 0.5}, \
             {kind: dense, units: 10}, relu, dense]}",
        )
        .unwrap();
        spec.validate().unwrap();
        let arch = Architecture::for_input(&spec, InputShape::Image([3, 8, 8]), 3);
        let rows: Vec<(String, String, usize, u64)> = arch
            .layer_table()
            .into_iter()
            .map(|r| (r.layer, r.output.to_string(), r.parameters, r.flops))
            .collect();
        let row = |l: &str, o: &str, p: usize, f: u64| (l.to_string(), o.to_string(), p, f);
        assert_eq!(
            rows,
            [
                // 3·4·3·3 weights + 4 biases; 2·(3·3·3·4) flops at each of 8·8 pixels.
                row("conv 3×3 3→4", "4×8×8", 112, 2 * 108 * 64),
                row("(residual", "4×8×8", 0, 0),
                row("relu", "4×8×8", 0, 0),
                row("conv 3×3 4→4", "4×8×8", 144, 2 * 144 * 64),
                row("+ residual)", "4×8×8", 0, 0),
                row("max-pool 2", "4×4×4", 0, 0),
                row("dropout 0.5", "4×4×4", 0, 0),
                // flatten adds no layer: the dense layer takes the 64 values.
                row("dense 64→10", "10", 650, 2 * 640),
                row("relu", "10", 0, 0),
                row("dense 10→3", "3", 33, 2 * 30),
            ]
        );
        assert_eq!(arch.num_params(), 112 + 144 + 650 + 33);
        assert_eq!(
            arch.flops_per_sample(),
            2 * 108 * 64 + 2 * 144 * 64 + 2 * 640 + 2 * 30
        );
    }

    /// `tanh` and `gelu` by hand: with an identity dense layer after them, the logits of x = (1,
    /// −1) are tanh(x) = ±(e² − 1)/(e² + 1), and gelu(x) = x·Φ(x) = (Φ(1), −(1 − Φ(1))), Φ(1)
    /// by Simpson's rule on the normal density (PyTorch's tanh approximation of GELU is 1.5e-4
    /// off at 1).
    #[test]
    fn tanh_and_gelu_by_hand() {
        let x = Tensor::from_slice(&[1.0f32, -1.0]).view([1, 2]);
        let logits = |activation: &str| -> Vec<f64> {
            let yaml = format!("{{kind: layers, layers: [{activation}, dense]}}");
            let arch = Architecture::for_input(
                &ModelSpec::from_yaml(&yaml).unwrap(),
                InputShape::Flat(2),
                3,
            );
            // The dense layer's weight [3, 2] (rows: the identity, then zeros) and bias [3].
            let flat = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0f32];
            let ps = arch.params(&flat);
            let z = tch::no_grad(|| arch.forward(&arch.layers(&ps), &x, &[]));
            Vec::<f32>::try_from(z.view([-1]))
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect()
        };
        let e2 = 2f64.exp();
        let tanh1 = (e2 - 1.0) / (e2 + 1.0);
        let n = 1000;
        let density = |t: f64| (-t * t / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let simpson: f64 = (0..=n)
            .map(|i| {
                let w = if i == 0 || i == n {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                w * density(i as f64 / n as f64)
            })
            .sum::<f64>()
            / (3.0 * n as f64);
        let phi1 = 0.5 + simpson;
        for (activation, want) in [
            ("tanh", [tanh1, -tanh1, 0.0]),
            ("gelu", [phi1, -(1.0 - phi1), 0.0]),
        ] {
            let got = logits(activation);
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() < 1e-6,
                    "{activation}: {got:?} against {want:?}"
                );
            }
        }
    }

    /// A layer without settings reads and writes as its kind alone; settings round-trip.
    #[test]
    fn layers_read_and_write_kinds_alone() {
        let spec: LayersSpec = serde_yaml::from_str(
            "layers: [relu, {kind: relu6}, {kind: conv, channels: 2, kernel: 3, bias: false}, \
             {kind: dense}]",
        )
        .unwrap();
        assert_eq!(spec.layers[0], LayerSpec::Relu(NoSettings {}));
        assert_eq!(spec.layers[1], LayerSpec::Relu6(NoSettings {}));
        let text = serde_yaml::to_string(&spec).unwrap();
        assert_eq!(
            text,
            "layers:\n- relu\n- relu6\n- kind: conv\n  channels: 2\n  kernel: 3\n  bias: false\n\
             - dense\ninitialisation: pytorch\n"
        );
        assert_eq!(serde_yaml::from_str::<LayersSpec>(&text).unwrap(), spec);
    }
}
