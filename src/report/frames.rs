//! Tidy polars frames of a run's records.

use super::{
    DeviceRecord, ExtraRecord, GossipRecord, JobOutcome, JobRecord, MixtureRecord, Record, Summary,
};
use crate::algorithms::ModelKind;
use crate::data::Split;
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
            "failed".into(),
            rounds.iter().map(|r| r.failed).collect::<Vec<_>>(),
        ),
        Column::new(
            "stragglers".into(),
            rounds.iter().map(|r| r.stragglers).collect::<Vec<_>>(),
        ),
        Column::new(
            "discarded".into(),
            rounds.iter().map(|r| r.discarded).collect::<Vec<_>>(),
        ),
        Column::new(
            "late".into(),
            rounds.iter().map(|r| r.late).collect::<Vec<_>>(),
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

/// One row per round of a decentralized run: when its last peer mixed, the consensus
/// distance, the mixing matrix's spectral gap, whether the graph was connected, its links, the
/// bytes sent and the peers that dropped out. Empty for client-server runs.
pub fn gossip_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rounds = GossipRecord::all(records);
    DataFrame::new_infer_height(vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); rounds.len()]),
        Column::new(
            "round".into(),
            rounds.iter().map(|g| g.round).collect::<Vec<_>>(),
        ),
        Column::new(
            "end_s".into(),
            rounds
                .iter()
                .map(|g| g.time.as_secs_f64())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "consensus_distance".into(),
            rounds
                .iter()
                .map(|g| g.consensus_distance)
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "spectral_gap".into(),
            rounds.iter().map(|g| g.spectral_gap).collect::<Vec<_>>(),
        ),
        Column::new(
            "connected".into(),
            rounds.iter().map(|g| g.connected).collect::<Vec<_>>(),
        ),
        Column::new(
            "links".into(),
            rounds.iter().map(|g| g.links).collect::<Vec<_>>(),
        ),
        Column::new(
            "bytes".into(),
            rounds.iter().map(|g| g.bytes).collect::<Vec<_>>(),
        ),
        Column::new(
            "dropped".into(),
            rounds.iter().map(|g| g.dropped).collect::<Vec<_>>(),
        ),
    ])
}

/// The leading columns of a table about clients at evaluations: `run_id, round, client,
/// unseen`, one row per `(round, client, unseen)` key.
pub(super) fn client_columns(meta: &RunMeta, keys: &[(u32, u32, bool)]) -> Vec<Column> {
    vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); keys.len()]),
        Column::new("round".into(), keys.iter().map(|k| k.0).collect::<Vec<_>>()),
        Column::new(
            "client".into(),
            keys.iter().map(|k| k.1).collect::<Vec<_>>(),
        ),
        Column::new(
            "unseen".into(),
            keys.iter().map(|k| k.2).collect::<Vec<_>>(),
        ),
    ]
}

/// One row per (evaluated round, client, component) of a mixture model (FedEM, D-FedEM,
/// FedGMM): the client's mixture weight π_t,m. Empty for other algorithms.
pub fn mixtures_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rows: Vec<(&MixtureRecord, usize, f64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Mixture(m) => Some(m),
            _ => None,
        })
        .flat_map(|m| m.weights.iter().enumerate().map(move |(c, &w)| (m, c, w)))
        .collect();
    let keys: Vec<_> = rows
        .iter()
        .map(|r| (r.0.round, r.0.client, r.0.unseen))
        .collect();
    let mut columns = client_columns(meta, &keys);
    columns.extend([
        Column::new(
            "component".into(),
            rows.iter().map(|r| r.1 as u32).collect::<Vec<_>>(),
        ),
        Column::new(
            "weight".into(),
            rows.iter().map(|r| r.2).collect::<Vec<_>>(),
        ),
    ]);
    DataFrame::new_infer_height(columns)
}

