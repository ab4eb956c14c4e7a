//! A run's result files, written while the run goes.
//!
//! Each table holds its records until they take [`BUFFER_BYTES`]; a table that outgrows that
//! is from then on written as it goes, in Parquet row groups of [`ROW_GROUP`] rows (polars'
//! default), so memory follows the buffer, not the run. A table that never outgrows it is
//! written in one piece at the end, byte for byte what writing the whole table did before
//! (streamed tables hold the same rows, in row groups of another size). `clients.parquet` has
//! one row per client and the summary needs only the last evaluation, so those two keep
//! accumulators ([`ClientsFileRows`], [`SummaryInputs`]) instead of records.
//!
//! Everything goes into the staging folder `out/.partial-<pid>/`. [`RunFiles::finish`] then
//! removes the old `summary.csv` and the other result files of an earlier run, and moves the new
//! files in with `summary.csv` last. So whenever `out` has a `summary.csv`, its result files are
//! one run's complete set; a failed write (a full or read-only disk) removes the staging folder
//! and leaves no `summary.csv`, and a killed run leaves either the old complete set or no
//! `summary.csv`. The folder is claimed through [`crate::io::OutputFolder`]: locked for this
//! run, and only files fedsim's manifest proves it wrote (and its own staging folders of
//! killed runs) are ever removed or replaced.
//!
//! This room writes what it is given in the order given; it must not reorder or drop records.

use super::checkpoint::CHECKPOINT_FILE;
use super::frames::ClientsFileRows;
use super::novelty::novelty_frame;
use super::{
    extras_frame, gossip_frame, jobs_frame, metrics_frame, mixtures_frame, rounds_frame, stage_csv,
    stage_parquet, summary_frame, write_error, ReportError, RunMeta, Summary, SummaryInputs,
};
use crate::io::{DiskFile, OutputFolder, OutputRules, Staging};
use crate::models::{Architecture, ClientModels};
use crate::records::{ClientModelsRecord, MixtureRecord, ModelKind, Record};
use polars::io::csv::write::BatchedWriter as CsvBatches;
use polars::io::parquet::write::BatchedWriter as ParquetBatches;
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The final global models of a run asked to save them (`fedsim run --save-models`).
pub const MODELS_FILE: &str = "models.safetensors";

/// The clients' own models of a run asked to save them (`fedsim run --save-client-models`).
pub const CLIENT_MODELS_FILE: &str = "client_models.safetensors";

/// Rows per Parquet row group of a streamed table: polars' default.
pub const ROW_GROUP: usize = 512 * 512;

/// The memory a table's records may take before the table is streamed (32 MiB: about 300 000
/// evaluation rows, or 4 million novelty scores).
pub const BUFFER_BYTES: usize = 32 << 20;

/// The memory one record of a table takes.
fn record_bytes(r: &Record) -> usize {
    let heap = match r {
        Record::Mixture(m) => m.weights.len() * 8,
        Record::Extra(x) => x.values.len() * 8 + x.name.len(),
        Record::Novelty(n) => (n.scores.typical.len() + n.scores.novel.len()) * 8,
        _ => 0,
    };
    std::mem::size_of::<Record>() + heap
}

/// The name of a staging folder inside a run's output folder, before the process id.
pub const STAGING_PREFIX: &str = ".partial-";

type Frame = fn(&RunMeta, &[Record]) -> PolarsResult<DataFrame>;

/// One streamed table: which records it takes, and how many rows each makes.
struct TableKind {
    /// The file's name without extension.
    name: &'static str,
    frame: Frame,
    /// The rows a record adds (`None`: not this table's record).
    rows_of: fn(&Record) -> Option<usize>,
    /// Also written as CSV.
    csv: bool,
    /// Written only when the run made at least one of its records.
    optional: bool,
}

