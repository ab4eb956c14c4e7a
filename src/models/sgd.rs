//! Local minibatch SGD and evaluation on one client's data.

use super::{flatten_into, Architecture};
use crate::data::SplitView;
use rand::seq::SliceRandom;
use rand::Rng;
use tch::{Device, Kind, Reduction, Tensor};

/// How much local work one round asks of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalWork {
    /// Full shuffled passes over the client's training data (the last batch may be short).
    Epochs(u32),
    /// Minibatch steps, drawing batches from successive shuffled passes.
    Steps(u32),
}

/// Local solver settings (PyTorch `SGD` semantics: dampening 0, no Nesterov).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalPlan {
    pub work: LocalWork,
    pub batch_size: usize,
    pub momentum: f64,
    pub weight_decay: f64,
}

impl LocalPlan {
    /// Samples processed for `n` training rows: what the device model charges time for.
    pub fn samples_processed(&self, n: usize) -> u64 {
        match self.work {
            LocalWork::Epochs(e) => e as u64 * n as u64,
            LocalWork::Steps(s) => s as u64 * self.batch_size.min(n) as u64,
        }
    }

    /// The batches (row indices) of one local run, in order.
    fn batches(&self, n: usize, rng: &mut impl Rng) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        let mut perm: Vec<i64> = (0..n as i64).collect();
        match self.work {
            LocalWork::Epochs(e) => {
                for _ in 0..e {
                    perm.shuffle(rng);
                    out.extend(perm.chunks(self.batch_size).map(<[i64]>::to_vec));
                }
            }
            LocalWork::Steps(s) => {
                let mut cursor = n;
                for _ in 0..s {
                    if cursor >= n {
                        perm.shuffle(rng);
                        cursor = 0;
                    }
                    let end = (cursor + self.batch_size).min(n);
                    out.push(perm[cursor..end].to_vec());
                    cursor = end;
                }
            }
        }
        out
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrainStats {
    pub steps: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalStats {
    pub n: usize,
    pub loss: f64,
    pub accuracy: f64,
}

/// Zero-copy tensor views of a split. The views must not outlive `view`.
fn data_tensors(view: &SplitView<'_>) -> (Tensor, Tensor) {
    let (n, d) = (view.len() as i64, view.dim as i64);
    // SAFETY: the slices are valid for n·d f32 and n i64, outlive the returned tensors inside
    // this module's functions, and are only read.
    unsafe {
        let x = Tensor::from_blob(
            view.features.as_ptr() as *const u8,
            &[n, d],
            &[],
            Kind::Float,
            Device::Cpu,
        );
        let y = Tensor::from_blob(
            view.labels.as_ptr() as *const u8,
            &[n],
            &[],
            Kind::Int64,
            Device::Cpu,
        );
        (x, y)
    }
}

/// Targets as the loss wants them: float for the logistic loss, integer classes otherwise.
fn targets(arch: &Architecture, y: &Tensor) -> Tensor {
    if arch.is_binary() {
        y.to_kind(Kind::Float)
    } else {
        y.shallow_clone()
    }
}

/// `y` as made by [`targets`].
fn loss(arch: &Architecture, logits: &Tensor, y: &Tensor, reduction: Reduction) -> Tensor {
    if arch.is_binary() {
        logits
            .squeeze_dim(1)
            .binary_cross_entropy_with_logits::<Tensor>(y, None, None, reduction)
    } else {
        logits.cross_entropy_loss::<Tensor>(y, None, reduction, -100, 0.0)
    }
}

fn correct(arch: &Architecture, logits: &Tensor, y: &Tensor) -> i64 {
    let pred = if arch.is_binary() {
        logits.squeeze_dim(1).gt(0.0).to_kind(Kind::Int64)
    } else {
        logits.argmax(1, false)
    };
    pred.eq_tensor(y).sum(Kind::Int64).int64_value(&[])
}

/// Runs local SGD on `params` in place. `momentum` holds the momentum buffer between calls
/// (empty: none yet; it is filled when the plan uses momentum). Batches come from `rng`.
pub fn train_sgd(
    arch: &Architecture,
    params: &mut [f32],
    momentum: &mut Vec<f32>,
    data: SplitView<'_>,
    plan: &LocalPlan,
    lr: f64,
    rng: &mut impl Rng,
) -> TrainStats {
    let (x, y) = data_tensors(&data);
    let y = targets(arch, &y);
    let ps = arch.tensors(params);
    let use_momentum = plan.momentum != 0.0;
    let mut bufs: Option<Vec<Tensor>> = if use_momentum && !momentum.is_empty() {
        Some(
            arch.tensors(momentum)
                .into_iter()
                .map(|t| t.detach())
                .collect(),
        )
    } else {
        None
    };
    let mut stats = TrainStats::default();
    for batch in plan.batches(data.len(), rng) {
        let idx = Tensor::from_slice(&batch);
        let (xb, yb) = (x.index_select(0, &idx), y.index_select(0, &idx));
        let l = loss(arch, &arch.forward(&ps, &xb), &yb, Reduction::Mean);
        let grads = Tensor::run_backward(&[&l], &ps, false, false);
        stats.steps += 1;
        tch::no_grad(|| {
            let mut directions = Vec::with_capacity(ps.len());
            for (p, g) in ps.iter().zip(&grads) {
                let mut d = g.shallow_clone();
                if plan.weight_decay != 0.0 {
                    d += p * plan.weight_decay;
                }
                directions.push(d);
            }
            if use_momentum {
                match bufs.as_mut() {
                    None => bufs = Some(directions.iter().map(|d| d.copy()).collect()),
                    Some(bs) => {
                        for (b, d) in bs.iter_mut().zip(&directions) {
                            let _ = b.g_mul_scalar_(plan.momentum).g_add_(d);
                        }
                    }
                }
                directions = bufs
                    .as_ref()
                    .unwrap()
                    .iter()
                    .map(Tensor::shallow_clone)
                    .collect();
            }
            for (p, d) in ps.iter().zip(&directions) {
                let _ = p.shallow_clone().g_sub_(&(d * lr));
            }
        });
    }
    flatten_into(&ps, params);
    if let Some(bs) = bufs {
        momentum.resize(params.len(), 0.0);
        flatten_into(&bs, momentum);
    }
    stats
}

/// Mean loss and accuracy of `params` on a split.
pub fn evaluate(arch: &Architecture, params: &[f32], data: SplitView<'_>) -> EvalStats {
    let n = data.len();
    if n == 0 {
        return EvalStats::default();
    }
    let (x, y) = data_tensors(&data);
    tch::no_grad(|| {
        let ps: Vec<Tensor> = arch.tensors(params).iter().map(Tensor::detach).collect();
        let logits = arch.forward(&ps, &x);
        let loss_sum = loss(arch, &logits, &targets(arch, &y), Reduction::Sum).double_value(&[]);
        let hits = correct(arch, &logits, &y);
        EvalStats {
            n,
            loss: loss_sum / n as f64,
            accuracy: hits as f64 / n as f64,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelSpec;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn plan(work: LocalWork, momentum: f64, wd: f64) -> LocalPlan {
        LocalPlan {
            work,
            batch_size: 4,
            momentum,
            weight_decay: wd,
        }
    }

    #[test]
    fn one_step_matches_hand_computed_logistic_gradient() {
        // One sample x = (1, 2), y = 1, w = 0, b = 0: sigmoid(0) = 0.5, dL/dw = (0.5 − 1)·x.
        let arch = Architecture::new(&ModelSpec::Linear, 2, 2);
        let mut p = vec![0.0f32; 3];
        let (x, y) = (vec![1.0f32, 2.0], vec![1i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 2,
        };
        let mut mom = Vec::new();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        train_sgd(
            &arch,
            &mut p,
            &mut mom,
            view,
            &plan(LocalWork::Steps(1), 0.0, 0.0),
            0.1,
            &mut rng,
        );
        let expect = [0.05f32, 0.1, 0.05];
        for (a, b) in p.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
        assert!(mom.is_empty());
    }

    #[test]
    fn momentum_and_weight_decay_follow_pytorch() {
        // Two steps on the same sample with momentum 0.9 and weight decay 0.5.
        let arch = Architecture::new(&ModelSpec::Linear, 1, 2);
        let (x, y) = (vec![1.0f32], vec![0i64]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 1,
        };
        let mut p = vec![1.0f32, 0.0];
        let mut mom = Vec::new();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let pl = plan(LocalWork::Steps(2), 0.9, 0.5);
        train_sgd(&arch, &mut p, &mut mom, view, &pl, 0.1, &mut rng);
        // By hand: step 1 at (w, b) = (1, 0): s = σ(1) = 0.731059, g = (s, s) + 0.5·(w, b).
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let (mut w, mut b) = (1.0f64, 0.0f64);
        let s = sig(w + b);
        let (mut bw, mut bb) = (s + 0.5 * w, s + 0.5 * b);
        w -= 0.1 * bw;
        b -= 0.1 * bb;
        let s = sig(w + b);
        bw = 0.9 * bw + s + 0.5 * w;
        bb = 0.9 * bb + s + 0.5 * b;
        w -= 0.1 * bw;
        b -= 0.1 * bb;
        assert!(
            (p[0] as f64 - w).abs() < 1e-6 && (p[1] as f64 - b).abs() < 1e-6,
            "{p:?}"
        );
        assert!((mom[0] as f64 - bw).abs() < 1e-6 && (mom[1] as f64 - bb).abs() < 1e-6);
    }

    #[test]
    fn epochs_cover_every_row_once_per_epoch() {
        let pl = LocalPlan {
            work: LocalWork::Epochs(2),
            batch_size: 3,
            momentum: 0.0,
            weight_decay: 0.0,
        };
        let batches = pl.batches(7, &mut ChaCha20Rng::seed_from_u64(5));
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 1, 3, 3, 1]
        );
        let mut first: Vec<i64> = batches[..3].concat();
        first.sort();
        assert_eq!(first, (0..7).collect::<Vec<_>>());
        assert_eq!(pl.samples_processed(7), 14);
    }

    #[test]
    fn evaluate_counts_hits() {
        let arch = Architecture::new(&ModelSpec::Linear, 1, 2);
        let (x, y) = (vec![1.0f32, -1.0, 2.0], vec![1i64, 0, 0]);
        let view = SplitView {
            features: &x,
            labels: &y,
            dim: 1,
        };
        let s = evaluate(&arch, &[1.0, 0.0], view);
        assert_eq!(s.n, 3);
        assert!((s.accuracy - 2.0 / 3.0).abs() < 1e-12);
    }
}
