//! Scenario files: YAML text → raw spec (unknown fields rejected) → validated [`Scenario`].
//!
//! Every error names the file, the field path, the line where it can be found, and what is
//! allowed. `--set a.b.c=VALUE` overrides are applied to the YAML tree before validation, so
//! they are checked like the file itself. This room parses and checks; it runs nothing.

mod locate;
mod raw;
mod reference;

use crate::settings::compact;
pub use raw::{RawLrSchedule, RawScenario, RawTraining};
pub use reference::{json_schema, json_schema_text, reference_page, REFERENCE_PAGE, SCHEMA_FILE};

use crate::algorithms::AlgorithmSpec;
use crate::algorithms::{names_where, Capabilities, LrSchedule, Training};
use crate::compression::Compressors;
use crate::data::{DatasetSpec, InputShape, SplitSpec};
use crate::models::ModelSpec;
use crate::models::{LocalPlan, LocalWork};
use crate::policy::PolicySpec;
use crate::privacy::{Accountant, Mechanism, PrivacySpec};
use crate::robust::Attacks;
use crate::sampling::{
    check_client_counts, RawSampling, SampleSize, Sampling, Strategies, STRATEGIES,
};
use crate::settings::catalogue::names_declaring;
use crate::settings::FieldError;
use crate::settings::OnDivergence;
use crate::settings::Precision;
use crate::settings::{EvaluatedSplits, EvaluationPlan, NoveltyScoring, RawEvaluation};
use crate::system::SystemSpec;
use crate::topology::TopologySpec;
use serde_yaml::Value;
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};

/// A problem with a scenario, located as precisely as possible.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file {}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", Located(self))]
    Invalid {
        file: PathBuf,
        path: String,
        line: Option<usize>,
        message: String,
    },
    #[error("--set {arg}: {message}")]
    Override { arg: String, message: String },
}

struct Located<'a>(&'a ScenarioError);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let ScenarioError::Invalid {
            file,
            path,
            line,
            message,
        } = self.0
        {
            write!(f, "{}", file.display())?;
            if let Some(l) = line {
                write!(f, ":{l}")?;
            }
            if path.is_empty() {
                write!(f, ": {message}")
            } else {
                write!(f, ": field `{path}`: {message}")
            }
        } else {
            Ok(())
        }
    }
}

/// What a client-server run needs besides its data.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub seed: u64,
    pub rounds: u32,
    /// When to evaluate (and always after the last round), and on which clients.
    pub evaluation: EvaluationPlan,
    pub model: ModelSpec,
    pub algorithm: AlgorithmSpec,
    pub training: Training,
    pub sampling: Sampling,
    pub policy: PolicySpec,
    pub system: SystemSpec,
    /// Fraction of the clients held out of training (chosen from the seed; see
    /// [`crate::plan::unseen_clients`]).
    pub unseen_fraction: f64,
    /// Peers and their graph, for decentralized algorithms (no server then).
    pub topology: Option<TopologySpec>,
    /// What a run does when its numbers stop being finite.
    pub on_divergence: OnDivergence,
    /// Client-level differential privacy, resolved against the clients when the run starts.
    pub privacy: Option<crate::privacy::PrivacySpec>,
    /// Secure aggregation's cost, paid by every synchronous round.
    pub secure_aggregation: Option<crate::system::secagg::SecAggSpec>,
    /// How clients compress their updates before uploading them.
    pub compression: Option<crate::compression::CompressionSpec>,
    /// Which clients lie, and how.
    pub adversary: Option<crate::robust::AdversarySpec>,
    /// The server's robust rule, if not the algorithm's own mean.
    pub aggregation: Option<crate::robust::RobustRuleSpec>,
    /// How the server steps the global model along its aggregate's change, if not to it.
    pub server_optimizer: Option<crate::server_optimizer::ServerOptimizerSpec>,
    /// Not the scenario's: set for a run that saves its clients' own models
    /// (`fedsim run --save-client-models`), which then copy them into their evaluation reports.
    pub saves_client_models: bool,
}

impl RunSpec {
    /// Client-level `privacy:` for a run over `clients` clients (held-out ones included): the
    /// accountant's sampling is the round's selection among the participants, and a
    /// `target_epsilon` is turned into σ for the scenario's rounds. `None` without `privacy:`
    /// or under DP-SGD (`plan::Setup::sample_privacy`).
    pub fn privacy_for(
        &self,
        clients: usize,
    ) -> Result<Option<crate::privacy::ClientLevelPrivacy>, FieldError> {
        let Some(privacy) = self.privacy.as_ref().filter(|p| p.sample_level().is_none()) else {
            return Ok(None);
        };
        let participants = clients - (self.unseen_fraction * clients as f64).floor() as usize;
        let participation = match self.sampling.poisson_rate() {
            Some(rate) => crate::privacy::Participation::Poisson(rate),
            None => crate::privacy::Participation::FixedSize(self.sampling.to_select(participants)),
        };
        (privacy.resolve(participants, participation, self.rounds))
            .map(Some)
            .map_err(|e| e.within("privacy"))
    }
}

