//! `fedsim schema`: the scenario's JSON Schema, or the book's field reference made from it.

use crate::finish;
use anyhow::{Context, Result};

/// The arguments of `fedsim schema`.
#[derive(clap::Args)]
pub struct SchemaArgs {
    /// Print the field reference (Markdown, the book's reference page) instead of the schema.
    #[arg(long)]
    pub markdown: bool,
}

pub fn schema(args: SchemaArgs) -> Result<i32> {
    if args.markdown {
        out!("{}", fedsim::scenario::reference_page());
    } else {
        out!("{}", fedsim::scenario::json_schema_text());
    }
    finish(0)
}
