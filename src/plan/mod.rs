//! A run decided before it runs. [`RunPlan::new`] turns a scenario's run settings, its built
//! data and this machine into one checked, immutable plan: every check that needs the data,
//! the held-out and malicious clients, where cohorts train, the model's architecture and the
//! system model, a decentralized run's topology, the privacy settings with DP-SGD's noise
//! solved, and the algorithm built as its own type with its initial global model. `actors`
//! takes a plan and assembles the run from it in one place; it cannot fail on input. Before
//! the data is built, [`preflight`] asks this machine what only it can answer (devices,
//! memory, the files an algorithm names), so that a run that cannot fit is refused at once.
//!
//! This room decides; it must not start actors, threads or the clock, write files, or train.
//! Every random draw here comes from its own keyed stream of the run's seed
//! (`unseen_clients`, `adversary`, `model_init`, the system model's and the topology's), so
//! the order in which parts are decided changes nothing.

mod preflight;

pub use preflight::{
    check_fits, check_run_fits, check_terms, least_bytes, preflight, run_terms, DataShape,
    MemoryTerm, RESULT_BYTES_PER_EVALUATED_CLIENT,
};

use crate::algorithms::{Built, Population};
use crate::data::FederatedData;
use crate::models::{read_models, Architecture, InitialModels, Placement};
use crate::privacy::{ClientLevelPrivacy, SampleLevelPrivacy};
use crate::records::Split;
use crate::sampling::Strategies;
use crate::scenario::RunSpec;
use crate::settings::catalogue::names_declaring;
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree, SimError};
use crate::system::{SampleCost, SystemModel};
use crate::topology::Topology;
use std::sync::Arc;

/// A run, decided: its algorithm, built, and everything else it runs with.
pub struct RunPlan {
    /// The algorithm as its own type, with its initial global model.
    pub algorithm: Built,
    pub setup: Setup,
}

/// Everything a run is decided to run with, besides its algorithm.
pub struct Setup {
    /// The run's settings; under DP-SGD with `target_epsilon`, with σ solved.
    pub spec: RunSpec,
    pub seeds: SeedTree,
    /// The clients' rows; under an attack that poisons data, the malicious clients' poisoned.
    pub data: Arc<FederatedData>,
    /// Where cohorts train: `training.device` resolved on this machine.
    pub placement: Placement,
    /// Trainer threads.
    pub threads: usize,
    /// The held-out clients (sorted).
    pub unseen: Vec<u32>,
    /// The malicious clients (sorted; none without `adversary:`).
    pub malicious: Vec<u32>,
    pub arch: Architecture,
    /// Every client's device and links (held-out ones included).
    pub system: SystemModel,
    /// A decentralized run's communication graph and mixing (round 1 built and checked).
    pub topology: Option<Topology>,
    /// Client-level privacy (`privacy:` without DP-SGD), resolved for the run's clients.
    pub client_privacy: Option<ClientLevelPrivacy>,
    /// DP-SGD (σ solved where the scenario gives `target_epsilon`), with the local runs an
    /// update sends (one per vector of the global model).
    pub sample_privacy: Option<(SampleLevelPrivacy, u64)>,
    /// Clients report the loss of the model they start from: the sampling strategy reads it
    /// (it declares so), and the algorithm sends one model (checked here).
    pub reports_losses: bool,
}

