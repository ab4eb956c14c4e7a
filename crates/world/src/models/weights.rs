//! Model weights in files: `model.init: {from: FILE.safetensors}` (the initial global models)
//! and `models.safetensors` (a run's final ones, `fedsim run --save-models`).
//!
//! Tensor names follow the model's layers, counting only the layers that have parameters
//! (from 0, in forward order): `K.weight` and `K.bias` for dense, convolution and normalisation
//! layers, `K.weight` for an embedding, and PyTorch's `K.weight_ih_lJ`, `K.weight_hh_lJ`,
//! `K.bias_ih_lJ`, `K.bias_hh_lJ` for layer J of an LSTM (see [`Architecture::parameter_names`]).
//! Shapes and layouts are PyTorch's (`state_dict`), values are F32. An algorithm that starts
//! several models (FedEM's components, FedGMM's classifiers) takes them as `M.` + those names,
//! model M from 0; a file of one model has the plain names. This module only reads and writes
//! files and checks them against an architecture; it never draws anything.

use super::Architecture;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Where a run's initial global models come from instead of the `model_init` stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelInit {
    /// A safetensors file (relative to the working directory) with one model's tensors, or
    /// `M.`-prefixed tensors of each model M an algorithm starts (FedEM's components): `K.weight`,
    /// `K.bias` for the K-th layer with parameters, PyTorch's shapes, F32 values (a wrong
    /// file's error lists the names and shapes the model expects).
    pub from: PathBuf,
}

/// Where an algorithm's initial global models come from (`Algorithm::init_global`, a layer
/// above): drawn from the run's `model_init` stream, or the models of a `model.init` file,
/// taken in order. Anything else an algorithm draws at the start (FedGMM's Gaussians) comes from
/// [`InitialModels::rng`] either way.
pub struct InitialModels<'a, R: rand::Rng> {
    arch: &'a Architecture,
    rng: &'a mut R,
    loaded: Option<&'a [Vec<f32>]>,
    taken: usize,
}

impl<'a, R: rand::Rng> InitialModels<'a, R> {
    /// Models drawn from `rng` (PyTorch's default initialisation of each layer).
    pub fn drawn(arch: &'a Architecture, rng: &'a mut R) -> Self {
        InitialModels {
            arch,
            rng,
            loaded: None,
            taken: 0,
        }
    }

    /// The models of a file ([`read_models`]), `loaded` if there are some, else drawn.
    pub fn from(arch: &'a Architecture, rng: &'a mut R, loaded: Option<&'a [Vec<f32>]>) -> Self {
        InitialModels {
            loaded,
            ..Self::drawn(arch, rng)
        }
    }

    /// The next model: the file's next one, or a fresh draw.
    pub fn model(&mut self) -> Vec<f32> {
        self.taken += 1;
        match self.loaded {
            Some(models) => models
                .get(self.taken - 1)
                .cloned()
                .unwrap_or_else(|| vec![0.0; self.arch.num_params()]),
            None => self.arch.init(self.rng),
        }
    }

    /// The stream for whatever else the algorithm draws at the start.
    pub fn rng(&mut self) -> &mut R {
        self.rng
    }

    /// Checks that the file held exactly the models the algorithm took.
    pub fn finish(self) -> Result<(), String> {
        match self.loaded {
            Some(models) if models.len() != self.taken => Err(format!(
                "holds {} model(s), and this algorithm starts {}: give {}",
                models.len(),
                self.taken,
                match self.taken {
                    1 => "one model's tensors, with plain names".to_string(),
                    n => format!("{n} models' tensors, named `0.…` to `{}.…`", n - 1),
                }
            )),
            _ => Ok(()),
        }
    }
}

/// The prefix of tensors that are not a model's parameters ([`models_to_safetensors`]).
const EXTRA: &str = "extra.";

