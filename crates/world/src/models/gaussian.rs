//! Gaussian densities and weighted moments of a split's rows (FedGMM's E- and M-steps), all
//! of a mixture's Gaussians at once in a few batched LibTorch ops. A covariance is a d × d
//! row-major matrix, or the d variances of a diagonal one. The rows may first be mapped by a
//! fixed projection z = x·P (`P`: input features × z dimensions, row-major), or be a trained
//! network's hidden layer ([`Encoder`]).
//!
//! The O(n·d²) products run in f32, as the authors' PyTorch code does (twice as fast as f64
//! and within about 1e-6 relative of it); everything of size d or d² (Cholesky factors,
//! log-determinants, means) and every sum over rows is in f64.

use super::sgd::{activations, data_tensors};
use super::Architecture;
use crate::data::SplitView;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// How a features projection pools an image-shaped layer output.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    /// Every value of the output, flattened.
    #[default]
    None,
    /// Each channel's mean over its pixels.
    Avg,
    /// Each channel's maximum over its pixels.
    Max,
}

/// A trained network cut after the layer whose output the Gaussians model.
#[derive(Debug)]
pub struct Encoder {
    arch: Architecture,
    params: Vec<f32>,
    pool: Pool,
}

impl Encoder {
    /// The network `arch` (already cut after the layer) with its parameters `params`, its
    /// output pooled by `pool`.
    pub fn new(arch: Architecture, params: Vec<f32>, pool: Pool) -> Self {
        Encoder { arch, params, pool }
    }

    /// The representation of the rows of `view`, row after row (`values()` each).
    pub fn represent(&self, view: SplitView<'_>) -> Vec<f32> {
        // f32 also where the network's products ran in bf16 (`training.precision`).
        Vec::<f32>::try_from(
            self.representation(view)
                .flatten(0, -1)
                .to_kind(Kind::Float),
        )
        .expect("a representation is f32")
    }

    /// The rows of `view` as the Gaussians see them: their representation, projected by
    /// `projection` if one is given (see [`GaussianInputs::of`]).
    pub fn inputs(&self, view: SplitView<'_>, projection: Option<&[f64]>) -> GaussianInputs {
        GaussianInputs::of(&self.representation(view).to_kind(Kind::Float), projection)
    }

    /// The representation of the rows of `view`: `[n, values]`, f32.
    fn representation(&self, view: SplitView<'_>) -> Tensor {
        let n = view.len() as i64;
        let h = activations(&self.arch, &self.params, view);
        tch::no_grad(|| match self.pool {
            Pool::None => h.reshape([n, -1]),
            Pool::Avg => h.mean_dim(&[2i64, 3][..], false, Kind::Float),
            Pool::Max => h.amax(&[2i64, 3][..], false),
        })
    }

    /// The values of one row's representation.
    pub fn values(&self) -> usize {
        let output = self.arch.output_shape();
        match self.pool {
            Pool::None => output.iter().product(),
            Pool::Avg | Pool::Max => output[0],
        }
    }
}

/// One Gaussian: its mean and covariance (d × d row-major, or the d variances).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gaussian {
    pub mean: Vec<f64>,
    pub cov: Vec<f64>,
}

fn to_vec(t: &Tensor) -> Vec<f64> {
    let n = t.numel();
    let mut out = vec![0f64; n];
    t.to_kind(Kind::Double).contiguous().copy_data(&mut out, n);
    out
}

/// The first and second moments of rows added in chunks (row-major, `dim` features each), for
/// a principal component analysis ([`Moments::principal_axes`]). All in f64 and pure Rust
/// (nalgebra's products, one thread): the same on every machine and thread count.
pub struct Moments {
    dim: usize,
    rows: usize,
    sum: Vec<f64>,
    /// Σ x xᵀ.
    scatter: nalgebra::DMatrix<f64>,
}

impl Moments {
    pub fn new(dim: usize) -> Moments {
        Moments {
            dim,
            rows: 0,
            sum: vec![0.0; dim],
            scatter: nalgebra::DMatrix::zeros(dim, dim),
        }
    }

    /// Adds the rows of `chunk`.
    pub fn add(&mut self, chunk: &[f32]) {
        const BLOCK_ROWS: usize = 2048;
        let dim = self.dim;
        for block in chunk.chunks(BLOCK_ROWS * dim) {
            let rows = block.len() / dim;
            // Column-major: column i of `xt` is row i of the block.
            let xt = nalgebra::DMatrix::from_iterator(dim, rows, block.iter().map(|&v| v as f64));
            let x = xt.transpose();
            self.scatter.gemm(1.0, &xt, &x, 1.0);
            for row in block.chunks(dim) {
                self.sum
                    .iter_mut()
                    .zip(row)
                    .for_each(|(s, &v)| *s += v as f64);
            }
            self.rows += rows;
        }
    }

