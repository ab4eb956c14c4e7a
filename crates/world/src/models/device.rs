//! Where cohorts train (`training.device`): the CPU, or CUDA GPUs with the data set's rows
//! resident there.
//!
//! A cohort's shards are placed on the resolved devices by shard index alone
//! ([`Placement::device_of`]), never by which device is free first, so which GPU trains which
//! clients depends only on the scenario. This room must not choose a device by load or
//! timing, nor use libtorch's global random generator.

use super::precision::PrecisionLease;
use crate::data::SplitView;
use crate::settings::Precision;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use tch::{Device, Tensor};

/// What the scenario asks for: `cpu` (the default), `cuda` (every visible GPU), `cuda:N`
/// (GPU N), or `auto` (every visible GPU, the CPU where there is none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Auto,
    /// `None`: every visible GPU.
    Cuda(Option<usize>),
}

pub const DEVICE_ALLOWED: &str = "`cpu`, `cuda` (every visible GPU), `cuda:N` or `auto`";

impl schemars::JsonSchema for DeviceChoice {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DeviceChoice".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(cpu|auto|cuda(:[0-9]+)?)$",
            "description": format!("Where cohorts train: {DEVICE_ALLOWED}."),
            "default": "cpu",
        })
    }
}

impl DeviceChoice {
    pub fn is_cpu(&self) -> bool {
        *self == DeviceChoice::Cpu
    }

    /// The devices cohorts are placed on, given `visible` CUDA devices; an error says why a
    /// GPU asked for cannot be had.
    pub fn resolve(&self, visible: usize) -> Result<Placement, String> {
        let gpus = |n: usize| (0..n).map(Device::Cuda).collect();
        let devices = match *self {
            DeviceChoice::Cpu => vec![Device::Cpu],
            DeviceChoice::Auto if visible == 0 => vec![Device::Cpu],
            DeviceChoice::Auto => gpus(visible),
            DeviceChoice::Cuda(_) if visible == 0 => {
                return Err(format!(
                    "`{self}` asks for a GPU, but libtorch sees no CUDA device: on a GPU machine \
                     set up with `FEDSIM_CUDA=1 bash scripts/setup.sh`; otherwise use `cpu` or \
                     `auto`"
                ))
            }
            DeviceChoice::Cuda(None) => gpus(visible),
            DeviceChoice::Cuda(Some(n)) if n >= visible => {
                return Err(format!(
                    "`{self}`: libtorch sees {visible} CUDA device(s), numbered from 0"
                ))
            }
            DeviceChoice::Cuda(Some(n)) => vec![Device::Cuda(n)],
        };
        Ok(Placement { devices })
    }

    /// [`DeviceChoice::resolve`] with the CUDA devices libtorch sees on this machine.
    pub fn resolve_here(&self) -> Result<Placement, String> {
        let visible = match self {
            DeviceChoice::Cpu => 0,
            _ => tch::Cuda::device_count().max(0) as usize,
        };
        self.resolve(visible)
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Cpu => f.write_str("cpu"),
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Cuda(None) => f.write_str("cuda"),
            DeviceChoice::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected {DEVICE_ALLOWED}, got `{s}`");
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "auto" => Ok(DeviceChoice::Auto),
            "cuda" => Ok(DeviceChoice::Cuda(None)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceChoice::Cuda(Some(n))),
                _ => Err(bad()),
            },
        }
    }
}

impl TryFrom<String> for DeviceChoice {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<DeviceChoice> for String {
    fn from(d: DeviceChoice) -> String {
        d.to_string()
    }
}

/// The devices a run's cohorts train on, resolved once when the scenario is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    devices: Vec<Device>,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            devices: vec![Device::Cpu],
        }
    }
}