/// A checked scenario, ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub data: DatasetSpec,
    pub split: SplitSpec,
    pub data_seed: u64,
    pub run: RunSpec,
    /// Accuracy for the time-to-accuracy figure of the summary.
    pub target_accuracy: Option<f64>,
    /// How often the run saves a checkpoint (`checkpoint:`; `None`: not said).
    pub checkpoint: Option<crate::settings::CheckpointEvery>,
    /// Where the run reports to experiment trackers (`tracking:`; `None`: nowhere).
    pub tracking: Option<crate::settings::TrackingSpec>,
    /// The scenario with every default filled in, as YAML.
    pub resolved_yaml: String,
    /// SHA-256 of `resolved_yaml`, hex.
    pub content_hash: String,
    /// The file it was read from (for messages, and so that no run writes over it).
    pub file: PathBuf,
    /// The file's text as read (for the line of an error found later).
    pub text: String,
    /// What the user should know that is not an error: what the overrides did beyond setting a
    /// value (a whole section replaced), and milestones the run never reaches.
    pub notes: Vec<String>,
}

impl Scenario {
    /// A short id for this exact configuration (first 12 hex digits of the content hash).
    pub fn run_id(&self) -> &str {
        &self.content_hash[..12]
    }

    /// The files the run reads: the scenario file, then every `path` (data, traces, graphs),
    /// `fedscale_devices`, `projection` and `from` (`model.init`) field of the resolved
    /// scenario, relative to the working folder.
    pub fn input_files(&self) -> Vec<PathBuf> {
        fn walk(v: &Value, out: &mut Vec<PathBuf>) {
            match v {
                Value::Mapping(m) => {
                    for (k, v) in m {
                        match (k.as_str(), v) {
                            (
                                Some("path" | "fedscale_devices" | "projection" | "from"),
                                Value::String(p),
                            ) => out.push(PathBuf::from(p)),
                            _ => walk(v, out),
                        }
                    }
                }
                Value::Sequence(items) => items.iter().for_each(|v| walk(v, out)),
                Value::Tagged(t) => walk(&t.value, out),
                _ => {}
            }
        }
        let mut out = vec![self.file.clone()];
        if let Ok(tree) = serde_yaml::from_str::<Value>(&self.resolved_yaml) {
            walk(&tree, &mut out);
        }
        out
    }

    /// An error found in this scenario after it was read (by the pre-flight, say), located in
    /// its file like the errors of reading it.
    pub fn locate(&self, e: FieldError) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.clone(),
            line: locate::line_of(&self.text, &e.path),
            path: e.path,
            message: e.message,
        }
    }

    /// Reads, overrides and validates a scenario file.
    pub fn load(file: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let text =
            crate::io::read_text(file, crate::io::SizeLimit::SCENARIO).map_err(|source| {
                ScenarioError::Read {
                    file: file.to_path_buf(),
                    source,
                }
            })?;
        Scenario::from_yaml(&text, file, overrides)
    }

    /// Parses scenario text; `file` is used in messages.
    pub fn from_yaml(
        text: &str,
        file: &Path,
        overrides: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let invalid = |path: String, message: String| {
            let line = locate::line_of(text, &path);
            ScenarioError::Invalid {
                file: file.to_path_buf(),
                path,
                line,
                message,
            }
        };
        let mut tree: Value = serde_yaml::from_str(text).map_err(|e| ScenarioError::Invalid {
            file: file.to_path_buf(),
            path: String::new(),
            line: e.location().map(|l| l.line()),
            message: format!("not valid YAML: {e}"),
        })?;
        if !tree.is_mapping() {
            let found = match &tree {
                Value::Null => "nothing (the file is empty)".to_string(),
                Value::Bool(_) => "a boolean".to_string(),
                Value::Number(_) => "a number".to_string(),
                Value::String(_) => "a string".to_string(),
                Value::Sequence(_) => "a list".to_string(),
                _ => "a tagged value".to_string(),
            };
            return Err(ScenarioError::Invalid {
                file: file.to_path_buf(),
                path: String::new(),
                line: Some(1),
                message: format!(
                    "a scenario is a mapping of fields (rounds, data, algorithm, ...); this \
                     file holds {found}"
                ),
            });
        }
        // No scenario field is called `base`; every sweep has one.
        if tree.get("base").is_some() {
            return Err(invalid(
                "base".into(),
                "this file is a sweep (it varies the scenario named in `base`), not a \
                 scenario: run it with `fedsim sweep FILE`"
                    .into(),
            ));
        }
        let mut notes = Vec::new();
        for arg in overrides {
            notes.extend(apply_override(&mut tree, arg)?);
        }
        let raw: RawScenario = serde_path_to_error::deserialize(tree).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            let (path, message) = within_catalogue_section(path, e.into_inner().to_string());
            let message = explain(&message);
            // An unknown field is best shown on its own line.
            let line = unknown_field(&message)
                .and_then(|f| locate::line_of(text, &join(&path, f)))
                .or_else(|| locate::line_of(text, &path));
            ScenarioError::Invalid {
                file: file.to_path_buf(),
                path,
                line,
                message,
            }
        })?;
        let mut scenario = validate(raw).map_err(|e| invalid(e.path, e.message))?;
        scenario.file = file.to_path_buf();
        scenario.text = text.to_string();
        notes.extend(unreached_milestones(
            &scenario.run.training,
            scenario.run.rounds,
        ));
        scenario.notes = notes;
        Ok(scenario)
    }
}

