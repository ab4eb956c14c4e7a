//! The model families a scenario can name (`model: {kind: ...}`), one entry each in [`MODELS`].
//!
//! A model family is its file (its settings type, implementing [`ModelSettings`]: the inputs it
//! takes and the [`Network`] it is for an input shape and a number of outputs) plus one entry
//! here. Everything else — parameter shapes and initialisation, the forward pass, stacking for
//! cohorts, FLOPs and the memory estimate — follows from the layers, so a new family needs
//! nothing more. Validation and `fedsim models` read only this catalogue.

use super::{InitScheme, InputShape, Layer, ModelInit};
use crate::settings::catalogue::{catalogue, read_settings, Catalogue, Chosen, ItemSettings};
use crate::settings::FieldError;
use serde_yaml::Value;
use std::fmt;

/// The catalogue: every model family a scenario can name, in the order `fedsim models` lists
/// them. The first is the default (`model:` left out).
pub static MODELS: &[Registration] = &[
    entry::<super::dense::LinearSpec>(
        "linear",
        "logistic regression for two classes, softmax regression otherwise",
    ),
    entry::<super::dense::MlpSpec>(
        "mlp",
        "fully connected ReLU network with the given hidden widths",
    ),
    entry::<super::conv::CnnSpec>(
        "cnn",
        "the FedEM authors' FemnistCNN: two 5×5 convolutions with max-pooling, dense 2048",
    ),
    entry::<super::conv::SmallCnnSpec>(
        "small_cnn",
        "the small CNN of FedEM's App. I.1 (Keras' MNIST example), with dropout",
    ),
    entry::<super::lenet::Lenet5Spec>(
        "lenet5",
        "LeNet-5 (LeCun et al. 1998) with ReLU and max-pooling",
    ),
    entry::<super::lstm::LstmSpec>(
        "lstm",
        "embedding → stacked LSTM → dense decoder: the FedEM authors' next-character model",
    ),
    entry::<super::mobilenet::MobilenetV2Spec>(
        "mobilenet_v2",
        "MobileNet-v2 as torchvision builds it, normalisation without running statistics",
    ),
    entry::<super::layers::LayersSpec>(
        "layers",
        "the scenario's own list of layers, shapes inferred from the data",
    ),
    entry::<super::script::TorchScriptSpec>(
        "torchscript",
        "a TorchScript module (torch.jit.trace or script), trained per client",
    ),
];

/// The inputs a model family takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inputs {
    /// Any row: it is flattened.
    Any,
    /// Images `[channels, height, width]` at least `min_side` pixels high and wide.
    Images { min_side: usize },
    /// Windows of token ids.
    Tokens,
}

/// A model for one input shape: its layers in forward order, how they are initialised, and
/// what [`super::Architecture::summary`] says instead of listing them (a deep network's name).
pub struct Network {
    pub layers: Vec<Layer>,
    pub init: InitScheme,
    pub name: Option<String>,
    /// The names of its layers with parameters, by number (the k-th such layer is `k` where
    /// it has no name): a layer list's `name:` fields.
    pub names: std::collections::BTreeMap<usize, String>,
}

impl Network {
    /// Layers with PyTorch's default initialisation.
    pub fn of(layers: Vec<Layer>) -> Network {
        Network {
            layers,
            init: InitScheme::LayerDefaults,
            name: None,
            names: Default::default(),
        }
    }
}

/// A model family's settings, as its `model:` section holds them (besides `kind`).
pub trait ModelSettings: ItemSettings {
    /// The inputs it takes: checked against the data before anything is built.
    const INPUTS: Inputs;

    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Whether the family is read from a file the scenario names (a TorchScript module): its
    /// example names a file that need not exist, so tests that build every family from its
    /// example pass it over.
    const READS_FILE: bool = false;