/// Reads the models of `file` for `arch`: one flat parameter vector per model, in model
/// order (tensors named `extra.…` are passed over). The error names the file and the tensor,
/// with the shape expected.
pub fn read_models(file: &Path, arch: &Architecture) -> Result<Vec<Vec<f32>>, String> {
    let at = |m: String| format!("{}: {m}", file.display());
    let bytes = read_safetensors(file).map_err(at)?;
    let tensors = SafeTensors::deserialize(&bytes)
        .map_err(|e| at(format!("not a safetensors file ({e:?})")))?;
    let names = arch.parameter_names();
    let shapes = arch.parameter_tensor_shapes();
    let expected = || {
        names
            .iter()
            .zip(&shapes)
            .map(|(n, s)| format!("{n} {s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Which model each tensor belongs to: none (plain names) or the number before the dot.
    let mut models: BTreeMap<Option<usize>, HashMap<String, TensorView<'_>>> = BTreeMap::new();
    let mut listed = tensors.tensors();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in listed.into_iter().filter(|(n, _)| !n.starts_with(EXTRA)) {
        let model = if names.contains(&name) {
            None
        } else {
            match name.split_once('.') {
                Some((m, rest)) if names.iter().any(|n| n == rest) => match m.parse::<usize>() {
                    Ok(m) => Some(m),
                    Err(_) => return Err(at(unexpected(&name, &expected()))),
                },
                _ => return Err(at(unexpected(&name, &expected()))),
            }
        };
        let short = match model {
            Some(m) => name[m.to_string().len() + 1..].to_string(),
            None => name.clone(),
        };
        models.entry(model).or_default().insert(short, view);
    }
    if models.is_empty() {
        return Err(at(format!("holds no tensor; the model has {}", expected())));
    }
    if models.contains_key(&None) && models.len() > 1 {
        return Err(at(
            "mixes plain tensor names (one model) with `M.`-prefixed ones (several)".into(),
        ));
    }
    for (i, m) in models.keys().enumerate() {
        if let Some(m) = m {
            if *m != i {
                return Err(at(format!(
                    "the models are numbered 0, 1, …: model {i} is missing (found model {m})"
                )));
            }
        }
    }
    let mut out = Vec::with_capacity(models.len());
    for (model, mut tensors) in models {
        let prefix = model.map_or(String::new(), |m| format!("{m}."));
        let mut flat = Vec::with_capacity(arch.num_params());
        for (name, shape) in names.iter().zip(&shapes) {
            let view = tensors
                .remove(name)
                .ok_or_else(|| at(format!("tensor `{prefix}{name}` {shape:?} is missing")))?;
            if view.dtype() != Dtype::F32 {
                return Err(at(format!(
                    "tensor `{prefix}{name}` is {:?}; fedsim's parameters are F32 (PyTorch: \
                     `.float()` before saving)",
                    view.dtype()
                )));
            }
            let found: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if &found != shape {
                return Err(at(format!(
                    "tensor `{prefix}{name}`: expected shape {shape:?}, found {found:?}"
                )));
            }
            flat.extend(
                view.data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        out.push(flat);
    }
    Ok(out)
}

/// The most bytes a safetensors header may take (the safetensors format's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The bytes of a safetensors file, read no further than its header says the file goes: the
/// 8-byte header length and the header first (at most [`MAX_HEADER_BYTES`]), then exactly the
/// tensor data the header describes, where the file is that long (and no longer than the
/// memory this process may use).
fn read_safetensors(file: &Path) -> Result<Vec<u8>, String> {
    let not = |why: String| format!("not a safetensors file ({why})");
    let mut input = crate::io::InputFile::open(
        file,
        crate::io::SizeLimit::memory("a weights file (held in memory)"),
    )
    .map_err(|e| format!("cannot read it: {e}"))?;
    let len = input.len();
    if len < 8 {
        return Err(not(format!("{len} bytes, shorter than a header")));
    }
    let read = |input: &mut crate::io::InputFile, n: u64| {
        input
            .read_exact(n as usize)
            .map_err(|e| format!("cannot read it: {e}"))
    };
    let head = read(&mut input, 8)?;
    let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES || 8 + n > len {
        return Err(not(format!(
            "its header would take {n} bytes, and the file has {len}"
        )));
    }
    let header = read(&mut input, n)?;
    let described: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| not(format!("its header is not JSON: {e}")))?;
    let data_bytes = described
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, t)| t.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    if len - 8 - n != data_bytes {
        return Err(not(format!(
            "its header describes {} bytes of tensors, and the file holds {} after it",
            data_bytes,
            len - 8 - n
        )));
    }
    let mut bytes = head;
    bytes.extend(header);
    bytes.extend(read(&mut input, data_bytes)?);
    Ok(bytes)
}

fn unexpected(name: &str, expected: &str) -> String {
    format!(
        "unexpected tensor `{name}`: the model has {expected} (with `M.` before each name for \
         model M of several)"
    )
}

/// `models` (a run's final models: flat parameter vectors of `arch`) as a safetensors file's
/// bytes: plain names for one model, `M.`-prefixed for several, as [`read_models`] reads them.
/// A vector of another length (state an algorithm records among its models, such as FedGMM's
/// Gaussians) is written whole as the 1-D tensor `extra.I`, I its place in `models`, which
/// [`read_models`] passes over.
pub fn models_to_safetensors(arch: &Architecture, models: &[Vec<f32>]) -> Vec<u8> {
    serialize(model_tensors(arch, models, ""), None)
}

/// One client's own models in `client_models.safetensors` (see
/// [`client_models_to_safetensors`]).
pub struct ClientModels<'a> {
    pub client: u32,
    /// The evaluation (after this round) the models were last seen at.
    pub round: u32,
    /// The client's models by kind name (`personalized`, `local`, `cluster`, a peer's
    /// `global`), each one flat vector or several.
    pub models: Vec<(&'static str, &'a [Vec<f32>])>,
    /// The client's mixture weights (FedEM's π), if it has them.
    pub mixture: Option<&'a [f64]>,
}

/// Clients' own models as a safetensors file's bytes: client C's model of kind K under
/// `C.K.` + the names [`models_to_safetensors`] gives it (so the tensors under one `C.K.`
/// prefix, prefix removed, are a file `model.init` reads), its mixture weights as the F64
/// tensor `C.mixture.weights`, and the round of each client's models in the metadata: under
/// `rounds`, a JSON object from client to round (`{"0": 100, "1": 100}`, in client order).
pub fn client_models_to_safetensors(arch: &Architecture, clients: &[ClientModels<'_>]) -> Vec<u8> {
    let mut tensors = Vec::new();
    let mut rounds = Vec::new();
    for c in clients {
        for (kind, models) in &c.models {
            tensors.extend(model_tensors(
                arch,
                models,
                &format!("{}.{kind}.", c.client),
            ));
        }
        if let Some(weights) = c.mixture {
            let data = weights.iter().flat_map(|v| v.to_le_bytes()).collect();
            let name = format!("{}.mixture.weights", c.client);
            tensors.push((name, Dtype::F64, vec![weights.len()], data));
        }
        rounds.push(format!("\"{}\": {}", c.client, c.round));
    }
    // One key: the metadata is a hash map, written in no fixed order.
    let metadata = HashMap::from([("rounds".to_string(), format!("{{{}}}", rounds.join(", ")))]);
    serialize(tensors, Some(metadata))
}

/// A tensor to write: name, type, shape and little-endian bytes.
type TensorBytes = (String, Dtype, Vec<usize>, Vec<u8>);

/// The tensors of `models` (see [`models_to_safetensors`]), each name after `prefix`.
fn model_tensors(arch: &Architecture, models: &[Vec<f32>], prefix: &str) -> Vec<TensorBytes> {
    let names = arch.parameter_names();
    let shapes = arch.parameter_tensor_shapes();
    let size = arch.num_params();
    let several = models.iter().filter(|m| m.len() == size).count() > 1;
    let mut bytes = Vec::new();
    let mut m = 0;
    for (i, flat) in models.iter().enumerate() {
        if flat.len() != size {
            let data = flat.iter().flat_map(|v| v.to_le_bytes()).collect();
            bytes.push((
                format!("{prefix}{EXTRA}{i}"),
                Dtype::F32,
                vec![flat.len()],
                data,
            ));
            continue;
        }
        let model = if several {
            format!("{prefix}{m}.")
        } else {
            prefix.to_string()
        };
        m += 1;
        let mut offset = 0;
        for (name, shape) in names.iter().zip(&shapes) {
            let n = shape.iter().product::<i64>() as usize;
            let data = flat[offset..offset + n]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            offset += n;
            let shape = shape.iter().map(|&d| d as usize).collect();
            bytes.push((format!("{model}{name}"), Dtype::F32, shape, data));
        }
    }
    bytes
}

/// A safetensors file of `tensors`, with `metadata`.
fn serialize(tensors: Vec<TensorBytes>, metadata: Option<HashMap<String, String>>) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| {
            let view = TensorView::new(*dtype, shape.clone(), data)
                .expect("the data has the shape's size");
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize(views, &metadata).expect("tensors serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{InputShape, ModelSpec};

    fn arch(yaml: &str, input: InputShape, classes: usize) -> Architecture {
        Architecture::for_input(&ModelSpec::from_yaml(yaml).unwrap(), input, classes)
    }

    fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), bytes).unwrap();
        f
    }

    #[test]
    fn names_follow_the_layers_with_parameters() {
        let cnn = arch("{kind: cnn}", InputShape::Image([1, 28, 28]), 62);
        assert_eq!(
            cnn.parameter_names(),
            [
                "0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias", "3.weight",
                "3.bias"
            ]
        );
        assert_eq!(cnn.parameter_tensor_shapes()[4], [2048, 1024]);
        let lstm = arch(
            "{kind: lstm, embedding: 8, hidden: 16, layers: 2}",
            InputShape::Tokens { len: 5, vocab: 7 },
            7,
        );
        assert_eq!(
            lstm.parameter_names()[..6],
            [
                "0.weight",
                "1.weight_ih_l0",
                "1.weight_hh_l0",
                "1.bias_ih_l0",
                "1.bias_hh_l0",
                "1.weight_ih_l1"
            ]
        );
    }

    /// Every model family names as many tensors as it has, and a file written from a model
    /// reads back bit for bit: one model with plain names, several with prefixes.
    #[test]
    fn models_round_trip_through_a_file() {
        for r in crate::models::MODELS
            .iter()
            .filter(|r| !r.declared.reads_file)
        {
            let spec = ModelSpec::from_yaml(&r.example_section()).unwrap();
            let input = match r.declared.inputs {
                crate::models::Inputs::Any => InputShape::Flat(6),
                crate::models::Inputs::Images { min_side } => {
                    InputShape::Image([3, min_side.max(8), min_side.max(8)])
                }
                crate::models::Inputs::Tokens => InputShape::Tokens { len: 5, vocab: 7 },
            };
            let a = Architecture::for_input(&spec, input, 3);
            assert_eq!(a.parameter_names().len(), a.parameter_tensor_shapes().len());
            let model = |k: usize| -> Vec<f32> {
                (0..a.num_params())
                    .map(|i| (i * 7 + k) as f32 * 0.25 - 3.0)
                    .collect()
            };
            for models in [vec![model(0)], vec![model(0), model(1), model(2)]] {
                let f = write(&models_to_safetensors(&a, &models));
                assert_eq!(read_models(f.path(), &a).unwrap(), models, "{}", r.name);
            }
            // Other state among the final models (FedGMM's Gaussians) is kept, not read back.
            let with_extra = vec![model(0), vec![1.5, -2.0], model(1)];
            let f = write(&models_to_safetensors(&a, &with_extra));
            assert_eq!(read_models(f.path(), &a).unwrap(), [model(0), model(1)]);
            let bytes = std::fs::read(f.path()).unwrap();
            let file = SafeTensors::deserialize(&bytes).unwrap();
            assert_eq!(file.tensor("extra.1").unwrap().shape(), [2]);
        }
    }

    #[test]
    fn wrong_files_are_refused_with_the_tensor_and_what_was_expected() {
        let a = arch("{kind: mlp, hidden: [4]}", InputShape::Flat(3), 3);
        let other = arch("{kind: mlp, hidden: [5]}", InputShape::Flat(3), 3);
        let wrong_shape = models_to_safetensors(&other, &[vec![0.5; other.num_params()]]);
        let f = write(&wrong_shape);
        let e = read_models(f.path(), &a).unwrap_err();
        assert!(
            e.contains("tensor `0.weight`: expected shape [4, 3], found [5, 3]"),
            "{e}"
        );
        // A file of `from`'s model (all values 0.5), as `read_models` reads it.
        let file_of = |from: &Architecture| {
            write(&models_to_safetensors(
                from,
                &[vec![0.5; from.num_params()]],
            ))
        };
        let fewer = arch("{kind: linear}", InputShape::Flat(3), 3);
        let e = read_models(file_of(&fewer).path(), &a).unwrap_err();
        assert!(e.contains("expected shape [4, 3], found [3, 3]"), "{e}");
        let deeper = arch("{kind: mlp, hidden: [4, 4]}", InputShape::Flat(3), 3);
        let e = read_models(file_of(&deeper).path(), &fewer).unwrap_err();
        assert!(e.contains("unexpected tensor `1.bias`"), "{e}");
        assert!(e.contains("0.weight [3, 3], 0.bias [3]"), "{e}");
        let e = read_models(file_of(&a).path(), &deeper).unwrap_err();
        assert!(
            e.contains("tensor `1.weight`: expected shape [4, 4], found [3, 4]"),
            "{e}"
        );
        // A tensor left out.
        let data = vec![0u8; 4 * 12];
        let view = TensorView::new(Dtype::F32, vec![4, 3], &data).unwrap();
        let f = write(&safetensors::serialize([("0.weight".to_string(), view)], &None).unwrap());
        let e = read_models(f.path(), &a).unwrap_err();
        assert!(e.contains("tensor `0.bias` [4] is missing"), "{e}");
        let f = write(b"not a file of tensors");
        let e = read_models(f.path(), &a).unwrap_err();
        assert!(e.contains("not a safetensors file"), "{e}");
        let e = read_models(Path::new("/nonexistent/w.safetensors"), &a).unwrap_err();
        assert!(
            e.contains("/nonexistent/w.safetensors: cannot read it"),
            "{e}"
        );
        // F64 tensors are refused, not rounded.
        let data = vec![0u8; 8 * 12];
        let view = TensorView::new(Dtype::F64, vec![4, 3], &data).unwrap();
        let f = write(&safetensors::serialize([("0.weight".to_string(), view)], &None).unwrap());
        let e = read_models(f.path(), &a).unwrap_err();
        assert!(e.contains("tensor `0.weight` is F64"), "{e}");
        // Models numbered with a gap.
        let mut named = Vec::new();
        for (name, shape) in a.parameter_names().iter().zip(a.parameter_tensor_shapes()) {
            let n = shape.iter().product::<i64>() as usize;
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            named.push((format!("1.{name}"), shape, vec![0u8; 4 * n]));
        }
        let views: Vec<_> = named
            .iter()
            .map(|(n, s, d)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
                )
            })
            .collect();
        let f = write(&safetensors::serialize(views, &None).unwrap());
        let e = read_models(f.path(), &a).unwrap_err();
        assert!(e.contains("model 0 is missing (found model 1)"), "{e}");
    }

    /// Drawn models come from the stream as `Architecture::init` draws them; loaded ones in
    /// file order, and the count must match what the algorithm takes.
    #[test]
    fn initial_models_are_drawn_or_taken_in_order() {
        use rand::SeedableRng;
        let a = arch("{kind: linear}", InputShape::Flat(3), 3);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let mut same = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let mut init = InitialModels::drawn(&a, &mut rng);
        assert_eq!(init.model(), a.init(&mut same));
        assert_eq!(init.model(), a.init(&mut same));
        init.finish().unwrap();
        let file = vec![vec![1.0; a.num_params()], vec![2.0; a.num_params()]];
        let mut init = InitialModels::from(&a, &mut rng, Some(&file));
        assert_eq!(
            [init.model(), init.model()],
            [file[0].clone(), file[1].clone()]
        );
        init.finish().unwrap();
        let mut init = InitialModels::from(&a, &mut rng, Some(&file));
        init.model();
        let e = init.finish().unwrap_err();
        assert!(e.contains("holds 2 model(s), and this algorithm starts 1: give one model's tensors, with plain names"), "{e}");
        let mut init = InitialModels::from(&a, &mut rng, Some(&file[..1]));
        (0..3).for_each(|_| drop(init.model()));
        let e = init.finish().unwrap_err();
        assert!(
            e.contains("starts 3: give 3 models' tensors, named `0.…` to `2.…`"),
            "{e}"
        );
    }

    /// Two clients of a linear model of 2 inputs and 3 classes (`0.weight [3, 2]`, `0.bias
    /// [3]`): names under `C.K.`, a client's two components under `C.K.M.`, the mixture
    /// weights as F64, the rounds in client order; a client's tensors with their prefix
    /// removed read back as its models.
    #[test]
    fn client_models_by_hand() {
        let a = arch("{kind: linear}", InputShape::Flat(2), 3);
        let one: Vec<f32> = (0..9).map(|v| v as f32).collect();
        let two: Vec<f32> = (0..9).map(|v| -(v as f32)).collect();
        let (first, second) = ([one.clone()], [one.clone(), two.clone()]);
        let clients = [
            ClientModels {
                client: 3,
                round: 10,
                models: vec![("personalized", &first[..])],
                mixture: None,
            },
            ClientModels {
                client: 12,
                round: 8,
                models: vec![("global", &second[..])],
                mixture: Some(&[0.25, 0.75]),
            },
        ];
        let bytes = client_models_to_safetensors(&a, &clients);
        let file = SafeTensors::deserialize(&bytes).unwrap();
        let mut names: Vec<&String> = file.names();
        names.sort();
        assert_eq!(
            names,
            [
                "12.global.0.0.bias",
                "12.global.0.0.weight",
                "12.global.1.0.bias",
                "12.global.1.0.weight",
                "12.mixture.weights",
                "3.personalized.0.bias",
                "3.personalized.0.weight",
            ]
        );
        let bias = file.tensor("12.global.1.0.bias").unwrap();
        assert_eq!((bias.dtype(), bias.shape()), (Dtype::F32, &[3][..]));
        let bias: Vec<f32> = (bias.data().chunks(4))
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(bias, [-6.0, -7.0, -8.0]);
        let pi = file.tensor("12.mixture.weights").unwrap();
        assert_eq!((pi.dtype(), pi.shape()), (Dtype::F64, &[2][..]));
        assert_eq!(&pi.data()[8..], 0.75f64.to_le_bytes());
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        let rounds = &header.metadata().as_ref().unwrap()["rounds"];
        assert_eq!(rounds, r#"{"3": 10, "12": 8}"#);

        let own: Vec<(String, TensorView<'_>)> = (file.tensors().into_iter())
            .filter_map(|(n, t)| Some((n.strip_prefix("12.global.")?.to_string(), t)))
            .collect();
        let f = write(&safetensors::serialize(own, &None).unwrap());
        assert_eq!(read_models(f.path(), &a).unwrap(), [one, two]);
    }
}