    /// The `dims` eigenvectors of the rows' covariance with the largest eigenvalues, as a
    /// `dim × dims` row-major matrix P (so z = x·P: FedGMM's `projection: {kind: pca}`), and
    /// the share of the variance they hold. Each axis's sign makes its largest entry in
    /// absolute value (the first such) positive.
    pub fn principal_axes(&self, dims: usize) -> (Vec<f64>, f64) {
        let (dim, n) = (self.dim, self.rows.max(1) as f64);
        let mean: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        let cov = nalgebra::DMatrix::from_fn(dim, dim, |i, j| {
            self.scatter[(i, j)] / n - mean[i] * mean[j]
        });
        let eig = nalgebra::SymmetricEigen::new(cov);
        let mut order: Vec<usize> = (0..dim).collect();
        order.sort_by(|&a, &b| (eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a])).then(a.cmp(&b)));
        let total: f64 = eig.eigenvalues.iter().map(|v| v.max(0.0)).sum();
        let kept: f64 = order[..dims]
            .iter()
            .map(|&k| eig.eigenvalues[k].max(0.0))
            .sum();
        let mut p = vec![0f64; dim * dims];
        for (col, &k) in order[..dims].iter().enumerate() {
            let axis = eig.eigenvectors.column(k);
            let largest = (0..dim).fold(0, |best, j| {
                if axis[j].abs() > axis[best].abs() {
                    j
                } else {
                    best
                }
            });
            let sign = if axis[largest] < 0.0 { -1.0 } else { 1.0 };
            (0..dim).for_each(|j| p[j * dims + col] = sign * axis[j]);
        }
        (p, if total > 0.0 { kept / total } else { 1.0 })
    }
}

/// The rows of a split as FedGMM's Gaussians see them: z = x, or x·P with a projection.
/// Made once per split and shared by every Gaussian's densities and moments.
pub struct GaussianInputs {
    /// [n, d], f32.
    z: Tensor,
}

impl GaussianInputs {
    pub fn new(data: &SplitView<'_>, projection: Option<&[f64]>) -> Self {
        let (x, _) = data_tensors(data);
        Self::of(&x, projection)
    }

    /// Rows `x` (`[n, f]`, f32; a representation of the data's rows) as the Gaussians see
    /// them: x, or x·P with a projection P of f rows.
    pub fn of(x: &Tensor, projection: Option<&[f64]>) -> Self {
        let z = tch::no_grad(|| match projection {
            None => x.copy(),
            Some(p) => x
                .to_kind(Kind::Double)
                .matmul(&Tensor::from_slice(p).reshape([x.size()[1], -1]))
                .to_kind(Kind::Float),
        });
        GaussianInputs { z }
    }

    fn len(&self) -> usize {
        self.z.size()[0] as usize
    }

    /// The rows' values, row after row (for tests, in any crate).
    pub fn values(&self) -> Vec<f32> {
        Vec::<f32>::try_from(self.z.flatten(0, -1)).expect("f32 rows")
    }

    /// log N(z; μ_k, Σ_k) of every row, for each Gaussian k (`[k][i]`); NaN for every row of
    /// a Gaussian whose covariance is not positive definite.
    pub fn log_densities(&self, gaussians: &[Gaussian]) -> Vec<Vec<f64>> {
        let n = self.len();
        if n == 0 || gaussians.is_empty() {
            return vec![Vec::new(); gaussians.len()];
        }
        let d = gaussians[0].mean.len();
        let log_2pi = (2.0 * std::f64::consts::PI).ln();
        super::precision::in_f32(|| {
            tch::no_grad(|| {
                // The Mahalanobis terms of every Gaussian: q[k][i] = |A_k (z_i − μ_k)|², with
                // A_k = L_k⁻¹ (Σ_k = L_k L_kᵀ) or diag(σ_k)⁻¹. Each A_k (z_i − μ_k) is one column
                // block of Z·[A_1ᵀ … A_Kᵀ] − [μ_1ᵀA_1ᵀ … μ_KᵀA_Kᵀ]: one product for all of them.
                let mut maps = Vec::with_capacity(gaussians.len());
                let mut log_dets = Vec::with_capacity(gaussians.len());
                for g in gaussians {
                    let mean = Tensor::from_slice(&g.mean).reshape([1, d as i64]);
                    let (a_t, log_det) = if g.cov.len() == d {
                        let var = Tensor::from_slice(&g.cov);
                        let a_t = var.rsqrt().diag(0);
                        (a_t, var.log().sum(Kind::Double).double_value(&[]))
                    } else {
                        let cov = Tensor::from_slice(&g.cov).reshape([d as i64, d as i64]);
                        let (l, info) = cov.linalg_cholesky_ex(false, false);
                        if info.int64_value(&[]) != 0 {
                            (
                                Tensor::full(
                                    [d as i64, d as i64],
                                    f64::NAN,
                                    (Kind::Double, tch::Device::Cpu),
                                ),
                                f64::NAN,
                            )
                        } else {
                            let eye = Tensor::eye(d as i64, (Kind::Double, tch::Device::Cpu));
                            let l_inv = l.linalg_solve_triangular(&eye, false, true, false);
                            let log_det = 2.0
                                * l.diagonal(0, 0, 1)
                                    .log()
                                    .sum(Kind::Double)
                                    .double_value(&[]);
                            (l_inv.transpose(0, 1), log_det)
                        }
                    };
                    let shift = mean.matmul(&a_t);
                    maps.push((a_t, shift));
                    log_dets.push(log_det);
                }
                let k = gaussians.len() as i64;
                let a_t = Tensor::cat(&maps.iter().map(|(a, _)| a).collect::<Vec<_>>(), 1);
                let shift = Tensor::cat(&maps.iter().map(|(_, s)| s).collect::<Vec<_>>(), 1);
                let u = self.z.matmul(&a_t.to_kind(Kind::Float)) - shift.to_kind(Kind::Float);
                // Sums of d squares in f32, then f64 for everything after.
                let q = u
                    .reshape([n as i64, k, d as i64])
                    .square()
                    .sum_dim_intlist(2, false, None);
                let q = to_vec(&q.transpose(0, 1).contiguous());
                q.chunks(n)
                    .zip(&log_dets)
                    .map(|(q, log_det)| {
                        let c = log_det + d as f64 * log_2pi;
                        q.iter().map(|q| -0.5 * (q + c)).collect()
                    })
                    .collect()
            })
        })
    }

