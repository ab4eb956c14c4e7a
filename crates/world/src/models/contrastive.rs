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
//! computed without gradient and without dropout. [`super::train_sgd`] takes the term as part
//! of its [`super::Objective`], so the steps are its own (momentum, weight decay, proximal and
//! correction terms, minibatches and dropout masks drawn the same way). The room must not know
//! which algorithm calls it.

use super::{Architecture, Layer};
use tch::{Kind, Reduction, Tensor};

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

/// The contrastive term of a run, ready for its steps: the body that makes representations,
/// how many of the model's tensors and dropout masks it takes, and the global and previous
/// models' tensors (without gradient).
pub(super) struct ContrastiveTerm<'a> {
    body: Architecture,
    body_tensors: usize,
    body_masks: usize,
    global: Vec<Tensor>,
    previous: Vec<Tensor>,
    term: &'a Contrastive<'a>,
}

impl<'a> ContrastiveTerm<'a> {
    /// The term for runs of `arch`, which must have a representation
    /// ([`Architecture::representation`]).
    pub(super) fn new(arch: &Architecture, term: &'a Contrastive<'a>) -> Self {
        let body = (arch.representation()).expect("a model with a representation");
        // The body's tensors are the first of the whole model's, its dropout masks the first.
        let body_tensors = body.parameter_shapes().len();
        let body_masks = (body.layers.iter())
            .filter(|l| matches!(l, Layer::Dropout { .. }))
            .count();
        let fixed = |flat: &[f32]| -> Vec<Tensor> {
            let ps: Vec<Tensor> = arch.params(flat).iter().map(Tensor::detach).collect();
            arch.layers(&ps)
        };
        ContrastiveTerm {
            body,
            body_tensors,
            body_masks,
            global: fixed(term.global),
            previous: fixed(term.previous),
            term,
        }
    }

    fn represent(&self, layers: &[Tensor], x: &Tensor, masks: &[Tensor]) -> Tensor {
        let layers = &layers[..self.body_tensors];
        self.body.forward(layers, x, masks).flatten(1, -1)
    }

    /// The logits of a minibatch at `params` (`masks` its dropout masks) and μ·ℓ_con, both in
    /// the autograd graph of `params`: the caller adds the plain loss and takes gradients.
    pub(super) fn forward(
        &self,
        arch: &Architecture,
        params: &[Tensor],
        x: &Tensor,
        masks: &[Tensor],
    ) -> (Tensor, Tensor) {
        // Views made afresh each step: a view made before a step's in-place update would not
        // pass the gradient on to the parameters.
        let layers = arch.layers(params);
        let logits = arch.forward(&layers, x, masks);
        let z = self.represent(&layers, x, &masks[..self.body_masks]);
        let (positive, negative) = tch::no_grad(|| {
            let positive = self.represent(&self.global, x, &[]);
            (positive, self.represent(&self.previous, x, &[]))
        });
        let tau = self.term.temperature;
        let similarity = |other: &Tensor| Tensor::cosine_similarity(&z, other, 1, 1e-8) / tau;
        let pair = Tensor::stack(&[similarity(&positive), similarity(&negative)], 1);
        let first = Tensor::zeros([x.size()[0]], (Kind::Int64, x.device()));
        let con = pair.cross_entropy_loss::<Tensor>(&first, None, Reduction::Mean, -100, 0.0);
        (logits, con * self.term.mu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::SplitView;
    use crate::models::{train_sgd, LocalPlan, LocalWork, ModelSpec, Objective};
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

    /// `params` after one step of plain SGD (batch 1, lr `lr`) on the row x = (1, 0), label 1,
    /// with `contrastive` in the objective (or none).
    fn one_step(
        arch: &Architecture,
        params: &[f32],
        lr: f64,
        contrastive: Option<Contrastive<'_>>,
    ) -> Vec<f32> {
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
        let objective = Objective {
            contrastive,
            ..Objective::default()
        };
        let mut params = params.to_vec();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let momentum = &mut Vec::new();
        train_sgd(
            arch,
            &mut params,
            momentum,
            rows,
            &plan,
            lr,
            &mut rng,
            &objective,
        );
        params
    }

    #[test]
    fn one_step_by_hand() {
        // One row x = (1, 0), label 1; body w = (w1, w2, b) = (1, 0, 0) → z = relu(w1) = 1, a
        // scalar; head (v, c) = (1, 0). Global body (2, 0, 0) → z_g = 2; previous body
        // (−1, 0, 0) → z_p = relu(−1) = 0. Cosine similarity of scalars: sign·sign, with
        // PyTorch's ε: sim(1, 2) = 1 and sim(1, 0) = 0 (a zero vector). ℓ_con = −log(e^{1/τ} /
        // (e^{1/τ} + e^0)), which depends on z only through the similarities; their gradient
        // with respect to a scalar z is 0 (sim(z, 2) = z·2/max(|z|·2, ε) is flat for z > 0,
        // sim(z, 0) = 0). So one step is the plain loss's step.
        let spec = ModelSpec::from_yaml("{kind: mlp, hidden: [1]}").unwrap();
        let arch = Architecture::new(&spec, 2, 2);
        let start = [1.0, 0.0, 0.0, 1.0, 0.0];
        let contrastive = Contrastive {
            global: &[2.0, 0.0, 0.0, 1.0, 0.0],
            previous: &[-1.0, 0.0, 0.0, 1.0, 0.0],
            mu: 5.0,
            temperature: 0.5,
        };
        let moon = one_step(&arch, &start, 0.1, Some(contrastive));
        let plain = one_step(&arch, &start, 0.1, None);
        let close = moon.iter().zip(&plain).all(|(a, b)| (a - b).abs() < 1e-6);
        assert!(close, "{moon:?} {plain:?}");
    }

    #[test]
    fn the_term_pulls_towards_the_global_representation() {
        // Two hidden units: z = relu(W x + b) for x = (1, 0) is W's first column plus b. With
        // the body at z = (1, 1), the global model's z_g = (1, 0) and the previous z_p = (0, 1),
        // a step of the contrastive term alone (μ large, learning rate small; the head is zero,
        // so the plain loss moves no body value) turns z towards z_g: its first coordinate
        // gains on its second.
        // Body: W = [[1, 0], [1, 0]], b = (0, 0); head v = (0, 0), c = 0.
        let start = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let contrastive = Contrastive {
            global: &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            previous: &[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            mu: 100.0,
            temperature: 0.5,
        };
        let params = one_step(&mlp(), &start, 1e-3, Some(contrastive));
        // z's first coordinate is W[0][0] + b[0] (values 0 and 4), its second W[1][0] + b[1].
        let z = (params[0] + params[4], params[2] + params[5]);
        assert!(z.0 > 1.0 && z.1 < 1.0, "{z:?}");
    }
}
