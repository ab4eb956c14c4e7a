//! `pachinko`: Pachinko allocation over coarse and fine labels.

use super::catalogue::PartitionSettings;
use super::{categorical, dirichlet, remove_and_renormalise};
use crate::settings::FieldError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Pachinko allocation over coarse and fine labels (Li & McCallum 2006; Reddi et al. 2021 and
/// FedEM split CIFAR-100 so): every client gets ⌊rows / clients⌋ rows. It draws its weights
/// over the coarse labels from Dir(α) and, for each coarse label, weights over its fine labels
/// from Dir(β); each of its rows picks a coarse label, then a fine label, then a row of that
/// label not dealt yet. A fine label whose rows run out leaves its coarse label's weights, a
/// coarse label whose rows run out leaves the client's (both renormalised), as in FedEM's
/// `pachinko_allocation_split`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PachinkoSpec {
    /// The number of clients.
    pub clients: usize,
    /// α of each client's Dir(α) weights over the coarse labels.
    #[serde(default = "d_pachinko_alpha")]
    pub alpha: f64,
    /// β of each client's Dir(β) weights over a coarse label's fine labels.
    #[serde(default = "d_pachinko_beta")]
    pub beta: f64,
    /// Fine label i's coarse label [default: CIFAR-100's 20 superclasses].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coarse: Option<Vec<usize>>,
}

/// CIFAR-100's superclass of each of its 100 labels (torchvision's label order).
pub(super) const CIFAR100_COARSE: [usize; 100] = [
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13, 15,
    3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4,
    2, 0, 17, 4, 18, 17, 10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
];

fn d_pachinko_alpha() -> f64 {
    0.4
}
fn d_pachinko_beta() -> f64 {
    10.0
}

impl PartitionSettings for PachinkoSpec {
    const EXAMPLE: &'static str = "{clients: 4}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::positive("alpha", self.alpha)?;
        FieldError::positive("beta", self.beta)?;
        match &self.coarse {
            Some(map) if map.iter().any(|&c| c >= map.len()) => Err(FieldError::new(
                "coarse".into(),
                format!(
                    "coarse labels are numbered from 0 and below the number of entries ({}); \
                     got {}",
                    map.len(),
                    map.iter().max().copied().unwrap_or_default()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn clients(&self) -> Option<usize> {
        Some(self.clients)
    }

    fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let coarse = self.coarse.as_deref().unwrap_or(&CIFAR100_COARSE);
        check_coarse_map(coarse, classes)?;
        Ok(pachinko(
            labels,
            classes,
            coarse,
            self.clients,
            self.alpha,
            self.beta,
            rng,
        ))
    }
}

/// A coarse label for each of the data's `classes` fine labels, or an error that says so.
fn check_coarse_map(coarse: &[usize], classes: usize) -> Result<(), String> {
    if coarse.len() == classes {
        return Ok(());
    }
    let default = if coarse.len() == CIFAR100_COARSE.len() {
        "; the default is CIFAR-100's"
    } else {
        ""
    };
    Err(format!(
        "partition.coarse gives a coarse label for {} fine labels; the data has {classes} \
         classes (one entry per label, in label order{default})",
        coarse.len()
    ))
}

/// Pachinko allocation (see [`PachinkoSpec`]): each client's rows in the order drawn.
fn pachinko(
    labels: &[i64],
    classes: usize,
    coarse: &[usize],
    clients: usize,
    alpha: f64,
    beta: f64,
    rng: &mut ChaCha20Rng,
) -> Vec<Vec<usize>> {
    // The rows not dealt yet, by fine label; the fine labels with rows left, by coarse label
    // (in label order); the coarse labels with rows left (in order).
    let per_client = labels.len() / clients.max(1);
    if per_client == 0 {
        return vec![Vec::new(); clients];
    }
    let mut rows_of = vec![Vec::new(); classes];
    for (r, &y) in labels.iter().enumerate() {
        rows_of[y as usize].push(r);
    }
    let groups = coarse.iter().max().map_or(0, |&c| c + 1);
    let mut fine_of = vec![Vec::new(); groups];
    for (fine, &c) in coarse.iter().enumerate() {
        if !rows_of[fine].is_empty() {
            fine_of[c].push(fine);
        }
    }
    let mut open: Vec<usize> = (0..groups).filter(|&c| !fine_of[c].is_empty()).collect();
    let mut out = vec![Vec::with_capacity(per_client); clients];
    for mine in &mut out {
        // This client's weights over the open coarse labels, and over each one's fine labels.
        let mut coarse_weights = dirichlet(alpha, open.len(), rng);
        let mut fine_weights: Vec<Vec<f64>> = (0..groups)
            .map(|c| {
                if fine_of[c].is_empty() {
                    Vec::new()
                } else {
                    dirichlet(beta, fine_of[c].len(), rng)
                }
            })
            .collect();
        for _ in 0..per_client {
            let ci = categorical(&coarse_weights, rng);
            let c = open[ci];
            let fi = categorical(&fine_weights[c], rng);
            let fine = fine_of[c][fi];
            let pool = &mut rows_of[fine];
            let row = pool.swap_remove(rng.gen_range(0..pool.len()));
            mine.push(row);
            if rows_of[fine].is_empty() {
                fine_of[c].remove(fi);
                remove_and_renormalise(&mut fine_weights[c], fi);
                if fine_of[c].is_empty() {
                    open.remove(ci);
                    remove_and_renormalise(&mut coarse_weights, ci);
                }
            }
        }
    }
    out
}
