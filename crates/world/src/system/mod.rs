//! Devices, network and availability: how long computing and sending take, and when a client
//! is online, in simulated time.
//!
//! Every per-client quantity is drawn once from the client's own seeded stream (or read from a
//! file); per-job variation (jitter, dropouts) is drawn from `(client, purpose, job)`. Durations
//! come from these parameters and the work's size, never from a clock. This room holds the
//! system model only; it does not decide who trains or when (that is the server's policy).

mod availability;
mod dist;
pub mod secagg;

pub use availability::{AvailabilityModel, Intervals, OnOff};
pub use dist::{Dist, DrawnDist, Quantity, CLOCK_SPAN};

use crate::data::MixtureTruth;
use crate::models::LocalWork;
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree, SimDuration, SimTime};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("system.{field}: {message}")]
    Spec { field: String, message: String },
    #[error(
        "{what} takes {} s of simulated time, more than the virtual clock counts (at most \
         4.6e12 s, about 146 000 years); check the numbers it comes from",
        crate::settings::number(*secs)
    )]
    Clock { what: String, secs: f64 },
}

impl From<SystemError> for crate::sim::SimError {
    fn from(e: SystemError) -> Self {
        crate::sim::SimError::Model(Box::new(e))
    }
}

/// `secs` of `what` as a duration the virtual clock counts, or the error that names `what`.
pub fn duration(secs: f64, what: impl FnOnce() -> String) -> Result<SimDuration, SystemError> {
    SimDuration::try_from_secs(secs).ok_or_else(|| SystemError::Clock { what: what(), secs })
}

impl From<crate::io::FileError> for SystemError {
    fn from(e: crate::io::FileError) -> Self {
        SystemError::File {
            path: e.path,
            message: e.message,
        }
    }
}

/// Device compute speed. Give `samples_per_second`, `seconds_per_batch` or `flops_per_second`
/// (default: 1000 samples per second for every device).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComputeSpec {
    /// Training throughput, in samples per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_second: Option<Dist>,
    /// Seconds per minibatch of `training.batch_size` samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_batch: Option<Dist>,
    /// Floating-point operations per second: a training sample costs three forward passes of
    /// the model (its real count, as `fedsim describe` prints it), so a CNN costs more than a
    /// linear model on the same device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_per_second: Option<Dist>,
    /// σ of a per-job lognormal factor (median 1) on compute time; 0 for none.
    #[serde(default)]
    pub jitter: f64,
    /// Hand the drawn speeds out so that the clients with the largest share of this mixture
    /// component get the slowest devices (needs data with known mixture weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest_to_component: Option<usize>,
}

/// Links between server and clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency of every message, in milliseconds.
    #[serde(default = "d_latency")]
    pub latency_ms: Dist,
    /// Server → client bandwidth, in megabits per second.
    #[serde(default = "d_down")]
    pub downlink_mbps: Dist,
    /// Client → server bandwidth, in megabits per second.
    #[serde(default = "d_up")]
    pub uplink_mbps: Dist,
}

/// When clients are online.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AvailabilitySpec {
    Always {},
    /// On/off two-state Markov process with exponential durations of these means.
    Markov {
        /// The mean of the exponential online durations, in seconds.
        mean_online_s: f64,
        /// The mean of the exponential offline durations, in seconds.
        mean_offline_s: f64,
    },
    /// Our CSV of online intervals: `client,start_s,end_s` (a client without rows is never
    /// online), repeating every `period_s` if given.
    Csv {
        /// The file, relative to the working directory.
        path: PathBuf,
        /// The intervals repeat with this period, in seconds [default: no repetition].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        period_s: Option<f64>,
    },
    /// FedScale's `client_behave_trace` pickle.
    Fedscale {
        path: PathBuf,
    },
    /// Each client's availability class from a population file (CSV or Parquet with a
    /// `client` column and `column`, default `availability`), each class always online or an
    /// on/off Markov chain.
    Classes {
        /// The file, relative to the working directory.
        path: PathBuf,
        /// The column of each client's class name.
        #[serde(default = "d_class_column")]
        column: String,
        /// How each class named in the file comes and goes.
        classes: BTreeMap<String, AvailabilityClass>,
    },
}

