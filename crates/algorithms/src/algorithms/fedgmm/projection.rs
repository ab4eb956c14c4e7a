//! FedGMM's `projection:`: what the Gaussians model, as written and read. A fixed matrix from
//! a CSV file, the principal axes of the participants' rows, or a trained network's layer
//! output; files are read once, when the pre-flight or the run first asks, never while the
//! scenario is read.

use crate::models::{Architecture, Encoder, InputShape, Pool};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// The Gaussians' projection z = x·P (`projection:`).
#[derive(Clone, Debug, PartialEq)]
pub enum Projection {
    /// A fixed matrix from a CSV file (`projection: FILE.csv`).
    File(ProjectionFile),
    /// The `dims` principal axes of the participants' training rows (`projection: {kind:
    /// pca, dims: 48}`), fitted when the run starts.
    Pca { dims: usize },
    /// A trained network's layer output (`projection: {kind: features, ...}`).
    Features(FeaturesProjection),
}

/// `projection: {kind: features, network: {...}, classes: C, layer: K, dims: D}`: the
/// Gaussians model the output of layer K of a trained network, flattened, and with `dims`
/// its D principal axes over the participants' training rows (fitted centrally before the
/// run). The network's weights are read once, when the pre-flight or the run first asks.
#[derive(Clone, Debug)]
pub struct FeaturesProjection {
    /// The network, as a `model:` section, with its trained weights in `init: {from: FILE}`
    /// (a run's `models.safetensors` from `fedsim run --save-models`, or PyTorch's).
    pub network: crate::models::ModelSpec,
    /// The classes it was trained for (its last layer's outputs; one output for two).
    pub classes: usize,
    /// The representation is this layer's output (counted from 0, as `fedsim describe`
    /// lists a model's layers), flattened.
    pub layer: usize,
    /// How an image-shaped output becomes one value per channel: `none` (every value),
    /// `avg` or `max` over each channel's pixels (as a CNN's embedding pools its last feature
    /// maps).
    pub pool: Pool,
    /// With it, the principal axes of the representation (the paper: 48).
    pub dims: Option<usize>,
    /// The network's parameters, read for the data's input shape; shared by the clones of
    /// one scenario's settings.
    weights: Arc<OnceLock<Result<Vec<f32>, String>>>,
}

impl PartialEq for FeaturesProjection {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.network,
            self.classes,
            self.layer,
            self.pool,
            self.dims,
        ) == (
            &other.network,
            other.classes,
            other.layer,
            other.pool,
            other.dims,
        )
    }
}

/// `projection: {kind: features, ...}` as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FeaturesFields {
    kind: FeaturesKind,
    network: crate::models::ModelSpec,
    classes: usize,
    layer: usize,
    #[serde(default, skip_serializing_if = "is_default")]
    pool: Pool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dims: Option<usize>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FeaturesKind {
    Features,
}

impl FeaturesProjection {
    /// The whole network for rows of `input`.
    pub(super) fn architecture(&self, input: InputShape) -> Architecture {
        Architecture::for_input(&self.network, input, self.classes)
    }

    /// The network's parameters for `arch`, read from its file the first time they are
    /// asked for (exactly one model).
    fn weights(&self, arch: &Architecture) -> Result<&[f32], String> {
        let read = || {
            let Some(init) = &self.network.init else {
                return Err(NO_WEIGHTS.to_string());
            };
            let mut models = crate::models::read_models(&init.from, arch)?;
            match models.len() {
                1 => Ok(models.remove(0)),
                n => Err(format!(
                    "{}: holds {n} models; the projection takes one network's tensors, with \
                     plain names",
                    init.from.display()
                )),
            }
        };
        let weights = self.weights.get_or_init(read);
        weights.as_deref().map_err(Clone::clone)
    }