impl Placement {
    /// The device of a cohort's `shard`-th shard: the devices in turn.
    pub fn device_of(&self, shard: usize) -> Device {
        self.devices[shard % self.devices.len()]
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Whether cohorts go to GPUs.
    pub fn on_gpu(&self) -> bool {
        self.devices.iter().any(|d| d.is_cuda())
    }

    /// Sets what CUDA determinism needs before the first CUDA call: cuBLAS's fixed workspace
    /// (`CUBLAS_WORKSPACE_CONFIG=:4096:8` unless set), cuDNN without benchmarking (which
    /// picks kernels by timing) and with deterministic algorithms only (convolutions' backward
    /// passes have kernels that add with atomics); and full f32 products, no TF32 (PyTorch
    /// lets cuDNN's convolutions round their inputs to 10-bit mantissas by default), so that
    /// GPU results differ from the CPU's by float rounding only. Nothing on the CPU.
    ///
    /// The binary sets the cuBLAS variable first thing ([`set_cublas_workspace`]), while it
    /// has one thread; here it is set only if still unset (a library user's process), which
    /// is racy only against threads reading the environment at that moment.
    ///
    /// Under `training.precision: tf32` TF32 is switched on instead. That switch is
    /// libtorch's, for the whole process: the run holds it until the lease is dropped, and a
    /// run of the same process that needs the other setting waits ([`PrecisionLease`]).
    pub fn prepare(&self, precision: Precision) -> PrecisionLease {
        if !self.on_gpu() {
            return PrecisionLease::none();
        }
        set_cublas_workspace();
        tch::Cuda::cudnn_set_benchmark(false);
        set_deterministic_cudnn(true);
        PrecisionLease::gpu(precision, set_tf32)
    }
}

/// `CUBLAS_WORKSPACE_CONFIG=:4096:8` unless it is set: cuBLAS then picks the same reduction
/// order on every call (NVIDIA's condition for reproducible results). Call it before other
/// threads exist where possible (the binary does, first thing): setting the environment
/// races with threads that read it.
pub fn set_cublas_workspace() {
    if std::env::var_os("CUBLAS_WORKSPACE_CONFIG").is_none() {
        std::env::set_var("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    }
}

// libtorch's global context, which tch 0.26 does not expose for cuDNN determinism: the C++
// methods by their (Itanium ABI) names in `libtorch_cpu`, which every build links. A method
// takes its object first.
extern "C" {
    #[link_name = "_ZN2at13globalContextEv"]
    fn at_global_context() -> *mut std::ffi::c_void;
    #[link_name = "_ZN2at7Context21setDeterministicCuDNNEb"]
    fn at_context_set_deterministic_cudnn(context: *mut std::ffi::c_void, on: bool);
    #[cfg(test)]
    #[link_name = "_ZNK2at7Context18deterministicCuDNNEv"]
    fn at_context_deterministic_cudnn(context: *const std::ffi::c_void) -> bool;
    #[link_name = "_ZN2at7Context17setAllowTF32CuDNNEb"]
    fn at_context_set_allow_tf32_cudnn(context: *mut std::ffi::c_void, on: bool);
    #[link_name = "_ZN2at7Context18setAllowTF32CuBLASEb"]
    fn at_context_set_allow_tf32_cublas(context: *mut std::ffi::c_void, on: bool);
    #[cfg(test)]
    #[link_name = "_ZNK2at7Context15allowTF32CuBLASEv"]
    fn at_context_allow_tf32_cublas(context: *const std::ffi::c_void) -> bool;
}

/// PyTorch's `torch.backends.cudnn.allow_tf32 = on` and `torch.backends.cuda.matmul.allow_tf32
/// = on`.
fn set_tf32(on: bool) {
    // SAFETY: as in `set_deterministic_cudnn`.
    unsafe {
        at_context_set_allow_tf32_cudnn(at_global_context(), on);
        at_context_set_allow_tf32_cublas(at_global_context(), on);
    }
}

/// PyTorch's `torch.backends.cudnn.deterministic = on`.
pub fn set_deterministic_cudnn(on: bool) {
    // SAFETY: `globalContext()` returns libtorch's context, which lives as long as the process;
    // the setter only stores a flag.
    unsafe { at_context_set_deterministic_cudnn(at_global_context(), on) }
}

/// Whether cuDNN is held to deterministic algorithms.
#[cfg(test)]
fn deterministic_cudnn() -> bool {
    // SAFETY: as in `set_deterministic_cudnn`; the getter only reads a flag.
    unsafe { at_context_deterministic_cudnn(at_global_context()) }
}

/// A data set's rows held on a device (uploaded once per run and device): features `[N, d]`
/// (f32) and labels `[N]` (i64), for stacked steps to gather their minibatches from there.
pub struct DeviceRows {
    pub x: Tensor,
    pub y: Tensor,
}

impl DeviceRows {
    pub fn upload(rows: &SplitView<'_>, device: Device) -> DeviceRows {
        let (n, d) = (rows.len() as i64, rows.dim as i64);
        let bytes = 4 * rows.features.len() + 8 * rows.labels.len();
        super::profile::crossed(super::profile::Crossing::RowsIn, bytes);
        DeviceRows {
            x: Tensor::from_slice(rows.features)
                .view([n, d])
                .to_device(device),
            y: Tensor::from_slice(rows.labels).to_device(device),
        }
    }

    pub fn device(&self) -> Device {
        self.x.device()
    }

    /// Another handle on the same tensors.
    pub fn share(&self) -> DeviceRows {
        DeviceRows {
            x: self.x.shallow_clone(),
            y: self.y.shallow_clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_read_write_and_resolve() {
        for (text, choice) in [
            ("cpu", DeviceChoice::Cpu),
            ("auto", DeviceChoice::Auto),
            ("cuda", DeviceChoice::Cuda(None)),
            ("cuda:1", DeviceChoice::Cuda(Some(1))),
        ] {
            assert_eq!(text.parse::<DeviceChoice>().unwrap(), choice);
            assert_eq!(choice.to_string(), text);
        }
        for bad in ["gpu", "cuda:", "cuda:x", "CPU", "cuda:-1"] {
            let e = bad.parse::<DeviceChoice>().unwrap_err();
            assert!(e.contains("`cuda:N`") && e.contains(bad), "{e}");
        }
        let cpu = vec![Device::Cpu];
        assert_eq!(DeviceChoice::Auto.resolve(0).unwrap().devices(), cpu);
        assert_eq!(DeviceChoice::Cpu.resolve(4).unwrap().devices(), cpu);
        let two = DeviceChoice::Auto.resolve(2).unwrap();
        assert_eq!(two.devices(), [Device::Cuda(0), Device::Cuda(1)]);
        assert_eq!(DeviceChoice::Cuda(None).resolve(2).unwrap(), two);
        // Shards take the devices in turn, whatever is free.
        let shards: Vec<Device> = (0..5).map(|s| two.device_of(s)).collect();
        assert_eq!(
            shards,
            [0, 1, 0, 1, 0].map(Device::Cuda).to_vec(),
            "placement by shard index"
        );
        assert_eq!(
            DeviceChoice::Cuda(Some(1)).resolve(2).unwrap().devices(),
            [Device::Cuda(1)]
        );
        let e = DeviceChoice::Cuda(None).resolve(0).unwrap_err();
        assert!(
            e.contains("no CUDA device") && e.contains("FEDSIM_CUDA=1"),
            "{e}"
        );
        let e = DeviceChoice::Cuda(Some(2)).resolve(2).unwrap_err();
        assert!(e.contains("sees 2 CUDA device(s)"), "{e}");
    }

    #[test]
    fn cuda_settings_reach_libtorch() {
        // The flag lives in libtorch's global context (in CPU builds too): set, read back.
        set_deterministic_cudnn(true);
        assert!(deterministic_cudnn());
        set_deterministic_cudnn(false);
        assert!(!deterministic_cudnn());
        // SAFETY: as in `set_tf32`; the getter only reads a flag.
        let tf32 = || unsafe { at_context_allow_tf32_cublas(at_global_context()) };
        set_tf32(true);
        assert!(tf32());
        set_tf32(false);
        assert!(!tf32());
    }
}
