//! Many runs: sweep files expanded into cells and run resumably ([`run_sweep`]), and reports
//! over finished runs ([`write_report`]: tables with mean ± std over seeds, and plots).
//!
//! This room reads runs only through the files `results` publishes; it never simulates.

mod plots;
mod runs;
mod study;
mod summaries;
mod sweep;
mod sweep_file;

pub use plots::{write_chart, write_label_heatmap, Chart, Series};
pub use runs::{Runs, UnfinishedSweep, Unreadable};
pub use study::{
    aggregate, markdown, mean_std, publish_report, read_curve, read_curves, report_frame,
    write_plots, write_report, write_text_table, CurvePoint, ReportRow, RunCurve,
};
pub use summaries::{summary_is_readable, ReportMetric, RunRow, REPORT_METRICS};
pub use sweep::{cell_dir, is_finished, run_sweep, CellNote, SweepOptions, SweepOutcome};
pub use sweep_file::{parse_shard, Cell, Sweep, SweepError};
