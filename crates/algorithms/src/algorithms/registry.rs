//! The algorithms a scenario can name, one line each in [`REGISTRY`].
//!
//! An algorithm is its file (its settings type, implementing [`AlgorithmSettings`], and its
//! [`Algorithm`]) plus one entry in the `registry!` list here. What it can do is declared by the
//! algorithm itself: whether it runs on peers follows from the registration it uses
//! (a `peers` line needs a [`Gossip`] algorithm), whether it takes stale updates from
//! its [`Algorithm::STALE_UPDATES`]. Validation and the run read only this registry: no name
//! lists elsewhere. This room parses settings and builds algorithms; it holds no algorithm's
//! logic, and it runs nothing itself: [`Built::run`] hands the built algorithm, as its own
//! type, to whatever runs it.

use super::{Algorithm, Gossip};
use crate::data::{FederatedData, InputShape, SplitView};
use crate::models::{Architecture, InitialModels, LocalPlan};
use crate::records::Split;
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;

/// Writes, from one list (`server|peers Variant settings-type { name, title, summary }` per
/// algorithm): [`REGISTRY`]; [`Built`], a variant per algorithm holding it as its own type; how
/// each settings type builds its variant; and [`Built::run`], the one `match` that hands an
/// algorithm to a run with a server or on peers, as it is registered.
macro_rules! registry {
    ($($how:ident $variant:ident $settings:ty { $name:expr, $title:expr, $summary:expr $(,)? })*) => {
        /// The registry: every algorithm a scenario can name, in the order `fedsim` lists them.
        pub static REGISTRY: &[Registration] = &[
            $($how::<$settings>($name, $title, $summary),)*
        ];

        /// A registered algorithm built for a run, with its initial global model: one variant
        /// per line of the registry, each holding the algorithm as its own type.
        pub enum Built {
            $($variant(Planned<<$settings as AlgorithmSettings>::Algorithm>),)*
        }

        $(impl InRegistry for $settings {
            fn built(
                &self,
                population: &Population,
                arch: &Architecture,
                init: &mut InitialModels<'_, ChaCha20Rng>,
            ) -> Built {
                let algorithm = AlgorithmSettings::build(self, population);
                let global = algorithm.init_global(arch, init);
                Built::$variant(Planned { algorithm, global })
            }
        })*

        impl Built {
            /// Hands the algorithm, as its own type, to `run`: to [`RunBuilt::server`] if it
            /// is registered with a server, to [`RunBuilt::peers`] if on peers.
            pub fn run<R: RunBuilt>(self, run: R) -> R::Output {
                match self {
                    $(Built::$variant(planned) => run.$how(planned),)*
                }
            }

            /// The vectors its updates send, one per vector of its global model
            /// ([`Algorithm::PRIVATE_UPDATES`]); `None` where its updates declare none.
            pub fn sent_vectors(&self) -> Option<usize> {
                match self {
                    $(Built::$variant(planned) => planned.sent_vectors(),)*
                }
            }
        }
    };
}

