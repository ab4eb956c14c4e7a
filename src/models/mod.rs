//! Models in tch and the flat-parameter helpers.
//!
//! Parameters leave this module only as flat `Vec<f32>` in a fixed order (layer by layer,
//! weight `out × in` row-major, then bias), so aggregation elsewhere is plain arithmetic in a
//! fixed order. Initialisation draws from the ChaCha stream it is given, never from libtorch's
//! global RNG. This module (and the trainer pool that calls it) is the only place that uses tch.

mod gaussian;
mod sgd;

pub use gaussian::{gaussian_log_densities, weighted_moments};
pub use sgd::{
    confidence, evaluate, evaluate_mixture, for_each_batch, sample_losses, train_sgd, Batch,
    EvalStats, Gates, LocalPlan, LocalWork, Objective, TrainStats,
};

use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// The model family, as a scenario names it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ModelSpec {
    /// Logistic regression for two classes (one output), softmax regression otherwise.
    #[default]
    Linear,
    /// Fully connected ReLU network with the given hidden widths.
    Mlp { hidden: Vec<usize> },
}

impl ModelSpec {
    pub fn validate(&self) -> Result<(), (String, String)> {
        if let ModelSpec::Mlp { hidden } = self {
            if hidden.is_empty() || hidden.contains(&0) {
                return Err((
                    "hidden".into(),
                    "must list at least one layer width, each at least 1".into(),
                ));
            }
        }
        Ok(())
    }
}

/// A concrete model: layer shapes for a given input size and number of classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Architecture {
    pub input_dim: usize,
    pub classes: usize,
    /// `(in, out)` of each affine layer; ReLU between layers.
    layers: Vec<(usize, usize)>,
}

impl Architecture {
    pub fn new(spec: &ModelSpec, input_dim: usize, classes: usize) -> Self {
        let outputs = if classes == 2 { 1 } else { classes };
        let mut widths = vec![input_dim];
        if let ModelSpec::Mlp { hidden } = spec {
            widths.extend(hidden);
        }
        widths.push(outputs);
        let layers = widths.windows(2).map(|w| (w[0], w[1])).collect();
        Architecture {
            input_dim,
            classes,
            layers,
        }
    }

    /// Binary models have a single logit and use the logistic loss.
    pub fn is_binary(&self) -> bool {
        self.classes == 2
    }

    pub fn num_params(&self) -> usize {
        self.layers.iter().map(|&(i, o)| i * o + o).sum()
    }

    /// PyTorch's default `nn.Linear` initialisation, U(−1/√fan_in, 1/√fan_in) for weights and
    /// biases, drawn from `rng` in parameter order.
    pub fn init(&self, rng: &mut impl Rng) -> Vec<f32> {
        let mut flat = Vec::with_capacity(self.num_params());
        for &(fan_in, out) in &self.layers {
            let bound = 1.0 / (fan_in as f32).sqrt();
            flat.extend((0..fan_in * out + out).map(|_| rng.gen_range(-bound..bound)));
        }
        flat
    }

    /// Linear models are trained with hand-written gradients on one flat tensor; deeper models
    /// with autograd on one leaf tensor per weight and bias. Both hold `flat` in its order.
    fn is_linear(&self) -> bool {
        self.layers.len() == 1
    }

    /// The tensors training updates, holding a copy of `flat`.
    fn params(&self, flat: &[f32]) -> Vec<Tensor> {
        assert_eq!(
            flat.len(),
            self.num_params(),
            "parameter vector of the wrong length"
        );
        if self.is_linear() {
            return vec![Tensor::from_slice(flat)];
        }
        let mut out = Vec::with_capacity(2 * self.layers.len());
        let mut at = 0;
        for &(i, o) in &self.layers {
            for (len, shape) in [(i * o, vec![o as i64, i as i64]), (o, vec![o as i64])] {
                out.push(
                    Tensor::from_slice(&flat[at..at + len])
                        .view(&shape[..])
                        .set_requires_grad(true),
                );
                at += len;
            }
        }
        out
    }

    /// `(weightᵀ [in, out], bias [out])` of each layer, as views of `params`: updates to
    /// `params` show through, so training computes them once per job.
    fn layers(&self, params: &[Tensor]) -> Vec<(Tensor, Tensor)> {
        if self.is_linear() {
            let (i, o) = (self.layers[0].0 as i64, self.layers[0].1 as i64);
            let flat = &params[0];
            return vec![(
                flat.narrow(0, 0, i * o).view([o, i]).tr(),
                flat.narrow(0, i * o, o),
            )];
        }
        params
            .chunks(2)
            .map(|wb| (wb[0].tr(), wb[1].shallow_clone()))
            .collect()
    }

    /// Logits `[batch, outputs]`.
    fn forward(&self, layers: &[(Tensor, Tensor)], x: &Tensor) -> Tensor {
        let mut h = x.shallow_clone();
        for (l, (wt, b)) in layers.iter().enumerate() {
            h = b.addmm(&h, wt);
            if l + 1 < layers.len() {
                h = h.relu();
            }
        }
        h
    }

