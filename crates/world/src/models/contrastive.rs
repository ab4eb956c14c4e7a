//! MOON's local training (Li, He and Song 2021, "Model-Contrastive Federated Learning"): the
//! plain loss plus μ times a contrastive term that pulls a row's representation towards the
//! global model's and away from the client's previous local model's.
//!
//! A row's representation z is the activation that reaches the model's head (its last layer
//! with parameters): MOON's projection head output, on which its classifier sits. For a
//! minibatch, with sim the cosine similarity and τ the temperature,
//!
//!   ℓ_con = mean over rows of −log( e^{sim(z, z_glob)/τ} / (e^{sim(z, z_glob)/τ} + e^{sim(z, z_prev)/τ}) ),
//!
//! z_glob and z_prev the rows' representations under the global and the previous model,
//! computed without gradient and without dropout. Steps are PyTorch's SGD as in
//! [`super::train_sgd`] (momentum, weight decay), with the minibatches and dropout masks drawn
//! the same way. The room must not know which algorithm calls it.

use super::sgd::{data_tensors, loss, sgd_update, targets};
use super::{flatten_into, walk, Architecture, Layer, LocalPlan, TrainStats};
use crate::data::SplitView;
use rand::Rng;
use tch::{Kind, Tensor};

/// The contrastive term of a MOON run: the models whose representations are the positive
/// (the global model) and the negative (the client's previous local model), μ and τ.
#[derive(Clone, Copy, Debug)]
pub struct Contrastive<'a> {
    pub global: &'a [f32],
    pub previous: &'a [f32],
    pub mu: f64,
    pub temperature: f64,
}

impl Architecture {
    /// The network whose output is the representation that reaches the head (the layers before
    /// the last one with parameters); `None` where no layer with parameters comes before it.
    pub fn representation(&self) -> Option<Architecture> {
        let has_parameters = |l: &Layer| !self.layer_parameters(l).is_empty();
        let head = self.layers.iter().rposition(has_parameters)?;
        let body = self.layers[..head].iter().any(has_parameters);
        body.then(|| self.cut_after(head - 1))
    }
}