registry! {
    server FedAvg super::fedavg::FedAvgSpec {
        "fedavg",
        "FedAvg",
        "FedAvg (McMahan et al. 2017): local SGD, weighted average of the models",
    }
    server FedProx super::fedavg::FedProxSpec {
        "fedprox",
        "FedProx",
        "FedProx (Li et al. 2020): FedAvg with a proximal term (μ/2)‖θ − θ_global‖²",
    }
    server FedAvgPlus super::fedavg::FedAvgPlusSpec {
        "fedavg_plus",
        "FedAvg+",
        "FedAvg+ (Jiang et al. 2019): FedAvg, then local fine-tuning before each test",
    }
    server Scaffold super::scaffold::ScaffoldSpec {
        "scaffold",
        "SCAFFOLD",
        "SCAFFOLD (Karimireddy et al. 2020): local steps corrected by control variates",
    }
    server FedDyn super::feddyn::FedDynSpec {
        "feddyn",
        "FedDyn",
        "FedDyn (Acar et al. 2021): local objectives corrected by dynamic regularization",
    }
    server FedNova super::fednova::FedNovaSpec {
        "fednova",
        "FedNova",
        "FedNova (Wang et al. 2020): FedAvg with each change normalized by its local steps",
    }
    server Moon super::moon::MoonSpec {
        "moon",
        "MOON",
        "MOON (Li et al. 2021): FedAvg with a model-contrastive term on the representation",
    }
    server QFedAvg super::q_fedavg::QFedAvgSpec {
        "q_fedavg",
        "q-FedAvg",
        "q-FedAvg (Li et al. 2020): the q-FFL objective, where clients with a higher loss weigh more",
    }
    server Afl super::afl::AflSpec {
        "afl",
        "AFL",
        "AFL (Mohri et al. 2019): the model best for the worst mixture of the clients",
    }
    server FedPer super::partial::FedPerSpec {
        "fedper",
        "FedPer",
        "FedPer (Arivazhagan et al. 2019): FedAvg of the body, a personal head per client",
    }
    server LgFedAvg super::partial::LgFedAvgSpec {
        "lg_fedavg",
        "LG-FedAvg",
        "LG-FedAvg (Liang et al. 2020): local representations, a global head",
    }
    server FedBn super::partial::FedBnSpec {
        "fedbn",
        "FedBN",
        "FedBN (Li et al. 2021): FedAvg with every normalisation layer local",
    }
    server FedRep super::fedrep::FedRepSpec {
        "fedrep",
        "FedRep",
        "FedRep (Collins et al. 2021): a shared body; each client trains its head, then the body",
    }
    server FedBabu super::fedbabu::FedBabuSpec {
        "fedbabu",
        "FedBABU",
        "FedBABU (Oh et al. 2022): the body trained under a frozen head, fine-tuned before tests",
    }
    server Local super::local::LocalSpec {
        "local",
        "Local",
        "every client trains alone on its own data; nothing is communicated",
    }
    server FedEm super::fedem::FedEmSpec {
        "fedem",
        "FedEM",
        "FedEM (Marfoq et al. 2021): a mixture of M shared components, learned by federated EM",
    }
    server PFedMe super::pfedme::PFedMeSpec {
        "pfedme",
        "pFedMe",
        "pFedMe (Dinh et al. 2020): personalized models through Moreau envelopes",
    }
    server Clustered super::clustered::ClusteredSpec {
        "clustered",
        "Clustered FL",
        "Clustered FL (Sattler et al. 2020): clusters split by the cosine similarity of updates",
    }
    server Apfl super::apfl::ApflSpec {
        "apfl",
        "APFL",
        "APFL (Deng et al. 2020): a local model mixed with the global one",
    }
    server PerFedAvg super::per_fedavg::PerFedAvgSpec {
        "per_fedavg",
        "Per-FedAvg",
        "Per-FedAvg (Fallah et al. 2020), first-order MAML: one adaptation step before testing",
    }
    server Ditto super::ditto::DittoSpec {
        "ditto",
        "Ditto",
        "Ditto (Li et al. 2021): personal models pulled towards the global one",
    }
    server FedGmm super::fedgmm::FedGmmSpec {
        "fedgmm",
        "FedGMM",
        "FedGMM (Wu et al. 2023): Gaussian mixtures over inputs times shared classifiers",
    }
    server Noop super::noop::NoopSpec {
        "noop",
        "no training",
        "no training: only the system is simulated (round times, participation)",
    }
    peers DPsgd super::fedavg::DPsgdSpec {
        "d_psgd",
        "D-PSGD",
        "D-PSGD (Lian et al. 2017): FedAvg without a server, averaging with neighbours",
    }
    peers DFedEm super::fedem::DFedEmSpec {
        "d_fedem",
        "D-FedEM",
        "D-FedEM (Marfoq et al. 2021, Alg. 4): FedEM without a server, mixing with neighbours",
    }
}