    /// Checks the network against rows of `input`, the layer and `dims` against it, and
    /// reads its weights; a path is below `projection`.
    pub(super) fn check(&self, input: InputShape) -> Result<(), crate::settings::FieldError> {
        let at = |field: &str, m: String| crate::settings::FieldError::new(field.into(), m);
        self.network
            .check_input(input)
            .map_err(|m| at("network", m))?;
        self.network
            .check_shape(input, Some(self.classes))
            .map_err(|e| e.within("network"))?;
        let arch = self.architecture(input);
        let layers = arch.layer_count();
        if self.layer >= layers {
            return Err(at(
                "layer",
                format!(
                    "the network has {layers} layers, 0 to {} (`fedsim describe` lists a \
                     model's layers)",
                    layers - 1
                ),
            ));
        }
        let output = arch.cut_after(self.layer).output_shape();
        let values = match (self.pool, output.as_slice()) {
            (Pool::None, _) => output.iter().product(),
            (Pool::Avg | Pool::Max, &[channels, _, _]) => channels,
            (_, _) => {
                return Err(at(
                    "pool",
                    format!(
                        "layer {}'s output is not an image (its shape is {output:?}); pooling \
                         takes [channels, height, width]: use `pool: none`",
                        self.layer
                    ),
                ))
            }
        };
        if let Some(dims) = self.dims.filter(|&d| d > values) {
            return Err(at(
                "dims",
                format!(
                    "`dims: {dims}` is more than the {values} values of layer {}'s output; at \
                     most {values}",
                    self.layer
                ),
            ));
        }
        self.weights(&arch)
            .map(|_| ())
            .map_err(|m| at("network.init.from", m))
    }

    /// The network cut after its layer and that part's parameters, for a run over
    /// `population` (after [`FeaturesProjection::check`]).
    pub(super) fn encoder(&self, input: InputShape) -> Encoder {
        let arch = self.architecture(input);
        let params = self
            .weights(&arch)
            .expect("a run reads its projection's network before it starts (check_data)");
        let cut = arch.cut_after(self.layer);
        let params = params[..cut.num_params()].to_vec();
        Encoder::new(cut, params, self.pool)
    }
}

pub(super) const NO_WEIGHTS: &str = "the network's trained weights are needed: `init: {from: \
     FILE.safetensors}` (a run's `models.safetensors`, `fedsim run --save-models`)";

/// A fixed projection matrix P (input features × z dimensions) from a CSV file. The scenario
/// holds its path (and writes it back); the file is read once, when the pre-flight or the run
/// first asks for it, never while the scenario is read.
#[derive(Clone, Debug)]
pub struct ProjectionFile {
    pub path: String,
    /// Shared by the clones of one scenario's settings.
    matrix: Arc<OnceLock<Result<Matrix, String>>>,
}

/// The numbers of a projection file.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    /// Row-major.
    pub values: Vec<f64>,
}

impl PartialEq for ProjectionFile {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl ProjectionFile {
    pub fn new(path: String) -> ProjectionFile {
        ProjectionFile {
            path,
            matrix: Arc::default(),
        }
    }

    /// The matrix, read from the file the first time it is asked for.
    pub fn matrix(&self) -> Result<&Matrix, String> {
        self.matrix
            .get_or_init(|| Matrix::read(&self.path))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The matrix of a run, whose pre-flight and start have read it.
    pub(super) fn read_already(&self) -> &Matrix {
        self.matrix()
            .expect("a run reads its projection before it starts (check_data)")
    }
}

impl Matrix {
    /// Reads `path`: numbers separated by commas (or spaces), one line per row.
    pub fn read(path: &str) -> Result<Matrix, String> {
        let text = crate::io::read_text(
            std::path::Path::new(path),
            crate::io::SizeLimit::memory("a projection matrix"),
        )
        .map_err(|e| format!("cannot read `{path}`: {e}"))?;
        let mut values = Vec::new();
        let (mut rows, mut cols) = (0, 0);
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let row: Vec<f64> = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .map(|t| {
                    t.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| {
                            format!("`{path}` line {}: `{t}` is not a finite number", i + 1)
                        })
                })
                .collect::<Result<_, _>>()?;
            if rows == 0 {
                cols = row.len();
            } else if row.len() != cols {
                return Err(format!(
                    "`{path}` line {}: {} values, the first row has {cols}",
                    i + 1,
                    row.len()
                ));
            }
            rows += 1;
            values.extend(row);
        }
        if rows == 0 || cols == 0 {
            return Err(format!("`{path}` holds no matrix"));
        }
        Ok(Matrix { rows, cols, values })
    }
}