const TABLES: [TableKind; 7] = [
    TableKind {
        name: "metrics",
        frame: metrics_frame,
        rows_of: |r| matches!(r, Record::Eval(_)).then_some(1),
        csv: true,
        optional: false,
    },
    TableKind {
        name: "rounds",
        frame: rounds_frame,
        rows_of: |r| matches!(r, Record::Round(_)).then_some(1),
        csv: false,
        optional: false,
    },
    TableKind {
        name: "jobs",
        frame: jobs_frame,
        rows_of: |r| matches!(r, Record::Job(_)).then_some(1),
        csv: false,
        optional: false,
    },
    TableKind {
        name: "gossip",
        frame: gossip_frame,
        rows_of: |r| matches!(r, Record::Gossip(_)).then_some(1),
        csv: false,
        optional: true,
    },
    TableKind {
        name: "mixtures",
        frame: mixtures_frame,
        rows_of: |r| match r {
            Record::Mixture(m) => Some(m.weights.len()),
            _ => None,
        },
        csv: false,
        optional: true,
    },
    TableKind {
        name: "extras",
        frame: extras_frame,
        rows_of: |r| match r {
            Record::Extra(x) => Some(x.values.len()),
            _ => None,
        },
        csv: false,
        optional: true,
    },
    TableKind {
        name: "novelty",
        frame: novelty_frame,
        rows_of: |r| match r {
            Record::Novelty(n) => Some(n.scores.typical.len() + n.scores.novel.len()),
            _ => None,
        },
        csv: false,
        optional: true,
    },
];

/// An open file and the polars writer that appends to it (through a second handle, so that
/// the file can be synced once the writer is done).
struct Sink<W> {
    file: DiskFile,
    path: PathBuf,
    writer: W,
}

impl<W> Sink<W> {
    fn open(
        staging: &Staging,
        name: &str,
        make: impl FnOnce(DiskFile) -> PolarsResult<W>,
    ) -> Result<Self, ReportError> {
        let path = staging.path(name);
        let file = staging.create(name)?;
        let handle = file.try_clone().map_err(|source| ReportError::Io {
            path: path.clone(),
            source,
        })?;
        let writer = make(handle).map_err(|source| write_error(&file, &path, source))?;
        Ok(Sink { file, path, writer })
    }

    fn polars<T>(&self, result: PolarsResult<T>) -> Result<T, ReportError> {
        result.map_err(|source| write_error(&self.file, &self.path, source))
    }

    fn sync(self) -> Result<PathBuf, ReportError> {
        self.file.sync_all().map_err(|source| ReportError::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(self.path)
    }
}

/// A table being written: its buffered records and, once the first row group is out, its
/// files.
struct Table {
    kind: &'static TableKind,
    buffered: Vec<Record>,
    /// Rows and bytes of the buffered records.
    rows: usize,
    bytes: usize,
    seen: bool,
    /// Outgrew the buffer: written in row groups as it goes.
    streaming: bool,
    parquet: Option<Sink<ParquetBatches<DiskFile>>>,
    csv: Option<Sink<CsvBatches<DiskFile>>>,
}

impl Table {
    fn new(kind: &'static TableKind) -> Table {
        Table {
            kind,
            buffered: Vec::new(),
            rows: 0,
            bytes: 0,
            seen: false,
            streaming: false,
            parquet: None,
            csv: None,
        }
    }

    /// Buffers `r` if it is this table's; once the table streams, writes the buffer whenever
    /// it holds a row group.
    fn take(&mut self, at: &Place, r: &Record) -> Result<(), ReportError> {
        let Some(rows) = (self.kind.rows_of)(r) else {
            return Ok(());
        };
        self.seen = true;
        self.buffered.push(r.clone());
        self.rows += rows;
        self.bytes += record_bytes(r);
        self.streaming |= self.bytes > at.buffer_bytes;
        if self.streaming && self.rows >= at.row_group {
            self.write_buffer(at)?;
        }
        Ok(())
    }

    /// Writes the buffered records as row groups of at most `at.row_group` rows (opening the
    /// files on the first call) and empties the buffer.
    fn write_buffer(&mut self, at: &Place) -> Result<(), ReportError> {
        let parquet_name = format!("{}.parquet", self.kind.name);
        let df =
            (self.kind.frame)(&at.meta, &self.buffered).map_err(|source| ReportError::Polars {
                path: at.staging.path(&parquet_name),
                source,
            })?;
        self.buffered.clear();
        (self.rows, self.bytes) = (0, 0);
        if self.parquet.is_none() {
            let schema = df.schema().clone();
            self.parquet = Some(Sink::open(&at.staging, &parquet_name, |f| {
                ParquetWriter::new(f).batched(&schema)
            })?);
            if self.kind.csv {
                let name = format!("{}.csv", self.kind.name);
                self.csv = Some(Sink::open(&at.staging, &name, |f| {
                    CsvWriter::new(f).batched(&schema)
                })?);
            }
        }
        let mut offset = 0;
        while offset < df.height() {
            let group = df.slice(offset as i64, at.row_group);
            offset += group.height();
            if let Some(sink) = &mut self.parquet {
                let written = sink.writer.write_batch(&group);
                sink.polars(written)?;
            }
            if let Some(sink) = &mut self.csv {
                let written = sink.writer.write_batch(&group);
                sink.polars(written)?;
            }
        }
        Ok(())
    }

