//! Local training: every client trains its own model on its own data and nothing is
//! communicated. All clients start from the same initial model.

use super::LocalUpdate;
use super::{AggregateStale, Algorithm, LocalContext, SentRuns, SgdRun, SgdUpdate, Tested};
use crate::models::{Architecture, InitialModels};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSpec {}

impl super::AlgorithmSettings for LocalSpec {
    type Algorithm = Local;

    fn build(&self, _: &super::Population) -> Local {
        Local
    }
}

#[derive(Clone, Debug, Default)]
pub struct Local;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LocalModel {
    pub params: Vec<f32>,
    pub momentum: Vec<f32>,
}

impl super::Finite for LocalModel {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for LocalModel {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params, &mut self.momentum]
    }
}

impl Algorithm for Local {
    /// Its own model.
    const CLIENT_MODELS: usize = 1;

    /// The common initial model.
    type Global = Vec<f32>;
    type ClientState = LocalModel;
    type Update = ();

    fn init_global(&self, _: &Architecture, init: &mut InitialModels<'_, ChaCha20Rng>) -> Vec<f32> {
        init.model()
    }

    fn init_client(&self, global: &Vec<f32>, _: u32) -> LocalModel {
        LocalModel {
            params: global.clone(),
            momentum: Vec::new(),
        }
    }

    fn models(&self, global: &Vec<f32>) -> Vec<Vec<f32>> {
        vec![global.clone()]
    }

    fn broadcast_len(&self, _: &Vec<f32>) -> usize {
        0
    }

    fn update_len(&self, _: &()) -> usize {
        0
    }

    /// One run of the client's own model.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |_, _, _, state, _| {
            vec![SgdRun {
                params: Cow::Owned(std::mem::take(&mut state.params)),
                momentum: std::mem::take(&mut state.momentum),
                ..SgdRun::default()
            }]
        },
        finish: |_, _, _, state, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            state.params = run.params.into_owned();
            state.momentum = run.momentum;
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    /// Nothing is communicated, fresh or stale.
    const STALE_UPDATES: Option<AggregateStale<Self>> = Some(|_, global, _, _| global.clone());

    fn aggregate(&self, global: &Vec<f32>, _: super::Updates<()>) -> Vec<f32> {
        global.clone()
    }

    /// Novelty is scored by the client's own model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, _, state| &state.params);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        _: &'a Vec<f32>,
        state: &'a LocalModel,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Local, &state.params[..])]
    }
}