    /// For each row weighting `weights[k]`: the weighted mean Σ wᵢ zᵢ / Σ wᵢ and covariance
    /// Σ wᵢ (zᵢ − mean)(zᵢ − mean)ᵀ / Σ wᵢ (only the variances when `diagonal`); `None` for a
    /// weighting that sums to 0.
    pub fn weighted_moments(
        &self,
        weights: &[Vec<f64>],
        diagonal: bool,
    ) -> Vec<Option<(Vec<f64>, Vec<f64>)>> {
        let n = self.len();
        let totals: Vec<f64> = weights.iter().map(|w| w.iter().sum()).collect();
        let kept: Vec<usize> = (0..weights.len())
            .filter(|&k| !(totals[k].is_nan() || totals[k] <= 1e-12 || n == 0))
            .collect();
        let mut out = vec![None; weights.len()];
        if kept.is_empty() {
            return out;
        }
        super::precision::in_f32(|| {
            tch::no_grad(|| {
                // W: [K, n], each weighting divided by its total; means W·Z, one product.
                let normalised: Vec<f32> = kept
                    .iter()
                    .flat_map(|&k| {
                        let total = totals[k];
                        weights[k].iter().map(move |&w| (w / total) as f32)
                    })
                    .collect();
                let w = Tensor::from_slice(&normalised).reshape([kept.len() as i64, n as i64]);
                let means = w.matmul(&self.z);
                // The centred rows of each weighting: [K, n, d].
                let centred = self.z.unsqueeze(0) - means.unsqueeze(1);
                let weighted = &centred * w.unsqueeze(2);
                let covs = if diagonal {
                    (weighted * &centred).sum_dim_intlist(1, false, Kind::Double)
                } else {
                    weighted.transpose(1, 2).bmm(&centred)
                };
                let (means, covs) = (to_vec(&means), to_vec(&covs));
                let d = means.len() / kept.len();
                let c = covs.len() / kept.len();
                for (j, &k) in kept.iter().enumerate() {
                    out[k] = Some((
                        means[j * d..(j + 1) * d].to_vec(),
                        covs[j * c..(j + 1) * c].to_vec(),
                    ));
                }
                out
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_axes_by_hand() {
        // Rows (±3, ±1, 0) in every sign combination, shifted by 5 (an offset the covariance
        // does not see): variance 9 along x, 1 along y, 0 along z. The first axis is x, the
        // second y; together they hold all the variance, x alone 9/10 of it.
        let rows: Vec<f32> = [[3., 1., 0.], [3., -1., 0.], [-3., 1., 0.], [-3., -1., 0.]]
            .iter()
            .flatten()
            .map(|&v: &f32| v + 5.0)
            .collect();
        // Given in two chunks, as two clients would.
        let mut moments = Moments::new(3);
        moments.add(&rows[..6]);
        moments.add(&rows[6..]);
        let (p, share) = moments.principal_axes(2);
        let want = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        for (got, want) in p.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{p:?}");
        }
        assert!((share - 1.0).abs() < 1e-12);
        let (p, share) = moments.principal_axes(1);
        assert!((p[0] - 1.0).abs() < 1e-12 && p[1].abs() < 1e-12, "{p:?}");
        assert!((share - 0.9).abs() < 1e-12);
    }
}