/// Refuses a name that is not one plain folder name: the default output folder is
/// `results/<name>/…`, which must stay inside `results/`.
pub fn check_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        Some("is empty")
    } else if name.contains(['/', '\\']) {
        Some("holds a path separator (`/` or `\\`)")
    } else if name == "." || name == ".." {
        Some("is `.` or `..`")
    } else if name.starts_with('.') {
        Some("starts with `.` (hidden folders are fedsim's own)")
    } else if name.chars().any(|c| c.is_control()) {
        Some("holds a control character")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(format!(
            "`{name}` {why}; a name is one folder name (the default output folder is \
             results/<name>/), e.g. `fedem-mnist`; to write elsewhere use --out"
        )),
    }
}

fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `")?.split('`').next()
}

/// A catalogue's section (`data`, `algorithm`) reads its item's own fields and puts their path
/// first (`` `a.b`: message ``): the error's path then goes down to that field. For an unknown
/// field the path stays at its parent, as elsewhere.
fn within_catalogue_section(mut path: String, mut message: String) -> (String, String) {
    // Sections nest (`data.partition`): each level puts its own path first.
    while let Some((inner, rest)) = message
        .strip_prefix('`')
        .and_then(|m| m.split_once("`: "))
        .map(|(i, r)| (i.to_string(), r.to_string()))
    {
        let inner = match (unknown_field(&rest), inner.rsplit_once('.')) {
            (Some(f), Some((parent, last))) if f == last => parent.to_string(),
            (Some(f), None) if f == inner => String::new(),
            _ => inner,
        };
        if !inner.is_empty() {
            path = join(&path, &inner);
        }
        message = rest;
    }
    (path, message)
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

/// serde's messages, made friendlier where they are terse.
fn explain(msg: &str) -> String {
    let msg = msg.trim_end_matches(|c: char| c == '.' || c.is_whitespace());
    if msg.starts_with("missing field") {
        format!("{msg} (it is required)")
    } else {
        msg.to_string()
    }
}

/// Sets `a.b.c=VALUE` in the YAML tree (VALUE is parsed as YAML; maps are created as needed;
/// a numeric segment indexes a list). An empty VALUE is an error (it would silently mean the
/// default). A mapping VALUE replaces the whole section, never merges into it: the note
/// returned then names the fields it reset.
pub fn apply_override(tree: &mut Value, arg: &str) -> Result<Option<String>, ScenarioError> {
    let err = |message: String| ScenarioError::Override {
        arg: arg.to_string(),
        message,
    };
    let (path, value) = arg
        .split_once('=')
        .ok_or_else(|| err("expected PATH=VALUE, e.g. sampling.fraction=0.1".into()))?;
    // `layers[3].kernel`, as errors write it, is `layers.3.kernel`.
    let path = &path.replace('[', ".").replace(']', "");
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(err(
            "the path must be dot-separated field names, e.g. training.lr".into(),
        ));
    }
    if value.trim().is_empty() {
        return Err(err(format!(
            "the value is empty; give one (e.g. {path}=0.1), or `{path}=null` for the default"
        )));
    }
    let value: Value = serde_yaml::from_str(value)
        .map_err(|e| err(format!("the value is not valid YAML: {e}")))?;
    let mut node = tree;
    for seg in path.split('.') {
        if node.is_null() {
            *node = Value::Mapping(Default::default());
        }
        node = match node {
            Value::Mapping(m) => m
                .entry(Value::String(seg.to_string()))
                .or_insert(Value::Null),
            Value::Sequence(s) => {
                let i: usize = seg
                    .parse()
                    .map_err(|_| err(format!("`{seg}` indexes a list and must be a number")))?;
                let len = s.len();
                s.get_mut(i)
                    .ok_or_else(|| err(format!("index {i} is past the list's end ({len} items)")))?
            }
            _ => {
                return Err(err(format!(
                    "cannot set a field inside a plain value at `{seg}`"
                )))
            }
        };
    }
    let note = match (&*node, &value) {
        (Value::Mapping(old), Value::Mapping(new)) => {
            let reset: Vec<String> = old
                .keys()
                .filter(|k| !new.contains_key(*k))
                .map(compact)
                .collect();
            (!reset.is_empty()).then(|| {
                format!(
                    "--set {path}=…: replaced the whole `{path}` section, so {} went back to \
                     {}default; to change one field keep the rest with --set {path}.FIELD=VALUE",
                    reset.join(", "),
                    if reset.len() == 1 { "its " } else { "their " }
                )
            })
        }
        _ => None,
    };
    *node = value;
    Ok(note)
}

