//! One scenario end to end: build the data, simulate, summarise, write the result files.

use super::checkpoint::{
    read_checkpoint, write_checkpoint, Cadence, CheckpointError, CheckpointOptions, RecordLog,
    Saved,
};
use super::tracking::{Finished, OnEvaluation, TrackedRun, Tracker};
use crate::actors::{simulate, Checkpoints, RunState, SimOutput, WriteClients};
use crate::data::DataError;
use crate::io::OutputRules;
use crate::models::Architecture;
use crate::plan::RunPlan;
use crate::records::{DivergenceRecord, EarlyEndRecord, Record, RoundRecord};
use crate::results::{Machine, ReportError, RunFiles, RunIdentity, RunMeta, Summary};
use crate::scenario::Scenario;
use crate::settings::CheckpointEvery;
use crate::sim::{RecordObserver, SeedTree, SimError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub out_dir: PathBuf,
    /// Trainer threads.
    pub threads: usize,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
    /// Move foreign files with result names aside instead of refusing the folder (never
    /// deleting them; see [`crate::io::folder`]).
    pub force: bool,
    /// Write the final global models as `models.safetensors` ([`crate::models::read_models`]
    /// reads them back, `model.init` starts a run from them).
    pub save_models: bool,
    /// Write each client's own models at its last evaluation as `client_models.safetensors`
    /// ([`crate::models::client_models_to_safetensors`]).
    pub save_client_models: bool,
    /// When the simulation fails after it has begun, publish what it had written (without
    /// `summary.csv`) instead of nothing (`fedsim run`; a sweep's cells and re-runs keep
    /// nothing of a failed run).
    pub keep_unfinished: bool,
    /// How often the run saves a checkpoint, and whether it resumes from the one it finds.
    pub checkpoint: CheckpointOptions,
}

#[derive(Debug)]
pub struct RunReport {
    /// One per evaluated model; the most client-specific one last (see [`RunReport::headline`]).
    pub summaries: Vec<Summary>,
    pub out_dir: PathBuf,
    pub files: Vec<PathBuf>,
    /// Events the scheduler delivered.
    pub events: u64,
    /// Simulated seconds at the end of the run, and the wall-clock seconds it took.
    pub sim_seconds: f64,
    pub wall_seconds: f64,
    /// Where the run's numbers first stopped being finite (`None`: they never did).
    pub divergence: Option<DivergenceRecord>,
    /// The run ended before its last round because no client would be online again.
    pub ended_early: Option<EarlyEndRecord>,
    /// What claiming the output folder did beyond writing results (files moved aside).
    pub notes: Vec<String>,
    /// The round at whose start the run resumed from its checkpoint (`None`: it ran from the
    /// start).
    pub resumed_at: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("simulation failed")]
    Sim(#[from] SimError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("data")]
    Data(#[from] DataError),
    #[error(transparent)]
    Preflight(#[from] crate::scenario::ScenarioError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("tracking")]
    Tracking(#[from] crate::io::TrackerError),
    #[error("{}: {error}", file.display())]
    Fit {
        file: PathBuf,
        error: crate::settings::FieldError,
    },
    #[error("cannot create the output folder {}", path.display())]
    OutDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--threads {asked}: at most {most} trainer threads (this machine has {cores} cores, and \
         more threads than cores make a run no faster; results do not depend on the count)"
    )]
    Threads {
        asked: usize,
        most: usize,
        cores: usize,
    },
    #[error(
        "--jobs {asked}: at most {most} cells at once (each runs at least one trainer thread)"
    )]
    Jobs { asked: usize, most: usize },
    /// The simulation failed after it had begun, and what it had written could not be
    /// published either.
    #[error("{error}; what the run had written could not be published either: {write}")]
    UnfinishedUnwritten { error: String, write: String },
    /// The simulation failed after it had begun; what it had written is published.
    #[error(
        "{error}; what the run had written is in {} ({}), without summary.csv: the run did \
         not finish",
        out.display(),
        match rounds { 0 => "no round had ended".to_string(), r => format!("rounds 1 to {r}") }
    )]
    Unfinished {
        /// The failure, with its causes.
        error: String,
        out: PathBuf,
        /// The rounds that had ended.
        rounds: u32,
    },
}

impl RunError {
    /// Whether the run was stopped from outside ([`crate::sim::interrupt`]): it publishes
    /// nothing, and the next run resumes from its last checkpoint.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, RunError::Sim(SimError::Interrupted))
    }
}

/// The most trainer threads a run takes: twice this machine's cores, and at least 256 (a
/// thread per client beyond the cores runs no faster, and thousands of threads can exhaust
/// the process's memory before a run begins).
pub fn max_threads() -> usize {
    (2 * default_threads()).max(256)
}

