//! Setting a simulation up, in one place for server runs, peer runs, `fedsim describe` and the
//! actors' tests (in the spirit of nexosim's `SimInit`): from a run's settings and its data,
//! the seed tree, the model's architecture and the system model ([`SimInit::new`]); with an
//! algorithm, its initial global model, the jobs' shared context and the trainer pool
//! ([`SimInit::start`]).
//!
//! Every random draw here comes from its own keyed stream of the run's seed (`model_init`, the
//! system model's streams), so the order in which parts are built changes nothing.

use super::cohort::Dispatch;
use super::{JobContext, TrainerPool};
use crate::algorithms::Algorithm;
use crate::data::FederatedData;
use crate::models::{read_models, Architecture, InitialModels, Placement};
use crate::privacy::ClientLevelPrivacy;
use crate::scenario::RunSpec;
use crate::sim::{Entity, SeedTree, SimError};
use crate::system::{SampleCost, SystemModel};
use std::sync::Arc;

/// The parts of a simulation that do not depend on its algorithm.
pub struct SimInit {
    pub seeds: SeedTree,
    pub arch: Architecture,
    pub system: SystemModel,
    pub data: Arc<FederatedData>,
    /// The initial global models of `model.init`'s file, if the scenario names one.
    pub initial_models: Option<Vec<Vec<f32>>>,
}

/// What an algorithm's run starts from.
pub(super) struct Started<A: Algorithm> {
    pub(super) seeds: SeedTree,
    /// The initial global model (every client's and peer's first model).
    pub(super) global: A::Global,
    pub(super) jobs: Arc<JobContext<A>>,
    pub(super) dispatch: Dispatch<A>,
    pub(super) system: Arc<SystemModel>,
    /// Under DP-SGD: its settings, σ solved for where the scenario gives `target_epsilon`.
    pub(super) sample_privacy: Option<crate::privacy::SampleLevelPrivacy>,
}

impl SimInit {
    /// The seed tree of `spec.seed`, the architecture of `spec.model` for `data`, and the
    /// system model of its clients (one per client of `data`, held-out ones included).
    pub fn new(spec: &RunSpec, data: Arc<FederatedData>) -> Result<SimInit, SimError> {
        let seeds = SeedTree::new(spec.seed);
        // The scenario checked the model against the shape it declares; a Parquet file's rows
        // are known only now.
        spec.model
            .check_shape(data.input_shape(), Some(data.classes))
            .map_err(|e| SimError::Scenario(e.within("model")))?;
        let arch = Architecture::for_input(&spec.model, data.input_shape(), data.classes);
        let initial_models = match &spec.model.init {
            Some(init) => Some(read_models(&init.from, &arch).map_err(init_error)?),
            None => None,
        };
        let system = SystemModel::build(
            &spec.system,
            &seeds,
            data.num_clients(),
            SampleCost::of(&arch, spec.training.plan.batch_size),
            data.truth.as_ref(),
        )
        .map_err(|e| SimError::Setup(e.into()))?;
        Ok(SimInit {
            seeds,
            arch,
            system,
            data,
            initial_models,
        })
    }

    /// `algorithm`'s initial global model (from the run's `model_init` stream), its jobs'
    /// context on `placement` (with `privacy`, resolved for the run's clients), and a trainer
    /// pool of `threads` threads.
    pub(super) fn start<A: Algorithm>(
        self,
        algorithm: A,
        spec: &RunSpec,
        placement: Placement,
        threads: usize,
        privacy: Option<ClientLevelPrivacy>,
    ) -> Result<Started<A>, SimError> {
        if spec.training.plan.dp_sgd.is_some() && !self.arch.stacks() {
            return Err(SimError::Scenario(crate::spec::FieldError::new(
                "privacy.mechanism".into(),
                format!(
                    "`dp_sgd` computes every record's gradient by stacking the model, and this \
                     model ({}) does not stack (batch statistics, or a TorchScript module); use \
                     a layer list without batch norm",
                    self.arch.summary()
                ),
            )));
        }
        let global = self.initial_global(&algorithm, spec)?;
        check_reported_loss::<A>(spec, &global)?;
        let sample_privacy = self.sample_privacy::<A>(spec, &global)?.map(|(p, _)| p);
        let solved;
        let spec = match sample_privacy {
            Some(p) if spec.training.plan.dp_sgd != Some(p.dp_sgd) => {
                let mut with_sigma = spec.clone();
                with_sigma.training.plan.dp_sgd = Some(p.dp_sgd);
                solved = with_sigma;
                &solved
            }
            _ => spec,
        };
        let jobs = Arc::new(JobContext::new(
            algorithm, self.arch, spec, placement, self.data, privacy,
        ));
        let dispatch = Dispatch::new(TrainerPool::start(threads), jobs.clone());
        Ok(Started {
            seeds: self.seeds,
            global,
            jobs,
            dispatch,
            system: Arc::new(self.system),
            sample_privacy,
        })
    }

