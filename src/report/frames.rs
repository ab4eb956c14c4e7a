//! Tidy polars frames of a run's records.

use super::{Record, Summary};
use polars::prelude::*;
use std::path::Path;

/// Columns shared by every row of a run.
#[derive(Clone, Debug)]
pub struct RunMeta {
    pub run_id: String,
    pub content_hash: String,
    pub algorithm: String,
    pub seed: u64,
}

/// One row per (round, client, split) evaluated.
pub fn metrics_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let evals: Vec<_> = records
        .iter()
        .filter_map(|r| {
            if let Record::Eval(e) = r {
                Some(e)
            } else {
                None
            }
        })
        .collect();
    let n = evals.len();
    DataFrame::new_infer_height(vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); n]),
        Column::new("algorithm".into(), vec![meta.algorithm.as_str(); n]),
        Column::new("seed".into(), vec![meta.seed; n]),
        Column::new(
            "round".into(),
            evals.iter().map(|e| e.round).collect::<Vec<_>>(),
        ),
        Column::new(
            "sim_time_s".into(),
            evals
                .iter()
                .map(|e| e.time.as_secs_f64())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "client".into(),
            evals.iter().map(|e| e.client).collect::<Vec<_>>(),
        ),
        Column::new(
            "split".into(),
            evals.iter().map(|e| e.split.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "model".into(),
            evals.iter().map(|e| e.model.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "n_samples".into(),
            evals.iter().map(|e| e.n_samples as u32).collect::<Vec<_>>(),
        ),
        Column::new(
            "loss".into(),
            evals.iter().map(|e| e.loss).collect::<Vec<_>>(),
        ),
        Column::new(
            "accuracy".into(),
            evals.iter().map(|e| e.accuracy).collect::<Vec<_>>(),
        ),
        Column::new(
            "sampled".into(),
            evals.iter().map(|e| e.sampled).collect::<Vec<_>>(),
        ),
        Column::new(
            "cluster".into(),
            evals.iter().map(|e| e.cluster).collect::<Vec<_>>(),
        ),
        Column::new(
            "unseen".into(),
            evals.iter().map(|e| e.unseen).collect::<Vec<_>>(),
        ),
    ])
}

/// One row per finished round.
pub fn rounds_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rounds: Vec<_> = records
        .iter()
        .filter_map(|r| {
            if let Record::Round(x) = r {
                Some(x)
            } else {
                None
            }
        })
        .collect();
    let n = rounds.len();
    DataFrame::new_infer_height(vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); n]),
        Column::new(
            "round".into(),
            rounds.iter().map(|r| r.round).collect::<Vec<_>>(),
        ),
        Column::new(
            "start_s".into(),
            rounds
                .iter()
                .map(|r| r.start.as_secs_f64())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "end_s".into(),
            rounds
                .iter()
                .map(|r| r.end.as_secs_f64())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "selected".into(),
            rounds.iter().map(|r| r.selected).collect::<Vec<_>>(),
        ),
        Column::new(
            "completed".into(),
            rounds.iter().map(|r| r.completed).collect::<Vec<_>>(),
        ),
        Column::new(
            "bytes_down".into(),
            rounds.iter().map(|r| r.bytes_down).collect::<Vec<_>>(),
        ),
        Column::new(
            "bytes_up".into(),
            rounds.iter().map(|r| r.bytes_up).collect::<Vec<_>>(),
        ),
    ])
}

/// One row per run and evaluated model.
pub fn summary_frame(rows: &[Summary]) -> PolarsResult<DataFrame> {
    let col = |name: &str, f: &dyn Fn(&Summary) -> f64| {
        Column::new(name.into(), rows.iter().map(f).collect::<Vec<f64>>())
    };
    DataFrame::new_infer_height(vec![
        Column::new(
            "run_id".into(),
            rows.iter().map(|s| s.run_id.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "name".into(),
            rows.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "algorithm".into(),
            rows.iter()
                .map(|s| s.algorithm.as_str())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "model".into(),
            rows.iter().map(|s| s.model.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "unseen".into(),
            rows.iter().map(|s| s.unseen).collect::<Vec<_>>(),
        ),
        Column::new(
            "seed".into(),
            rows.iter().map(|s| s.seed).collect::<Vec<_>>(),
        ),
        Column::new(
            "clients".into(),
            rows.iter().map(|s| s.clients).collect::<Vec<_>>(),
        ),
        Column::new(
            "final_round".into(),
            rows.iter().map(|s| s.final_round).collect::<Vec<_>>(),
        ),
        col("test_acc_mean", &|s| s.test.weighted_mean),
        col("test_acc_bottom_decile", &|s| s.test.bottom_decile),
        col("test_acc_p10", &|s| s.test.p10),
        col("test_acc_worst10_mean", &|s| s.test.worst10_mean),
        col("test_loss_mean", &|s| s.test_loss_mean),
        col("sim_seconds", &|s| s.sim_seconds),
        col("wall_seconds", &|s| s.wall_seconds),
    ])
}

/// Reads a Parquet file (for tests and analysis).
pub fn read_parquet(path: &Path) -> PolarsResult<DataFrame> {
    ParquetReader::new(std::fs::File::open(path)?).finish()
}