impl schemars::JsonSchema for Projection {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Projection".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let network = generator
            .subschema_for::<crate::models::ModelSpec>()
            .to_value();
        schemars::json_schema!({
            "anyOf": [
                {
                    "type": "string",
                    "description": "A CSV file of a matrix with one row per input feature (no header).",
                },
                {
                    "type": "object",
                    "description": "The principal axes of the participants' training rows.",
                    "properties": {
                        "kind": {"const": "pca"},
                        "dims": {"type": "integer", "minimum": 1, "description": "How many axes (the paper: 48)."},
                    },
                    "required": ["kind", "dims"],
                    "additionalProperties": false,
                },
                {
                    "type": "object",
                    "description": "A trained network's layer output, flattened (and with `dims`, its principal axes over the participants' training rows).",
                    "properties": {
                        "kind": {"const": "features"},
                        "network": network,
                        "classes": {"type": "integer", "minimum": 2, "description": "The classes the network was trained for (its last layer's outputs; one output for two)."},
                        "layer": {"type": "integer", "minimum": 0, "description": "The representation is this layer's output (counted from 0, as `fedsim describe` lists a model's layers)."},
                        "pool": {"enum": ["none", "avg", "max"], "default": "none", "description": "How an image-shaped output becomes one value per channel: every value (`none`), each channel's mean (`avg`) or maximum (`max`) over its pixels."},
                        "dims": {"type": "integer", "minimum": 1, "description": "How many principal axes of the representation to keep (left out: all of it)."},
                    },
                    "required": ["kind", "network", "classes", "layer"],
                    "additionalProperties": false,
                },
            ],
        })
    }
}

/// `projection: {kind: pca, dims: N}` as written.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PcaFields {
    kind: PcaKind,
    dims: usize,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PcaKind {
    Pca,
}

impl Serialize for Projection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Projection::File(f) => s.serialize_str(&f.path),
            Projection::Pca { dims } => PcaFields {
                kind: PcaKind::Pca,
                dims: *dims,
            }
            .serialize(s),
            Projection::Features(f) => FeaturesFields {
                kind: FeaturesKind::Features,
                network: f.network.clone(),
                classes: f.classes,
                layer: f.layer,
                pool: f.pool,
                dims: f.dims,
            }
            .serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Projection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::String(path) => Ok(Projection::File(ProjectionFile::new(path))),
            serde_yaml::Value::Mapping(m)
                if m.get("kind").and_then(|k| k.as_str()) == Some("features") =>
            {
                serde_yaml::from_value::<FeaturesFields>(serde_yaml::Value::Mapping(m))
                    .map(|f| {
                        Projection::Features(FeaturesProjection {
                            network: f.network,
                            classes: f.classes,
                            layer: f.layer,
                            pool: f.pool,
                            dims: f.dims,
                            weights: Arc::default(),
                        })
                    })
                    .map_err(|e| {
                        D::Error::custom(format!(
                            "{e} (`{{kind: features, network: {{...}}, classes: C, layer: K, \
                             dims: D}}`)"
                        ))
                    })
            }
            v @ serde_yaml::Value::Mapping(_) => serde_yaml::from_value::<PcaFields>(v)
                .map(|f| Projection::Pca { dims: f.dims })
                .map_err(|e| D::Error::custom(format!("{e} (`{{kind: pca, dims: N}}`)"))),
            _ => Err(D::Error::custom(
                "expected a CSV file's path, `{kind: pca, dims: N}` or `{kind: features, ...}`",
            )),
        }
    }
}