/// One row per value an algorithm reported about a client by name (round, client, name,
/// index, value). Empty for algorithms that report nothing extra.
pub fn extras_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rows: Vec<(&ExtraRecord, usize, f64)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Extra(x) => Some(x),
            _ => None,
        })
        .flat_map(|x| x.values.iter().enumerate().map(move |(i, &v)| (x, i, v)))
        .collect();
    let keys: Vec<_> = rows
        .iter()
        .map(|r| (r.0.round, r.0.client, r.0.unseen))
        .collect();
    let mut columns = client_columns(meta, &keys);
    columns.extend([
        Column::new(
            "name".into(),
            rows.iter().map(|r| r.0.name.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "index".into(),
            rows.iter().map(|r| r.1 as u32).collect::<Vec<_>>(),
        ),
        Column::new("value".into(), rows.iter().map(|r| r.2).collect::<Vec<_>>()),
    ]);
    DataFrame::new_infer_height(columns)
}

/// One row per training job whose fate is known: when it was sent and arrived, how long it
/// spent downloading, computing and uploading, and what became of it.
pub fn jobs_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let jobs: Vec<&JobRecord> = records
        .iter()
        .filter_map(|r| match r {
            Record::Job(j) => Some(j),
            _ => None,
        })
        .collect();
    let secs = |f: &dyn Fn(&JobRecord) -> f64| jobs.iter().map(|j| f(j)).collect::<Vec<f64>>();
    DataFrame::new_infer_height(vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); jobs.len()]),
        Column::new(
            "round".into(),
            jobs.iter().map(|j| j.round).collect::<Vec<_>>(),
        ),
        Column::new(
            "client".into(),
            jobs.iter().map(|j| j.client).collect::<Vec<_>>(),
        ),
        Column::new(
            "outcome".into(),
            jobs.iter().map(|j| j.outcome.as_str()).collect::<Vec<_>>(),
        ),
        Column::new("sent_s".into(), secs(&|j| j.sent.as_secs_f64())),
        Column::new("end_s".into(), secs(&|j| j.end.as_secs_f64())),
        Column::new("download_s".into(), secs(&|j| j.download.as_secs_f64())),
        Column::new("compute_s".into(), secs(&|j| j.compute.as_secs_f64())),
        Column::new(
            "upload_s".into(),
            secs(&|j| {
                if j.outcome == JobOutcome::Failed {
                    0.0
                } else {
                    (j.end - j.sent).as_secs_f64()
                        - j.download.as_secs_f64()
                        - j.compute.as_secs_f64()
                }
            }),
        ),
        Column::new(
            "staleness".into(),
            jobs.iter().map(|j| j.staleness).collect::<Vec<_>>(),
        ),
    ])
}

/// One row per client: its device, its jobs by outcome, its time computing and
/// communicating, and its last test accuracy (of the most client-specific model evaluated).
pub fn clients_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let mut rows = ClientRows::default();
    records.iter().for_each(|r| rows.see(r));
    rows.frame(meta)
}

/// The rows of `clients.parquet` as a run's records go past: one per client that has a
/// device, a job or a test evaluation (memory follows those clients, not the records).
#[derive(Clone, Debug, Default)]
pub struct ClientRows {
    rows: std::collections::BTreeMap<u32, ClientRow>,
}

#[derive(Default, Clone, Debug)]
struct ClientRow {
    device: Option<DeviceRecord>,
    outcomes: [u32; 6],
    compute: f64,
    comm: f64,
    last_eval: Option<(u32, ModelKind, f64, bool)>,
}

/// The job outcomes in the order of `clients.parquet`'s `jobs_*` columns.
const OUTCOMES: [JobOutcome; 6] = [
    JobOutcome::Aggregated,
    JobOutcome::Late,
    JobOutcome::Straggler,
    JobOutcome::Discarded,
    JobOutcome::Failed,
    JobOutcome::Unsampled,
];

impl ClientRows {
    /// Takes in the next record.
    pub fn see(&mut self, r: &Record) {
        let rows = &mut self.rows;
        match r {
            Record::Device(d) => rows.entry(d.client).or_default().device = Some(d.clone()),
            Record::Job(j) => {
                let row = rows.entry(j.client).or_default();
                let k = OUTCOMES
                    .iter()
                    .position(|o| *o == j.outcome)
                    .expect("every outcome");
                row.outcomes[k] += 1;
                row.compute += j.compute.as_secs_f64();
                row.comm += (j.end - j.sent).as_secs_f64() - j.compute.as_secs_f64();
            }
            Record::Eval(e) if e.split == Split::Test => {
                let row = rows.entry(e.client).or_default();
                let key = (e.round, e.model);
                if row.last_eval.is_none_or(|(r, m, _, _)| key >= (r, m)) {
                    row.last_eval = Some((e.round, e.model, e.accuracy, e.unseen));
                }
            }
            _ => {}
        }
    }

