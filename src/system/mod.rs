//! Devices and network: how long computing and sending take, in simulated time.
//!
//! Durations are computed from the model's parameters and the work's size, never measured.
//! This room holds the system model only; it does not decide who trains or when.

use crate::sim::SimDuration;
use serde::{Deserialize, Serialize};

/// Device compute speed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeSpec {
    /// Training throughput of every device, in samples per second.
    #[serde(default = "d_speed")]
    pub samples_per_second: f64,
}

/// Links between server and clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency of every message, in milliseconds.
    #[serde(default = "d_latency")]
    pub latency_ms: f64,
    /// Server → client bandwidth, in megabits per second.
    #[serde(default = "d_down")]
    pub downlink_mbps: f64,
    /// Client → server bandwidth, in megabits per second.
    #[serde(default = "d_up")]
    pub uplink_mbps: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemSpec {
    #[serde(default)]
    pub compute: ComputeSpec,
    #[serde(default)]
    pub network: NetworkSpec,
}

fn d_speed() -> f64 {
    1000.0
}
fn d_latency() -> f64 {
    50.0
}
fn d_down() -> f64 {
    20.0
}
fn d_up() -> f64 {
    5.0
}

impl Default for ComputeSpec {
    fn default() -> Self {
        ComputeSpec {
            samples_per_second: d_speed(),
        }
    }
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            latency_ms: d_latency(),
            downlink_mbps: d_down(),
            uplink_mbps: d_up(),
        }
    }
}

impl SystemSpec {
    pub fn validate(&self) -> Result<(), (String, String)> {
        let positive = |path: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err((
                    path.to_string(),
                    format!("must be a positive number, got {v}"),
                ))
            }
        };
        positive(
            "compute.samples_per_second",
            self.compute.samples_per_second,
        )?;
        positive("network.downlink_mbps", self.network.downlink_mbps)?;
        positive("network.uplink_mbps", self.network.uplink_mbps)?;
        if !(self.network.latency_ms >= 0.0 && self.network.latency_ms.is_finite()) {
            return Err((
                "network.latency_ms".into(),
                format!(
                    "must be a non-negative number, got {}",
                    self.network.latency_ms
                ),
            ));
        }
        Ok(())
    }
}

/// Direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Down,
    Up,
}

/// Turns work sizes into durations. Rounds up to whole microseconds.
#[derive(Clone, Debug)]
pub struct SystemModel {
    spec: SystemSpec,
}

impl SystemModel {
    pub fn new(spec: SystemSpec) -> Self {
        SystemModel { spec }
    }

    /// Time for `client` to process `samples` training samples.
    pub fn compute_time(&self, _client: u32, samples: u64) -> SimDuration {
        micros_ceil(samples as f64 / self.spec.compute.samples_per_second * 1e6)
    }

    /// Time for a message of `bytes` to cross `link`; a message of no bytes is not sent.
    pub fn transfer_time(&self, _client: u32, link: Link, bytes: u64) -> SimDuration {
        if bytes == 0 {
            return SimDuration::ZERO;
        }
        let mbps = match link {
            Link::Down => self.spec.network.downlink_mbps,
            Link::Up => self.spec.network.uplink_mbps,
        };
        micros_ceil(self.spec.network.latency_ms * 1e3) + micros_ceil(bytes as f64 * 8.0 / mbps)
    }
}

fn micros_ceil(us: f64) -> SimDuration {
    SimDuration(us.ceil() as u64)
}

/// Bytes on the wire for `floats` f32 parameters.
pub fn payload_bytes(floats: usize) -> u64 {
    4 * floats as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_from_sizes() {
        let m = SystemModel::new(SystemSpec {
            compute: ComputeSpec {
                samples_per_second: 200.0,
            },
            network: NetworkSpec {
                latency_ms: 10.0,
                downlink_mbps: 8.0,
                uplink_mbps: 1.0,
            },
        });
        assert_eq!(m.compute_time(0, 100), SimDuration::from_millis(500));
        // 1000 bytes = 8000 bits at 8 Mbit/s = 1 ms, plus 10 ms latency.
        assert_eq!(
            m.transfer_time(0, Link::Down, 1000),
            SimDuration::from_millis(11)
        );
        assert_eq!(
            m.transfer_time(0, Link::Up, 1000),
            SimDuration::from_millis(18)
        );
        assert_eq!(m.transfer_time(0, Link::Up, 0), SimDuration::ZERO);
    }
}