    /// Writes what is left, closes the files and returns their paths (none for an optional
    /// table the run never fed).
    fn finish(mut self, at: &Place) -> Result<Vec<PathBuf>, ReportError> {
        if self.kind.optional && !self.seen {
            return Ok(Vec::new());
        }
        if !self.streaming {
            // One write of the whole table.
            let parquet = format!("{}.parquet", self.kind.name);
            let mut df = (self.kind.frame)(&at.meta, &self.buffered).map_err(|source| {
                ReportError::Polars {
                    path: at.staging.path(&parquet),
                    source,
                }
            })?;
            let mut paths = vec![stage_parquet(&at.staging, &parquet, &mut df)?];
            if self.kind.csv {
                let csv = format!("{}.csv", self.kind.name);
                paths.push(stage_csv(&at.staging, &csv, &mut df)?);
            }
            return Ok(paths);
        }
        if !self.buffered.is_empty() {
            self.write_buffer(at)?;
        }
        let mut paths = Vec::new();
        if let Some(sink) = self.parquet.take() {
            let done = sink.writer.finish().map(|_| ());
            sink.polars(done)?;
            paths.push(sink.sync()?);
        }
        if let Some(mut sink) = self.csv.take() {
            let done = sink.writer.finish();
            sink.polars(done)?;
            paths.push(sink.sync()?);
        }
        Ok(paths)
    }
}

/// Where and how the tables are written.
struct Place {
    /// The staging folder (removed, with whatever is left in it, when the run's files are
    /// dropped: published or not).
    staging: Staging,
    meta: RunMeta,
    row_group: usize,
    buffer_bytes: usize,
}

/// A run's result files while it goes (see the module docs).
pub struct RunFiles {
    /// Before `folder`: fields drop in order, and the staging folder goes before the output
    /// folder decides whether it can remove itself (one this run made and never wrote into).
    at: Place,
    folder: OutputFolder,
    tables: Vec<Table>,
    clients: ClientsFileRows,
    summary: SummaryInputs,
    /// The first write that failed: reported by [`RunFiles::finish`].
    failed: Option<ReportError>,
    notes: Vec<String>,
    /// `Some` when the run's final models are kept for `models.safetensors`: the last
    /// [`Record::FinalModels`] seen.
    final_models: Option<Vec<Vec<f32>>>,
    /// `Some` when the clients' own models are kept for `client_models.safetensors`: each
    /// client's latest.
    client_models: Option<BTreeMap<u32, KeptClient>>,
    /// Files staged besides the tables (`models.safetensors`, `machine.yaml`).
    staged: Vec<PathBuf>,
    /// The last round recorded.
    rounds_done: u32,
}

/// A client's latest own models ([`Record::ClientModels`]) and mixture weights
/// ([`Record::Mixture`]), and the round of the evaluation they were last seen at.
#[derive(Default)]
struct KeptClient {
    round: u32,
    models: Vec<(ModelKind, Vec<Vec<f32>>)>,
    mixture: Option<Vec<f64>>,
}

impl KeptClient {
    fn see(&mut self, r: &Record) {
        match r {
            Record::ClientModels(c) => {
                self.round = c.round;
                for (kind, models) in &c.models {
                    match self.models.iter_mut().find(|(k, _)| k == kind) {
                        Some((_, kept)) => kept.clone_from(models),
                        None => self.models.push((*kind, models.clone())),
                    }
                }
            }
            Record::Mixture(m) => {
                self.round = m.round;
                self.mixture = Some(m.weights.clone());
            }
            _ => {}
        }
    }
}

impl RunFiles {
    /// Starts a run's files in `out` (created if missing): claims the folder (see
    /// [`OutputFolder::claim`]; `rules` say whether foreign files are moved aside and which
    /// inputs must not be results), removes staging folders of earlier killed runs, makes this
    /// run's, and writes `scenario.yaml` (the resolved scenario under a header naming the run)
    /// there. What the claim had to say (files moved aside) is in [`RunFiles::notes`].
    pub fn create(
        out: &Path,
        meta: RunMeta,
        resolved_yaml: &str,
        rules: &OutputRules,
    ) -> Result<RunFiles, ReportError> {
        let mut names = super::result_files();
        names.push(CHECKPOINT_FILE);
        let (folder, notes) = OutputFolder::claim(out, &names, rules)?;
        let staging = folder.staging(STAGING_PREFIX)?;
        let files = RunFiles {
            folder,
            notes,
            at: Place {
                staging,
                meta,
                row_group: ROW_GROUP,
                buffer_bytes: BUFFER_BYTES,
            },
            tables: TABLES.iter().map(Table::new).collect(),
            clients: ClientsFileRows::default(),
            summary: SummaryInputs::default(),
            failed: None,
            final_models: None,
            client_models: None,
            staged: Vec::new(),
            rounds_done: 0,
        };
        let header = format!(
            "# Resolved scenario of run {} (content hash sha256:{}).\n",
            files.at.meta.run_id, files.at.meta.content_hash
        );
        let text = format!("{header}{resolved_yaml}");
        files.at.staging.write("scenario.yaml", text.as_bytes())?;
        Ok(files)
    }