    /// The table, one row per client in client order.
    pub fn frame(&self, meta: &RunMeta) -> PolarsResult<DataFrame> {
        let outcomes = OUTCOMES;
        let rows: Vec<(&u32, &ClientRow)> = self.rows.iter().collect();
        let device = |f: &dyn Fn(&DeviceRecord) -> f64| {
            rows.iter()
                .map(|(_, r)| r.device.as_ref().map(f))
                .collect::<Vec<Option<f64>>>()
        };
        let mut columns = vec![
            Column::new("run_id".into(), vec![meta.run_id.as_str(); rows.len()]),
            Column::new(
                "client".into(),
                rows.iter().map(|(c, _)| **c).collect::<Vec<_>>(),
            ),
            Column::new(
                "samples_per_second".into(),
                device(&|d| d.samples_per_second),
            ),
            Column::new("downlink_mbps".into(), device(&|d| d.downlink_mbps)),
            Column::new("uplink_mbps".into(), device(&|d| d.uplink_mbps)),
        ];
        for (k, o) in outcomes.iter().enumerate() {
            columns.push(Column::new(
                format!("jobs_{}", o.as_str()).into(),
                rows.iter().map(|(_, r)| r.outcomes[k]).collect::<Vec<_>>(),
            ));
        }
        columns.extend([
            Column::new(
                "compute_s".into(),
                rows.iter().map(|(_, r)| r.compute).collect::<Vec<_>>(),
            ),
            Column::new(
                "comm_s".into(),
                rows.iter().map(|(_, r)| r.comm).collect::<Vec<_>>(),
            ),
            Column::new(
                "unseen".into(),
                rows.iter()
                    .map(|(_, r)| r.last_eval.map(|e| e.3))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "test_accuracy".into(),
                rows.iter()
                    .map(|(_, r)| r.last_eval.map(|e| e.2))
                    .collect::<Vec<_>>(),
            ),
        ]);
        DataFrame::new_infer_height(columns)
    }
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
        col("test_acc_std", &|s| s.test.std),
        col("test_acc_jain", &|s| s.test.jain),
        col("test_loss_mean", &|s| s.test_loss_mean),
        Column::new(
            "time_to_target_s".into(),
            rows.iter().map(|s| s.time_to_target_s).collect::<Vec<_>>(),
        ),
        Column::new(
            "spectral_gap_mean".into(),
            rows.iter().map(|s| s.spectral_gap_mean).collect::<Vec<_>>(),
        ),
        Column::new(
            "consensus_distance_final".into(),
            rows.iter()
                .map(|s| s.consensus_distance_final)
                .collect::<Vec<_>>(),
        ),
        col("sim_seconds", &|s| s.sim_seconds),
        col("wall_seconds", &|s| s.wall_seconds),
        Column::new(
            "diverged".into(),
            rows.iter()
                .map(|s| s.divergence.is_some())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "diverged_round".into(),
            rows.iter()
                .map(|s| s.divergence.as_ref().map(|d| d.round))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "diverged_stage".into(),
            rows.iter()
                .map(|s| s.divergence.as_ref().map(|d| d.stage.as_str()))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "diverged_client".into(),
            rows.iter()
                .map(|s| s.divergence.as_ref().and_then(|d| d.client))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "ended_early".into(),
            rows.iter()
                .map(|s| s.ended_early.is_some())
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "novelty_auroc".into(),
            rows.iter()
                .map(|s| s.novelty.map(|n| n.auroc))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "novelty_ap".into(),
            rows.iter()
                .map(|s| s.novelty.map(|n| n.average_precision))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "novelty_max_f1".into(),
            rows.iter()
                .map(|s| s.novelty.map(|n| n.max_f1))
                .collect::<Vec<_>>(),
        ),
    ])
}

/// Reads a Parquet file (for tests and analysis).
pub fn read_parquet(path: &Path) -> PolarsResult<DataFrame> {
    ParquetReader::new(std::fs::File::open(path)?).finish()
}