/// Runs MOON's local SGD on `params` in place: the plain loss plus μ·ℓ_con (see the module
/// docs). `momentum` holds the buffer between calls, as for [`super::train_sgd`]; minibatches
/// and dropout masks come from `rng` in the same order. The model must have a representation
/// ([`Architecture::representation`]).
#[allow(clippy::too_many_arguments)]
pub fn train_moon(
    arch: &Architecture,
    params: &mut [f32],
    momentum: &mut Vec<f32>,
    data: SplitView<'_>,
    plan: &LocalPlan,
    lr: f64,
    rng: &mut impl Rng,
    contrastive: &Contrastive<'_>,
) -> TrainStats {
    let body = arch
        .representation()
        .expect("a model with a representation");
    // The body's tensors are the first of the whole model's, its dropout masks the first.
    let body_tensors = body.parameter_shapes().len();
    let body_masks = (body.layers.iter())
        .filter(|l| matches!(l, Layer::Dropout { .. }))
        .count();
    let represent = |layers: &[Tensor], x: &Tensor, masks: &[Tensor]| {
        let z = walk::forward(&body, &mut walk::Single, layers, x, masks);
        z.flatten(1, -1)
    };
    let fixed = |flat: &[f32]| -> Vec<Tensor> {
        let ps: Vec<Tensor> = arch.params(flat).iter().map(Tensor::detach).collect();
        arch.layers(&ps)
    };
    let (global, previous) = (fixed(contrastive.global), fixed(contrastive.previous));
    let (x, y) = data_tensors(&data);
    let y = targets(arch, &y);
    let ps = arch.params(params);
    let mut bufs: Option<Vec<Tensor>> = (plan.momentum != 0.0 && !momentum.is_empty())
        .then(|| arch.params(momentum).iter().map(Tensor::detach).collect());
    let tau = contrastive.temperature;
    let mut stats = TrainStats::default();
    for (order, batches) in plan.passes(data.len(), rng) {
        let perm = Tensor::from_slice(&order);
        let (xp, yp) = (x.index_select(0, &perm), y.index_select(0, &perm));
        for (start, len) in batches {
            let (s, l) = (start as i64, len as i64);
            let (xb, yb) = (xp.narrow(0, s, l), yp.narrow(0, s, l));
            let masks = arch.dropout_masks(len, rng);
            // Views made afresh each step: a view made before a step's in-place update would
            // not pass the gradient on to the parameters.
            let layers = arch.layers(&ps);
            let logits = walk::forward(arch, &mut walk::Single, &layers, &xb, &masks);
            let z = represent(&layers[..body_tensors], &xb, &masks[..body_masks]);
            let (positive, negative) = tch::no_grad(|| {
                (
                    represent(&global[..body_tensors], &xb, &[]),
                    represent(&previous[..body_tensors], &xb, &[]),
                )
            });
            let similarity = |other: &Tensor| Tensor::cosine_similarity(&z, other, 1, 1e-8) / tau;
            let pair = Tensor::stack(&[similarity(&positive), similarity(&negative)], 1);
            let first = Tensor::zeros([l], (Kind::Int64, xb.device()));
            let con =
                pair.cross_entropy_loss::<Tensor>(&first, None, tch::Reduction::Mean, -100, 0.0);
            let total = loss(arch, &logits, &yb, tch::Reduction::Mean) + con * contrastive.mu;
            let grads = Tensor::run_backward(&[&total], &ps, false, false);
            sgd_update(&ps, grads, &mut bufs, plan, lr);
            stats.steps += 1;
        }
    }
    flatten_into(&ps, params);
    if let Some(bs) = bufs {
        momentum.resize(params.len(), 0.0);
        flatten_into(&bs, momentum);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{train_sgd, LocalWork, ModelSpec, Objective};
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn mlp() -> Architecture {
        let spec = ModelSpec::from_yaml("{kind: mlp, hidden: [2]}").unwrap();
        Architecture::new(&spec, 2, 2)
    }

    #[test]
    fn the_representation_is_what_reaches_the_head() {
        // dense, relu, dense: the head is the last dense, the representation the ReLU's output.
        let body = mlp().representation().unwrap();
        assert_eq!(body.layer_count(), 2);
        assert_eq!(body.num_params(), 6);
        let linear = Architecture::new(&ModelSpec::from_yaml("{kind: linear}").unwrap(), 2, 2);
        assert!(
            linear.representation().is_none(),
            "a linear model has no body"
        );
    }

    #[test]
    fn one_step_by_hand() {
        // One row x = (1, 0), label 1; body w = (w1, w2, b) = (1, 0, 0) → z = relu(w1) = 1, a
        // scalar; head (v, c) = (1, 0). Global body (2, 0, 0) → z_g = 2; previous body
        // (−1, 0, 0) → z_p = relu(−1) = 0. Cosine similarity of scalars: sign·sign, with
        // PyTorch's ε: sim(1, 2) = 1 and sim(1, 0) = 0 (a zero vector). ℓ_con = −log(e^{1/τ} /
        // (e^{1/τ} + e^0)), which depends on z only through the similarities; their gradient
        // with respect to a scalar z is 0 (sim(z, 2) = z·2/max(|z|·2, ε) is flat for z > 0,
        // sim(z, 0) = 0). So one step is the plain loss's step, as train_sgd takes it.
        let spec = ModelSpec::from_yaml("{kind: mlp, hidden: [1]}").unwrap();
        let arch = Architecture::new(&spec, 2, 2);
        let start = [1.0, 0.0, 0.0, 1.0, 0.0];
        let rows = SplitView {
            features: &[1.0, 0.0],
            labels: &[1],
            dim: 2,
        };
        let plan = LocalPlan {
            work: LocalWork::Steps(1),
            batch_size: 1,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: None,
        };
        let contrastive = Contrastive {
            global: &[2.0, 0.0, 0.0, 1.0, 0.0],
            previous: &[-1.0, 0.0, 0.0, 1.0, 0.0],
            mu: 5.0,
            temperature: 0.5,
        };
        let mut moon = start.to_vec();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        train_moon(
            &arch,
            &mut moon,
            &mut Vec::new(),
            rows,
            &plan,
            0.1,
            &mut rng,
            &contrastive,
        );
        let mut plain = start.to_vec();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let objective = Objective::default();
        train_sgd(
            &arch,
            &mut plain,
            &mut Vec::new(),
            rows,
            &plan,
            0.1,
            &mut rng,
            &objective,
        );
        assert!(
            moon.iter().zip(&plain).all(|(a, b)| (a - b).abs() < 1e-6),
            "{moon:?} {plain:?}"
        );
    }

    #[test]
    fn the_term_pulls_towards_the_global_representation() {
        // Two hidden units: z = relu(W x + b) for x = (1, 0) is W's first column plus b. With
        // the body at z = (1, 1), the global model's z_g = (1, 0) and the previous z_p = (0, 1),
        // a step of the contrastive term alone (μ large, learning rate small) turns z towards
        // z_g: its first coordinate gains on its second.
        let arch = mlp();
        // Body: W = [[1, 0], [1, 0]], b = (0, 0); head v = (0, 0), c = 0.
        let start = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let global = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let previous = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let rows = SplitView {
            features: &[1.0, 0.0],
            labels: &[1],
            dim: 2,
        };
        let plan = LocalPlan {
            work: LocalWork::Steps(1),
            batch_size: 1,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: None,
        };
        let contrastive = Contrastive {
            global: &global,
            previous: &previous,
            mu: 100.0,
            temperature: 0.5,
        };
        let mut params = start.to_vec();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        train_moon(
            &arch,
            &mut params,
            &mut Vec::new(),
            rows,
            &plan,
            1e-3,
            &mut rng,
            &contrastive,
        );
        // z's first coordinate is W[0][0] + b[0] (values 0 and 4), its second W[1][0] + b[1].
        let z = (params[0] + params[4], params[2] + params[5]);
        assert!(z.0 > 1.0 && z.1 < 1.0, "{z:?}");
    }
}