    /// Streams tables past `bytes` of records in row groups of `rows` rows, instead of
    /// [`BUFFER_BYTES`] and [`ROW_GROUP`] (for tests of streamed tables).
    pub fn with_limits(mut self, bytes: usize, rows: usize) -> RunFiles {
        (self.at.buffer_bytes, self.at.row_group) = (bytes, rows.max(1));
        self
    }

    /// Takes in the run's next record. A failed write is kept and reported by `finish`; later
    /// records are then only summarised.
    pub fn record(&mut self, r: &Record) {
        if let Record::Round(round) = r {
            self.rounds_done = self.rounds_done.max(round.round);
        }
        self.summary.see(r);
        self.clients.see(r);
        if let (Some(kept), Record::FinalModels(models)) = (&mut self.final_models, r) {
            kept.clone_from(models);
        }
        if let (Some(kept), Record::ClientModels(ClientModelsRecord { client, .. }))
        | (Some(kept), Record::Mixture(MixtureRecord { client, .. })) =
            (&mut self.client_models, r)
        {
            kept.entry(*client).or_default().see(r);
        }
        if self.failed.is_some() {
            return;
        }
        for table in &mut self.tables {
            if let Err(e) = table.take(&self.at, r) {
                self.failed = Some(e);
                return;
            }
        }
    }

    /// Keeps the run's final models, for [`RunFiles::write_final_models`].
    pub fn keep_final_models(&mut self) {
        self.final_models = Some(Vec::new());
    }

    /// Keeps each client's latest own models, for [`RunFiles::write_final_models`].
    pub fn keep_client_models(&mut self) {
        self.client_models = Some(BTreeMap::new());
    }

    /// Writes the kept final models as `models.safetensors` (tensor names of `arch`, see
    /// [`crate::models::models_to_safetensors`]) and the kept clients' models, where any
    /// client had its own, as `client_models.safetensors`
    /// ([`crate::models::client_models_to_safetensors`]); nothing that was not kept.
    pub fn write_final_models(&mut self, arch: &Architecture) -> Result<(), ReportError> {
        if let Some(models) = self.final_models.take() {
            let bytes = crate::models::models_to_safetensors(arch, &models);
            self.stage(MODELS_FILE, &bytes)?;
        }
        let clients = self.client_models.take().unwrap_or_default();
        let clients: Vec<ClientModels<'_>> = clients
            .iter()
            .filter(|(_, kept)| !kept.models.is_empty() || kept.mixture.is_some())
            .map(|(&client, kept)| ClientModels {
                client,
                round: kept.round,
                models: (kept.models.iter())
                    .map(|(kind, models)| (kind.as_str(), &models[..]))
                    .collect(),
                mixture: kept.mixture.as_deref(),
            })
            .collect();
        if !clients.is_empty() {
            let bytes = crate::models::client_models_to_safetensors(arch, &clients);
            self.stage(CLIENT_MODELS_FILE, &bytes)?;
        }
        Ok(())
    }

