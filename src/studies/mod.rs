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

pub use plots::{chart_images, label_heatmap_png, write_chart, Chart, Series};
pub use runs::{Runs, UnfinishedSweep, Unreadable};
pub use study::{
    aggregate, markdown, mean_std, publish_report, read_curve, read_curves, report_frame,
    report_rows, rounds_to, text_table_csv, write_plots, write_report, CurvePoint, ReportOptions,
    ReportRow, RunCurve,
};
pub use summaries::{summary_is_readable, ReportMetric, RunRow, REPORT_METRICS};
pub use sweep::{cell_dir, is_finished, run_sweep, CellNote, SweepOptions, SweepOutcome};
pub use sweep_file::{parse_shard, Cell, Sweep, SweepError};
