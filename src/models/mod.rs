//! Models in tch and the flat-parameter helpers.
//!
//! Parameters leave this module only as flat `Vec<f32>` in a fixed order (layer by layer,
//! weight `out × in` row-major, then bias), so aggregation elsewhere is plain arithmetic in a
//! fixed order. Initialisation draws from the ChaCha stream it is given, never from libtorch's
//! global RNG. This module (and the trainer pool that calls it) is the only place that uses tch.

mod sgd;

pub use sgd::{evaluate, train_sgd, EvalStats, LocalPlan, LocalWork, TrainStats};

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

    /// Leaf tensors (requiring grad) holding a copy of `flat`.
    fn tensors(&self, flat: &[f32]) -> Vec<Tensor> {
        assert_eq!(
            flat.len(),
            self.num_params(),
            "parameter vector of the wrong length"
        );
        let mut out = Vec::with_capacity(2 * self.layers.len());
        let mut at = 0;
        for &(i, o) in &self.layers {
            let w = Tensor::from_slice(&flat[at..at + i * o]).view([o as i64, i as i64]);
            at += i * o;
            let b = Tensor::from_slice(&flat[at..at + o]);
            at += o;
            out.push(w.set_requires_grad(true));
            out.push(b.set_requires_grad(true));
        }
        out
    }

    /// Logits `[batch, outputs]`.
    fn forward(&self, params: &[Tensor], x: &Tensor) -> Tensor {
        let mut h = x.shallow_clone();
        let last = self.layers.len() - 1;
        for (l, wb) in params.chunks(2).enumerate() {
            h = wb[1].addmm(&h, &wb[0].tr());
            if l < last {
                h = h.relu();
            }
        }
        h
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
    use rand::SeedableRng;

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
        let arch = Architecture::new(&ModelSpec::Mlp { hidden: vec![4] }, 3, 3);
        let flat: Vec<f32> = (0..arch.num_params()).map(|i| i as f32 * 0.5).collect();
        let t = arch.tensors(&flat);
        let mut back = vec![0.0; flat.len()];
        flatten_into(&t, &mut back);
        assert_eq!(flat, back);
    }
}