/// Refuses more trainer threads than [`max_threads`].
pub fn check_threads(threads: usize) -> Result<(), RunError> {
    let most = max_threads();
    if threads > most {
        return Err(RunError::Threads {
            asked: threads,
            most,
            cores: default_threads(),
        });
    }
    Ok(())
}

/// The number of cores, the default for `--threads`.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The default output folder of a scenario: `results/<name>/seed-<seed>`.
pub fn default_out_dir(s: &Scenario) -> PathBuf {
    Path::new("results")
        .join(&s.name)
        .join(format!("seed-{}", s.run.seed))
}

impl RunReport {
    /// The summary of the most client-specific model evaluated (personalized over global) on
    /// the training clients (`None` for a run that evaluates nothing: `noop`).
    pub fn headline(&self) -> Option<&Summary> {
        self.summaries.iter().rfind(|s| !s.unseen)
    }
}

/// Runs the simulation only (no files): data, actors, records (all kept in the output).
pub fn simulate_scenario(
    s: &Scenario,
    threads: usize,
    on_record: impl FnMut(&Record) + 'static,
) -> Result<SimOutput, RunError> {
    let observer = RecordObserver::keeping(on_record);
    observe_scenario(s, threads, observer, None).map(|(output, _)| output)
}

/// Runs the simulation only, showing its records to `observer` (which says whether the output
/// keeps them), with `checkpoints` if given.
pub fn observe_scenario(
    s: &Scenario,
    threads: usize,
    observer: RecordObserver<Record>,
    checkpoints: Option<Checkpoints>,
) -> Result<(SimOutput, Architecture), RunError> {
    check_threads(threads)?;
    crate::plan::preflight(s)?;
    let data = s.data.build(&s.split, &SeedTree::new(s.data_seed))?;
    crate::plan::check_run_fits(&s.run, &data, crate::io::machine_memory()).map_err(|e| {
        RunError::Fit {
            file: s.file.clone(),
            error: e,
        }
    })?;
    let arch = Architecture::for_input(&s.run.model, data.input_shape(), data.classes);
    let data = Arc::new(data);
    let plan = RunPlan::new(&s.run, data, threads).map_err(|e| match e {
        // A field only the built data could check: located in the file like the others.
        SimError::Scenario(field) => RunError::Preflight(s.locate(field)),
        e => RunError::Sim(e),
    })?;
    let output = simulate(plan, observer, checkpoints)?;
    Ok((output, arch))
}

/// Runs a scenario and writes its result files into `opts.out_dir`.
pub fn run_scenario(s: &Scenario, opts: &RunOptions) -> Result<RunReport, RunError> {
    run_with_own_bar(s, opts, None)
}

/// [`run_scenario`], handing each evaluation to `on_evaluation` as the run makes it (the
/// figures `tracking:` reports: [`super::Evaluation`]).
pub fn run_scenario_reporting(
    s: &Scenario,
    opts: &RunOptions,
    on_evaluation: OnEvaluation,
) -> Result<RunReport, RunError> {
    run_with_own_bar(s, opts, Some(on_evaluation))
}

