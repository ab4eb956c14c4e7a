//! `fedsim check`: validate a scenario (and the pre-flight on this machine), print it resolved.

use crate::{finish, Overrides};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// The arguments of `fedsim check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
}

pub fn check(args: CheckArgs) -> Result<i32> {
    let CheckArgs {
        scenario,
        overrides,
    } = args;
    let s = overrides.load(&scenario)?;
    fedsim::plan::preflight(&s)?;
    outln!(
        "# {}: valid (run id {})\n{}",
        scenario.display(),
        s.run_id(),
        s.resolved_yaml
    );
    finish(0)
}