impl Default for AvailabilitySpec {
    /// Every client always online.
    fn default() -> Self {
        AvailabilitySpec::Always {}
    }
}

/// How the clients of one availability class come and go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AvailabilityClass {
    Always {},
    Markov {
        /// The mean of the exponential online durations, in seconds.
        mean_online_s: f64,
        /// The mean of the exponential offline durations, in seconds.
        mean_offline_s: f64,
    },
}

/// How much of the planned local work a training job does: a fraction f in (0, 1] of
/// `training.local_epochs` E (⌈f·E⌉ epochs) or of `training.local_steps` S (⌈f·S⌉ steps), at
/// least one. Uniform f on [0.2, 1] with 5 epochs gives FedNova's E ∈ {2, 3, 4, 5}. Compute
/// time counts the work done; a job that does less is not late for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalWorkSpec {
    /// The fraction f: a number, `dist: uniform` on [low, high], or (with `per: client`)
    /// `dist: file`.
    pub fraction: Dist,
    /// Whether f is drawn anew for each job (`job`, the default) or once for each client
    /// (`client`: its lasting capacity).
    #[serde(default)]
    pub per: WorkDrawnPer,
}

/// How often a client's [`LocalWorkSpec::fraction`] is drawn.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkDrawnPer {
    #[default]
    Job,
    Client,
}

impl LocalWorkSpec {
    /// Checks the fraction's law ([`WORK_FRACTION`]); an error's path is below `local_work`.
    fn validate(&self) -> Result<(), FieldError> {
        let refused = |message: &str| Err(FieldError::new("fraction".into(), message.into()));
        match (&self.fraction, self.per) {
            (Dist::Drawn(DrawnDist::File { .. }), WorkDrawnPer::Job) => {
                refused("a file holds one value per client: give `per: client` with it")
            }
            (Dist::Drawn(DrawnDist::Lognormal { .. }), _) => refused(
                "a fraction is a number in (0, 1], `dist: uniform` within (0, 1], or `dist: \
                 file` (with `per: client`); a lognormal is not bounded by 1",
            ),
            (fraction, _) => fraction
                .validate(WORK_FRACTION)
                .map_err(|e| e.within("fraction")),
        }
    }
}

/// Each job's fraction of its planned local work, drawn for one run.
enum WorkFractions {
    /// Drawn once per client.
    PerClient(Vec<f64>),
    /// Uniform on [low, high] (a constant where they are equal), drawn for each job from
    /// `(client, "local_work", job)`.
    PerJob { low: f64, high: f64 },
}

fn d_class_column() -> String {
    "availability".into()
}