impl RunPlan {
    /// Decides `spec`'s run over `data` on `threads` trainer threads. An error is a field of
    /// the scenario that only the data or this machine could check (located by the caller),
    /// or a part that cannot be built (the system model, the topology).
    pub fn new(spec: &RunSpec, data: Arc<FederatedData>, threads: usize) -> Result<Self, SimError> {
        let clients = data.num_clients();
        crate::sampling::check_client_counts(
            clients,
            spec.unseen_fraction,
            &spec.sampling,
            &spec.evaluation,
        )?;
        crate::scenario::check_robust_counts(
            spec.aggregation.as_ref(),
            clients,
            spec.unseen_fraction,
            &spec.sampling,
        )?;
        let seeds = SeedTree::new(spec.seed);
        let unseen = unseen_clients(&seeds, clients, held_out(spec, clients));
        let malicious = malicious_clients(spec, clients, &unseen);
        let data = poisoned(spec, data, &malicious)?;
        let placement = (spec.training.device.resolve_here())
            .map_err(|m| FieldError::new("training.device".into(), m))?;
        // The scenario checked the model against the shape it declares; a Parquet file's rows
        // are known only now.
        spec.model
            .check_shape(data.input_shape(), Some(data.classes))
            .map_err(|e| e.within("model"))?;
        let arch = Architecture::for_input(&spec.model, data.input_shape(), data.classes);
        let population = population_of(&data, &unseen, &arch);
        spec.algorithm
            .check_data(&population)
            .map_err(|e| e.within("algorithm"))?;
        // Client-level privacy noises what a server aggregates: none on peers.
        let client_privacy = match spec.topology {
            None => spec.privacy_for(clients)?,
            Some(_) => None,
        };
        let initial_models = match &spec.model.init {
            Some(init) => Some(read_models(&init.from, &arch).map_err(init_error)?),
            None => None,
        };
        let system = SystemModel::build(
            &spec.system,
            &seeds,
            clients,
            SampleCost::of(&arch, spec.training.plan.batch_size),
            data.truth.as_ref(),
        )
        .map_err(|e| SimError::Setup(e.into()))?;
        let topology = match &spec.topology {
            Some(topology) => Some(
                Topology::build(topology, clients, seeds).map_err(|e| SimError::Setup(e.into()))?,
            ),
            None => None,
        };
        if spec.training.plan.dp_sgd.is_some() && !arch.stacks() {
            return Err(FieldError::new(
                "privacy.mechanism".into(),
                format!(
                    "`dp_sgd` computes every record's gradient by stacking the model, and this \
                     model ({}) does not stack (batch statistics, or a TorchScript module); use \
                     a layer list without batch norm",
                    arch.summary()
                ),
            )
            .into());
        }
        let algorithm = built(spec, &population, &arch, &seeds, initial_models.as_deref())?;
        check_reported_loss(spec, &algorithm)?;
        let sample_privacy = sample_privacy(spec, &data, &algorithm)?;
        let reports_losses = spec.sampling.strategy.uses_feedback();
        let mut spec = spec.clone();
        if let Some((p, _)) = &sample_privacy {
            spec.training.plan.dp_sgd = Some(p.dp_sgd);
        }
        Ok(RunPlan {
            algorithm,
            setup: Setup {
                spec,
                seeds,
                data,
                placement,
                threads,
                unseen,
                malicious,
                arch,
                system,
                topology,
                client_privacy,
                sample_privacy,
                reports_losses,
            },
        })
    }
}

/// The number of held-out clients of `clients` (`unseen_fraction`).
fn held_out(spec: &RunSpec, clients: usize) -> usize {
    (spec.unseen_fraction * clients as f64).floor() as usize
}

