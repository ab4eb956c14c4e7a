//! MOON (Li, He and Song 2021, "Model-Contrastive Federated Learning"): FedAvg whose local loss
//! adds μ times a model-contrastive term. A row's representation (what reaches the model's
//! head: MOON's projection head output, on which the classifier sits) is pulled towards the
//! global model's representation of the row and pushed from the client's previous local
//! model's, with temperature τ (`models::Contrastive`, a term of local SGD's objective).
//!
//! The client keeps its model from the last round it trained: the negative of the next. Before
//! it first trains it has none, and the negative is the global model it received (the authors
//! start every client's previous model as the initial global one; a client first sampled later
//! starts from the model it then receives, so its first contrast is zero). The server averages
//! the models as FedAvg does. A round's clients train in cohorts, the term stacked with their
//! runs (`models::train_sgd_stacked`); it has no DP-SGD form.

use super::{
    Algorithm, ContrastiveTerm, LocalContext, LocalUpdate, ModelUpdate, SentRuns, SgdRun,
    SgdUpdate, Tested,
};
use crate::algorithms::fedavg::model_update_aggregation;
use crate::models::Architecture;
use crate::records::ModelKind;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoonSpec {
    /// μ, the weight of the contrastive term (the paper: 5 on CIFAR-10, 1 on CIFAR-100 and
    /// Tiny-ImageNet).
    pub mu: f64,
    /// τ, the temperature of the contrastive term (the paper: 0.5).
    #[serde(default = "half")]
    pub temperature: f64,
}

fn half() -> f64 {
    0.5
}

impl super::AlgorithmSettings for MoonSpec {
    const EXAMPLE: &'static str = "{mu: 1}";

    const EXAMPLE_SETTINGS: &'static [&'static str] = &[super::partial::SPLIT_EXAMPLE_MODEL];

    type Algorithm = Moon;

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::non_negative("mu", self.mu)?;
        FieldError::positive("temperature", self.temperature)
    }

    fn check_model(&self, arch: &Architecture) -> Result<(), FieldError> {
        match arch.representation() {
            Some(_) => Ok(()),
            None => Err(FieldError::new(
                String::new(),
                format!(
                    "MOON contrasts the representation that reaches the model's head, and this \
                     model has no layer with parameters before its head ({}); use a model \
                     with a hidden layer",
                    arch.summary()
                ),
            )),
        }
    }

    fn build(&self, _: &super::Population) -> Moon {
        Moon { spec: self.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct Moon {
    pub spec: MoonSpec,
}

/// The client's model from the last round it trained (empty before) and its momentum buffer
/// (empty unless momentum is kept across rounds).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MoonClient {
    pub previous: Vec<f32>,
    pub momentum: Vec<f32>,
}

impl super::Finite for MoonClient {
    fn is_finite(&self) -> bool {
        self.previous.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for MoonClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.previous, &mut self.momentum]
    }
}

impl Algorithm for Moon {
    /// The previous local model.
    const CLIENT_MODELS: usize = 1;

    /// The contrastive term, over a batch's representations, has no per-row form.
    const DP_SGD: bool = false;

    type Global = Vec<f32>;
    type ClientState = MoonClient;
    type Update = ModelUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> MoonClient {
        MoonClient::default()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// One run from the global model, the contrastive term against it and the previous model;
    /// the trained model is sent and kept as the next negative.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |alg, _, global, state, _| {
            let previous = match state.previous.is_empty() {
                true => Cow::Borrowed(&global[..]),
                false => Cow::Owned(std::mem::take(&mut state.previous)),
            };
            vec![SgdRun {
                params: Cow::Borrowed(global),
                momentum: std::mem::take(&mut state.momentum),
                contrastive: Some(ContrastiveTerm {
                    global: Cow::Borrowed(global),
                    previous,
                    mu: alg.spec.mu,
                    temperature: alg.spec.temperature,
                }),
                ..SgdRun::default()
            }]
        },
        finish: |_, ctx, _, state, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            state.momentum = run.momentum;
            let params = run.params.into_owned();
            state.previous = params.clone();
            ModelUpdate::of(ctx, params)
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    model_update_aggregation!();

    /// Novelty is scored by the global model's confidence, as FedAvg's.
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> = Some(|_, global, _| global);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<f32>,
        _: &'a MoonClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::Kit;
    use crate::algorithms::AlgorithmSettings;
    use crate::models::LocalWork;
    use rand::SeedableRng;

    #[test]
    fn without_the_term_it_is_fedavg_and_the_client_keeps_its_model() {
        // μ = 0: MOON's run is FedAvg's (the same minibatches, the same steps), and the client
        // keeps the model it sent as its next negative.
        let mut kit = Kit::binary(&[(&[1.0, 0.0], 1), (&[0.0, 1.0], 0)], 1, 0.1)
            .with_model("{kind: mlp, hidden: [2]}");
        kit.training.plan.work = LocalWork::Epochs(2);
        let spec = MoonSpec {
            mu: 0.0,
            temperature: 0.5,
        };
        let alg = spec.build(&kit.population());
        let global: Vec<f32> = vec![0.5, -0.25, 0.1, 0.3, 0.0, 0.1, 1.0, -1.0, 0.2];
        let mut state = MoonClient::default();
        let up = alg.local_update(
            &kit.ctx(),
            &global,
            &mut state,
            &mut ChaCha20Rng::seed_from_u64(3),
        );
        let fedavg = crate::algorithms::FedAvg::plain();
        let plain = fedavg.local_update(
            &kit.ctx(),
            &global,
            &mut Vec::new(),
            &mut ChaCha20Rng::seed_from_u64(3),
        );
        assert_eq!(up.params, plain.params);
        assert_eq!(state.previous, up.params);
        // With μ > 0 the run differs once the previous model differs from the global one.
        let alg = MoonSpec {
            mu: 5.0,
            temperature: 0.5,
        }
        .build(&kit.population());
        let again = alg.local_update(
            &kit.ctx(),
            &global,
            &mut state,
            &mut ChaCha20Rng::seed_from_u64(3),
        );
        assert_ne!(again.params, plain.params);
    }
}
