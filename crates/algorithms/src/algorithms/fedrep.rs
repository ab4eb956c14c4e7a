//! FedRep (Collins et al. 2021, "Exploiting Shared Representations for Personalized Federated
//! Learning"): a shared representation (the body, averaged by the server) and a personal head
//! per client. A client first trains its head with the body fixed, then the body with its
//! head fixed, and sends the body; it keeps its head.
//!
//! As the authors' code splits a client's `local_ep` epochs: the last `body_epochs` of the
//! plan's epochs train the body and the ones before train the head (with `local_steps`, the
//! last `body_epochs` × ⌈n/B⌉ of the steps, at most all of them). Each round's steps start
//! from a zero momentum buffer at the plan's momentum, as the authors' code makes a new
//! optimizer for each local update; a fixed layer's values and buffer do not move. The
//! layers split as in `partial` (`personal`, default `[head]`).

use super::partial::{
    split_model_aggregation, split_model_global, LayerSplit, LayerSteps, SplitModel,
};
use super::{Algorithm, BatchwiseUpdate, LocalContext, LocalUpdate, ModelUpdate, Tested};
use crate::models::{Architecture, LocalPlan, LocalWork};
use crate::records::ModelKind;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedRepSpec {
    /// The layers each client keeps, its head [default: `[head]`]: `head`, `body`, `norm` or
    /// layers' names (`0`, `1`, …).
    #[serde(
        default,
        deserialize_with = "super::partial::layer_names",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<Vec<super::partial::LayerName>>")]
    pub personal: Option<Vec<String>>,
    /// The last epochs of a client's local work, which train the shared layers (the authors'
    /// `local_rep_ep`); the epochs before train the head.
    #[serde(default = "one")]
    pub body_epochs: u32,
}

fn one() -> u32 {
    1
}

impl FedRepSpec {
    fn split(&self, arch: &Architecture) -> Result<LayerSplit, FieldError> {
        let names = (self.personal.clone()).unwrap_or_else(|| vec!["head".to_string()]);
        LayerSplit::of(arch, &names, "personal")
    }
}

impl super::AlgorithmSettings for FedRepSpec {
    type Algorithm = FedRep;

    /// One epoch of the head, then one of the body.
    const EXAMPLE_SETTINGS: &'static [&'static str] = &[
        super::partial::SPLIT_EXAMPLE_MODEL,
        "training.local_epochs=2",
    ];

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("body_epochs", self.body_epochs as usize)
    }

    /// The head trains for the epochs before the last `body_epochs`: with no epoch left, each
    /// client's head would never leave its initial values.
    fn check_training(&self, plan: &LocalPlan) -> Result<(), FieldError> {
        match plan.work {
            LocalWork::Epochs(epochs) if epochs <= self.body_epochs => Err(FieldError::new(
                "training.local_epochs".into(),
                format!(
                    "is {epochs}, and FedRep trains each client's head for the epochs before \
                     the last `algorithm.body_epochs` ({}): no epoch is left for the head, \
                     which would keep its initial values; give more (the FedRep paper: 10 \
                     epochs of the head, then 1 of the body)",
                    self.body_epochs
                ),
            )),
            _ => Ok(()),
        }
    }

    fn check_model(&self, arch: &Architecture) -> Result<(), FieldError> {
        self.split(arch).map(|_| ())
    }

    fn build(&self, population: &super::Population) -> FedRep {
        FedRep {
            split: self
                .split(&population.arch)
                .expect("checked with the model"),
            body_epochs: self.body_epochs,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FedRep {
    /// `shared`: the body; `rest`: the head.
    pub split: LayerSplit,
    pub body_epochs: u32,
}

/// A client's head (empty until it first trains: it starts from the server's) and, during an
/// update, its steps.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct FedRepClient {
    pub head: Vec<f32>,
    pub steps: LayerSteps,
}

impl super::Finite for FedRepClient {
    fn is_finite(&self) -> bool {
        self.head.is_finite() && self.steps.is_finite()
    }
}

impl crate::io::Floats for FedRepClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let mut floats = vec![&mut self.head];
        floats.extend(self.steps.floats_mut());
        floats
    }
}

impl FedRep {
    /// The client's whole model: the shared body with its head (the server's before it trains).
    fn model(&self, global: &SplitModel, state: &FedRepClient) -> Vec<f32> {
        self.split.join(&global.shared, global.rest_or(&state.head))
    }