/// A run with a bar of its own on stderr where `opts` asks for progress, cleared at the end.
fn run_with_own_bar(
    s: &Scenario,
    opts: &RunOptions,
    on_evaluation: Option<OnEvaluation>,
) -> Result<RunReport, RunError> {
    let bar = if opts.progress {
        ProgressBar::with_draw_target(Some(s.run.rounds as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let report = run_observed(s, opts, bar.clone(), on_evaluation);
    bar.finish_and_clear();
    report
}

/// A run's progress bar: rounds done out of the scenario's rounds (and, with privacy, the ε
/// spent so far).
pub fn style_run_bar(bar: &ProgressBar, s: &Scenario, prefix: &str) {
    bar.set_length(s.run.rounds as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] round {pos}/{len}{msg} {elapsed_precise} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
}

/// What the progress bar says after `round` besides its number: the ε spent so far, with
/// privacy.
fn round_message(round: &RoundRecord) -> String {
    match round.privacy {
        Some(p) => format!(" ε {:.3}", p.epsilon),
        None => String::new(),
    }
}

/// [`run_scenario`], reporting finished rounds on `bar` (which it styles, keeping its prefix if
/// it has one; hidden bars are fine).
pub fn run_scenario_with_bar(
    s: &Scenario,
    opts: &RunOptions,
    bar: ProgressBar,
) -> Result<RunReport, RunError> {
    run_observed(s, opts, bar, None)
}

fn run_observed(
    s: &Scenario,
    opts: &RunOptions,
    bar: ProgressBar,
    on_evaluation: Option<OnEvaluation>,
) -> Result<RunReport, RunError> {
    let wall = Instant::now();
    check_threads(opts.threads)?;
    let prefix = match bar.prefix() {
        p if p.is_empty() => format!("{} ({})", s.name, s.run.algorithm.name()),
        p => p,
    };
    style_run_bar(&bar, s, &prefix);
    let meta = RunMeta {
        run_id: s.run_id().to_string(),
        content_hash: s.content_hash.clone(),
        algorithm: s.run.algorithm.name().to_string(),
        seed: s.run.seed,
        reports_losses: s.run.sampling.strategy.uses_feedback(),
    };
    let rules = OutputRules {
        force: opts.force,
        inputs: s.input_files(),
    };
    let mut files =
        RunFiles::create(&opts.out_dir, meta, &s.resolved_yaml, &rules).map_err(|e| match e {
            ReportError::Io { path, source } if path == opts.out_dir => {
                RunError::OutDir { path, source }
            }
            e => RunError::Report(e),
        })?;
    if opts.save_models {
        files.keep_final_models();
    }
    let saving_clients;
    let s = if opts.save_client_models {
        files.keep_client_models();
        let mut with = s.clone();
        with.run.saves_client_models = true;
        saving_clients = with;
        &saving_clients
    } else {
        s
    };
    // The records stream into the result files as they are made; the run keeps none. A run
    // that resumes from a checkpoint takes in its records first, as they were made.
    let notes = files.notes().to_vec();
    let log = Rc::new(RefCell::new(RecordLog::default()));
    let resumed = match files.checkpoint() {
        Some(path) if !opts.checkpoint.restart => {
            Some(read_checkpoint(&path, &s.content_hash, &s.resolved_yaml)?)
        }
        _ => None,
    };
    let resumed_at = resumed.as_ref().map(|saved| saved.resumed.state.round);
    let tracked = TrackedRun {
        name: &s.name,
        run_id: s.run_id(),
        seed: s.run.seed,
        resolved_yaml: &s.resolved_yaml,
    };
    let tracker = match (&s.tracking, on_evaluation) {
        (None, None) => None,
        (spec, on_evaluation) => Some(Tracker::open(spec.as_ref(), &tracked, on_evaluation)?),
    };
    let tracker = Rc::new(RefCell::new(tracker));
    let files = Rc::new(RefCell::new(files));
    let (tick, sink, tracking) = (bar.clone(), files.clone(), tracker.clone());
    // The command line's cadence, else the scenario's, else every minute.
    let every = (opts.checkpoint.every).or(s.checkpoint).unwrap_or_default();
    let logging = (every != CheckpointEvery::Off).then(|| log.clone());
    let mut see = move |r: &Record| {
        match r {
            Record::Round(round) => {
                tick.set_position(round.round as u64);
                tick.set_message(round_message(round));
            }
            Record::Gossip(round) => tick.set_position(round.round as u64),
            _ => {}
        }
        sink.borrow_mut().record(r);
        if let Some(tracker) = tracking.borrow_mut().as_mut() {
            tracker.record(r);
        }
        if let Some(log) = &logging {
            log.borrow_mut().push(r);
        }
    };
    let checkpoints = checkpoints(s, every, resumed, &files, &log, &mut see);
    let observed = observe_scenario(
        s,
        opts.threads,
        RecordObserver::streaming(see),
        Some(checkpoints),
    );
    let mut files = Rc::try_unwrap(files)
        .map_err(|_| ())
        .expect("the simulation has let go of the observer")
        .into_inner();
    let mut tracker = tracker.take();
    if observed.is_err() {
        // The trackers say the run failed (what they show of it stays).
        if let Some(t) = tracker.take() {
            let _ = t.finish(None);
        }
    }
    let (output, arch) = match observed {
        Ok(done) => done,
        // Failed once it had begun: what it wrote is published where asked for. Otherwise
        // the files go with their staging folder, and the folder keeps what it held.
        Err(e @ RunError::Sim(_))
            if opts.keep_unfinished && files.rounds_done() > 0 && !e.is_interrupted() =>
        {
            let rounds = files.rounds_done();
            let machine = Machine::here(opts.threads, &s.run.training.device);
            let published =
                (files.describe_machine(&machine)).and_then(|()| files.finish_unfinished());
            if let Err(write) = published {
                // The failure that stopped the run first (a full disk's checkpoint, say).
                return Err(RunError::UnfinishedUnwritten {
                    error: crate::error_chain(&e),
                    write: crate::error_chain(&write),
                });
            }
            return Err(RunError::Unfinished {
                error: crate::error_chain(&e),
                out: opts.out_dir.clone(),
                rounds,
            });
        }
        Err(e) => return Err(e),
    };
    files.write_final_models(&arch)?;
    files.describe_machine(&Machine::here(opts.threads, &s.run.training.device))?;
    let (sim_seconds, wall_seconds) = (output.end_time.as_secs_f64(), wall.elapsed().as_secs_f64());
    let run = RunIdentity {
        run_id: s.run_id(),
        name: &s.name,
        algorithm: s.run.algorithm.name(),
        seed: s.run.seed,
        sim_seconds,
        wall_seconds,
    };
    let inputs = files.summary_inputs();
    let summaries = Summary::per_model(run, inputs, s.target_accuracy);
    let divergence = inputs.divergence().cloned();
    let ended_early = inputs.ended_early().cloned();
    let files = files.finish(&summaries)?;
    let mut notes = notes;
    if let Some(t) = tracker {
        let last = summaries.iter().map(|s| s.final_round).max().unwrap_or(0);
        let values = summary_values(&summaries);
        let finished = Finished {
            last_round: last,
            end: output.end_time,
            values: &values,
        };
        if let Some(e) = t.finish(Some(finished)) {
            notes.push(format!(
                "tracking stopped part way: {}; the result files are complete",
                crate::error_chain(&e)
            ));
        }
    }
    Ok(RunReport {
        summaries,
        out_dir: opts.out_dir.clone(),
        files,
        events: output.events,
        sim_seconds,
        wall_seconds,
        divergence,
        ended_early,
        notes,
        resumed_at,
    })
}

/// The summaries' figures as tracked values (`summary/<model>[/unseen]/<column>`).
fn summary_values(summaries: &[Summary]) -> Vec<(String, f64)> {
    let mut values = Vec::new();
    for s in summaries {
        let prefix = match s.unseen {
            true => format!("summary/{}/unseen", s.model),
            false => format!("summary/{}", s.model),
        };
        let figures = [
            ("test_acc_mean", s.test.weighted_mean),
            ("test_acc_bottom_decile", s.test.bottom_decile),
            ("test_acc_worst10_mean", s.test.worst10_mean),
            ("test_acc_std", s.test.std),
            ("test_acc_jain", s.test.jain),
            ("test_loss_mean", s.test_loss_mean),
        ];
        for (name, value) in figures {
            values.push((format!("{prefix}/{name}"), value));
        }
        if let Some(p) = &s.privacy {
            values.push((format!("{prefix}/epsilon"), p.epsilon));
        }
    }
    values
}

/// The run's checkpoints: from `resumed` (whose records `see` takes in first, as the run
/// made them, into the files and `log`), saved into `files` with the records of `log`
/// `every` so often.
fn checkpoints(
    s: &Scenario,
    every: CheckpointEvery,
    resumed: Option<Saved>,
    files: &Rc<RefCell<RunFiles>>,
    log: &Rc<RefCell<RecordLog>>,
    see: &mut impl FnMut(&Record),
) -> Checkpoints {
    let resume = resumed.map(|saved| {
        for r in &saved.records {
            see(r);
        }
        saved.resumed
    });
    let from = resume.as_ref().map_or(1, |r| r.state.round);
    let cadence = Rc::new(RefCell::new(Cadence::new(every, from)));
    let due = {
        let cadence = cadence.clone();
        Box::new(move |round| cadence.borrow().due(round))
    };
    let (files, log) = (files.clone(), log.clone());
    let (hash, yaml) = (s.content_hash.clone(), s.resolved_yaml.clone());
    let save = Box::new(move |state: &RunState, clients: WriteClients<'_>| {
        let (mut log, start) = (log.borrow_mut(), Instant::now());
        let saved = files.borrow_mut().save_checkpoint(&mut |w| {
            write_checkpoint(w, (&hash, &yaml), state, &mut log, &mut *clients)
        });
        saved.map_err(|e| SimError::Checkpoint(Box::new(e)))?;
        cadence.borrow_mut().saved(state.round, start.elapsed());
        Ok(())
    });
    Checkpoints { resume, due, save }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RoundPrivacy;

    #[test]
    fn the_bar_shows_the_privacy_spent() {
        let mut round = RoundRecord::default();
        assert_eq!(round_message(&round), "");
        round.privacy = Some(RoundPrivacy {
            epsilon: 1.23456,
            ..Default::default()
        });
        assert_eq!(round_message(&round), " ε 1.235");
    }
}