    /// Writes `bytes` as the staged file `name`, published with the tables.
    fn stage(&mut self, name: &str, bytes: &[u8]) -> Result<(), ReportError> {
        let path = self.at.staging.write(name, bytes)?;
        self.staged.push(path);
        Ok(())
    }

    /// The last round whose record the run made (0: none).
    pub fn rounds_done(&self) -> u32 {
        self.rounds_done
    }

    /// What the summaries need, from the records so far.
    pub fn summary_inputs(&self) -> &SummaryInputs {
        &self.summary
    }

    /// Writes the rest of every table, `clients.parquet`/`.csv` and `summary.csv` (last), then
    /// publishes them into the output folder as one unit; returns their final paths,
    /// `summary.csv` last.
    pub fn finish(self, summaries: &[Summary]) -> Result<Vec<PathBuf>, ReportError> {
        self.finish_with(Some(summaries))
    }

    /// What a run that failed had written when it failed: every table and `clients.parquet`
    /// as far as they go, published as [`RunFiles::finish`] does but without `summary.csv`, so
    /// that the folder does not read as a finished run (and the earlier run's files there go,
    /// as they would have).
    pub fn finish_unfinished(self) -> Result<Vec<PathBuf>, ReportError> {
        self.finish_with(None)
    }

    fn finish_with(mut self, summaries: Option<&[Summary]>) -> Result<Vec<PathBuf>, ReportError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let staging = &self.at.staging;
        let mut staged = vec![staging.path("scenario.yaml")];
        for table in std::mem::take(&mut self.tables) {
            staged.extend(table.finish(&self.at)?);
        }
        let staging = &self.at.staging;
        let mut clients =
            self.clients
                .frame(&self.at.meta)
                .map_err(|source| ReportError::Polars {
                    path: staging.path("clients.parquet"),
                    source,
                })?;
        staged.push(stage_parquet(staging, "clients.parquet", &mut clients)?);
        staged.push(stage_csv(staging, "clients.csv", &mut clients)?);
        staged.append(&mut self.staged);
        if let Some(summaries) = summaries {
            let mut s = summary_frame(summaries).map_err(|source| ReportError::Polars {
                path: staging.path("summary.csv"),
                source,
            })?;
            staged.push(stage_csv(staging, "summary.csv", &mut s)?);
        }
        let published = self.publish(staged)?;
        if summaries.is_some() {
            // Finished: its checkpoint has nothing left to resume.
            self.folder.publish(&[], &[CHECKPOINT_FILE])?;
        }
        Ok(published)
    }

    /// The run's checkpoint in the folder, if fedsim wrote it there (a foreign file of its
    /// name was refused, or moved aside, when the folder was claimed).
    pub fn checkpoint(&self) -> Option<PathBuf> {
        let owned = self.folder.owned().iter().any(|n| n == CHECKPOINT_FILE);
        owned.then(|| self.folder.dir().join(CHECKPOINT_FILE))
    }

    /// Writes the run's checkpoint as `write` writes it: staged, synced, then moved in place of
    /// the last one.
    pub fn save_checkpoint(
        &mut self,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), ReportError> {
        let path = self.at.staging.path(CHECKPOINT_FILE);
        let io = |source| ReportError::Io {
            path: path.clone(),
            source,
        };
        let file = self.at.staging.create(CHECKPOINT_FILE)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        write(&mut out).map_err(io)?;
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        self.folder.publish(std::slice::from_ref(&path), &[])?;
        Ok(())
    }

    /// Removes the earlier run's result files (those fedsim wrote) and moves `staged` in, in
    /// order.
    fn publish(&mut self, staged: Vec<PathBuf>) -> Result<Vec<PathBuf>, ReportError> {
        Ok(self.folder.publish(&staged, &super::result_files())?)
    }

    /// Writes `machine.yaml` ([`super::Machine`]): what ran the run.
    pub fn describe_machine(&mut self, machine: &super::Machine) -> Result<(), ReportError> {
        self.stage(super::MACHINE_FILE, machine.to_yaml().as_bytes())
    }

