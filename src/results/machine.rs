//! `machine.yaml`: what ran a run — fedsim's version, the processor and the vector instruction
//! sets libtorch's CPU kernels choose from, the limits on those kernels set in the environment,
//! the trainer threads and the devices training ran on. On the CPU, libtorch's kernels follow the
//! processor's instruction sets, so two machines can give different floats for the same
//! scenario and seed (see "On another machine" in the determinism guarantees); this file says
//! which machine a result came from.
//!
//! This room must not read anything a result depends on, nor fail a run: a fact it cannot read
//! is written as `unknown`. The file is never compared between runs (it is not among
//! [`super::REPRODUCIBLE_FILES`]).

use crate::models::DeviceChoice;
use serde::Serialize;
use std::collections::BTreeMap;

/// The file's name in a run's folder.
pub const MACHINE_FILE: &str = "machine.yaml";

/// The environment variables that cap the instruction sets of libtorch's CPU kernels (ATen's
/// own, oneDNN's and MKL's); setting all three to AVX2 makes an AVX-512 processor give an AVX2
/// one's results.
pub const KERNEL_LIMITS: [&str; 3] = [
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
];

/// What ran a run (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Machine {
    pub fedsim: String,
    pub os: String,
    pub arch: String,
    /// The processor's model name (`/proc/cpuinfo`), or `unknown`.
    pub cpu: String,
    /// Of the vector instruction sets libtorch's x86-64 kernels choose between, those the
    /// processor has (empty elsewhere).
    pub cpu_features: Vec<String>,
    /// Each of `ATEN_CPU_CAPABILITY`, `ONEDNN_MAX_CPU_ISA` and `MKL_ENABLE_INSTRUCTIONS` set in
    /// the environment, with its value.
    pub kernel_limits: BTreeMap<String, String>,
    pub threads: usize,
    /// Where cohorts trained (`training.device` resolved): `cpu`, or the CUDA devices.
    pub devices: Vec<String>,
}

impl Machine {
    /// This machine, for a run on `threads` trainer threads that chose `device`.
    pub fn here(threads: usize, device: &DeviceChoice) -> Machine {
        let devices = match device.resolve_here() {
            Ok(placement) => placement.devices().iter().map(device_name).collect(),
            Err(_) => vec!["unknown".into()],
        };
        Machine {
            fedsim: env!("CARGO_PKG_VERSION").to_string(),
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpu: crate::io::input::system_text(std::path::Path::new("/proc/cpuinfo"))
                .and_then(|text| cpu_model(&text))
                .unwrap_or_else(|| "unknown".into()),
            cpu_features: cpu_features(),
            kernel_limits: KERNEL_LIMITS
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .collect(),
            threads,
            devices,
        }
    }

    /// The file's text: a comment saying what it is, then the fields.
    pub fn to_yaml(&self) -> String {
        let fields = serde_yaml::to_string(self).expect("plain fields always serialise");
        format!(
            "# What ran this run (not a result: never compared between runs). libtorch's CPU\n\
             # kernels follow the processor's instruction sets: see \"On another machine\" in\n\
             # the determinism guarantees.\n{fields}"
        )
    }
}

fn device_name(device: &tch::Device) -> String {
    match device {
        tch::Device::Cpu => "cpu".into(),
        tch::Device::Cuda(n) => format!("cuda:{n}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The first processor's `model name` in `/proc/cpuinfo`'s text, with its vendor, family and
/// model numbers where given (a virtual machine's model name can be as plain as "AMD EPYC").
fn cpu_model(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next()?;
    let field = |name: &str| {
        first.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let name = field("model name")?;
    let details: Vec<String> = [
        ("", "vendor_id"),
        ("family ", "cpu family"),
        ("model ", "model"),
    ]
    .into_iter()
    .filter_map(|(label, key)| field(key).map(|v| format!("{label}{v}")))
    .collect();
    Some(match details.is_empty() {
        true => name,
        false => format!("{name} ({})", details.join(", ")),
    })
}

#[cfg(target_arch = "x86_64")]
fn cpu_features() -> Vec<String> {
    let detected = [
        ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ("fma", std::arch::is_x86_feature_detected!("fma")),
        ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ("avx512bw", std::arch::is_x86_feature_detected!("avx512bw")),
        ("avx512vl", std::arch::is_x86_feature_detected!("avx512vl")),
        ("avx512dq", std::arch::is_x86_feature_detected!("avx512dq")),
    ];
    detected
        .into_iter()
        .filter(|(_, has)| *has)
        .map(|(name, _)| name.to_string())
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_features() -> Vec<String> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processor_is_the_first_ones_model_name_vendor_family_and_model() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: \
                    17\nmodel name\t: AMD EPYC\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel \
                    name\t: other\n";
        assert_eq!(
            cpu_model(text).as_deref(),
            Some("AMD EPYC (AuthenticAMD, family 25, model 17)")
        );
        assert_eq!(
            cpu_model("model name\t: Some CPU\n").as_deref(),
            Some("Some CPU")
        );
        assert_eq!(cpu_model("processor\t: 0\n\nmodel name\t: late\n"), None);
    }

    #[test]
    fn the_file_names_every_field_under_its_comment() {
        let m = Machine {
            fedsim: "1.2.3".into(),
            os: "linux".into(),
            arch: "x86_64".into(),
            cpu: "Some CPU".into(),
            cpu_features: vec!["avx2".into(), "fma".into()],
            kernel_limits: [("ATEN_CPU_CAPABILITY".to_string(), "avx2".to_string())].into(),
            threads: 2,
            devices: vec!["cpu".into()],
        };
        let text = m.to_yaml();
        assert!(text.starts_with("# What ran this run"), "{text}");
        let fields = "fedsim: 1.2.3\nos: linux\narch: x86_64\ncpu: Some CPU\ncpu_features:\n- \
                      avx2\n- fma\nkernel_limits:\n  ATEN_CPU_CAPABILITY: avx2\nthreads: 2\n\
                      devices:\n- cpu\n";
        assert!(text.ends_with(fields), "{text}");
        let parsed: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(parsed["threads"], serde_yaml::Value::from(2));
    }
}
