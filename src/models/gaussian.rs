//! Gaussian densities and weighted moments of a split's rows (FedGMM's E- and M-steps), as a
//! few batched LibTorch ops in f64. A covariance is a d × d row-major matrix, or the d
//! variances of a diagonal one. The rows may first be mapped by a fixed projection z = x·P
//! (`P`: input features × z dimensions, row-major).

use super::sgd::data_tensors;
use crate::data::SplitView;
use tch::{Kind, Tensor};

fn to_vec(t: &Tensor) -> Vec<f64> {
    let n = t.numel();
    let mut out = vec![0f64; n];
    t.to_kind(Kind::Double).contiguous().copy_data(&mut out, n);
    out
}

/// The rows of `data` in f64, projected by `projection` when given.
fn rows(data: &SplitView<'_>, projection: Option<&[f64]>) -> Tensor {
    let (x, _) = data_tensors(data);
    let x = x.to_kind(Kind::Double);
    match projection {
        None => x,
        Some(p) => x.matmul(&Tensor::from_slice(p).reshape([data.dim as i64, -1])),
    }
}

/// log N(z; mean, cov) of every row of `data` (z = x, or x·P with a projection); NaN
/// everywhere if `cov` is not positive definite.
pub fn gaussian_log_densities(
    mean: &[f64],
    cov: &[f64],
    data: SplitView<'_>,
    projection: Option<&[f64]>,
) -> Vec<f64> {
    let (n, d) = (data.len(), mean.len());
    if n == 0 {
        return Vec::new();
    }
    tch::no_grad(|| {
        let centred = rows(&data, projection) - Tensor::from_slice(mean);
        let log_2pi = (2.0 * std::f64::consts::PI).ln();
        let (q, log_det) = if cov.len() == d {
            let var = Tensor::from_slice(cov);
            let q = (centred.square() / &var).sum_dim_intlist(1, false, Kind::Double);
            (q, var.log().sum(Kind::Double).double_value(&[]))
        } else {
            let a = Tensor::from_slice(cov).reshape([d as i64, d as i64]);
            let (l, info) = a.linalg_cholesky_ex(false, false);
            if info.int64_value(&[]) != 0 {
                return vec![f64::NAN; n];
            }
            // L u = x − mean for every row: U = (X − mean) L⁻ᵀ, one product (faster than a
            // triangular solve with n right-hand sides).
            let eye = Tensor::eye(d as i64, (Kind::Double, tch::Device::Cpu));
            let l_inv = l.linalg_solve_triangular(&eye, false, true, false);
            let u = centred.matmul(&l_inv.transpose(0, 1));
            let q = u.square().sum_dim_intlist(1, false, Kind::Double);
            let log_det = 2.0
                * l.diagonal(0, 0, 1)
                    .log()
                    .sum(Kind::Double)
                    .double_value(&[]);
            (q, log_det)
        };
        let lp = (q + (log_det + d as f64 * log_2pi)) * -0.5;
        to_vec(&lp)
    })
}

/// The weighted mean Σ wᵢ zᵢ / Σ wᵢ and covariance Σ wᵢ (zᵢ − mean)(zᵢ − mean)ᵀ / Σ wᵢ (only
/// the variances when `diagonal`) of the rows of `data` (z = x, or x·P with a projection);
/// `None` when the weights sum to 0.
pub fn weighted_moments(
    weights: &[f64],
    data: SplitView<'_>,
    diagonal: bool,
    projection: Option<&[f64]>,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let total: f64 = weights.iter().sum();
    if total.is_nan() || total <= 1e-12 || data.is_empty() {
        return None;
    }
    Some(tch::no_grad(|| {
        let x = rows(&data, projection);
        let w = Tensor::from_slice(weights).reshape([-1, 1]) / total;
        let mean = (&x * &w).sum_dim_intlist(0, false, Kind::Double);
        let centred = x - &mean;
        let cov = if diagonal {
            (centred.square() * &w).sum_dim_intlist(0, false, Kind::Double)
        } else {
            (&centred * &w).transpose(0, 1).matmul(&centred)
        };
        (to_vec(&mean), to_vec(&cov))
    }))
}
