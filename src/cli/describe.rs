//! `fedsim describe`: a scenario's data, model and availability, before anything trains.

use crate::{finish, Overrides};
use anyhow::{Context, Result};
use fedsim::results::DataDescription;
use fedsim::sim::{SeedTree, SimTime};
use std::path::PathBuf;

/// The arguments of `fedsim describe`.
#[derive(clap::Args)]
pub struct DescribeArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
    /// Also draw a `clients × labels` heat map of the label shares (PNG) into this file (never
    /// over a file fedsim did not write: see --force).
    #[arg(long, value_name = "FILE.png")]
    pub heatmap: Option<PathBuf>,
    /// Write the heat map over a file of its name that fedsim did not write: that file is
    /// moved aside (renamed to NAME.before-fedsim), never deleted.
    #[arg(long)]
    pub force: bool,
}

pub fn describe(args: DescribeArgs) -> Result<i32> {
    let DescribeArgs {
        scenario,
        overrides,
        heatmap,
        force,
    } = args;
    let s = overrides.load(&scenario)?;
    // The heat map's file is claimed before anything is built, so a refused one costs nothing.
    let heatmap = match heatmap {
        Some(path) => {
            let rules = fedsim::io::OutputRules {
                force,
                inputs: s.input_files(),
            };
            let (folder, name, notes) = fedsim::results::claim_single_file(&path, &rules, None)?;
            for n in notes {
                errln!("note: {n}");
            }
            Some((folder, name, path))
        }
        None => None,
    };
    let data = s
        .data
        .build(&s.split, &SeedTree::new(s.data_seed))
        .with_context(|| format!("building the data of {}", scenario.display()))?;
    out!("{}: {}", s.name, DataDescription::of(&data));
    let data = std::sync::Arc::new(data);
    // The run as it would be decided: a field only the data could check is located in the
    // file, like the scenario's own errors.
    let plan = fedsim::plan::RunPlan::new(&s.run, data.clone(), 1).map_err(|e| match e {
        fedsim::sim::SimError::Scenario(field) => anyhow::Error::new(s.locate(field)),
        e => anyhow::Error::new(e).context(format!("the system model of {}", scenario.display())),
    })?;
    let setup = &plan.setup;
    let (arch, system) = (&setup.arch, &setup.system);
    outln!(
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
    outln!(
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
        outln!("{}", line.trim_end());
    }
    let clients = data.num_clients() as u32;
    if let Some((online, gone)) = system.availability_outlook(clients, SimTime::ZERO) {
        out!("  availability: {online} of {clients} clients online at the start");
        match gone {
            Some(t) => outln!(
                "; none is online after {:.3} s (simulated): a run still going then \
                 trains no one (and ends early if it samples online clients only)",
                t.as_secs_f64()
            ),
            None => outln!(),
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
            outln!(
                "  {link} compression ({}): {bytes} bytes a model of {d} values against {dense} \
                 uncompressed ({:.1}× fewer){}",
                serde_yaml::to_string(compressor)?
                    .trim()
                    .replace('\n', ", "),
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
        outln!(
            "  adversary: {malicious} malicious clients ({}); aggregation: {}",
            serde_yaml::to_string(&adversary.attack)?
                .trim()
                .replace('\n', ", "),
            match &s.run.aggregation {
                Some(rule) => serde_yaml::to_string(rule)?.trim().replace('\n', ", "),
                None => "the algorithm's weighted mean".into(),
            }
        );
    }
    if let Some(optimizer) = &s.run.server_optimizer {
        outln!(
            "  server optimizer: {}; the server keeps its moments for every global vector it \
             steps",
            fedsim::settings::compact(&serde_yaml::to_value(optimizer)?)
        );
    }
    let privacy = &setup.client_privacy;
    // A target more than the least noise spends: σ stopped at the smallest tried.
    let shortfall = |sigma: f64, spent: f64| {
        let target = s.run.privacy.as_ref().and_then(|p| p.target_epsilon)?;
        let solved = fedsim::privacy::Calibrated {
            sigma,
            epsilon: spent,
        };
        (sigma <= fedsim::privacy::SMALLEST_SIGMA)
            .then(|| solved.shortfall(target))
            .flatten()
    };
    if let Some(privacy) = privacy {
        if let Some(note) = shortfall(
            privacy.noise_multiplier,
            privacy.epsilon_after(s.run.rounds as u64),
        ) {
            errln!("note: {note}");
        }
        let solved = if privacy.calibrated {
            " (solved for target_epsilon)"
        } else {
            ""
        };
        let who = match (privacy.noise_at, privacy.sampling) {
            (fedsim::privacy::NoiseAt::Client, _) => {
                "local, for a client that sends every round".to_string()
            }
            (
                fedsim::privacy::NoiseAt::Shares,
                fedsim::privacy::Subsampling::FixedSize { sample, population },
            ) => format!(
                "distributed under secure aggregation, {sample} of {population} a round, one \
                 client's data replaced, each client's noise share sized for {} of them (ε as \
                 below while that many shares reach each sum; more when fewer do)",
                privacy.shares_for.unwrap_or(0.0)
            ),
            (_, fedsim::privacy::Subsampling::Poisson { rate }) => {
                format!("central, Poisson participation q = {rate}, one client more or less")
            }
            (_, fedsim::privacy::Subsampling::FixedSize { sample, population }) => {
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
            fedsim::privacy::Accountant::Rdp => "",
            fedsim::privacy::Accountant::Pld => " (PLD accountant)",
        };
        if privacy.tree_aggregation() {
            use fedsim::privacy::tree::{one_release_squares, tree_epsilon};
            let rounds = s.run.rounds as u64;
            let sigma = privacy.noise_multiplier;
            let once = tree_epsilon(sigma, one_release_squares(rounds), privacy.delta);
            outln!(
                "  privacy (DP-FTRL tree aggregation, {}, no amplification by sampling): σ = \
                 {sigma:.4} per tree node{solved}, {clip}; over {rounds} rounds a client aggregated once \
                 spends ε ≤ {once:.4}, one aggregated every round ε = {:.4}, at δ = {:e}",
                match privacy.neighbours {
                    fedsim::privacy::Neighbours::ReplaceOne => "one client's data replaced",
                    fedsim::privacy::Neighbours::AddRemove => "one client more or less",
                },
                privacy.epsilon_after(rounds),
                privacy.delta
            );
        } else {
            outln!(
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
            .map(|c| data.split_len(c, fedsim::records::Split::Train))
            .filter(|&n| n > 0)
            .collect();
        let rounds = s.run.rounds as u64;
        let worst = sample.worst_case_epsilon(plan, &sizes, rounds, runs);
        if let Some(note) = shortfall(sample.dp_sgd.noise_multiplier, worst) {
            errln!("note: {note}");
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
        outln!(
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
    if let Some((mut folder, name, path)) = heatmap {
        let title = format!("{}: label shares of {} clients", s.name, data.num_clients());
        let png = fedsim::studies::label_heatmap_png(
            &title,
            &fedsim::results::client_label_shares(&data),
        )
        .map_err(|m| anyhow::anyhow!("drawing {}: {m}", path.display()))?;
        folder
            .write_file(&name, &png)
            .with_context(|| format!("writing {}", path.display()))?;
        outln!("  wrote {}", path.display());
    }
    finish(0)
}
