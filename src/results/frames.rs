//! Tidy polars frames of a run's records.

use super::Summary;
use crate::records::ModelKind;
use crate::records::Split;
use crate::records::{
    DeviceRecord, ExtraRecord, GossipRecord, JobOutcome, JobRecord, MixtureRecord, Record,
    RoundRecord,
};
use polars::prelude::*;
use std::path::Path;

/// Columns shared by every row of a run.
#[derive(Clone, Debug)]
pub struct RunMeta {
    pub run_id: String,
    pub content_hash: String,
    pub algorithm: String,
    pub seed: u64,
    /// Whether clients report their training loss with each update (loss-guided selection):
    /// `jobs.parquet` then has a `reported_loss` column.
    pub reports_losses: bool,
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
        column("round", &evals, |e| e.round),
        column("sim_time_s", &evals, |e| e.time.as_secs_f64()),
        column("client", &evals, |e| e.client),
        column("split", &evals, |e| e.split.as_str()),
        column("model", &evals, |e| e.model.as_str()),
        column("n_samples", &evals, |e| e.n_samples as u32),
        column("loss", &evals, |e| e.loss),
        column("accuracy", &evals, |e| e.accuracy),
        column("sampled", &evals, |e| e.sampled),
        column("cluster", &evals, |e| e.cluster),
        column("unseen", &evals, |e| e.unseen),
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
    let mut columns = vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); n]),
        column("round", &rounds, |r| r.round),
        column("start_s", &rounds, |r| r.start.as_secs_f64()),
        column("end_s", &rounds, |r| r.end.as_secs_f64()),
        column("selected", &rounds, |r| r.selected),
        column("completed", &rounds, |r| r.completed),
        column("failed", &rounds, |r| r.failed),
        column("stragglers", &rounds, |r| r.stragglers),
        column("discarded", &rounds, |r| r.discarded),
        column("late", &rounds, |r| r.late),
        column("bytes_down", &rounds, |r| r.bytes_down),
        column("bytes_up", &rounds, |r| r.bytes_up),
    ];
    // Runs with `privacy:` only: the round's noise and the ε spent by its end.
    if rounds.iter().any(|r| r.privacy.is_some()) {
        columns.extend([
            column("noise_std", &rounds, |r| r.privacy.map(|p| p.noise_std)),
            column("epsilon", &rounds, |r| r.privacy.map(|p| p.epsilon)),
        ]);
    }
    // Secure aggregation only: what the protocol added.
    if rounds.iter().any(|r| r.secure_aggregation.is_some()) {
        let secagg = |r: &RoundRecord| r.secure_aggregation.unwrap_or_default();
        columns.extend([
            column("secagg_setup_s", &rounds, |r| secagg(r).setup.as_secs_f64()),
            column("secagg_finish_s", &rounds, |r| {
                secagg(r).finish.as_secs_f64()
            }),
            column("secagg_bytes", &rounds, |r| secagg(r).bytes),
            column("secagg_dropped", &rounds, |r| secagg(r).dropped),
            column("secagg_failed", &rounds, |r| secagg(r).failed),
        ]);
    }
    // Adaptive clipping only: the round's bound and the noised fraction within it.
    if rounds
        .iter()
        .any(|r| r.privacy.is_some_and(|p| p.adaptive.is_some()))
    {
        let adaptive = |r: &RoundRecord| r.privacy.and_then(|p| p.adaptive);
        columns.extend([
            column("clip", &rounds, |r| adaptive(r).map(|a| a.clip)),
            column("unclipped_fraction", &rounds, |r| {
                adaptive(r).and_then(|a| a.unclipped)
            }),
        ]);
    }
    DataFrame::new_infer_height(columns)
}

/// One row per round of a decentralized run: when its last peer mixed, the consensus
/// distance, the mixing matrix's spectral gap, whether the graph was connected, its links, the
/// bytes sent and the peers that dropped out. Empty for client-server runs.
pub fn gossip_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rounds = GossipRecord::all(records);
    DataFrame::new_infer_height(vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); rounds.len()]),
        column("round", &rounds, |g| g.round),
        column("end_s", &rounds, |g| g.time.as_secs_f64()),
        column("consensus_distance", &rounds, |g| g.consensus_distance),
        column("spectral_gap", &rounds, |g| g.spectral_gap),
        column("connected", &rounds, |g| g.connected),
        column("links", &rounds, |g| g.links),
        column("bytes", &rounds, |g| g.bytes),
        column("dropped", &rounds, |g| g.dropped),
    ])
}