    /// Gradients of the minibatch loss Σᵢ wᵢ·ℓᵢ / B (wᵢ = 1 without weights), one per tensor of
    /// `params`. `layers` are [`Architecture::layers`] of `params`; `y` as [`sgd::targets`]
    /// makes it; `w` is `[B, 1]`.
    fn gradients(
        &self,
        params: &[Tensor],
        layers: &[(Tensor, Tensor)],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
    ) -> Vec<Tensor> {
        if self.is_linear() {
            vec![self.linear_gradient(layers, x, y, w)]
        } else {
            self.autograd_gradients(params, x, y, w)
        }
    }

    /// For logits z = xWᵀ + b, the logistic and the softmax cross-entropy losses both have
    /// ∂L/∂z = (p − onehot(y)) / B, so ∂L/∂W = (∂L/∂z)ᵀ x and ∂L/∂b = Σ_rows ∂L/∂z.
    fn linear_gradient(
        &self,
        layers: &[(Tensor, Tensor)],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
    ) -> Tensor {
        let z = self.forward(layers, x);
        let batch = x.size()[0] as f64;
        let mut r = if self.is_binary() {
            z.sigmoid() - y
        } else {
            z.softmax(1, Kind::Float) - y.one_hot(self.classes as i64).to_kind(Kind::Float)
        };
        if let Some(w) = w {
            let _ = r.g_mul_(w);
        }
        let _ = r.g_mul_scalar_(1.0 / batch);
        let gw = r.tr().mm(x);
        let gb = r.sum_dim_intlist(0, false, Kind::Float);
        Tensor::cat(&[gw.view(-1), gb], 0)
    }

    fn autograd_gradients(
        &self,
        params: &[Tensor],
        x: &Tensor,
        y: &Tensor,
        w: Option<&Tensor>,
    ) -> Vec<Tensor> {
        let logits = self.forward(&self.layers(params), x);
        let l = match w {
            None => sgd::loss(self, &logits, y, tch::Reduction::Mean),
            Some(w) => {
                let per_row = sgd::loss(self, &logits, y, tch::Reduction::None);
                (per_row.view([-1]) * w.view([-1])).sum(Kind::Float) / x.size()[0] as f64
            }
        };
        Tensor::run_backward(&[&l], params, false, false)
    }
}

/// Copies tensors back into a flat vector, in parameter order.
fn flatten_into(params: &[Tensor], flat: &mut [f32]) {
    let mut at = 0;
    for p in params {
        let n = p.numel();
        p.to_kind(Kind::Float).copy_data(&mut flat[at..at + n], n);
        at += n;
    }
    assert_eq!(at, flat.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn shapes_and_parameter_counts() {
        let lin = Architecture::new(&ModelSpec::Linear, 150, 2);
        assert_eq!(lin.num_params(), 151);
        let soft = Architecture::new(&ModelSpec::Linear, 60, 10);
        assert_eq!(soft.num_params(), 610);
        let mlp = Architecture::new(
            &ModelSpec::Mlp {
                hidden: vec![64, 32],
            },
            10,
            3,
        );
        assert_eq!(mlp.num_params(), 10 * 64 + 64 + 64 * 32 + 32 + 32 * 3 + 3);
    }

    #[test]
    fn init_is_bounded_and_seeded() {
        let arch = Architecture::new(&ModelSpec::Linear, 100, 2);
        let mut r = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let p = arch.init(&mut r);
        assert!(p.iter().all(|v| v.abs() <= 0.1));
        let mut r2 = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        assert_eq!(p, arch.init(&mut r2));
    }

    #[test]
    fn flat_round_trip() {
        for arch in [
            Architecture::new(&ModelSpec::Mlp { hidden: vec![4] }, 3, 3),
            Architecture::new(&ModelSpec::Linear, 3, 4),
        ] {
            let flat: Vec<f32> = (0..arch.num_params()).map(|i| i as f32 * 0.5).collect();
            let t = arch.params(&flat);
            let mut back = vec![0.0; flat.len()];
            flatten_into(&t, &mut back);
            assert_eq!(flat, back);
        }
    }

    #[test]
    fn linear_gradients_equal_autograd() {
        // Binary (logistic) and 4-class (softmax) linear models, random data and sample weights.
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        for classes in [2usize, 4] {
            let arch = Architecture::new(&ModelSpec::Linear, 5, classes);
            let flat: Vec<f32> = (0..arch.num_params())
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            let xs: Vec<f32> = (0..7 * 5).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let ys: Vec<i64> = (0..7).map(|_| rng.gen_range(0..classes as i64)).collect();
            let x = Tensor::from_slice(&xs).view([7, 5]);
            let y = sgd::targets(&arch, &Tensor::from_slice(&ys));
            let ws: Vec<f32> = (0..7).map(|_| rng.gen_range(0.0..1.0)).collect();
            let w = Tensor::from_slice(&ws).unsqueeze(1);
            let manual = arch.linear_gradient(&arch.layers(&arch.params(&flat)), &x, &y, Some(&w));
            // Autograd through the same views of a flat leaf tensor holding the same values.
            let leaf = Tensor::from_slice(&flat).set_requires_grad(true);
            let auto = arch.autograd_gradients(&[leaf], &x, &y, Some(&w)).remove(0);
            let diff = (manual - auto).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "{classes} classes: max difference {diff}");
        }
    }
}