/// What the run knows of its clients when it builds the algorithm.
#[derive(Clone, Debug)]
pub struct Population {
    /// All clients, held-out ones included.
    pub clients: usize,
    /// Training rows of the clients that take part (not held out).
    pub participants_train: usize,
    /// Features per row.
    pub input_dim: usize,
    /// The clients' rows, for settings fitted on them before the run (FedGMM's PCA).
    pub data: Arc<FederatedData>,
    /// The held-out clients, sorted.
    pub unseen: Vec<u32>,
    /// The model every client trains (its layers, for settings that name them).
    pub arch: Architecture,
}

impl Population {
    /// Calls `each` with every participant's training rows, client by client in increasing
    /// order (rows made on demand are made, one client at a time).
    pub fn for_each_training_view(&self, mut each: impl FnMut(SplitView<'_>)) {
        for c in 0..self.clients as u32 {
            if self.unseen.binary_search(&c).is_ok() {
                continue;
            }
            let rows = self.data.rows_for(&[c]);
            each(rows.data().view(rows.index(0), Split::Train));
        }
    }
}

/// An algorithm's settings, as its `algorithm:` section holds them (besides `name`).
pub trait AlgorithmSettings: ItemSettings + InRegistry {
    /// The algorithm these settings configure.
    type Algorithm: Algorithm;

    /// The smallest settings that run (YAML flow mapping, without `name`): what the test
    /// suites run every registered algorithm with, so a new one is tested without a list.
    const EXAMPLE: &'static str = "{}";

    /// The other settings its example needs, as `--set` takes them: a model with the layers
    /// a split names (`model={kind: mlp, hidden: [8]}`), local work its phases need
    /// (`training.local_epochs=2`). The test suites run the example with them; without a
    /// `model=`, any model will do.
    const EXAMPLE_SETTINGS: &'static [&'static str] = &[];

    /// Checks the settings; a path is below `algorithm`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// Reads the files the settings name, before anything runs (the pre-flight of `fedsim
    /// check`, `run` and `sweep`; never while a scenario is read), for `clients` clients where
    /// the scenario says how many before the data is built; a path is below `algorithm`.
    fn check_files(&self, _clients: Option<usize>) -> Result<(), FieldError> {
        Ok(())
    }

    /// Checks the settings against the shape of a row (`fedsim check` where the data's shape
    /// is known before it is built, and when the run starts; a path is below `algorithm`).
    fn check_input(&self, _input: InputShape) -> Result<(), FieldError> {
        Ok(())
    }

    /// Checks the settings against the scenario's local work (`training`); an error's path is
    /// below the scenario's root (`algorithm.…` or `training.…`).
    fn check_training(&self, _plan: &LocalPlan) -> Result<(), FieldError> {
        Ok(())
    }

    /// Checks the settings against the run's model: the layers a split names, the layers a
    /// term reads (`fedsim check` where the data's shape and classes are known before it is
    /// built, and when the run starts; a path is below `algorithm`).
    fn check_model(&self, _arch: &Architecture) -> Result<(), FieldError> {
        Ok(())
    }

    /// Checks the settings against the data, once it is built (a path is below `algorithm`).
    fn check_data(&self, population: &Population) -> Result<(), FieldError> {
        self.check_input(population.data.input_shape())?;
        self.check_model(&population.arch)
    }

    /// The algorithm for a run over `population` (after [`AlgorithmSettings::check_data`]).
    fn build(&self, population: &Population) -> Self::Algorithm;