    /// What claiming the folder did beyond the run's own files (foreign files moved aside).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

impl Drop for RunFiles {
    // The open tables' files close before their staging folder goes (see [`Place::staging`]).
    fn drop(&mut self) {
        self.tables.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{EvalRecord, JobOutcome, JobRecord, ModelKind, Split};
    use crate::results::read_parquet;
    use crate::sim::{SimDuration, SimTime};

    fn meta() -> RunMeta {
        RunMeta {
            run_id: "id".into(),
            content_hash: "hash".into(),
            algorithm: "fedavg".into(),
            seed: 1,
            reports_losses: true,
        }
    }

    /// Rounds 1..=5 of 7 clients' test evaluations and jobs.
    fn records() -> Vec<Record> {
        let mut out = Vec::new();
        for round in 1..=5u32 {
            for client in 0..7u32 {
                out.push(Record::Job(JobRecord {
                    round,
                    client,
                    outcome: JobOutcome::Aggregated,
                    sent: SimTime(round as u64 * 10),
                    end: SimTime(round as u64 * 10 + 5),
                    download: SimDuration(1),
                    compute: SimDuration(3),
                    staleness: 0,
                    reported_loss: (client % 2 == 1).then_some(client as f64 / 4.0),
                }));
                out.push(Record::Eval(EvalRecord {
                    round,
                    time: SimTime(round as u64 * 10 + 7),
                    client,
                    split: Split::Test,
                    model: ModelKind::Global,
                    n_samples: 10 + client as usize,
                    loss: 0.1 * client as f64 + round as f64,
                    accuracy: (client as f64 + round as f64) / 20.0,
                    sampled: true,
                    cluster: None,
                    unseen: false,
                }));
            }
        }
        out
    }

    fn write(dir: &Path, (bytes, row_group): (usize, usize)) -> Vec<PathBuf> {
        let mut files = RunFiles::create(dir, meta(), "rounds: 5\n", &OutputRules::default())
            .unwrap()
            .with_limits(bytes, row_group);
        records().iter().for_each(|r| files.record(r));
        files.finish(&[]).unwrap()
    }

    #[test]
    fn streamed_tables_hold_every_record_in_order_whatever_the_row_group() {
        let tmp = tempfile::tempdir().unwrap();
        let (small, whole) = (tmp.path().join("small"), tmp.path().join("whole"));
        // Streamed from the first record on, in groups of 4 rows; or held whole.
        let files = write(&small, (0, 4));
        write(&whole, (BUFFER_BYTES, 4));
        assert_eq!(files.last().unwrap(), &small.join("summary.csv"));
        assert!(!std::fs::read_dir(&small).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".partial")));
        let all = records();
        let expected = metrics_frame(&meta(), &all).unwrap();
        for dir in [&small, &whole] {
            assert!(read_parquet(&dir.join("metrics.parquet"))
                .unwrap()
                .equals_missing(&expected));
            let jobs = read_parquet(&dir.join("jobs.parquet")).unwrap();
            assert!(jobs.equals_missing(&jobs_frame(&meta(), &all).unwrap()));
        }
        // 35 evaluation rows in groups of 4: nine row groups; CSV rows are the same bytes.
        let groups = |dir: &Path| {
            let f = std::fs::File::open(dir.join("metrics.parquet")).unwrap();
            ParquetReader::new(f)
                .get_metadata()
                .unwrap()
                .row_groups
                .len()
        };
        assert_eq!((groups(&small), groups(&whole)), (9, 1));
        let csv = |dir: &Path| std::fs::read(dir.join("metrics.csv")).unwrap();
        assert_eq!(csv(&small), csv(&whole));
        // Held whole, the file is what one write of the whole table gives.
        let mut single = Vec::new();
        ParquetWriter::new(&mut single)
            .finish(&mut expected.clone())
            .unwrap();
        assert_eq!(
            single,
            std::fs::read(whole.join("metrics.parquet")).unwrap()
        );
        // No optional table was fed, so none was written.
        assert!(!small.join("mixtures.parquet").exists());
    }

    #[test]
    fn an_unfinished_run_leaves_the_earlier_results_and_no_staging() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, (0, 4));
        let before = std::fs::read(out.join("metrics.parquet")).unwrap();
        {
            let mut files =
                RunFiles::create(&out, meta(), "rounds: 5\n", &OutputRules::default()).unwrap();
            records()[..10].iter().for_each(|r| files.record(r));
            // Dropped without finishing: a failed simulation.
        }
        assert_eq!(std::fs::read(out.join("metrics.parquet")).unwrap(), before);
        assert!(out.join("summary.csv").exists());
        let names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with(".partial")),
            "{names:?}"
        );
    }
}
