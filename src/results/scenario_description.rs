//! What `fedsim describe` says of a scenario before anything trains: its data at a glance
//! ([`DataDescription`]), the model layer by layer, availability, compression, the adversary,
//! the server optimizer and what privacy spends. The command line prints it; the Python
//! package hands it over.
//!
//! This room must not train, write a file or read the wall clock.

use super::DataDescription;
use crate::data::{DataError, FederatedData};
use crate::plan::RunPlan;
use crate::scenario::{Scenario, ScenarioError};
use crate::sim::{SeedTree, SimError, SimTime};
use std::path::PathBuf;
use std::sync::Arc;

/// A scenario described ([`describe_scenario`]).
pub struct ScenarioDescription {
    /// The data at a glance.
    pub data: DataDescription,
    /// The data, built.
    pub built: Arc<FederatedData>,
}

/// What a description says, as it goes: text (what `fedsim describe` prints), or a note (what
/// it says on standard error: a privacy target that the least noise cannot meet).
pub enum Said {
    Text(String),
    Note(String),
}

/// Why a scenario could not be described.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error("building the data of {}", file.display())]
    Data {
        file: PathBuf,
        #[source]
        source: DataError,
    },
    /// A field only the data could check.
    #[error(transparent)]
    Scenario(ScenarioError),
    #[error("the system model of {}", file.display())]
    Setup {
        file: PathBuf,
        #[source]
        source: SimError,
    },
}

macro_rules! say {
    ($t:expr, $($arg:tt)*) => {{
        ($t)(Said::Text(format!($($arg)*)));
    }};
}

macro_rules! sayln {
    ($t:expr) => {{
        ($t)(Said::Text("\n".into()));
    }};
    ($t:expr, $($arg:tt)*) => {{
        ($t)(Said::Text(format!($($arg)*) + "\n"));
    }};
}

/// A setting as one line of YAML's flow.
fn yaml(value: &impl serde::Serialize) -> String {
    serde_yaml::to_string(value).unwrap_or_default()
}