    /// Checks the settings; a path is below `model`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// Checks the settings against rows of `input` (of the kind [`Self::INPUTS`] says) and
    /// `outputs` output units where they are known (a Parquet file's classes are known only
    /// once it is read); a path is below `model`. Where this passes with the outputs,
    /// [`Self::network`] builds.
    fn check_shape(&self, _input: InputShape, _outputs: Option<usize>) -> Result<(), FieldError> {
        Ok(())
    }

    /// The network for inputs of `input` (of the kind [`Self::INPUTS`] says) and `outputs`
    /// output units.
    fn network(&self, input: InputShape, outputs: usize) -> Network;
}

catalogue! {
    /// The catalogue of model families.
    pub struct Models {
        tag: "kind",
        example: "{kind: mlp, hidden: [64]}",
        schema: "ModelSpec",
        declared: Declared,
        items: MODELS,
    }
    /// Settings of some registered model family, their type erased.
    erases ModelSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn check_shape(&self, input: InputShape, outputs: Option<usize>) -> Result<(), FieldError>;
        fn network(&self, input: InputShape, outputs: usize) -> Network;
    }
}

/// What the catalogue declares of a model family.
pub struct Declared {
    /// The inputs it takes ([`ModelSettings::INPUTS`]).
    pub inputs: Inputs,
    /// [`ModelSettings::READS_FILE`].
    pub reads_file: bool,
}

/// The entry of the model family whose settings are `S`.
const fn entry<S: ModelSettings>(kind: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        inputs: S::INPUTS,
        reads_file: S::READS_FILE,
    };
    Registration::new::<S>(kind, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

/// The model family, as a scenario names it: `model: {kind: mlp, hidden: [64]}`, with the
/// `init` field every family has.
#[derive(Clone, PartialEq)]
pub struct ModelSpec {
    family: Chosen<Models>,
    /// `init: {from: FILE}`: the initial global models from a file instead of drawn.
    pub init: Option<ModelInit>,
}

impl ModelSpec {
    /// The family `kind` with `fields` (a mapping of its settings, without `kind`).
    pub fn parse(kind: &str, fields: Value) -> Result<ModelSpec, String> {
        // `init` is every family's; the rest are the family's own settings.
        let (fields, init) = match fields {
            Value::Mapping(mut map) => {
                let init = map.remove("init");
                (Value::Mapping(map), init)
            }
            other => (other, None),
        };
        let family = Chosen::parse(kind, fields)?;
        let init = match init {
            None | Some(Value::Null) => None,
            Some(v) => Some(read_settings::<ModelInit>(v).map_err(
                |e| match e.strip_prefix('`') {
                    Some(rest) => format!("`init.{rest}"),
                    None => format!("`init`: {e}"),
                },
            )?),
        };
        Ok(ModelSpec { family, init })
    }

    /// The registered family whose settings are `settings`.
    pub fn of<S: ModelSettings>(settings: S) -> ModelSpec {
        ModelSpec {
            family: Chosen::<Models>::of_boxed::<S>(Box::new(settings)),
            init: None,
        }
    }

    /// A model section written as YAML, e.g. `{kind: mlp, hidden: [16, 8]}`.
    pub fn from_yaml(text: &str) -> Result<ModelSpec, String> {
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    }

    pub fn kind(&self) -> &'static str {
        self.family.name()
    }

    pub fn registration(&self) -> &'static Registration {
        self.family.registration()
    }

    /// The settings as their own type, where they are of type `S`.
    pub fn settings<S: ModelSettings>(&self) -> Option<&S> {
        self.family.settings()
    }

    /// Checks the settings; an error's path is below `model`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.family.erased().validate()
    }

    /// Checks the settings against rows of `input` and a data set of `classes` classes where
    /// they are known (after [`Self::check_input`]); an error's path is below `model`.
    pub fn check_shape(&self, input: InputShape, classes: Option<usize>) -> Result<(), FieldError> {
        let outputs = classes.map(|c| if c == 2 { 1 } else { c });
        self.family.erased().check_shape(input, outputs)
    }

    /// The network for inputs of `input` and `outputs` outputs (after [`Self::check_input`]
    /// and [`Self::check_shape`]).
    pub fn network(&self, input: InputShape, outputs: usize) -> Network {
        self.family.erased().network(input, outputs)
    }

    /// Whether this model can take inputs of `shape`; the message says why not.
    pub fn check_input(&self, shape: InputShape) -> Result<(), String> {
        let name = self.kind();
        match (self.family.declared().inputs, shape) {
            (Inputs::Any, _) | (Inputs::Tokens, InputShape::Tokens { .. }) => Ok(()),
            (Inputs::Tokens, _) => Err(format!(
                "`{name}` needs token data (a text data set such as `shakespeare`)"
            )),
            (Inputs::Images { .. }, InputShape::Flat(_) | InputShape::Tokens { .. }) => {
                Err(format!(
                    "`{name}` needs image data ([channels, height, width]); this data set has \
                     flat features (a Parquet file declares its image shape with `data.shape`)"
                ))
            }
            (Inputs::Images { min_side }, InputShape::Image(image)) => {
                if image[1] < min_side || image[2] < min_side {
                    return Err(format!(
                        "`{name}` needs images of at least {min_side}×{min_side} pixels, the \
                         data has {}×{}",
                        image[1], image[2]
                    ));
                }
                Ok(())
            }
        }
    }
}