    /// The steps that train the head, of a run over `n` rows: all but the last `body_epochs`
    /// epochs' worth.
    fn head_steps(&self, plan: &LocalPlan, n: usize) -> u64 {
        let body = LocalPlan {
            work: LocalWork::Epochs(self.body_epochs),
            ..*plan
        };
        plan.steps(n).saturating_sub(body.steps(n))
    }
}

impl Algorithm for FedRep {
    /// The head (counted as a whole model, at most).
    const CLIENT_MODELS: usize = 1;

    type Global = SplitModel;
    type ClientState = FedRepClient;
    type Update = ModelUpdate;

    split_model_global!();

    fn init_client(&self, _: &SplitModel, _: u32) -> FedRepClient {
        FedRepClient::default()
    }

    /// The plan's minibatches: the head's steps, then the body's.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Batchwise(BatchwiseUpdate {
        plan: |_, plan| *plan,
        begin: |alg, ctx, global, state| {
            let plan = &ctx.training.plan;
            let head_steps = alg.head_steps(plan, ctx.train_view().len());
            let model = alg.model(global, state);
            state.steps.begin(model, plan.momentum, head_steps);
        },
        step: |alg, clients, batch| {
            let mut runs: Vec<_> = (clients.iter_mut())
                .map(|c| (&mut c.state.steps, c.lr))
                .collect();
            LayerSteps::step(&alg.split, &mut runs, batch);
        },
        finish: |alg, ctx, _, state| {
            let model = state.steps.finish();
            state.head = alg.split.rest_of(&model);
            ModelUpdate::of(ctx, alg.split.shared_of(&model))
        },
    });

    split_model_aggregation!();

    /// The shared body with the client's head.
    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a SplitModel,
        state: &'a FedRepClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(
            ModelKind::Personalized,
            self.model(global, state),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use crate::algorithms::AlgorithmSettings;
    use rand::SeedableRng;

    #[test]
    fn the_head_trains_first_then_the_body() {
        // One row x = (1, 0), label 1; an MLP 2 → 1 → 1 (ReLU): body (w1, w2, b) = (1, 0, 0),
        // head (v, c) = (1, 0). Three epochs of one step, the last the body's, lr 0.5.
        // Step 1 (head): h = relu(1) = 1, logit 1, g = σ(1) − 1 =: e1 < 0;
        //   v ← 1 − 0.5·e1·h, c ← 0 − 0.5·e1.
        // Step 2 (head): logit z2 = v + c, e2 = σ(z2) − 1; v ← v − 0.5·e2, c ← c − 0.5·e2.
        // Step 3 (body): logit z3 = v + c, e3 = σ(z3) − 1; w1 ← 1 − 0.5·e3·v, b ← −0.5·e3·v,
        //   w2 stays 0 (x₂ = 0); the head stays.
        let mut kit =
            Kit::binary(&[(&[1.0, 0.0], 1)], 1, 0.5).with_model("{kind: mlp, hidden: [1]}");
        kit.training.plan.work = LocalWork::Epochs(3);
        let spec: FedRepSpec = serde_yaml::from_str("{}").unwrap();
        let alg = spec.build(&kit.population());
        let global = alg.split.split(&[1.0, 0.0, 0.0, 1.0, 0.0]);
        let sigma = |z: f64| 1.0 / (1.0 + (-z).exp());
        let e1 = sigma(1.0) - 1.0;
        let (mut v, mut c) = (1.0 - 0.5 * e1, -0.5 * e1);
        let e2 = sigma(v + c) - 1.0;
        (v, c) = (v - 0.5 * e2, c - 0.5 * e2);
        let e3 = sigma(v + c) - 1.0;
        let (w1, b) = (1.0 - 0.5 * e3 * v, -0.5 * e3 * v);
        let mut state = FedRepClient::default();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let up = alg.local_update(&kit.ctx(), &global, &mut state, &mut rng);
        let want = |xs: &[f64]| xs.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        assert!(
            close(&up.params, &want(&[w1, 0.0, b]), 1e-6),
            "{:?}",
            up.params
        );
        assert!(close(&state.head, &want(&[v, c]), 1e-6), "{:?}", state.head);
        assert!(state.steps.model.is_empty() && state.steps.momentum.is_empty());
    }
}
