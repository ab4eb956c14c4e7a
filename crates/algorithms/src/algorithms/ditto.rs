//! Ditto (Li et al. 2021): FedAvg for the global model w, plus a personal model v per client,
//! trained in the same round by v ← v − η_p·(∇f(v) + λ·(v − w)) against the global model w the
//! client received. Clients are evaluated with v.
//!
//! The global part is FedAvg's local training (momentum and all, as the scenario says); the
//! personal part takes as many plain-SGD minibatch steps as the plan has, at `personal_lr`,
//! from its own shuffle of the client's rows. Both are local SGD runs, so Ditto trains in
//! cohorts.

use super::LocalUpdate;
use super::ProximalTerm;
use super::{Algorithm, KeptRun, LocalContext, SentRuns, SgdRun, SgdUpdate, Tested};
use crate::algorithms::fedavg::{model_update_aggregation, ModelUpdate};
use crate::models::LocalPlan;
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DittoSpec {
    /// λ, the pull of the personal model towards the global one (the Ditto paper tunes it in
    /// {0.01, 0.1, 1, 2}).
    pub lambda: f64,
    /// Learning rate of the personal model [default: the round's `training.lr`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal_lr: Option<f64>,
}

impl super::AlgorithmSettings for DittoSpec {
    const EXAMPLE: &'static str = "{lambda: 0.1}";

    type Algorithm = Ditto;

    fn build(&self, _: &super::Population) -> Ditto {
        Ditto { spec: self.clone() }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::non_negative("lambda", self.lambda)?;
        match self.personal_lr {
            Some(lr) => crate::settings::FieldError::positive("personal_lr", lr),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Ditto {
    pub spec: DittoSpec,
}

/// The personal model (empty until the client first trains) and the momentum of the global
/// model's local training.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct DittoClient {
    pub personal: Vec<f32>,
    pub momentum: Vec<f32>,
}

impl super::Finite for DittoClient {
    fn is_finite(&self) -> bool {
        self.personal.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for DittoClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.personal, &mut self.momentum]
    }
}

impl Algorithm for Ditto {
    /// The personal model.
    const CLIENT_MODELS: usize = 1;

    type Global = Vec<f32>;
    type ClientState = DittoClient;
    type Update = ModelUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> DittoClient {
        DittoClient::default()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// The global and the personal model each take one pass of the plan.
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        2 * plan.samples_processed(n_train)
    }

    /// Two runs: the global model's (FedAvg's, with the client's momentum), then the personal
    /// model's (plain SGD at `personal_lr`, pulled towards the received global model by λ).
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |alg, ctx, global, state, _| {
            let personal = if state.personal.is_empty() {
                Cow::Borrowed(&global[..])
            } else {
                Cow::Owned(std::mem::take(&mut state.personal))
            };
            vec![
                SgdRun {
                    params: Cow::Borrowed(global),
                    momentum: std::mem::take(&mut state.momentum),
                    ..SgdRun::default()
                },
                SgdRun {
                    params: personal,
                    proximal: Some(ProximalTerm {
                        anchor: Cow::Borrowed(global),
                        mu: alg.spec.lambda,
                    }),
                    lr: Some(alg.spec.personal_lr.unwrap_or(ctx.lr)),
                    plain_sgd: true,
                    ..SgdRun::default()
                },
            ]
        },
        finish: |_, ctx, _, state, runs| {
            let [global_run, personal_run] = <[SgdRun; 2]>::try_from(runs).expect("two runs");
            state.momentum = global_run.momentum;
            state.personal = personal_run.params.into_owned();
            ModelUpdate::of(ctx, global_run.params.into_owned())
        },
        sends: SentRuns::First,
        keeps: Some(KeptRun {
            run: 1,
            state_vector: 0,
        }),
    });

    model_update_aggregation!();

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<f32>,
        state: &'a DittoClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let v = if state.personal.is_empty() {
            global
        } else {
            &state.personal
        };
        vec![Tested::params(ModelKind::Personalized, &v[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use rand::SeedableRng;

    #[test]
    fn personal_step_by_hand() {
        // One row x = 1, y = 1; global w = (0, 0) and personal v = (1, 1) from an earlier
        // round. ∇f(v) = (σ(2) − 1)·(1, 1); with λ = 0.5 the pull is 0.5·(1 − 0) = 0.5.
        // lr 0.1: v = 1 − 0.1·(σ(2) − 1 + 0.5).
        let kit = Kit::binary(&[(&[1.0], 1)], 1, 0.1);
        let alg = Ditto {
            spec: DittoSpec {
                lambda: 0.5,
                personal_lr: None,
            },
        };
        let mut state = DittoClient {
            personal: vec![1.0, 1.0],
            momentum: Vec::new(),
        };
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let up = alg.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut state, &mut rng);
        let want = (1.0 - 0.1 * (1.0 / (1.0 + (-2.0f64).exp()) - 1.0 + 0.5)) as f32;
        assert!(
            close(&state.personal, &[want, want], 1e-6),
            "{:?}",
            state.personal
        );
        // The global part is one plain SGD step from w = 0: 0 − 0.1·(−½) = 0.05.
        assert!(close(&up.params, &[0.05, 0.05], 1e-7), "{:?}", up.params);
    }
}