fn validate(mut raw: RawScenario) -> Result<Scenario, FieldError> {
    let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
    check_name(&raw.name).map_err(|m| FieldError::new("name".into(), m))?;
    FieldError::at_least_one("rounds", raw.rounds as usize)?;
    let evaluation = validate_evaluation(&mut raw)?;
    raw.data.validate().map_err(|e| e.within("data"))?;
    raw.split.validate().map_err(|e| e.within("split"))?;
    raw.model.validate().map_err(|e| e.within("model"))?;
    // A Parquet file without a declared shape has flat features.
    let shape = raw.data.input_shape().unwrap_or(InputShape::Flat(0));
    raw.model
        .check_input(shape)
        .map_err(|m| FieldError::new("model.kind".into(), m))?;
    raw.model
        .check_shape(shape, raw.data.classes())
        .map_err(|e| e.within("model"))?;
    raw.system.validate().map_err(|e| e.within("system"))?;
    raw.algorithm
        .validate()
        .map_err(|e| e.within("algorithm"))?;
    let mut training = validate_training(&raw.training).map_err(|e| e.within("training"))?;
    raw.algorithm.check_training(&training.plan)?;
    let sampling = raw.sampling.resolve().map_err(|e| e.within("sampling"))?;
    raw.policy.validate().map_err(|e| e.within("policy"))?;
    // Decentralized runs take no server policy at all (checked with the topology below).
    let server_policy = !raw.algorithm.is_decentralized();
    if server_policy && raw.policy.needs_stale_updates() && !raw.algorithm.takes_stale_updates() {
        return bad(
            "policy",
            format!(
                "this policy aggregates stale updates, which `{}` cannot take; use it with {}",
                raw.algorithm.name(),
                names_where(|c| c.stale_updates && !c.decentralized)
            ),
        );
    }
    if !raw.policy.declared().rounds_in_step {
        let s = &raw.sampling;
        if s.fraction.is_some()
            || s.count.is_some()
            || s.over_selection > 0.0
            || s.available_only
            || !s.strategy.declared().fills_slots
        {
            let fillers = STRATEGIES
                .iter()
                .filter(|r| r.declared.fills_slots)
                .map(|r| r.name)
                .collect::<Vec<_>>()
                .join(" or ");
            return bad(
                "sampling",
                format!(
                    "with `policy.kind: {}`, `policy.concurrency` sets how many clients train \
                     and only online clients start; keep only `strategy` ({fillers}, and \
                     `replacement`) here",
                    raw.policy.name()
                ),
            );
        }
    }
    let checkpoint = (raw.checkpoint.as_ref())
        .map(|c| c.every().map_err(|e| e.within("checkpoint")))
        .transpose()?;
    if let Some(t) = &raw.tracking {
        t.validate().map_err(|e| e.within("tracking"))?;
    }
    let tracking = raw.tracking.clone();
    if let Some(t) = raw.target_accuracy {
        if !(0.0..=1.0).contains(&t) {
            return bad("target_accuracy", format!("must be in [0, 1], got {t}"));
        }
    }
    let unseen_fraction = raw.unseen.as_ref().map_or(0.0, |u| u.fraction);
    if raw.unseen.is_some() && !(unseen_fraction > 0.0 && unseen_fraction < 1.0) {
        return bad(
            "unseen.fraction",
            format!("must be in (0, 1), got {unseen_fraction}"),
        );
    }
    validate_decentralized(&raw)?;
    validate_privacy(&raw, &sampling)?;
    validate_secure_aggregation(&raw)?;
    validate_compression(&raw)?;
    validate_robustness(&raw)?;
    validate_server_optimizer(&raw)?;
    validate_guided_sampling(&raw)?;
    training.plan.dp_sgd = (raw.privacy.as_ref())
        .and_then(PrivacySpec::sample_level)
        .map(|p| p.dp_sgd);
    // With a data set of known size, check the client counts now (else when it is loaded).
    if let Some(clients) = raw.data.num_clients() {
        check_client_counts(clients, unseen_fraction, &sampling, &evaluation)?;
        check_robust_counts(
            raw.aggregation.as_ref(),
            clients,
            unseen_fraction,
            &sampling,
        )?;
    }
    let resolved_yaml = serde_yaml::to_string(&raw).expect("a scenario always serialises");
    let content_hash = format!("{:x}", Sha256::digest(resolved_yaml.as_bytes()));
    let run = RunSpec {
        seed: raw.seed,
        rounds: raw.rounds,
        evaluation,
        model: raw.model,
        algorithm: raw.algorithm,
        training,
        sampling,
        policy: raw.policy,
        system: raw.system,
        unseen_fraction,
        topology: raw.topology,
        on_divergence: raw.on_divergence,
        privacy: raw.privacy,
        secure_aggregation: raw.secure_aggregation,
        compression: raw.compression,
        adversary: raw.adversary,
        aggregation: raw.aggregation,
        server_optimizer: raw.server_optimizer,
        saves_client_models: false,
    };
    Ok(Scenario {
        name: raw.name.clone(),
        data: raw.data.clone(),
        split: raw.split.clone(),
        data_seed: raw.data_seed.unwrap_or(raw.seed),
        target_accuracy: raw.target_accuracy,
        checkpoint,
        tracking,
        run,
        resolved_yaml,
        content_hash,
        file: PathBuf::new(),
        text: String::new(),
        notes: Vec::new(),
    })
}

