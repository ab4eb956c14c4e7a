//! `fedsim describe`: a scenario's data, model and availability, before anything trains.

use crate::{finish, Overrides};
use anyhow::{Context, Result};
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
    let mut failed = None;
    let described = fedsim::results::describe_scenario(&s, &mut |said| match said {
        fedsim::results::Said::Text(text) => {
            use std::io::Write as _;
            if let Err(e) = write!(std::io::stdout(), "{text}") {
                failed.get_or_insert(e);
            }
        }
        fedsim::results::Said::Note(note) => errln!("note: {note}"),
    });
    if let Some(e) = failed {
        return Err(anyhow::Error::new(e).context("writing to standard output"));
    }
    let data = described?.built;
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