/// The first family of the catalogue (`linear`) with its defaults.
impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec::parse(MODELS[0].name, Value::Null).expect("the default model has defaults")
    }
}

// The section's traits, by hand for the `init` field every family has.
impl schemars::JsonSchema for ModelSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        Models::SCHEMA_NAME.into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let init = generator.subschema_for::<ModelInit>().to_value();
        let mut schema = Chosen::<Models>::json_schema(generator);
        if let Some(serde_json::Value::Array(items)) = schema.get_mut("oneOf") {
            for item in items {
                if let Some(serde_json::Value::Object(p)) = item.get_mut("properties") {
                    p.insert("init".into(), init.clone());
                }
            }
        }
        schema
    }
}

impl fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.family)?;
        match &self.init {
            Some(init) => write!(f, " init {init:?}"),
            None => Ok(()),
        }
    }
}

impl serde::Serialize for ModelSpec {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut section = crate::settings::catalogue::tagged(
            Models::TAG,
            self.kind(),
            &self.family.erased().fields(),
        );
        if let Some(init) = &self.init {
            section.insert(
                "init".into(),
                serde_yaml::to_value(init).unwrap_or(Value::Null),
            );
        }
        serde::Serialize::serialize(&section, serializer)
    }
}

impl<'de> serde::Deserialize<'de> for ModelSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let section = <Value as serde::Deserialize>::deserialize(deserializer)?;
        let (name, fields) =
            crate::settings::catalogue::split_tag(section, Models::TAG, Models::EXAMPLE_SECTION)
                .map_err(D::Error::custom)?;
        ModelSpec::parse(&name, fields).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family reads its example, writes it back `kind` first, reads that again, and
    /// builds a network for an input it takes.
    #[test]
    fn every_model_round_trips_and_builds() {
        assert_eq!(ModelSpec::default().kind(), "linear");
        crate::settings::catalogue::check_catalogue::<Models>(|family| {
            let r = family.registration();
            let spec = ModelSpec::from_yaml(&r.example_section())?;
            spec.validate().map_err(|e| format!("{e:?}"))?;
            if r.declared.reads_file {
                return Ok(());
            }
            let input = match r.declared.inputs {
                Inputs::Any => InputShape::Flat(6),
                Inputs::Images { min_side } => InputShape::Image([1, min_side, min_side]),
                Inputs::Tokens => InputShape::Tokens { len: 5, vocab: 7 },
            };
            spec.check_input(input)?;
            assert!(!spec.network(input, 3).layers.is_empty(), "{}", r.name);
            Ok(())
        });
    }
}