/// `privacy:` holds for algorithms that declare private updates, in synchronous rounds of
/// clients drawn uniformly without replacement (what its accountant assumes).
fn validate_privacy(raw: &RawScenario, sampling: &Sampling) -> Result<(), FieldError> {
    let Some(privacy) = &raw.privacy else {
        return Ok(());
    };
    privacy.validate().map_err(|e| e.within("privacy"))?;
    let bad = |message: String| Err(FieldError::new("privacy".into(), message));
    if privacy.mechanism == Mechanism::DpSgd {
        let capabilities = raw.algorithm.capabilities();
        if !(capabilities.private_updates && capabilities.sgd_runs) {
            return Err(FieldError::new(
                "privacy.mechanism".into(),
                format!(
                    "`dp_sgd` trains local SGD runs of algorithms that declare what they send; \
                     `{}` does not; use it with {}",
                    raw.algorithm.name(),
                    names_where(|c| c.private_updates && c.sgd_runs)
                ),
            ));
        }
        // Client-side only: any round policy and any draw of clients (no amplification by
        // the draw is claimed).
        return Ok(());
    }
    if !raw.algorithm.takes_privacy() {
        return bad(format!(
            "`{}` does not take client-level privacy (its aggregation is not a sum of what \
             clients send over a fixed count); use it with {}",
            raw.algorithm.name(),
            names_where(|c| c.private_updates)
        ));
    }
    if raw.policy.needs_stale_updates() {
        return bad(
            "needs synchronous rounds without late updates (the accountant counts one noised \
             aggregation of the round's clients per round)"
                .into(),
        );
    }
    if privacy.mechanism == Mechanism::DpFtrl {
        // The tree's accountant counts who took part: any draw of clients.
        return Ok(());
    }
    if privacy.mechanism == Mechanism::Distributed {
        if raw.secure_aggregation.is_none() {
            return Err(FieldError::new(
                "privacy.mechanism".into(),
                "`distributed` needs a `secure_aggregation:` section: the clients' noise shares \
                 protect only a sum the server cannot see apart (without it, use `local` or \
                 `central`)"
                    .into(),
            ));
        }
        if sampling.poisson_rate().is_some() {
            return Err(FieldError::new(
                "privacy.mechanism".into(),
                crate::privacy::client_level::DISTRIBUTED_SAMPLING.into(),
            ));
        }
    }
    let every_client = sampling.size == SampleSize::Fraction(1.0) && sampling.over_selection == 0.0;
    if privacy.accountant == Accountant::Pld
        && privacy.mechanism == Mechanism::Central
        && sampling.poisson_rate().is_none()
        && !every_client
    {
        // K of N is known only with the data; `PrivacySpec::resolve` checks it then.
        return Err(FieldError::new(
            "privacy.accountant".into(),
            crate::privacy::client_level::PLD_SAMPLING.into(),
        ));
    }
    if sampling.available_only {
        return bad(
            "needs clients drawn among all participants, not only the online ones \
             (`sampling.available_only: false`): a draw among fewer clients picks each more \
             often than the accountant's K/N"
                .into(),
        );
    }
    // A loss-guided draw is refused with its own reason (`validate_guided_sampling`).
    let declared = sampling.strategy.declared();
    if !declared.same_chance && !declared.uses_feedback {
        let fair = STRATEGIES
            .iter()
            .filter(|r| r.declared.same_chance)
            .map(|r| r.name)
            .collect::<Vec<_>>()
            .join("` or `");
        return bad(format!(
            "needs `sampling.strategy: {fair}` (the accountant assumes clients drawn uniformly \
             without replacement, or each with the same chance)"
        ));
    }
    Ok(())
}

/// A loss-guided `sampling.strategy` (power-of-choice, Oort) reads the loss clients report with
/// their updates: algorithms that declare what they send, without privacy (a reported loss
/// is not privatized, and no accountant counts a draw that depends on the data).
fn validate_guided_sampling(raw: &RawScenario) -> Result<(), FieldError> {
    if !raw.sampling.strategy.uses_feedback() {
        return Ok(());
    }
    sends_declared_updates(
        raw,
        "sampling.strategy",
        "a loss-guided draw ranks clients by the loss they report with the updates they send \
         to a server (of one global model: FedEM's components are refused when the run starts)",
    )?;
    if raw.privacy.is_some() {
        return Err(FieldError::new(
            "sampling.strategy".into(),
            format!(
                "a loss-guided draw reads the losses clients report, which `privacy:` does not \
                 protect, and its accountant assumes draws that do not depend on the data; use \
                 {} with privacy",
                names_declaring::<Strategies>(|d| d.same_chance, "or")
            ),
        ));
    }
    Ok(())
}