/// Describes scenario `s`: builds its data and decides its run as `fedsim run` would, and
/// says what they are to `t` as it goes (so that what comes before an error is said).
pub fn describe_scenario(
    s: &Scenario,
    t: &mut dyn FnMut(Said),
) -> Result<ScenarioDescription, DescribeError> {
    let file = s.file.clone();
    let data = (s.data.build(&s.split, &SeedTree::new(s.data_seed))).map_err(|source| {
        DescribeError::Data {
            file: file.clone(),
            source,
        }
    })?;
    let description = DataDescription::of(&data);
    say!(t, "{}: {}", s.name, description);
    let data = Arc::new(data);
    // The run as it would be decided: a field only the data could check is located in the
    // file, like the scenario's own errors.
    let plan = RunPlan::new(&s.run, data.clone(), 1).map_err(|e| match e {
        SimError::Scenario(field) => DescribeError::Scenario(s.locate(field)),
        source => DescribeError::Setup { file, source },
    })?;
    let setup = &plan.setup;
    let (arch, system) = (&setup.arch, &setup.system);
    sayln!(
        t,
        "  model: {} parameters, {:.3} MFLOP per sample forward (about 3× that to \
         train); {}",
        arch.num_params(),
        arch.flops_per_sample() as f64 / 1e6,
        arch.summary()
    );
    let rows = arch.layer_table();
    let width = rows
        .iter()
        .map(|r| r.layer.chars().count())
        .max()
        .unwrap_or(0);
    // `name`: what `personal:` and `frozen:` read (`head` is the last named layer).
    let head = rows.iter().rposition(|r| r.name.is_some());
    sayln!(
        t,
        "    {:>3}  {:<width$}  {:>12}  {:>10}  {:>8}  name",
        "#",
        "layer",
        "output",
        "parameters",
        "MFLOP"
    );
    for (i, row) in rows.iter().enumerate() {
        let name = match (&row.name, head == Some(i)) {
            (Some(name), true) => format!("{name} (head)"),
            (Some(name), false) => name.clone(),
            (None, _) => String::new(),
        };
        let line = format!(
            "    {i:>3}  {:<width$}  {:>12}  {:>10}  {:>8.3}  {name}",
            row.layer,
            row.output.to_string(),
            row.parameters,
            row.flops as f64 / 1e6
        );
        sayln!(t, "{}", line.trim_end());
    }
    let clients = data.num_clients() as u32;
    if let Some((online, gone)) = system.availability_outlook(clients, SimTime::ZERO) {
        say!(
            t,
            "  availability: {online} of {clients} clients online at the start"
        );
        match gone {
            Some(at) => sayln!(
                t,
                "; none is online after {:.3} s (simulated): a run still going then \
                 trains no one (and ends early if it samples online clients only)",
                at.as_secs_f64()
            ),
            None => sayln!(t),
        }
    }
    if let Some(compression) = &s.run.compression {
        let d = arch.num_params();
        let dense = 4 * d as u64;
        let links = [
            ("uplink", &compression.uplink),
            ("downlink", &compression.downlink),
        ];
        for (link, compressor) in links {
            let Some(compressor) = compressor else {
                continue;
            };
            let bytes = compressor.bytes(d);
            sayln!(
                t,
                "  {link} compression ({}): {bytes} bytes a model of {d} values against {dense} \
                 uncompressed ({:.1}× fewer){}",
                yaml(compressor).trim().replace('\n', ", "),
                dense as f64 / bytes as f64,
                match (link, compressor.error_feedback()) {
                    ("uplink", true) => "; each client keeps a residual of the values it sends",
                    ("downlink", _) => {
                        "; a client pays the changes since the copy it last received, or the \
                         whole model if that is less"
                    }
                    _ => "",
                }
            );
        }
    }
    if let Some(adversary) = &s.run.adversary {
        let malicious = setup.malicious.len();
        sayln!(
            t,
            "  adversary: {malicious} malicious clients ({}); aggregation: {}",
            yaml(&adversary.attack).trim().replace('\n', ", "),
            match &s.run.aggregation {
                Some(rule) => yaml(rule).trim().replace('\n', ", "),
                None => "the algorithm's weighted mean".into(),
            }
        );
    }
    if let Some(optimizer) = &s.run.server_optimizer {
        sayln!(
            t,
            "  server optimizer: {}; the server keeps its moments for every global vector it \
             steps",
            crate::settings::compact(&serde_yaml::to_value(optimizer).unwrap_or_default())
        );
    }
    let privacy = &setup.client_privacy;
    // A target more than the least noise spends: σ stopped at the smallest tried.
    let shortfall = |sigma: f64, spent: f64| {
        let target = s.run.privacy.as_ref().and_then(|p| p.target_epsilon)?;
        let solved = crate::privacy::Calibrated {
            sigma,
            epsilon: spent,
        };
        (sigma <= crate::privacy::SMALLEST_SIGMA)
            .then(|| solved.shortfall(target))
            .flatten()
    };
    if let Some(privacy) = privacy {
        if let Some(note) = shortfall(
            privacy.noise_multiplier,
            privacy.epsilon_after(s.run.rounds as u64),
        ) {
            t(Said::Note(note));
        }
        let solved = if privacy.calibrated {
            " (solved for target_epsilon)"
        } else {
            ""
        };
        let who = match (privacy.noise_at, privacy.sampling) {
            (crate::privacy::NoiseAt::Client, _) => {
                "local, for a client that sends every round".to_string()
            }
            (
                crate::privacy::NoiseAt::Shares,
                crate::privacy::Subsampling::FixedSize { sample, population },
            ) => format!(
                "distributed under secure aggregation, {sample} of {population} a round, one \
                 client's data replaced, each client's noise share sized for {} of them (ε as \
                 below while that many shares reach each sum; more when fewer do)",
                privacy.shares_for.unwrap_or(0.0)
            ),
            (_, crate::privacy::Subsampling::Poisson { rate }) => {
                format!("central, Poisson participation q = {rate}, one client more or less")
            }
            (_, crate::privacy::Subsampling::FixedSize { sample, population }) => {
                format!("central, {sample} of {population} a round, one client's data replaced")
            }
        };
        let clip = match privacy.adaptive {
            None => format!("clip {}", privacy.clip),
            Some(a) => format!(
                "clip from {} adaptive to quantile {} (count noise {}, updates' σ {:.4})",
                privacy.clip, a.quantile, a.count_noise, privacy.update_noise_multiplier
            ),
        };
        let by = match privacy.accountant() {
            crate::privacy::Accountant::Rdp => "",
            crate::privacy::Accountant::Pld => " (PLD accountant)",
        };
        if privacy.tree_aggregation() {
            use crate::privacy::tree::{one_release_squares, tree_epsilon};
            let rounds = s.run.rounds as u64;
            let sigma = privacy.noise_multiplier;
            let once = tree_epsilon(sigma, one_release_squares(rounds), privacy.delta);
            sayln!(
            t,
                "  privacy (DP-FTRL tree aggregation, {}, no amplification by sampling): σ = \
                 {sigma:.4} per tree node{solved}, {clip}; over {rounds} rounds a client aggregated once \
                 spends ε ≤ {once:.4}, one aggregated every round ε = {:.4}, at δ = {:e}",
                match privacy.neighbours {
                    crate::privacy::Neighbours::ReplaceOne => "one client's data replaced",
                    crate::privacy::Neighbours::AddRemove => "one client more or less",
                },
                privacy.epsilon_after(rounds),
                privacy.delta
            );
        } else {
            sayln!(
            t,
            "  privacy ({who}): σ = {:.4}{solved}, {clip}; {} rounds spend ε = {:.4} at δ = {:e}{by}",
            privacy.noise_multiplier,
            s.run.rounds,
            privacy.epsilon_after(s.run.rounds as u64),
            privacy.delta
        );
        }
    }
    if let Some((sample, runs)) = setup.sample_privacy {
        // Every client drawn every round: the most a record can spend.
        let plan = &s.run.training.plan;
        let sizes: Vec<usize> = (0..data.num_clients())
            .map(|c| data.split_len(c, crate::records::Split::Train))
            .filter(|&n| n > 0)
            .collect();
        let rounds = s.run.rounds as u64;
        let worst = sample.worst_case_epsilon(plan, &sizes, rounds, runs);
        if let Some(note) = shortfall(sample.dp_sgd.noise_multiplier, worst) {
            t(Said::Note(note));
        }
        let (smallest, largest) = (sizes.iter().min(), sizes.iter().max());
        let rates = |n: Option<&usize>| n.map_or(0.0, |&n| plan.dp_sampling_rate(n));
        let solved = if s
            .run
            .privacy
            .as_ref()
            .is_some_and(|p| p.target_epsilon.is_some())
        {
            " (solved for target_epsilon)"
        } else {
            ""
        };
        sayln!(
            t,
            "  privacy (DP-SGD, one record of a client added or removed): σ = {:.4} per \
             step{solved}, clip {} per record, Poisson batches at q = 1/⌈n/{}⌉ ({:.4} … {:.4}); \
             a client drawn in all {} rounds, {runs} local run{} an update, spends ε ≤ {:.4} \
             at δ = {:e}",
            sample.dp_sgd.noise_multiplier,
            sample.dp_sgd.clip,
            plan.batch_size,
            rates(largest),
            rates(smallest),
            s.run.rounds,
            if runs == 1 { "" } else { "s" },
            worst,
            sample.delta
        );
    }
    Ok(ScenarioDescription {
        data: description,
        built: data,
    })
}