/// The leading columns of a table about clients at evaluations: `run_id, round, client,
/// unseen`, one row per `(round, client, unseen)` key.
pub(super) fn client_columns(meta: &RunMeta, keys: &[(u32, u32, bool)]) -> Vec<Column> {
    vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); keys.len()]),
        column("round", keys, |k| k.0),
        column("client", keys, |k| k.1),
        column("unseen", keys, |k| k.2),
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
        column("component", &rows, |r| r.1 as u32),
        column("weight", &rows, |r| r.2),
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
        column("name", &rows, |r| r.0.name.as_str()),
        column("index", &rows, |r| r.1 as u32),
        column("value", &rows, |r| r.2),
    ]);
    DataFrame::new_infer_height(columns)
}

/// One row per training job whose fate is known: when it was sent and arrived, how long it
/// spent downloading, computing and uploading, and what became of it; under loss-guided
/// selection, the loss its client reported with it.
pub fn jobs_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let jobs: Vec<&JobRecord> = records
        .iter()
        .filter_map(|r| match r {
            Record::Job(j) => Some(j),
            _ => None,
        })
        .collect();
    let mut columns = vec![
        Column::new("run_id".into(), vec![meta.run_id.as_str(); jobs.len()]),
        column("round", &jobs, |j| j.round),
        column("client", &jobs, |j| j.client),
        column("outcome", &jobs, |j| j.outcome.as_str()),
        column("sent_s", &jobs, |j| j.sent.as_secs_f64()),
        column("end_s", &jobs, |j| j.end.as_secs_f64()),
        column("download_s", &jobs, |j| j.download.as_secs_f64()),
        column("compute_s", &jobs, |j| j.compute.as_secs_f64()),
        column("upload_s", &jobs, |j| {
            if j.outcome == JobOutcome::Failed {
                0.0
            } else {
                (j.end - j.sent).as_secs_f64() - j.download.as_secs_f64() - j.compute.as_secs_f64()
            }
        }),
        column("staleness", &jobs, |j| j.staleness),
    ];
    if meta.reports_losses {
        columns.push(column("reported_loss", &jobs, |j| j.reported_loss));
    }
    DataFrame::new_infer_height(columns)
}

/// One row per client: its device, its jobs by outcome, its time computing and
/// communicating, and its last test accuracy (of the most client-specific model evaluated).
pub fn clients_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let mut rows = ClientsFileRows::default();
    records.iter().for_each(|r| rows.see(r));
    rows.frame(meta)
}

/// The rows of `clients.parquet` as a run's records go past: one per client that has a
/// device, a job or a test evaluation (memory follows those clients, not the records).
#[derive(Clone, Debug, Default)]
pub struct ClientsFileRows {
    rows: std::collections::BTreeMap<u32, ClientRow>,
    /// Under `adversary:`, the malicious clients (sorted): the table then marks them.
    malicious: Option<Vec<u32>>,
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

impl ClientsFileRows {
    /// The memory one client's row takes (without the map's own overhead): for estimates.
    pub const ROW_BYTES: usize = std::mem::size_of::<ClientRow>() + std::mem::size_of::<u32>();