    /// `algorithm`'s initial global model, from the run's `model_init` stream (or the file of
    /// `model.init`).
    fn initial_global<A: Algorithm>(
        &self,
        algorithm: &A,
        spec: &RunSpec,
    ) -> Result<A::Global, SimError> {
        let mut rng = self.seeds.rng(Entity::Run, "model_init", 0);
        let mut init = InitialModels::from(&self.arch, &mut rng, self.initial_models.as_deref());
        let global = algorithm.init_global(&self.arch, &mut init);
        init.finish().map_err(|m| {
            let file = spec
                .model
                .init
                .as_ref()
                .map(|i| i.from.display().to_string());
            init_error(format!("{}: {m}", file.unwrap_or_default()))
        })?;
        Ok(global)
    }

    /// DP-SGD as the run of `spec` with `algorithm` applies it, without running it (what
    /// `fedsim describe` prints), from its initial global model: σ solved where the scenario
    /// gives `target_epsilon`, and the local runs an update sends.
    pub fn sample_privacy_of<A: Algorithm>(
        &self,
        algorithm: &A,
        spec: &RunSpec,
    ) -> Result<Option<(crate::privacy::SampleLevelPrivacy, u64)>, SimError> {
        let global = self.initial_global(algorithm, spec)?;
        self.sample_privacy::<A>(spec, &global)
    }

    /// DP-SGD's settings for this run (`None` without it), with the local runs an update
    /// sends (one per vector of `global`): a `target_epsilon` is solved for the most a record
    /// can spend, a client of any of the data's training-set sizes drawn in every round.
    fn sample_privacy<A: Algorithm>(
        &self,
        spec: &RunSpec,
        global: &A::Global,
    ) -> Result<Option<(crate::privacy::SampleLevelPrivacy, u64)>, SimError> {
        let Some(privacy) = &spec.privacy else {
            return Ok(None);
        };
        let runs = A::PRIVATE_UPDATES.map_or(1, |hooks| (hooks.global)(&mut global.clone()).len());
        let sizes: Vec<usize> = (0..self.data.num_clients())
            .map(|c| self.data.split_len(c, crate::records::Split::Train))
            .collect();
        let rounds = spec.rounds as u64;
        let runs = runs as u64;
        let resolved = crate::privacy::sample_level::resolve(
            privacy,
            &spec.training.plan,
            &sizes,
            rounds,
            runs,
        )
        .map_err(|e| SimError::Scenario(e.within("privacy")))?;
        Ok(resolved.map(|p| (p, runs)))
    }
}

/// A loss-guided `sampling.strategy` needs clients to report the loss of the model they start
/// from: one vector an update moves ([`Algorithm::PRIVATE_UPDATES`]), not a mixture's several.
fn check_reported_loss<A: Algorithm>(spec: &RunSpec, global: &A::Global) -> Result<(), SimError> {
    if !spec.sampling.strategy.uses_feedback() {
        return Ok(());
    }
    let vectors = A::PRIVATE_UPDATES.map_or(0, |hooks| (hooks.global)(&mut global.clone()).len());
    if vectors == 1 {
        return Ok(());
    }
    Err(SimError::Scenario(crate::spec::FieldError::new(
        "sampling.strategy".into(),
        format!(
            "a loss-guided strategy ranks clients by the loss of the one model they start \
             from, and this algorithm's server sends {vectors} models (a mixture's components \
             have no loss of their own); use `uniform`, `weighted` or `poisson`, or an \
             algorithm with one global model"
        ),
    )))
}

/// An error of `model.init`'s file, at the field that names it.
fn init_error(message: String) -> SimError {
    SimError::Scenario(crate::spec::FieldError::new(
        "model.init.from".into(),
        message,
    ))
}
