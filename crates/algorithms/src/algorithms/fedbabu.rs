//! FedBABU (Oh et al. 2022, "FedBABU: Towards Enhanced Representation for Federated Image
//! Classification"): during federated training only the body is trained and averaged; the
//! head stays at its random initial values, the same for every client. Before it is tested, a
//! client fine-tunes the whole model (body and head) for `finetune_epochs` local epochs and is
//! tested on the result (the paper's τ_f; nothing fine-tuned is kept).
//!
//! A client's steps train the body with the head fixed (the plan's momentum from a zero
//! buffer each round, as a new optimizer per local update); it sends the body. The layers
//! split as in `partial` (`frozen`, default `[head]`).

use super::partial::{
    split_model_aggregation, split_model_global, LayerSplit, LayerSteps, SplitModel,
};
use super::{
    Algorithm, BatchwiseUpdate, FineTuning, FineTunings, LocalContext, LocalUpdate, ModelUpdate,
    Tested,
};
use crate::models::Architecture;
use crate::records::ModelKind;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedBabuSpec {
    /// The layers that stay at their initial values during federated training, the head
    /// [default: `[head]`]: `head`, `body`, `norm` or layers' names (`0`, `1`, …).
    #[serde(
        default,
        deserialize_with = "super::partial::layer_names",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<Vec<super::partial::LayerName>>")]
    pub frozen: Option<Vec<String>>,
    /// Local epochs of fine-tuning the whole model before each test (the paper's τ_f; its
    /// tables go up to 5).
    #[serde(default = "five")]
    pub finetune_epochs: u32,
    /// Learning rate of the fine-tuning [default: `training.lr`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune_lr: Option<f64>,
}

fn five() -> u32 {
    5
}

impl FedBabuSpec {
    fn split(&self, arch: &Architecture) -> Result<LayerSplit, FieldError> {
        let names = (self.frozen.clone()).unwrap_or_else(|| vec!["head".to_string()]);
        LayerSplit::of(arch, &names, "frozen")
    }
}

impl super::AlgorithmSettings for FedBabuSpec {
    type Algorithm = FedBabu;

    const EXAMPLE_SETTINGS: &'static [&'static str] = &[super::partial::SPLIT_EXAMPLE_MODEL];

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("finetune_epochs", self.finetune_epochs as usize)?;
        match self.finetune_lr {
            Some(lr) => FieldError::positive("finetune_lr", lr),
            None => Ok(()),
        }
    }

    fn check_model(&self, arch: &Architecture) -> Result<(), FieldError> {
        self.split(arch).map(|_| ())
    }

    fn build(&self, population: &super::Population) -> FedBabu {
        FedBabu {
            split: self
                .split(&population.arch)
                .expect("checked with the model"),
            finetune_epochs: self.finetune_epochs,
            finetune_lr: self.finetune_lr,
        }
    }
}

#[derive(Clone, Debug)]
pub struct FedBabu {
    /// `shared`: the body; `rest`: the frozen head.
    pub split: LayerSplit,
    pub finetune_epochs: u32,
    pub finetune_lr: Option<f64>,
}

impl Algorithm for FedBabu {
    type Global = SplitModel;
    /// Its steps during an update (nothing is kept between rounds).
    type ClientState = LayerSteps;
    type Update = ModelUpdate;

    split_model_global!();

    fn init_client(&self, _: &SplitModel, _: u32) -> LayerSteps {
        LayerSteps::default()
    }

    /// The fine-tuning before a test charged too: not by the plan, so not here.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Batchwise(BatchwiseUpdate {
        plan: |_, plan| *plan,
        begin: |alg, ctx, global, state| {
            let model = alg.split.join(&global.shared, &global.rest);
            state.begin(model, ctx.training.plan.momentum, 0);
        },
        step: |alg, clients, batch| {
            let mut runs: Vec<_> = (clients.iter_mut())
                .map(|c| (&mut *c.state, c.lr))
                .collect();
            LayerSteps::step(&alg.split, &mut runs, batch);
        },
        finish: |alg, ctx, _, state| {
            let model = state.finish();
            ModelUpdate::of(ctx, alg.split.shared_of(&model))
        },
    });

    split_model_aggregation!();

    /// The global model (the averaged body, the initial head), `finetune_epochs` epochs at
    /// `finetune_lr`, every layer trained.
    const FINE_TUNING: Option<FineTunings<Self>> = Some(|alg, ctx, global, _| {
        Some(FineTuning {
            start: Cow::Owned(alg.split.join(&global.shared, &global.rest)),
            epochs: alg.finetune_epochs,
            lr: alg.finetune_lr.unwrap_or(ctx.training.lr),
        })
    });

    fn tested_models<'a>(
        &'a self,
        ctx: &LocalContext<'_>,
        global: &'a SplitModel,
        state: &'a LayerSteps,
        rng: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let tuning = (Self::FINE_TUNING.and_then(|t| t(self, ctx, global, state)))
            .expect("FedBABU fine-tunes");
        let tuned = ctx.fine_tune(&tuning, rng);
        vec![Tested::params(ModelKind::Personalized, tuned)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use crate::algorithms::AlgorithmSettings;
    use crate::models::LocalWork;
    use rand::SeedableRng;

    #[test]
    fn the_head_stays_and_the_body_trains() {
        // One row x = (1, 0), label 1; an MLP 2 → 1 → 1: body (w1, w2, b) = (1, 0, 0), head
        // (v, c) = (2, 0). Two steps at lr 0.5, momentum 0.5 from zero: e_t = σ(z_t) − 1 with
        // z = v·(w1 + b) + c; the body's gradient is e·v·(1, 0, 1).
        // Step 1: buf = e1·2·(1, 0, 1); w1 = 1 − 0.5·buf₁, b = −0.5·buf₃.
        // Step 2: buf = 0.5·buf + e2·2·(1, 0, 1).
        let mut kit =
            Kit::binary(&[(&[1.0, 0.0], 1)], 1, 0.5).with_model("{kind: mlp, hidden: [1]}");
        kit.training.plan.work = LocalWork::Epochs(2);
        kit.training.plan.momentum = 0.5;
        let spec: FedBabuSpec = serde_yaml::from_str("{}").unwrap();
        let alg = spec.build(&kit.population());
        let global = alg.split.split(&[1.0, 0.0, 0.0, 2.0, 0.0]);
        let sigma = |z: f64| 1.0 / (1.0 + (-z).exp());
        let e1 = sigma(2.0) - 1.0;
        let buf1 = e1 * 2.0;
        let (w1, b) = (1.0 - 0.5 * buf1, -0.5 * buf1);
        let e2 = sigma(2.0 * (w1 + b)) - 1.0;
        let buf2 = 0.5 * buf1 + e2 * 2.0;
        let (w1, b) = (w1 - 0.5 * buf2, b - 0.5 * buf2);
        let mut state = LayerSteps::default();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let up = alg.local_update(&kit.ctx(), &global, &mut state, &mut rng);
        let want = [w1 as f32, 0.0, b as f32];
        assert!(
            close(&up.params, &want, 1e-6),
            "{:?} vs {want:?}",
            up.params
        );
        assert_eq!(
            global.rest,
            [2.0, 0.0],
            "the head is the server's, never trained"
        );
    }
}