    /// The algorithm for a run over `population`, with its initial global model from `init`,
    /// as its [`Built`] variant.
    fn build_with_global(
        &self,
        population: &Population,
        arch: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> Built {
        self.built(population, arch, init)
    }
}

/// What an algorithm can do beyond a synchronous round with a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Runs on peers over a `topology`, without a server.
    pub decentralized: bool,
    /// Combines updates computed from older models (FedBuff, late updates).
    pub stale_updates: bool,
    /// Its clients can train in cohorts, as one stacked computation (`training.cohorts`): its
    /// update is made of local SGD runs ([`LocalUpdate::Sgd`](super::LocalUpdate::Sgd)) or of minibatch steps by its
    /// own rule ([`LocalUpdate::Batchwise`](super::LocalUpdate::Batchwise)), with a server or on peers.
    pub cohorts: bool,
    /// Its updates take client-level differential privacy (`privacy:`): clipped against
    /// the global model, every client weighing the same ([`Algorithm::PRIVATE_UPDATES`]).
    pub private_updates: bool,
    /// Its server combines updates into global vectors that a `server_optimizer:` can step
    /// ([`Algorithm::SERVER_OPTIMIZED`]).
    pub server_optimizer: bool,
    /// Its update is made of local SGD runs ([`LocalUpdate::Sgd`](super::LocalUpdate::Sgd)),
    /// which DP-SGD can train (`privacy: {mechanism: dp_sgd}`; [`Algorithm::DP_SGD`]).
    pub sgd_runs: bool,
    /// Its update's E-step reads every training row's loss under models it declares
    /// ([`SgdUpdate::scores`](super::SgdUpdate::scores)); where cohorts stack evaluations, a
    /// shard's rows are scored in stacked forward passes.
    pub scores_rows: bool,
    /// Model-sized vectors each client that has trained keeps ([`Algorithm::CLIENT_MODELS`]).
    pub client_models: usize,
    /// Scores novelty by one classifier's confidence, which `evaluation.novelty:
    /// max_over_clients` can take over every client's classifier
    /// ([`Algorithm::CONFIDENCE_MODEL`]); with a server only.
    pub confidence_novelty: bool,
    /// Weighs shared components by each client's mixture weights, so that `evaluation.novelty:
    /// mean_weights` can score with their mean ([`Algorithm::MIXTURE_WEIGHTS`]); with a server
    /// only.
    pub mixture_novelty: bool,
    /// Trains and evaluates a model ([`Algorithm::TRAINS_MODELS`]); `noop` does not.
    pub trains_models: bool,
}

/// Whether the algorithm declares an update that cohorts can train.
pub const fn trains_in_cohorts<A: Algorithm>() -> bool {
    A::UPDATE.stacks()
}

catalogue! {
    /// The catalogue of algorithms (the registry).
    pub struct Algorithms {
        tag: "name",
        example: "{name: fedavg}",
        schema: "AlgorithmSpec",
        declared: Declared,
        items: REGISTRY,
    }
    /// Settings of some registered algorithm, their type erased.
    erases AlgorithmSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn check_files(&self, clients: Option<usize>) -> Result<(), FieldError>;
        fn check_input(&self, input: InputShape) -> Result<(), FieldError>;
        fn check_training(&self, plan: &LocalPlan) -> Result<(), FieldError>;
        fn check_model(&self, arch: &Architecture) -> Result<(), FieldError>;
        fn check_data(&self, population: &Population) -> Result<(), FieldError>;
        fn build_with_global(&self, population: &Population, arch: &Architecture, init: &mut InitialModels<'_, ChaCha20Rng>) -> Built;
    }
    /// Which algorithm a scenario runs, with its settings: `algorithm: {name: fedavg, ...}`.
    section AlgorithmSpec;
}

/// What the registry declares of an algorithm.
pub struct Declared {
    /// How papers and plots write it (`FedAvg+`, `pFedMe`).
    pub title: &'static str,
    pub capabilities: Capabilities,
    /// [`AlgorithmSettings::EXAMPLE_SETTINGS`].
    pub example_settings: &'static [&'static str],
}