/// `secure_aggregation:` holds for algorithms whose aggregation is a sum of what clients send
/// (what the protocol computes), in synchronous rounds without late updates.
fn validate_secure_aggregation(raw: &RawScenario) -> Result<(), FieldError> {
    let Some(secagg) = &raw.secure_aggregation else {
        return Ok(());
    };
    secagg
        .validate()
        .map_err(|e| e.within("secure_aggregation"))?;
    let bad = |message: String| Err(FieldError::new("secure_aggregation".into(), message));
    if raw.topology.is_some() || !raw.algorithm.takes_privacy() {
        return bad(format!(
            "secure aggregation computes the sum of what clients send; `{}` does not aggregate \
             a sum on a server; use it with {}",
            raw.algorithm.name(),
            names_where(|c| c.private_updates)
        ));
    }
    if !raw.policy.declared().rounds_in_step || raw.policy.needs_stale_updates() {
        return bad(
            "needs synchronous rounds without late updates (`policy: {kind: synchronous}`): a \
             masked sum is over one round's clients"
                .into(),
        );
    }
    Ok(())
}

/// `section` (compression, adversary, aggregation, a loss-guided sampling strategy) does
/// `what` with the updates clients send to a server, which the algorithm must declare
/// ([`crate::algorithms::Algorithm::PRIVATE_UPDATES`]).
fn sends_declared_updates(raw: &RawScenario, section: &str, what: &str) -> Result<(), FieldError> {
    if raw.topology.is_none() && raw.algorithm.takes_privacy() {
        return Ok(());
    }
    Err(FieldError::new(
        section.into(),
        format!(
            "{what}; `{}` does not send updates it declares; use it with {}",
            raw.algorithm.name(),
            names_where(|c| c.private_updates)
        ),
    ))
}

/// Whether privacy noise is added after the clients (`central`, `dp_ftrl`, `distributed`),
/// sized for a sum of updates clipped to C.
fn noised_after_the_clients(raw: &RawScenario) -> bool {
    (raw.privacy.as_ref()).is_some_and(|p| {
        matches!(
            p.mechanism,
            Mechanism::Central | Mechanism::DpFtrl | Mechanism::Distributed
        )
    })
}

/// `compression:` holds for algorithms that declare what they send, with a server (peers
/// gossip models, not updates), without secure aggregation (its masked sums are of dense
/// vectors), and, where noise is added after the clients, only with compressors that keep a
/// clipped update within its bound (the noise is sized for it). A compressed downlink leaves
/// out privacy and robustness, which read updates against the server's own model.
fn validate_compression(raw: &RawScenario) -> Result<(), FieldError> {
    let Some(compression) = &raw.compression else {
        return Ok(());
    };
    compression
        .validate()
        .map_err(|e| e.within("compression"))?;
    sends_declared_updates(
        raw,
        "compression",
        "compresses the updates clients send to a server",
    )?;
    if raw.secure_aggregation.is_some() {
        return Err(FieldError::new(
            "compression".into(),
            "cannot be combined with `secure_aggregation:`, whose masked sums are of dense \
             vectors (quantized secure aggregation is not modelled); remove one of the two"
                .into(),
        ));
    }
    let lengthens = (compression.uplink.as_ref()).is_some_and(|u| !u.keeps_norm_bound());
    if noised_after_the_clients(raw) && lengthens {
        return Err(FieldError::new(
            "compression.uplink".into(),
            format!(
                "under `privacy` with noise added after the clients (`central`, `dp_ftrl`, \
                 `distributed`) an update must stay within its clipping bound, which only {} \
                 without error feedback guarantee; use one of them, or `mechanism: local` or \
                 `dp_sgd`",
                names_declaring::<Compressors>(|c| c.keeps_norm_bound, "and")
            ),
        ));
    }
    let with = [
        ("privacy", raw.privacy.is_some()),
        ("adversary", raw.adversary.is_some()),
        ("aggregation", raw.aggregation.is_some()),
    ];
    if let (Some(_), Some((section, _))) = (&compression.downlink, with.iter().find(|w| w.1)) {
        return Err(FieldError::new(
            "compression.downlink".into(),
            format!(
                "cannot be combined with `{section}:`, which reads each update against the \
                 server's model while clients train from their compressed copy of it; \
                 remove one of the two"
            ),
        ));
    }
    Ok(())
}