/// Checks Markov means: each a positive number of seconds; errors name the field below `at`.
fn check_means(at: &str, online: f64, offline: f64) -> Result<(), FieldError> {
    for (name, v) in [("mean_online_s", online), ("mean_offline_s", offline)] {
        FieldError::seconds(&format!("{at}.{name}"), v)?;
    }
    Ok(())
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SystemSpec {
    /// How fast devices train.
    #[serde(default)]
    pub compute: ComputeSpec,
    /// How long transfers take.
    #[serde(default)]
    pub network: NetworkSpec,
    /// When clients are online.
    #[serde(default)]
    pub availability: AvailabilitySpec,
    /// Probability that a client drops out during a training job (its update never arrives).
    #[serde(default)]
    pub dropout: f64,
    /// Jobs that do only part of the planned local work (heterogeneous local work, as in
    /// FedNova's and FedProx's experiments) [default: every job does all of it].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_work: Option<LocalWorkSpec>,
    /// FedScale's `client_device_capacity` pickle: sets every client's compute speed
    /// (1000 / (3 · computation) samples per second, FedScale's factor 3 for a training pass)
    /// and both bandwidths (communication kbit/s); replaces `compute` speeds and the
    /// bandwidths of `network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fedscale_devices: Option<PathBuf>,
}

fn d_latency() -> Dist {
    Dist::Constant(50.0)
}
fn d_down() -> Dist {
    Dist::Constant(20.0)
}
fn d_up() -> Dist {
    Dist::Constant(5.0)
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
    /// Checks parameters (files are read when the model is built); an error's path is below
    /// `system`.
    pub fn validate(&self) -> Result<(), FieldError> {
        let at = |prefix: &'static str| move |e: FieldError| e.within(prefix);
        let c = &self.compute;
        let speeds = [
            c.samples_per_second.is_some(),
            c.seconds_per_batch.is_some(),
            c.flops_per_second.is_some(),
        ];
        if speeds.iter().filter(|&&given| given).count() > 1 {
            return Err(FieldError::new(
                "compute".into(),
                "give one of `samples_per_second`, `seconds_per_batch` and `flops_per_second`"
                    .into(),
            ));
        }
        if let Some(d) = &c.flops_per_second {
            d.validate(FLOPS_PER_SECOND)
                .map_err(at(FLOPS_PER_SECOND.field))?;
        }
        if let Some(d) = &c.samples_per_second {
            d.validate(SAMPLES_PER_SECOND)
                .map_err(at(SAMPLES_PER_SECOND.field))?;
        }
        if let Some(d) = &c.seconds_per_batch {
            d.validate(SECONDS_PER_BATCH)
                .map_err(at(SECONDS_PER_BATCH.field))?;
        }
        if !(c.jitter >= 0.0 && c.jitter.is_finite()) {
            return Err(FieldError::new(
                "compute.jitter".into(),
                format!("must be ≥ 0, got {}", c.jitter),
            ));
        }
        for (dist, quantity) in [
            (&self.network.latency_ms, LATENCY_MS),
            (&self.network.downlink_mbps, DOWNLINK_MBPS),
            (&self.network.uplink_mbps, UPLINK_MBPS),
        ] {
            dist.validate(quantity).map_err(at(quantity.field))?;
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(FieldError::new(
                "dropout".into(),
                format!("must be in [0, 1), got {}", self.dropout),
            ));
        }
        if let Some(work) = &self.local_work {
            work.validate().map_err(at("local_work"))?;
        }
        match &self.availability {
            AvailabilitySpec::Markov {
                mean_online_s,
                mean_offline_s,
            } => check_means("availability", *mean_online_s, *mean_offline_s)?,
            AvailabilitySpec::Classes { classes, .. } => {
                if classes.is_empty() {
                    return Err(FieldError::new(
                        "availability.classes".into(),
                        "name at least one class, e.g. `{phone: {kind: markov, mean_online_s: \
                         600, mean_offline_s: 1800}, server: {kind: always}}`"
                            .into(),
                    ));
                }
                if classes.len() > u16::MAX as usize + 1 {
                    return Err(FieldError::new(
                        "availability.classes".into(),
                        format!("at most 65 536 classes, got {}", classes.len()),
                    ));
                }
                for (name, class) in classes {
                    if let AvailabilityClass::Markov {
                        mean_online_s,
                        mean_offline_s,
                    } = class
                    {
                        check_means(
                            &format!("availability.classes.{name}"),
                            *mean_online_s,
                            *mean_offline_s,
                        )?;
                    }
                }
            }
            AvailabilitySpec::Csv {
                period_s: Some(p), ..
            } => FieldError::seconds("availability.period_s", *p)?,
            _ => {}
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

/// What one training sample costs: what turns a device's speed into samples per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleCost {
    /// `training.batch_size`, for `seconds_per_batch`.
    pub batch_size: usize,
    /// Floating-point operations of one training sample (three forward passes), for
    /// `flops_per_second`.
    pub training_flops: f64,
}

impl SampleCost {
    pub fn of(arch: &crate::models::Architecture, batch_size: usize) -> Self {
        SampleCost {
            batch_size,
            training_flops: 3.0 * arch.flops_per_sample() as f64,
        }
    }
}

/// Every client's device, links and availability, drawn for one run.
pub struct SystemModel {
    samples_per_second: Vec<f64>,
    jitter: f64,
    latency: Vec<SimDuration>,
    downlink_mbps: Vec<f64>,
    uplink_mbps: Vec<f64>,
    availability: AvailabilityModel,
    dropout: f64,
    local_work: Option<WorkFractions>,
    seeds: SeedTree,
}

/// The per-client quantities of `system`: each one's field, its draws' stream and the rule
/// every value meets, inline, drawn or from a file.
const SAMPLES_PER_SECOND: Quantity =
    Quantity::rate("compute.samples_per_second", "device/samples_per_second");
const SECONDS_PER_BATCH: Quantity = Quantity {
    field: "compute.seconds_per_batch",
    purpose: "device/seconds_per_batch",
    positive: true,
    most: Some((crate::settings::LONGEST_SECONDS, CLOCK_SPAN)),
};
const FLOPS_PER_SECOND: Quantity =
    Quantity::rate("compute.flops_per_second", "device/flops_per_second");
const DOWNLINK_MBPS: Quantity = Quantity::rate("network.downlink_mbps", "network/downlink");
const UPLINK_MBPS: Quantity = Quantity::rate("network.uplink_mbps", "network/uplink");
const WORK_FRACTION: Quantity = Quantity {
    field: "local_work.fraction",
    purpose: "device/local_work",
    positive: true,
    most: Some((1.0, "all of the planned work")),
};
const LATENCY_MS: Quantity = Quantity {
    field: "network.latency_ms",
    purpose: "network/latency",
    positive: false,
    most: Some((crate::settings::LONGEST_SECONDS * 1e3, CLOCK_SPAN)),
};

impl SystemModel {
    /// Draws (or reads) every client's parameters. `cost` converts seconds per batch and
    /// FLOP/s into samples per second; `truth` is needed by `compute.slowest_to_component`.
    pub fn build(
        spec: &SystemSpec,
        seeds: &SeedTree,
        clients: usize,
        cost: SampleCost,
        truth: Option<&MixtureTruth>,
    ) -> Result<SystemModel, SystemError> {
        let c = &spec.compute;
        let mut speed = match (
            &c.samples_per_second,
            &c.seconds_per_batch,
            &c.flops_per_second,
        ) {
            (_, Some(spb), _) => spb
                .per_client(seeds, SECONDS_PER_BATCH, clients)?
                .into_iter()
                .map(|s| cost.batch_size as f64 / s)
                .collect(),
            (_, _, Some(fps)) => fps
                .per_client(seeds, FLOPS_PER_SECOND, clients)?
                .into_iter()
                .map(|f| f / cost.training_flops.max(1.0))
                .collect(),
            (Some(sps), None, None) => sps.per_client(seeds, SAMPLES_PER_SECOND, clients)?,
            (None, None, None) => vec![1000.0; clients],
        };
        let net = &spec.network;
        let mut downlink_mbps = net
            .downlink_mbps
            .per_client(seeds, DOWNLINK_MBPS, clients)?;
        let mut uplink_mbps = net.uplink_mbps.per_client(seeds, UPLINK_MBPS, clients)?;
        if let Some(path) = &spec.fedscale_devices {
            for (c, d) in crate::io::population::fedscale_devices(path, clients)?
                .into_iter()
                .enumerate()
            {
                speed[c] = 1000.0 / (3.0 * d.computation);
                downlink_mbps[c] = d.communication / 1000.0;
                uplink_mbps[c] = d.communication / 1000.0;
            }
        }
        if let Some(k) = spec.compute.slowest_to_component {
            speed = slowest_to_component(speed, truth, k)?;
        }
        let latency = net
            .latency_ms
            .per_client(seeds, LATENCY_MS, clients)?
            .into_iter()
            .enumerate()
            .map(|(c, ms)| {
                duration(ms / 1e3, || {
                    format!(
                        "client {c}'s latency (system.network.latency_ms: {} ms)",
                        crate::settings::number(ms)
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let availability = match &spec.availability {
            AvailabilitySpec::Always {} => AvailabilityModel::Always,
            AvailabilitySpec::Markov {
                mean_online_s,
                mean_offline_s,
            } => AvailabilityModel::markov(*mean_online_s, *mean_offline_s, seeds),
            AvailabilitySpec::Csv { path, period_s } => AvailabilityModel::Traces(
                crate::io::population::online_intervals(path, clients)?
                    .into_iter()
                    .map(|spans| Intervals::new(spans, *period_s))
                    .collect(),
            ),
            AvailabilitySpec::Classes {
                path,
                column,
                classes,
            } => {
                let names: Vec<&String> = classes.keys().collect();
                let class_of = crate::io::population::per_client_text(path, column, clients)?
                    .iter()
                    .enumerate()
                    .map(|(c, name)| {
                        names.binary_search(&name).map(|k| k as u16).map_err(|_| {
                            SystemError::File {
                                path: path.clone(),
                                message: format!(
                                    "client {c}: availability class `{name}` is not among \
                                     `system.availability.classes` ({})",
                                    classes.keys().cloned().collect::<Vec<_>>().join(", ")
                                ),
                            }
                        })
                    })
                    .collect::<Result<Vec<u16>, _>>()?;
                let laws = classes
                    .values()
                    .map(|class| match class {
                        AvailabilityClass::Always {} => None,
                        AvailabilityClass::Markov {
                            mean_online_s,
                            mean_offline_s,
                        } => Some(OnOff::new(*mean_online_s, *mean_offline_s)),
                    })
                    .collect();
                AvailabilityModel::classes(laws, class_of, seeds)
            }
            AvailabilitySpec::Fedscale { path } => AvailabilityModel::Traces(
                crate::io::population::fedscale_behavior(path)?
                    .iter()
                    .map(Intervals::fedscale)
                    .collect(),
            ),
        };
        let local_work = match &spec.local_work {
            None => None,
            Some(LocalWorkSpec {
                fraction,
                per: WorkDrawnPer::Client,
            }) => Some(WorkFractions::PerClient(fraction.per_client(
                seeds,
                WORK_FRACTION,
                clients,
            )?)),
            Some(LocalWorkSpec { fraction, .. }) => Some(match fraction {
                Dist::Constant(f) => WorkFractions::PerJob { low: *f, high: *f },
                Dist::Drawn(DrawnDist::Uniform { low, high }) => WorkFractions::PerJob {
                    low: *low,
                    high: *high,
                },
                _ => {
                    return Err(SystemError::Spec {
                        field: WORK_FRACTION.field.into(),
                        message: "drawn for each job, a fraction is a number or `dist: uniform`"
                            .into(),
                    })
                }
            }),
        };
        Ok(SystemModel {
            local_work,
            samples_per_second: speed,
            jitter: spec.compute.jitter,
            latency,
            downlink_mbps,
            uplink_mbps,
            availability,
            dropout: spec.dropout,
            seeds: *seeds,
        })
    }

    /// Client `client`'s training throughput before jitter, in samples per second.
    pub fn samples_per_second(&self, client: u32) -> f64 {
        self.samples_per_second[client as usize]
    }

    pub fn bandwidth_mbps(&self, client: u32, link: Link) -> f64 {
        match link {
            Link::Down => self.downlink_mbps[client as usize],
            Link::Up => self.uplink_mbps[client as usize],
        }
    }

    /// Time for `client` to process `samples` training samples in its job number `job`; an
    /// error where the virtual clock cannot count it.
    pub fn compute_time(
        &self,
        client: u32,
        job: u64,
        samples: u64,
    ) -> Result<SimDuration, SystemError> {
        let speed = self.samples_per_second(client);
        let mut secs = samples as f64 / speed;
        if self.jitter > 0.0 {
            let mut rng = self.seeds.rng(Entity::Client(client), "device/jitter", job);
            let z: f64 = StandardNormal.sample(&mut rng);
            secs *= (self.jitter * z).exp();
        }
        duration(secs, || {
            format!(
                "client {client}'s training ({samples} samples at {} samples per second, from \
                 system.compute)",
                crate::settings::number(speed)
            )
        })
    }

    /// Time for a message of `bytes` to cross `client`'s `link`: latency plus bytes over the
    /// bandwidth. A message of no bytes (a completion notice) takes the latency only. An error
    /// where the virtual clock cannot count it.
    pub fn transfer_time(
        &self,
        client: u32,
        link: Link,
        bytes: u64,
    ) -> Result<SimDuration, SystemError> {
        let bits = bytes as f64 * 8.0;
        let mbps = self.bandwidth_mbps(client, link);
        let transfer = duration(bits / (mbps * 1e6), || {
            let field = match link {
                Link::Down => "downlink",
                Link::Up => "uplink",
            };
            format!(
                "client {client}'s {field} transfer of {bytes} bytes at {} Mbit/s (from \
                 system.network.{field}_mbps)",
                crate::settings::number(mbps)
            )
        })?;
        Ok(self.latency[client as usize] + transfer)
    }

    /// A direct message of `bytes` from peer `from` to peer `to` (decentralized runs): the
    /// larger of the two latencies, and the time the bytes take at the slower of `from`'s
    /// uplink and `to`'s downlink, returned apart so that a sender can queue its messages on
    /// its uplink. An error where the virtual clock cannot count it.
    pub fn peer_transfer_time(
        &self,
        from: u32,
        to: u32,
        bytes: u64,
    ) -> Result<(SimDuration, SimDuration), SystemError> {
        let latency = self.latency[from as usize].max(self.latency[to as usize]);
        let mbps = self
            .bandwidth_mbps(from, Link::Up)
            .min(self.bandwidth_mbps(to, Link::Down));
        let bits = bytes as f64 * 8.0;
        let transfer = duration(bits / (mbps * 1e6), || {
            format!(
                "peer {from}'s message of {bytes} bytes to peer {to} at {} Mbit/s (from \
                 system.network)",
                crate::settings::number(mbps)
            )
        })?;
        Ok((latency, transfer))
    }

    /// If `client` is online at `t`: when it goes offline ([`SimTime::MAX`]: never).
    pub fn online_until(&self, client: u32, t: SimTime) -> Option<SimTime> {
        self.availability.online_until(client, t)
    }

    /// Whether every client is online all the time (no availability model).
    pub fn always_online(&self) -> bool {
        self.availability.is_always()
    }

    /// The first time at or after `t` when `client` is online (`None`: never again).
    pub fn next_online(&self, client: u32, t: SimTime) -> Option<SimTime> {
        self.availability.next_online(client, t)
    }

    /// Availability at a glance, for `describe` (`None`: every client is always online): how
    /// many of the `clients` are online at `t`, and the time after which none ever is again
    /// (`None`: some always come back).
    pub fn availability_outlook(&self, clients: u32, t: SimTime) -> Option<(u32, Option<SimTime>)> {
        if self.availability.is_always() {
            return None;
        }
        let online = (0..clients)
            .filter(|&c| self.online_until(c, t).is_some())
            .count() as u32;
        Some((online, self.availability.all_gone_after(clients)))
    }

    /// Whether `client` drops out of its job number `job`, and if so after which fraction of
    /// the job's compute time.
    pub fn dropout_point(&self, client: u32, job: u64) -> Option<f64> {
        if self.dropout == 0.0 {
            return None;
        }
        let mut rng = self.seeds.rng(Entity::Client(client), "dropout", job);
        (rng.gen::<f64>() < self.dropout).then(|| rng.gen::<f64>())
    }

    /// The local work `client`'s job number `job` does: `planned`, or the part of it that
    /// `system.local_work` draws (see [`LocalWorkSpec`]).
    pub fn local_work(&self, client: u32, job: u64, planned: LocalWork) -> LocalWork {
        let fraction = match self.local_work {
            None => return planned,
            Some(WorkFractions::PerClient(ref f)) => f[client as usize],
            Some(WorkFractions::PerJob { low, high }) if low == high => low,
            Some(WorkFractions::PerJob { low, high }) => {
                let mut rng = self.seeds.rng(Entity::Client(client), "local_work", job);
                low + (high - low) * rng.gen::<f64>()
            }
        };
        planned.part(fraction)
    }

    /// How long after `now` `client`'s job number `job`, of `compute`, stops short: its dropout
    /// point, or `online_until` if the client goes offline first (`None`: it runs to the end).
    /// Clients and peers both ask this.
    pub fn cut_short(
        &self,
        client: u32,
        job: u64,
        now: SimTime,
        online_until: SimTime,
        compute: SimDuration,
    ) -> Option<SimDuration> {
        let dropout = self
            .dropout_point(client, job)
            .map(|f| SimDuration::from_secs_f64_ceil(compute.as_secs_f64() * f));
        let offline = (online_until < now + compute).then(|| online_until - now);
        [dropout, offline].into_iter().flatten().min()
    }
}

/// Speeds reassigned so that the larger a client's weight of component `k`, the slower its
/// device (ties by client id).
fn slowest_to_component(
    mut speed: Vec<f64>,
    truth: Option<&MixtureTruth>,
    k: usize,
) -> Result<Vec<f64>, SystemError> {
    let spec_err = |message: String| SystemError::Spec {
        field: "compute.slowest_to_component".into(),
        message,
    };
    let truth = truth.ok_or_else(|| {
        spec_err(
            "needs data with known mixture weights (`data.kind: fedem_synthetic` or \
             `fedgmm_synthetic`, without `on_demand`)"
                .into(),
        )
    })?;
    let m = truth.components.len();
    if k >= m || truth.weights.len() != speed.len() {
        return Err(spec_err(format!(
            "component {k} does not exist: the data has {m}"
        )));
    }
    let mut order: Vec<usize> = (0..speed.len()).collect();
    order.sort_by(|&a, &b| {
        truth.weights[b][k]
            .total_cmp(&truth.weights[a][k])
            .then(a.cmp(&b))
    });
    let mut sorted = speed.clone();
    sorted.sort_by(f64::total_cmp);
    for (rank, c) in order.into_iter().enumerate() {
        speed[c] = sorted[rank];
    }
    Ok(speed)
}

/// Bytes on the wire for `floats` f32 parameters.
pub fn payload_bytes(floats: usize) -> u64 {
    4 * floats as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(spec: SystemSpec, clients: usize) -> SystemModel {
        SystemModel::build(
            &spec,
            &SeedTree::new(1),
            clients,
            SampleCost {
                batch_size: 50,
                training_flops: 1.0,
            },
            None,
        )
        .unwrap()
    }

    #[test]
    fn durations_from_sizes() {
        let m = model(
            SystemSpec {
                compute: ComputeSpec {
                    samples_per_second: Some(Dist::Constant(200.0)),
                    ..Default::default()
                },
                network: NetworkSpec {
                    latency_ms: Dist::Constant(10.0),
                    downlink_mbps: Dist::Constant(8.0),
                    uplink_mbps: Dist::Constant(1.0),
                },
                ..Default::default()
            },
            3,
        );
        assert_eq!(
            m.compute_time(0, 1, 100).unwrap(),
            SimDuration::from_millis(500)
        );
        // 1000 bytes = 8000 bits at 8 Mbit/s = 1 ms, plus 10 ms latency.
        assert_eq!(
            m.transfer_time(0, Link::Down, 1000).unwrap(),
            SimDuration::from_millis(11)
        );
        assert_eq!(
            m.transfer_time(0, Link::Up, 1000).unwrap(),
            SimDuration::from_millis(18)
        );
        assert_eq!(
            m.transfer_time(0, Link::Up, 0).unwrap(),
            SimDuration::from_millis(10)
        );
        let b = model(
            SystemSpec {
                compute: ComputeSpec {
                    seconds_per_batch: Some(Dist::Constant(2.0)),
                    ..Default::default()
                },
                ..Default::default()
            },
            1,
        );
        // 50 samples per 2 s batch.
        assert_eq!(
            b.compute_time(0, 1, 100).unwrap(),
            SimDuration::from_secs(4)
        );
    }

    #[test]
    fn jitter_and_dropout_are_per_job_streams() {
        let m = model(
            SystemSpec {
                compute: ComputeSpec {
                    jitter: 0.3,
                    ..Default::default()
                },
                dropout: 0.5,
                ..Default::default()
            },
            2,
        );
        let a = m.compute_time(1, 7, 1000).unwrap();
        assert_eq!(a, m.compute_time(1, 7, 1000).unwrap());
        assert_ne!(a, m.compute_time(1, 8, 1000).unwrap());
        let drops = (0..1000)
            .filter(|&j| m.dropout_point(0, j).is_some())
            .count();
        assert!((400..600).contains(&drops), "{drops}");
    }

    #[test]
    fn slow_devices_go_to_one_component() {
        let truth = MixtureTruth {
            components: vec![vec![0.0]; 2],
            weights: vec![vec![0.9, 0.1], vec![0.2, 0.8], vec![0.5, 0.5]],
            labels: None,
            inputs: None,
        };
        let speed = slowest_to_component(vec![3.0, 1.0, 2.0], Some(&truth), 1).unwrap();
        assert_eq!(speed, vec![3.0, 1.0, 2.0]);
        let speed = slowest_to_component(vec![3.0, 1.0, 2.0], Some(&truth), 0).unwrap();
        assert_eq!(speed, vec![1.0, 3.0, 2.0]);
        assert!(slowest_to_component(vec![1.0; 3], None, 0).is_err());
    }

    fn work(fraction: Dist, per: WorkDrawnPer) -> SystemSpec {
        SystemSpec {
            local_work: Some(LocalWorkSpec { fraction, per }),
            ..Default::default()
        }
    }

    #[test]
    fn local_work_is_the_plan_without_a_law_and_a_part_with_one() {
        assert_eq!(
            model(SystemSpec::default(), 2).local_work(1, 3, LocalWork::Epochs(5)),
            LocalWork::Epochs(5)
        );
        // ⌈0.5 · 5⌉ = 3 epochs, ⌈0.5 · 7⌉ = 4 steps, for every client and job.
        let half = model(work(Dist::Constant(0.5), WorkDrawnPer::Job), 2);
        assert_eq!(
            half.local_work(1, 3, LocalWork::Epochs(5)),
            LocalWork::Epochs(3)
        );
        assert_eq!(
            half.local_work(0, 9, LocalWork::Steps(7)),
            LocalWork::Steps(4)
        );
        // FedNova's E ∈ {2, 3, 4, 5}: uniform f on [0.2, 1] with 5 epochs, each about a quarter
        // of the jobs, drawn per job.
        let uniform = Dist::Drawn(DrawnDist::Uniform {
            low: 0.2,
            high: 1.0,
        });
        let per_job = model(work(uniform.clone(), WorkDrawnPer::Job), 2);
        let mut counts = [0; 6];
        for job in 0..4000 {
            match per_job.local_work(0, job, LocalWork::Epochs(5)) {
                LocalWork::Epochs(e) => counts[e as usize] += 1,
                steps => panic!("{steps:?}"),
            }
        }
        assert_eq!(counts[..2], [0, 0]);
        assert!(
            counts[2..].iter().all(|&c| (900..1100).contains(&c)),
            "{counts:?}"
        );
        // The same job draws the same part; drawn per client, every job of a client does.
        let e = |m: &SystemModel, c, j| m.local_work(c, j, LocalWork::Epochs(5));
        assert_eq!(e(&per_job, 1, 7), e(&per_job, 1, 7));
        let per_client = model(work(uniform, WorkDrawnPer::Client), 50);
        assert!((0..50).all(|c| (1..20).all(|j| e(&per_client, c, j) == e(&per_client, c, 0))));
        assert!((1..50).any(|c| e(&per_client, c, 0) != e(&per_client, 0, 0)));
    }

    #[test]
    fn a_fraction_outside_0_to_1_is_refused_with_its_path() {
        let err = |spec: SystemSpec| spec.validate().unwrap_err().to_string();
        assert_eq!(
            err(work(Dist::Constant(1.5), WorkDrawnPer::Job)),
            "field `local_work.fraction`: must be a positive number of at most 1 (all of the \
             planned work), got 1.5"
        );
        let uniform = |low, high| Dist::Drawn(DrawnDist::Uniform { low, high });
        assert_eq!(
            err(work(uniform(0.0, 1.0), WorkDrawnPer::Client)),
            "field `local_work.fraction.low`: must be a positive number, got 0"
        );
        assert_eq!(
            err(work(uniform(0.8, 0.5), WorkDrawnPer::Job)),
            "field `local_work.fraction.high`: must be at least low (0.8)"
        );
        let file = Dist::Drawn(DrawnDist::File {
            path: "work.csv".into(),
            column: "fraction".into(),
        });
        assert!(err(work(file, WorkDrawnPer::Job)).contains("give `per: client`"));
        let lognormal = Dist::Drawn(DrawnDist::Lognormal {
            median: 0.5,
            sigma: 1.0,
        });
        assert!(err(work(lognormal, WorkDrawnPer::Job)).contains("not bounded by 1"));
        // A file's value above 1 is refused naming the file, its row and the rule.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("work.csv");
        std::fs::write(&path, "client,fraction\n0,0.5\n1,1.5\n").unwrap();
        let file = Dist::Drawn(DrawnDist::File {
            path: path.clone(),
            column: "fraction".into(),
        });
        let built = SystemModel::build(
            &work(file, WorkDrawnPer::Client),
            &SeedTree::new(1),
            2,
            SampleCost {
                batch_size: 50,
                training_flops: 1.0,
            },
            None,
        );
        let e = built.err().expect("a fraction above 1").to_string();
        assert!(
            e.contains("work.csv") && e.contains("at most 1 (all of the planned work)"),
            "{e}"
        );
    }
}