/// The line of an algorithm that runs with a server.
const fn server<S: AlgorithmSettings>(
    name: &'static str,
    title: &'static str,
    summary: &'static str,
) -> Registration {
    let capabilities = Capabilities {
        decentralized: false,
        stale_updates: <S::Algorithm as Algorithm>::STALE_UPDATES.is_some(),
        private_updates: <S::Algorithm as Algorithm>::PRIVATE_UPDATES.is_some(),
        server_optimizer: <S::Algorithm as Algorithm>::SERVER_OPTIMIZED.is_some(),
        cohorts: trains_in_cohorts::<S::Algorithm>(),
        sgd_runs: <S::Algorithm as Algorithm>::UPDATE.is_sgd_runs()
            && <S::Algorithm as Algorithm>::DP_SGD,
        scores_rows: <S::Algorithm as Algorithm>::UPDATE.scores_rows(),
        client_models: <S::Algorithm as Algorithm>::CLIENT_MODELS,
        confidence_novelty: <S::Algorithm as Algorithm>::CONFIDENCE_MODEL.is_some(),
        mixture_novelty: <S::Algorithm as Algorithm>::MIXTURE_WEIGHTS.is_some(),
        trains_models: <S::Algorithm as Algorithm>::TRAINS_MODELS,
    };
    line::<S>(name, title, summary, capabilities)
}

/// The line of an algorithm that runs on peers over a topology.
const fn peers<S: AlgorithmSettings>(
    name: &'static str,
    title: &'static str,
    summary: &'static str,
) -> Registration
where
    S::Algorithm: Gossip,
{
    let capabilities = Capabilities {
        decentralized: true,
        stale_updates: false,
        private_updates: false,
        server_optimizer: false,
        cohorts: trains_in_cohorts::<S::Algorithm>(),
        sgd_runs: <S::Algorithm as Algorithm>::UPDATE.is_sgd_runs()
            && <S::Algorithm as Algorithm>::DP_SGD,
        scores_rows: <S::Algorithm as Algorithm>::UPDATE.scores_rows(),
        client_models: <S::Algorithm as Algorithm>::CLIENT_MODELS,
        confidence_novelty: false,
        mixture_novelty: false,
        trains_models: <S::Algorithm as Algorithm>::TRAINS_MODELS,
    };
    line::<S>(name, title, summary, capabilities)
}