    /// Takes in the next record.
    pub fn see(&mut self, r: &Record) {
        let rows = &mut self.rows;
        match r {
            Record::Device(d) => rows.entry(d.client).or_default().device = Some(d.clone()),
            Record::Malicious(m) => self.malicious = Some(m.clone()),
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
        let mut columns = vec![
            Column::new("run_id".into(), vec![meta.run_id.as_str(); rows.len()]),
            column("client", &rows, |(c, _)| **c),
            column("samples_per_second", &rows, |(_, r)| {
                r.device.as_ref().map(|d| d.samples_per_second)
            }),
            column("downlink_mbps", &rows, |(_, r)| {
                r.device.as_ref().map(|d| d.downlink_mbps)
            }),
            column("uplink_mbps", &rows, |(_, r)| {
                r.device.as_ref().map(|d| d.uplink_mbps)
            }),
        ];
        for (k, o) in outcomes.iter().enumerate() {
            let name = format!("jobs_{}", o.as_str());
            columns.push(column(&name, &rows, |(_, r)| r.outcomes[k]));
        }
        columns.extend([
            column("compute_s", &rows, |(_, r)| r.compute),
            column("comm_s", &rows, |(_, r)| r.comm),
            column("unseen", &rows, |(_, r)| r.last_eval.map(|e| e.3)),
            column("test_accuracy", &rows, |(_, r)| r.last_eval.map(|e| e.2)),
        ]);
        if let Some(malicious) = &self.malicious {
            let bad = |c: &u32| malicious.binary_search(c).is_ok();
            columns.push(column("malicious", &rows, |(c, _)| bad(c)));
        }
        DataFrame::new_infer_height(columns)
    }
}

/// One row per run and evaluated model.
pub fn summary_frame(rows: &[Summary]) -> PolarsResult<DataFrame> {
    let mut columns = vec![
        column("run_id", rows, |s| s.run_id.as_str()),
        column("name", rows, |s| s.name.as_str()),
        column("algorithm", rows, |s| s.algorithm.as_str()),
        column("model", rows, |s| s.model.as_str()),
        column("unseen", rows, |s| s.unseen),
        column("seed", rows, |s| s.seed),
        column("clients", rows, |s| s.clients),
        column("final_round", rows, |s| s.final_round),
        column("test_acc_mean", rows, |s| s.test.weighted_mean),
        column("test_acc_bottom_decile", rows, |s| s.test.bottom_decile),
        column("test_acc_p10", rows, |s| s.test.p10),
        column("test_acc_worst10_mean", rows, |s| s.test.worst10_mean),
        column("test_acc_std", rows, |s| s.test.std),
        column("test_acc_jain", rows, |s| s.test.jain),
        column("test_loss_mean", rows, |s| s.test_loss_mean),
        column("time_to_target_s", rows, |s| s.time_to_target_s),
        column("spectral_gap_mean", rows, |s| s.spectral_gap_mean),
        column("consensus_distance_final", rows, |s| {
            s.consensus_distance_final
        }),
        column("sim_seconds", rows, |s| s.sim_seconds),
        column("wall_seconds", rows, |s| s.wall_seconds),
        column("diverged", rows, |s| s.divergence.is_some()),
        column("diverged_round", rows, |s| {
            s.divergence.as_ref().map(|d| d.round)
        }),
        column("diverged_stage", rows, |s| {
            s.divergence.as_ref().map(|d| d.stage.as_str())
        }),
        column("diverged_client", rows, |s| {
            s.divergence.as_ref().and_then(|d| d.client)
        }),
        column("ended_early", rows, |s| s.ended_early.is_some()),
        column("novelty_auroc", rows, |s| s.novelty.map(|n| n.auroc)),
        column("novelty_ap", rows, |s| {
            s.novelty.map(|n| n.average_precision)
        }),
        column("novelty_max_f1", rows, |s| s.novelty.map(|n| n.max_f1)),
        column("noise_multiplier", rows, |s| {
            s.privacy.map(|p| p.noise_multiplier)
        }),
        column("epsilon", rows, |s| s.privacy.map(|p| p.epsilon)),
        column("bytes_up", rows, |s| s.bytes.map(|b| b.0)),
        column("bytes_down", rows, |s| s.bytes.map(|b| b.1)),
    ];
    // Runs under a backdoor adversary only.
    if rows.iter().any(|s| s.backdoor_success.is_some()) {
        columns.push(column("backdoor_success", rows, |s| s.backdoor_success));
    }
    DataFrame::new_infer_height(columns)
}

/// A column named `name` with one value per row: `value(row)`.
pub fn column<'a, R, T>(name: &str, rows: &'a [R], value: impl Fn(&'a R) -> T) -> Column
where
    Series: NamedFrom<Vec<T>, [T]>,
{
    Column::new(name.into(), rows.iter().map(value).collect::<Vec<T>>())
}

/// Reads a Parquet file of results (for reports, tests and analysis).
pub fn read_parquet(path: &Path) -> PolarsResult<DataFrame> {
    let file = crate::io::open_regular(path, crate::io::SizeLimit::STREAMED)?;
    ParquetReader::new(file).finish()
}
