//! FedAvg (McMahan et al. 2017): clients run local SGD from the global model; the server
//! averages the returned models weighted by the clients' training-set sizes n_t.

use super::{weighted_average, Algorithm, LocalContext, ModelKind};
use crate::data::SplitView;
use crate::models::{evaluate, Architecture, EvalStats};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedAvgSpec {}

#[derive(Clone, Debug, Default)]
pub struct FedAvg;

/// A client's model after local training, with its aggregation weight n_t.
pub struct ModelUpdate {
    pub params: Vec<f32>,
    pub weight: f64,
}

impl Algorithm for FedAvg {
    type Global = Vec<f32>;
    /// The momentum buffer (empty unless momentum is kept across rounds).
    type ClientState = Vec<f32>;
    type Update = ModelUpdate;

    fn init_global(&self, arch: &Architecture, rng: &mut ChaCha20Rng) -> Vec<f32> {
        arch.init(rng)
    }

    fn init_client(&self, _: &Vec<f32>, _: u32) -> Vec<f32> {
        Vec::new()
    }

    fn broadcast_len(&self, global: &Vec<f32>) -> usize {
        global.len()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    fn local_update(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        momentum: &mut Vec<f32>,
        rng: &mut ChaCha20Rng,
    ) -> ModelUpdate {
        let mut params = global.clone();
        ctx.train(&mut params, momentum, None, rng);
        ModelUpdate {
            params,
            weight: ctx.train_view().len() as f64,
        }
    }

    fn aggregate(&self, _: &Vec<f32>, updates: &[(u32, ModelUpdate)]) -> Vec<f32> {
        weighted_average(updates.iter().map(|(_, u)| (u.weight, &u.params[..])))
    }

    fn evaluated_model(&self) -> ModelKind {
        ModelKind::Global
    }

    fn evaluate(
        &self,
        arch: &Architecture,
        global: &Vec<f32>,
        _: &Vec<f32>,
        view: SplitView<'_>,
    ) -> EvalStats {
        evaluate(arch, global, view)
    }
}