/// The line of the algorithm whose settings are `S`, able to do what `capabilities` say.
const fn line<S: AlgorithmSettings>(
    name: &'static str,
    title: &'static str,
    summary: &'static str,
    capabilities: Capabilities,
) -> Registration {
    let declared = Declared {
        title,
        capabilities,
        example_settings: S::EXAMPLE_SETTINGS,
    };
    Registration::new::<S>(name, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

/// The names of the registered algorithms that have `wanted`, as "`a`, `b` or `c`".
pub fn names_where(wanted: impl Fn(&Capabilities) -> bool) -> String {
    crate::settings::catalogue::names_declaring::<Algorithms>(|d| wanted(&d.capabilities), "or")
}

/// An algorithm built for a run, as its own type, with its initial global model.
pub struct Planned<A: Algorithm> {
    pub algorithm: A,
    pub global: A::Global,
}

impl<A: Algorithm> Planned<A> {
    /// See [`Built::sent_vectors`].
    fn sent_vectors(&self) -> Option<usize> {
        A::PRIVATE_UPDATES.map(|hooks| (hooks.global)(&mut self.global.clone()).len())
    }
}

/// What runs a [`Built`] algorithm (the simulation, with a server or on peers): it gets the
/// algorithm as its own type from [`Built::run`].
pub trait RunBuilt {
    type Output;
    /// Runs `planned` with a server and clients.
    fn server<A: Algorithm>(self, planned: Planned<A>) -> Self::Output;
    /// Runs `planned` on peers.
    fn peers<A: Gossip>(self, planned: Planned<A>) -> Self::Output;
}

/// What the registry writes for each algorithm's settings, which have it by having their line
/// in the registry: the algorithm built with its initial global model, as its [`Built`] variant.
pub trait InRegistry {
    fn built(
        &self,
        population: &Population,
        arch: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> Built;
}

impl AlgorithmSpec {
    pub fn capabilities(&self) -> Capabilities {
        self.declared().capabilities
    }

    /// Whether the algorithm runs on peers over a `topology` instead of with a server.
    pub fn is_decentralized(&self) -> bool {
        self.capabilities().decentralized
    }

    /// Whether the algorithm can aggregate stale updates.
    pub fn takes_stale_updates(&self) -> bool {
        self.capabilities().stale_updates
    }

    /// Whether the algorithm's updates take client-level differential privacy.
    pub fn takes_privacy(&self) -> bool {
        self.capabilities().private_updates
    }

    /// Checks the algorithm's own settings; a path is below `algorithm`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Reads the files the settings name (the pre-flight), for `clients` clients where known;
    /// a path is below `algorithm`.
    pub fn check_files(&self, clients: Option<usize>) -> Result<(), FieldError> {
        self.erased().check_files(clients)
    }

    /// Checks the settings against rows of shape `input`; a path is below `algorithm`.
    pub fn check_input(&self, input: InputShape) -> Result<(), FieldError> {
        self.erased().check_input(input)
    }

    /// Checks the settings against the local work; a path is below the scenario's root.
    pub fn check_training(&self, plan: &LocalPlan) -> Result<(), FieldError> {
        self.erased().check_training(plan)
    }

    /// Checks the settings against the run's model; a path is below `algorithm`.
    pub fn check_model(&self, arch: &Architecture) -> Result<(), FieldError> {
        self.erased().check_model(arch)
    }

    /// Checks the settings against the data of `population`; a path is below `algorithm`.
    pub fn check_data(&self, population: &Population) -> Result<(), FieldError> {
        self.erased().check_data(population)
    }

    /// The algorithm for a run over `population` (after [`Self::check_data`]), with its
    /// initial global model from `init`.
    pub fn build(
        &self,
        population: &Population,
        arch: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> Built {
        self.erased().build_with_global(population, arch, init)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml::Value;

    #[test]
    fn every_algorithm_parses_its_example_and_round_trips() {
        crate::settings::catalogue::check_catalogue::<Algorithms>(|spec| {
            AlgorithmSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }

    #[test]
    fn capabilities_come_from_the_algorithms() {
        let get = |n: &str| Registration::find(n).unwrap().declared.capabilities;
        assert!(get("fedavg").stale_updates && !get("fedavg").decentralized);
        assert!(get("fedem").stale_updates);
        assert!(!get("pfedme").stale_updates && !get("clustered").stale_updates);
        for name in [
            "fedavg",
            "fedprox",
            "fedavg_plus",
            "local",
            "fedem",
            "clustered",
            "fedgmm",
            "ditto",
            "pfedme",
            "apfl",
            "per_fedavg",
        ] {
            assert!(get(name).cohorts, "{name} trains in cohorts");
        }
        assert!(!get("noop").cohorts, "noop trains nothing");
        assert!(get("d_psgd").decentralized && get("d_fedem").decentralized);
        assert_eq!(names_where(|c| c.decentralized), "`d_psgd` or `d_fedem`");
    }

    #[test]
    fn unknown_names_and_fields_say_what_is_allowed() {
        let e = AlgorithmSpec::parse("fedsgd", Value::Null).unwrap_err();
        assert!(
            e.contains("unknown variant `fedsgd`") && e.contains("`fedem`"),
            "{e}"
        );
        let e = AlgorithmSpec::parse("fedem", serde_yaml::from_str("{componentz: 2}").unwrap())
            .unwrap_err();
        assert!(e.contains("unknown field `componentz`"), "{e}");
    }
}
