//! No training at all: clients take the simulated time their devices and links need for a
//! model of the scenario's size, and return nothing. For studying the system alone (round
//! times, participation, stragglers) at scales where training would dominate, and for
//! measuring the simulator's own overhead.

use super::LocalUpdate;
use super::{AggregateStale, Algorithm, LocalContext, Tested};
use crate::models::{Architecture, InitialModels};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoopSpec {}

impl super::AlgorithmSettings for NoopSpec {
    type Algorithm = Noop;

    fn build(&self, _: &super::Population) -> Noop {
        Noop
    }
}

#[derive(Clone, Debug, Default)]
pub struct Noop;

impl Algorithm for Noop {
    /// The number of model parameters (what the messages would carry).
    type Global = usize;
    type ClientState = ();
    type Update = usize;

    fn init_global(&self, arch: &Architecture, _: &mut InitialModels<'_, ChaCha20Rng>) -> usize {
        arch.num_params()
    }

    fn init_client(&self, _: &usize, _: u32) {}

    const TRAINS_MODELS: bool = false;

    fn broadcast_len(&self, global: &usize) -> usize {
        *global
    }

    fn update_len(&self, update: &usize) -> usize {
        *update
    }

    /// Nothing is trained: the "update" is the global model's size, for the system model.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Own(|_, _, global, _, _| *global);

    fn models(&self, _: &usize) -> Vec<Vec<f32>> {
        Vec::new()
    }

    /// Nothing to combine, fresh or stale.
    const STALE_UPDATES: Option<AggregateStale<Self>> = Some(|_, global, _, _| *global);

    fn aggregate(&self, global: &usize, _: super::Updates<usize>) -> usize {
        *global
    }

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        _: &'a usize,
        _: &'a (),
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        Vec::new()
    }
}