/// `adversary:` and `aggregation:` hold for algorithms that declare what they send, with a
/// server. A robust rule sees every update of a synchronous round apart, so it needs rounds
/// without stale updates and refuses what sums updates unseen (secure aggregation) or noises
/// their sum for a sum's sensitivity (central privacy). ALIE and IPM are crafted by the server
/// from the round's honest updates: synchronous rounds without secure aggregation.
fn validate_robustness(raw: &RawScenario) -> Result<(), FieldError> {
    if let Some(adversary) = &raw.adversary {
        sends_declared_updates(
            raw,
            "adversary",
            "attacks through the updates clients send to a server",
        )?;
        adversary.validate().map_err(|e| e.within("adversary"))?;
        if adversary.attack.is_crafted()
            && (raw.policy.needs_stale_updates() || raw.secure_aggregation.is_some())
        {
            return Err(FieldError::new(
                "adversary.attack".into(),
                format!(
                    "{} are crafted from the honest updates of a synchronous round, which the \
                     attackers are assumed to see: they need synchronous rounds without late \
                     updates and without `secure_aggregation:` (use {} there)",
                    names_declaring::<Attacks>(|a| a.crafted, "and"),
                    names_declaring::<Attacks>(|a| !a.crafted, "or"),
                ),
            ));
        }
    }
    let Some(rule) = &raw.aggregation else {
        return Ok(());
    };
    sends_declared_updates(
        raw,
        "aggregation",
        "combines the updates clients send to a server",
    )?;
    rule.validate().map_err(|e| e.within("aggregation"))?;
    let bad = |message: &str| Err(FieldError::new("aggregation".into(), message.into()));
    if raw.policy.needs_stale_updates() {
        return bad(
            "a robust rule combines one synchronous round's fresh updates; it needs \
             `policy: {kind: synchronous}` without late updates",
        );
    }
    if raw.secure_aggregation.is_some() {
        return bad(
            "a robust rule needs every update apart, and secure aggregation shows the server \
             only their sum; remove one of the two",
        );
    }
    if noised_after_the_clients(raw) {
        return bad(
            "server-side privacy noise is sized for a sum of clipped updates, not for a robust \
             rule's output; use `privacy.mechanism: local` or `dp_sgd` with it",
        );
    }
    Ok(())
}

/// `server_optimizer:` holds for algorithms whose server combines updates into global vectors
/// it declares ([`crate::algorithms::Algorithm::SERVER_OPTIMIZED`]), with a server.
fn validate_server_optimizer(raw: &RawScenario) -> Result<(), FieldError> {
    let Some(optimizer) = &raw.server_optimizer else {
        return Ok(());
    };
    optimizer
        .validate()
        .map_err(|e| e.within("server_optimizer"))?;
    if raw.topology.is_none() && raw.algorithm.capabilities().server_optimizer {
        return Ok(());
    }
    Err(FieldError::new(
        "server_optimizer".into(),
        format!(
            "steps the global model a server combines updates into; `{}` {}; use it with {}",
            raw.algorithm.name(),
            match raw.topology {
                Some(_) => "runs on peers, without a server",
                None => "does not declare global vectors its server combines updates into",
            },
            names_where(|c| c.server_optimizer)
        ),
    ))
}

/// Krum and Bulyan need enough updates a round: refused, naming both fields, when the clients
/// drawn each round are too few.
pub fn check_robust_counts(
    rule: Option<&crate::robust::RobustRuleSpec>,
    clients: usize,
    unseen_fraction: f64,
    sampling: &Sampling,
) -> Result<(), FieldError> {
    let Some((least, why)) = rule.and_then(|r| r.least_updates()) else {
        return Ok(());
    };
    if sampling.poisson_rate().is_some() {
        return Ok(());
    }
    let participants = clients - (unseen_fraction * clients as f64).floor() as usize;
    let per_round = sampling.per_round(participants);
    if per_round < least {
        return Err(FieldError::new(
            "aggregation".into(),
            format!(
                "{why}, and `sampling` draws {per_round} a round from {participants} \
                 participants; draw more (`sampling.fraction`) or tolerate fewer \
                 (`aggregation.byzantine`)"
            ),
        ));
    }
    Ok(())
}

/// A run has a `topology` exactly when its algorithm is decentralized, and then none of the
/// server's settings (who trains, when it aggregates) nor held-out clients, which peers do not
/// model yet.
fn validate_decentralized(raw: &RawScenario) -> Result<(), FieldError> {
    let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
    let name = raw.algorithm.name();
    let Some(topology) = &raw.topology else {
        if raw.algorithm.is_decentralized() {
            return bad(
                "algorithm",
                format!("`{name}` runs on peers: add a `topology:` section (graph and mixing)"),
            );
        }
        return Ok(());
    };
    if !raw.algorithm.is_decentralized() {
        return bad(
            "topology",
            format!(
                "`{name}` needs a server; decentralized runs take {} (remove `topology` to run \
                 `{name}`)",
                names_where(|c| c.decentralized)
            ),
        );
    }
    topology.validate().map_err(|e| e.within("topology"))?;
    let every_peer = "every peer trains and mixes each round in a decentralized run";
    if raw.sampling != RawSampling::default() {
        return bad("sampling", format!("{every_peer}; remove `sampling`"));
    }
    if raw.policy != PolicySpec::default() {
        return bad(
            "policy",
            format!("{every_peer}; set `topology.gossip` (synchronous or asynchronous) instead"),
        );
    }
    if raw.unseen.is_some() {
        return bad(
            "unseen",
            "held-out clients are not supported in decentralized runs".into(),
        );
    }
    Ok(())
}

