//! `torchscript`: a TorchScript module as the model, for architectures a layer list cannot
//! say.
//!
//! ```yaml
//! model: {kind: torchscript, path: my_model.pt, flops: 2278334}
//! ```
//!
//! The module is one [`Layer::Script`]. Its parameters, in `named_parameters` order, are the
//! model's flat vector; its saved values are the initial model. Each thread that trains or
//! evaluates loads its own copy of the module and, before each forward pass, copies the
//! parameters it is given into that copy's tensors, so a job's arithmetic never depends on
//! which thread runs it. The module runs in eval mode (dropout off, batch norm with its saved
//! running statistics, never updated), and with the JIT's graph optimiser off (a profiling
//! executor rewrites the graph after a few calls, which would make a thread's results depend
//! on how many jobs it ran before).
//!
//! This room must not: stack a module (it has no `[R, …]` form: each client trains alone),
//! let a module draw from libtorch's global generator (a module whose outputs change with the
//! seed is refused at load), or keep state outside its parameters.

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InputShape, Layer};
use crate::settings::FieldError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tch::{CModule, Device, Kind, Tensor};

/// A TorchScript module saved by `torch.jit.trace` or `torch.jit.script` (and `.save`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TorchScriptSpec {
    /// The module's file (relative to the working directory). It takes a batch of rows shaped
    /// as the data's (`[B, C, H, W]` for images, `[B, d]` for flat rows, `[B, len]` token ids
    /// as int64) and returns `[B, classes]` logits (`[B, 1]` for two classes).
    pub path: PathBuf,
    /// Multiply-adds ×2 of one row's forward pass (at least 1), which the system model charges devices for
    /// (`python3 scripts/torch_weights.py script` prints it, from PyTorch's FLOP counter).
    pub flops: u64,
}

impl ModelSettings for TorchScriptSpec {
    const INPUTS: Inputs = Inputs::Any;
    const EXAMPLE: &'static str = "{path: model.pt, flops: 1000}";
    const READS_FILE: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        if self.flops == 0 {
            return Err(FieldError::new(
                "flops".into(),
                "must be at least 1: the FLOPs of one row's forward pass, which \
                 `scripts/torch_weights.py script` prints (PyTorch's FLOP counter)"
                    .into(),
            ));
        }
        Ok(())
    }

    fn check_shape(&self, input: InputShape, outputs: Option<usize>) -> Result<(), FieldError> {
        self.load(input, outputs).map(|_| ())
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let id = self
            .load(input, Some(outputs))
            .unwrap_or_else(|e| panic!("a TorchScript module is checked before it is built: {e:?}"))
            .expect("with its outputs, a module is kept");
        let name = format!("TorchScript module {}", self.path.display());
        Network {
            name: Some(name),
            ..Network::of(vec![Layer::Script { id }])
        }
    }
}

impl TorchScriptSpec {
    /// The module of `path` for rows of `input` and `outputs` outputs, loaded and checked once
    /// per file content, input and outputs. With the outputs unknown, the module is checked
    /// (any number of outputs) but not kept: no id.
    fn load(
        &self,
        input: InputShape,
        outputs: Option<usize>,
    ) -> Result<Option<ScriptId>, FieldError> {
        let at =
            |m: String| FieldError::new("path".into(), format!("{}: {m}", self.path.display()));
        let limit = crate::io::SizeLimit::memory("a TorchScript module (held in memory)");
        let bytes = crate::io::read_bytes(&self.path, limit)
            .map_err(|e| at(format!("cannot read it: {e}")))?;
        let mut scripts = SCRIPTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = scripts.iter().position(|s| {
            s.bytes == bytes
                && s.input == input
                && outputs.is_none_or(|o| s.outputs == o)
                && s.flops == self.flops
        }) {
            return Ok(Some(ScriptId(i)));
        }
        let script = Script::check(bytes, input, outputs, self.flops).map_err(at)?;
        if outputs.is_none() {
            return Ok(None);
        }
        scripts.push(Arc::new(script));
        Ok(Some(ScriptId(scripts.len() - 1)))
    }
}

