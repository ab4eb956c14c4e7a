//! `fedsim algorithms | datasets | models`: what a scenario can name, from the catalogues.

use crate::finish;
use anyhow::{Context, Result};
use fedsim::data::Source;
use fedsim::models::Inputs;

/// The arguments of `fedsim algorithms`.
#[derive(clap::Args)]
pub struct AlgorithmsArgs {
    /// Instead of the table, each algorithm's example as lines a script reads: its name,
    /// `server` or `peers`, its `algorithm` section, then any other settings its example needs
    /// as `--set` takes them (`model=...`, `training.local_epochs=2`), separated by tabs. A new
    /// algorithm appears by registering.
    #[arg(long)]
    pub examples: bool,
    /// With `--examples`: only the algorithms that train and evaluate a model (all but
    /// `noop`, whose runs record the system alone).
    #[arg(long, requires = "examples")]
    pub trains_models: bool,
}

pub fn algorithms(args: AlgorithmsArgs) -> Result<i32> {
    if args.examples {
        let listed = (fedsim::algorithms::registry::REGISTRY.iter())
            .filter(|r| r.declared.capabilities.trains_models || !args.trains_models);
        for r in listed {
            let on = if r.declared.capabilities.decentralized {
                "peers"
            } else {
                "server"
            };
            let mut line = format!("{}\t{on}\t{}", r.name, r.example_section());
            for setting in r.declared.example_settings {
                line += &format!("\t{setting}");
            }
            outln!("{line}");
        }
        return finish(0);
    }
    outln!(
        "{:<12} {:<8} {:<6} {:<8} {:<14} {:<10} what it is",
        "name",
        "runs on",
        "stale",
        "cohorts",
        "privacy",
        "server opt"
    );
    let yes = |b: bool| if b { "yes" } else { "no" };
    for r in fedsim::algorithms::registry::REGISTRY {
        let c = r.declared.capabilities;
        let on = if c.decentralized { "peers" } else { "server" };
        outln!(
            "{:<12} {:<8} {:<6} {:<8} {:<14} {:<10} {}",
            r.name,
            on,
            yes(c.stale_updates),
            yes(c.cohorts),
            // Client-level privacy, and DP-SGD where the update is local SGD runs.
            match (c.private_updates, c.sgd_runs) {
                (true, true) => "client, dp_sgd",
                (true, false) => "client",
                (false, _) => "no",
            },
            yes(c.server_optimizer),
            r.summary
        );
    }
    finish(0)
}

pub fn datasets() -> Result<i32> {
    outln!(
        "{:<18} {:<26} {:<10} what it is",
        "kind",
        "rows",
        "on demand"
    );
    for r in fedsim::data::DATASETS {
        let rows = match r.declared.source {
            Source::Generated => "generated from the seed".to_string(),
            Source::Fetched(name) => format!("fedsim data fetch {name}"),
            Source::File => "a file (`path`)".to_string(),
        };
        let on_demand = if r.declared.on_demand { "yes" } else { "no" };
        outln!(
            "{:<18} {:<26} {:<10} {}",
            r.name,
            rows,
            on_demand,
            r.summary
        );
    }
    finish(0)
}

pub fn models() -> Result<i32> {
    outln!("{:<14} {:<22} what it is", "kind", "inputs");
    for r in fedsim::models::MODELS {
        let inputs = match r.declared.inputs {
            Inputs::Any => "any (flattened)".to_string(),
            Inputs::Images { min_side } => format!("images ≥ {min_side}×{min_side}"),
            Inputs::Tokens => "token windows".to_string(),
        };
        outln!("{:<14} {:<22} {}", r.name, inputs, r.summary);
    }
    finish(0)
}