/// The evaluation settings, from `eval_every` or `evaluation.every` (not both) and
/// `evaluation`; leaves `raw` in its resolved form: `eval_every` always stated, `evaluation`
/// only when it samples clients, leaves splits out or scores novelty over clients (so
/// scenarios that do none of these are written as before).
fn validate_evaluation(raw: &mut RawScenario) -> Result<EvaluationPlan, FieldError> {
    let section = raw.evaluation.take().unwrap_or_default();
    let plan = section.resolve(raw.eval_every)?;
    // The resolved scenario states the period at the top level, and a sample of the clients
    // (if any) under `evaluation`.
    raw.eval_every = Some(plan.every);
    let all_splits = plan.splits == EvaluatedSplits::ALL;
    if !plan.clients.is_all() || !all_splits || !plan.novelty.is_own() {
        raw.evaluation = Some(RawEvaluation {
            every: None,
            clients: plan.clients,
            sample: plan.sample,
            splits: (!all_splits).then(|| plan.splits.listed()),
            novelty: plan.novelty,
        });
    }
    let capabilities = raw.algorithm.capabilities();
    let refused = |what: &str, lacks: &str, able: fn(&Capabilities) -> bool| {
        FieldError::new(
            "evaluation.novelty".into(),
            format!(
                "{what}, and `{}` {lacks}; use it with {} (or `own`)",
                raw.algorithm.name(),
                names_where(able)
            ),
        )
    };
    match plan.novelty {
        NoveltyScoring::Own => {}
        NoveltyScoring::MaxOverClients if !capabilities.confidence_novelty => {
            return Err(refused(
                "`max_over_clients` takes the highest confidence over the clients' classifiers",
                "does not score novelty by one classifier's confidence",
                |c| c.confidence_novelty,
            ))
        }
        NoveltyScoring::MeanWeights if !capabilities.mixture_novelty => {
            return Err(refused(
                "`mean_weights` scores with the clients' mean mixture weights",
                "has no mixture weights",
                |c| c.mixture_novelty,
            ))
        }
        NoveltyScoring::MaxOverClients | NoveltyScoring::MeanWeights => {}
    }
    Ok(plan)
}

/// A note when learning-rate milestones are at or past the last round: round `r` decays once
/// for every milestone below `r`, so those never apply. Not an error (a short test run of a long
/// scenario is common), but `--set rounds=…` would otherwise drop the decay without a word.
fn unreached_milestones(training: &Training, rounds: u32) -> Option<String> {
    let LrSchedule::MultiStep { milestones, .. } = &training.schedule else {
        return None;
    };
    let late: Vec<String> = milestones
        .iter()
        .filter(|&&m| m >= rounds)
        .map(u32::to_string)
        .collect();
    let (what, verb, applies) = match late.len() {
        0 => return None,
        1 => ("milestone", "is", "it never applies"),
        _ => ("milestones", "are", "they never apply"),
    };
    Some(format!(
        "training.lr_schedule.milestones: {what} {} {verb} at or past the last round ({rounds}), \
         so {applies} (round r decays once for every milestone below r)",
        late.join(", ")
    ))
}

fn validate_training(t: &RawTraining) -> Result<Training, FieldError> {
    let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
    let work = match (t.local_epochs, t.local_steps) {
        (Some(_), Some(_)) => {
            return bad(
                "local_epochs",
                "give either `local_epochs` or `local_steps`, not both".into(),
            )
        }
        (Some(0), None) => return bad("local_epochs", "must be at least 1".into()),
        (None, Some(0)) => return bad("local_steps", "must be at least 1".into()),
        (Some(e), None) => LocalWork::Epochs(e),
        (None, Some(s)) => LocalWork::Steps(s),
        (None, None) => LocalWork::Epochs(1),
    };
    FieldError::at_least_one("batch_size", t.batch_size)?;
    FieldError::positive("lr", t.lr)?;
    if !(0.0..1.0).contains(&t.momentum) {
        return bad("momentum", format!("must be in [0, 1), got {}", t.momentum));
    }
    FieldError::non_negative("weight_decay", t.weight_decay)?;
    FieldError::non_negative("device_state_gib", t.device_state_gib)?;
    if t.precision == Precision::Tf32 && t.device.is_cpu() {
        return bad(
            "precision",
            "`tf32` runs products on a GPU's TF32 tensor cores, and `training.device` is `cpu`: \
             use `fp32` or `bf16` on the CPU, or set `training.device` to `cuda` or `auto`"
                .into(),
        );
    }
    let schedule = match &t.lr_schedule {
        RawLrSchedule::Constant {} => LrSchedule::Constant,
        RawLrSchedule::MultiStep { milestones, gamma } => {
            FieldError::positive("lr_schedule.gamma", *gamma)?;
            if milestones.windows(2).any(|w| w[0] >= w[1]) {
                return bad(
                    "lr_schedule.milestones",
                    "must be strictly increasing round numbers".into(),
                );
            }
            LrSchedule::MultiStep {
                milestones: milestones.clone(),
                gamma: *gamma,
            }
        }
    };
    Ok(Training {
        plan: LocalPlan {
            work,
            batch_size: t.batch_size,
            momentum: t.momentum,
            weight_decay: t.weight_decay,
            dp_sgd: None,
        },
        lr: t.lr,
        schedule,
        keep_momentum: t.keep_momentum,
        cohorts: t.cohorts,
        device: t.device,
        precision: t.precision,
        spill: t.spill,
        device_state_bytes: (t.device_state_gib * (1u64 << 30) as f64) as u64,
    })
}