/// The held-out clients of a run (sorted): `count` of `total`, drawn from the run's seed.
pub fn unseen_clients(seeds: &SeedTree, total: usize, count: usize) -> Vec<u32> {
    if count == 0 {
        return Vec::new();
    }
    let mut rng = seeds.rng(Entity::Run, "unseen_clients", 0);
    let mut chosen: Vec<u32> = rand::seq::index::sample(&mut rng, total, count)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// The malicious clients of a run of `total` clients (sorted): `adversary.fraction` of its
/// participants (the clients not held out: all but `unseen`, sorted), drawn from the run's
/// `adversary` stream; none without `adversary:`.
pub fn malicious_clients(spec: &RunSpec, total: usize, unseen: &[u32]) -> Vec<u32> {
    let Some(adversary) = &spec.adversary else {
        return Vec::new();
    };
    let seeds = SeedTree::new(spec.seed);
    let participant = |position: usize| {
        // The position-th client not held out: step over each held-out one at or before it.
        let mut client = position as u32;
        for &gone in unseen {
            if gone > client {
                break;
            }
            client += 1;
        }
        client
    };
    let mut rng = seeds.rng(Entity::Run, "adversary", 0);
    let mut chosen: Vec<u32> = (adversary.draw(total - unseen.len(), &mut rng).into_iter())
        .map(participant)
        .collect();
    chosen.sort_unstable();
    chosen
}

/// `data` with the `malicious` clients' training data poisoned, under an adversary that
/// poisons data (resident data only: rows made on demand are made for each job, unpoisoned):
/// the attack's own poisoning ([`crate::robust::AttackSpec::poison`]).
fn poisoned(
    spec: &RunSpec,
    data: Arc<FederatedData>,
    malicious: &[u32],
) -> Result<Arc<FederatedData>, FieldError> {
    let Some(adversary) = &spec.adversary else {
        return Ok(data);
    };
    if malicious.is_empty() {
        return Err(FieldError::new(
            "adversary.fraction".into(),
            format!(
                "{} of this run's participants is no client (⌊fraction·N⌋ = 0); raise it",
                adversary.fraction
            ),
        ));
    }
    let attack = &adversary.attack;
    if !attack.poisons_data() {
        return Ok(data);
    }
    if !data.is_resident() {
        return Err(FieldError::new(
            "adversary.attack".into(),
            format!(
                "`{}` poisons the malicious clients' training data in memory, and this data \
                 set makes its rows on demand; load it whole (no `on_demand`) or use another \
                 attack",
                attack.name()
            ),
        ));
    }
    let mut data = Arc::unwrap_or_clone(data);
    (attack.poison(&mut data, malicious, spec.seed))
        .map_err(|message| FieldError::new("adversary.attack".into(), message))?;
    Ok(Arc::new(data))
}

/// The clients as an algorithm sees them when it is built (`unseen` sorted).
fn population_of(data: &Arc<FederatedData>, unseen: &[u32], arch: &Architecture) -> Population {
    let participants_train = (0..data.num_clients())
        .filter(|&c| unseen.binary_search(&(c as u32)).is_err())
        .map(|c| data.split_len(c, Split::Train))
        .sum();
    Population {
        clients: data.num_clients(),
        participants_train,
        input_dim: data.dim,
        data: Arc::clone(data),
        unseen: unseen.to_vec(),
        arch: arch.clone(),
    }
}

/// The algorithm of `spec`, built for `population`, with its initial global model: its models
/// drawn from the run's `model_init` stream, or those of `model.init`'s file (`loaded`).
fn built(
    spec: &RunSpec,
    population: &Population,
    arch: &Architecture,
    seeds: &SeedTree,
    loaded: Option<&[Vec<f32>]>,
) -> Result<Built, FieldError> {
    let mut rng = seeds.rng(Entity::Run, "model_init", 0);
    let mut init = InitialModels::from(arch, &mut rng, loaded);
    let algorithm = spec.algorithm.build(population, arch, &mut init);
    init.finish().map_err(|m| {
        let file = (spec.model.init.as_ref()).map(|i| i.from.display().to_string());
        init_error(format!("{}: {m}", file.unwrap_or_default()))
    })?;
    Ok(algorithm)
}

/// A loss-guided `sampling.strategy` needs clients to report the loss of the model they start
/// from: one vector an update moves (`Algorithm::PRIVATE_UPDATES`), not a mixture's several.
fn check_reported_loss(spec: &RunSpec, algorithm: &Built) -> Result<(), FieldError> {
    if !spec.sampling.strategy.uses_feedback() {
        return Ok(());
    }
    let vectors = algorithm.sent_vectors().unwrap_or(0);
    if vectors == 1 {
        return Ok(());
    }
    Err(FieldError::new(
        "sampling.strategy".into(),
        format!(
            "a loss-guided strategy ranks clients by the loss of the one model they start \
             from, and this algorithm's server sends {vectors} models (a mixture's components \
             have no loss of their own); use {}, or an algorithm with one global model",
            names_declaring::<Strategies>(|d| !d.uses_feedback, "or")
        ),
    ))
}

/// DP-SGD's settings for this run (`None` without it), with the local runs an update sends
/// (one per vector of the global model): a `target_epsilon` is solved for the most a record
/// can spend, a client of any of the data's training-set sizes drawn in every round.
fn sample_privacy(
    spec: &RunSpec,
    data: &FederatedData,
    algorithm: &Built,
) -> Result<Option<(SampleLevelPrivacy, u64)>, FieldError> {
    let Some(privacy) = &spec.privacy else {
        return Ok(None);
    };
    let runs = algorithm.sent_vectors().unwrap_or(1) as u64;
    let sizes: Vec<usize> = (0..data.num_clients())
        .map(|c| data.split_len(c, Split::Train))
        .collect();
    let resolved = crate::privacy::sample_level::resolve(
        privacy,
        &spec.training.plan,
        &sizes,
        spec.rounds as u64,
        runs,
    )
    .map_err(|e| e.within("privacy"))?;
    Ok(resolved.map(|p| (p, runs)))
}

/// An error of `model.init`'s file, at the field that names it.
fn init_error(message: String) -> FieldError {
    FieldError::new("model.init.from".into(), message)
}