/// Which loaded module a [`Layer::Script`] is: an index into this process's modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptId(usize);

/// A loaded and checked module.
pub(super) struct Script {
    /// The file's bytes, from which each thread loads its copy.
    bytes: Vec<u8>,
    input: InputShape,
    pub(super) outputs: usize,
    pub(super) flops: u64,
    /// `named_parameters`' names and shapes, in its order.
    pub(super) names: Vec<String>,
    pub(super) shapes: Vec<Vec<i64>>,
    /// The saved parameters, flat in that order: the initial model.
    pub(super) saved: Vec<f32>,
}

/// Every module this process has loaded, in load order.
static SCRIPTS: Mutex<Vec<Arc<Script>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's copy of each module, with its parameter tensors.
    static COPIES: RefCell<HashMap<usize, (CModule, Vec<Tensor>)>> = RefCell::new(HashMap::new());
}

/// The module `id` (loaded by [`TorchScriptSpec::load`]).
pub(super) fn script(id: ScriptId) -> Arc<Script> {
    SCRIPTS.lock().unwrap_or_else(|e| e.into_inner())[id.0].clone()
}

/// A copy of the module in `bytes`, in eval mode, with its parameter tensors.
fn load_copy(bytes: &[u8]) -> Result<(CModule, Vec<(String, Tensor)>), String> {
    tch::jit::set_graph_executor_optimize(false);
    let mut module = CModule::load_data_on_device(&mut &bytes[..], Device::Cpu)
        .map_err(|e| format!("not a TorchScript module ({})", first_line(&e.to_string())))?;
    module.set_eval();
    let params = module
        .named_parameters()
        .map_err(|e| format!("cannot list its parameters ({e})"))?;
    // Every parameter is trained, whatever the file says of it.
    let params = params
        .into_iter()
        .map(|(name, p)| (name, p.set_requires_grad(true)))
        .collect();
    Ok((module, params))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

impl Script {
    /// Loads the module and checks it: float32 parameters, `[B, outputs]` logits for a batch
    /// of rows of `input` (`[B, k]` for any k where `outputs` is unknown), and the same outputs
    /// whatever libtorch's global seed.
    fn check(
        bytes: Vec<u8>,
        input: InputShape,
        outputs: Option<usize>,
        flops: u64,
    ) -> Result<Script, String> {
        let (module, params) = load_copy(&bytes)?;
        if params.is_empty() {
            return Err("the module has no parameters to train".into());
        }
        let mut saved = Vec::new();
        for (name, p) in &params {
            if p.kind() != Kind::Float {
                return Err(format!(
                    "parameter `{name}` is {:?}; fedsim trains float32 parameters (PyTorch: \
                     `.float()` before tracing)",
                    p.kind()
                ));
            }
            let n = p.numel();
            let at = saved.len();
            saved.resize(at + n, 0.0);
            p.detach()
                .contiguous()
                .view(-1)
                .copy_data(&mut saved[at..], n);
        }
        // A fixed batch: small positive values for features, token 0 for token ids.
        let rows = 2;
        let values = Tensor::arange(rows * input.len() as i64, (Kind::Float, Device::Cpu));
        let values = match input {
            InputShape::Tokens { .. } => values.zeros_like(),
            _ => (values * 0.37).sin().abs(),
        };
        let x = batch_of(input, &values.view([rows, -1]));
        let run = |seed: i64| {
            tch::manual_seed(seed);
            tch::no_grad(|| module.forward_ts(&[&x])).map_err(|e| {
                format!(
                    "its forward pass fails on a batch of {} ({})",
                    describe(input, rows),
                    first_line(&e.to_string())
                )
            })
        };
        let (a, b) = (run(1)?, run(2)?);
        let got = a.size();
        let expected = [
            rows,
            outputs.map_or(got.get(1).copied().unwrap_or(1), |o| o as i64),
        ];
        if got != expected {
            return Err(format!(
                "it returns {:?} for a batch of {}; the data need {expected:?} (one logit per \
                 class, one for two classes)",
                a.size(),
                describe(input, rows)
            ));
        }
        if a.kind() != Kind::Float {
            return Err(format!(
                "it returns {:?} logits; fedsim needs float32",
                a.kind()
            ));
        }
        if !a.equal(&b) {
            return Err(
                "its outputs change with libtorch's global seed: it draws random numbers \
                        in eval mode, which would make runs irreproducible; trace it without \
                        them (dropout is off in eval mode), or write it as a layer list, whose \
                        dropout draws from the job's stream"
                    .into(),
            );
        }
        // Every parameter must receive a gradient (one the forward pass leaves out cannot be
        // trained, and autograd refuses it).
        let (_, own): (Vec<String>, Vec<Tensor>) = params
            .iter()
            .map(|(n, p)| (n.clone(), p.shallow_clone()))
            .unzip();
        let total = module
            .forward_ts(&[&x])
            .map_err(|e| format!("its forward pass fails ({})", first_line(&e.to_string())))?
            .sum(Kind::Float);
        Tensor::f_run_backward(&[&total], &own, false, false).map_err(|e| {
            format!(
                "not every parameter takes part in the forward pass, so one cannot be trained \
                 ({}); remove the unused parameters before tracing",
                first_line(&e.to_string())
            )
        })?;
        Ok(Script {
            names: params.iter().map(|(n, _)| n.clone()).collect(),
            shapes: params.iter().map(|(_, p)| p.size()).collect(),
            bytes,
            input,
            outputs: expected[1] as usize,
            flops,
            saved,
        })
    }
}

/// `rows` rows of `input` in words: `2 rows of 1×28×28`.
fn describe(input: InputShape, rows: i64) -> String {
    match input {
        InputShape::Flat(d) => format!("{rows} rows of {d} features"),
        InputShape::Image([c, h, w]) => format!("{rows} images of {c}×{h}×{w}"),
        InputShape::Tokens { len, .. } => format!("{rows} windows of {len} tokens"),
    }
}

/// Flat rows `[B, len]` as the module takes them.
fn batch_of(input: InputShape, x: &Tensor) -> Tensor {
    let b = x.size()[0];
    match input {
        InputShape::Flat(d) => x.view([b, d as i64]),
        InputShape::Image([c, h, w]) => x.view([b, c as i64, h as i64, w as i64]),
        InputShape::Tokens { len, .. } => x.view([b, len as i64]).to_kind(Kind::Int64),
    }
}

/// Runs `f` with this thread's copy of module `id`, its parameter tensors holding `params`
/// (tensors of the module's shapes, in its order).
fn with_params<T>(id: ScriptId, params: &[Tensor], f: impl FnOnce(&CModule, &[Tensor]) -> T) -> T {
    COPIES.with(|copies| {
        let mut copies = copies.borrow_mut();
        let (module, own) = copies.entry(id.0).or_insert_with(|| {
            let (module, params) = load_copy(&script(id).bytes).expect("the module loaded before");
            let own = params.into_iter().map(|(_, p)| p).collect();
            (module, own)
        });
        assert_eq!(own.len(), params.len(), "one tensor per module parameter");
        tch::no_grad(|| {
            for (o, p) in own.iter().zip(params) {
                o.shallow_clone().copy_(p);
            }
        });
        f(module, own)
    })
}

/// Logits of module `id` with parameters `params` for flat rows `x` of `input`.
pub(super) fn forward(id: ScriptId, input: InputShape, params: &[Tensor], x: &Tensor) -> Tensor {
    with_params(id, params, |module, _| {
        module
            .forward_ts(&[batch_of(input, x)])
            .expect("the module ran at load on a batch of this shape")
    })
}

/// Gradients of `loss(logits)` with respect to `params` (the loss of module `id`'s logits for
/// flat rows `x`).
pub(super) fn gradients(
    id: ScriptId,
    input: InputShape,
    params: &[Tensor],
    x: &Tensor,
    loss: impl FnOnce(&Tensor) -> Tensor,
) -> Vec<Tensor> {
    with_params(id, params, |module, own| {
        let logits = module
            .forward_ts(&[batch_of(input, x)])
            .expect("the module ran at load on a batch of this shape");
        Tensor::run_backward(&[&loss(&logits)], own, false, false)
    })
}
