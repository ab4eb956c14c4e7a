//! `blobs`: Gaussian blobs, one per class, each client with its own label shares — a data set
//! small enough to see everything a run does, and the walkthrough's example of a data set.

use super::catalogue::DatasetSettings;
use super::{DataError, FederatedData, InputShape, Layout, SplitSpec};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand::Rng;
use rand_distr::{Distribution, Gamma, StandardNormal};
use serde::{Deserialize, Serialize};

/// Class `c` is the blob N(μ_c, I) in `dim` dimensions, its centre μ_c drawn once from
/// N(0, separation²·I). Client k draws its label shares from Dir(α·1) (`alpha` left out: every
/// class alike), then each of its `samples` rows: a label, then a point of that label's blob.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlobsSpec {
    /// The number of clients.
    #[serde(default = "ten")]
    pub clients: usize,
    /// Features per row.
    #[serde(default = "two")]
    pub dim: usize,
    /// The number of classes, one blob each.
    #[serde(default = "three")]
    pub classes: usize,
    /// Rows per client.
    #[serde(default = "hundred")]
    pub samples: usize,
    /// The spread of the blobs' centres, in units of a blob's own spread.
    #[serde(default = "three_f")]
    pub separation: f64,
    /// Label skew: each client's label shares from Dir(α·1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
}

fn ten() -> usize {
    10
}
fn two() -> usize {
    2
}
fn three() -> usize {
    3
}
fn hundred() -> usize {
    100
}
fn three_f() -> f64 {
    3.0
}

impl DatasetSettings for BlobsSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::at_least_one("dim", self.dim)?;
        FieldError::at_least_one("samples", self.samples)?;
        if self.classes < 2 {
            return Err(FieldError::new(
                "classes".into(),
                format!("must be at least 2, got {}", self.classes),
            ));
        }
        FieldError::non_negative("separation", self.separation)?;
        if let Some(alpha) = self.alpha {
            FieldError::positive("alpha", alpha)?;
        }
        Ok(())
    }

    fn num_clients(&self) -> Option<usize> {
        Some(self.clients)
    }

    fn input_shape(&self) -> Option<InputShape> {
        Some(InputShape::Flat(self.dim))
    }

    fn classes(&self) -> Option<usize> {
        Some(self.classes)
    }

    fn least_rows(&self) -> Option<(f64, usize)> {
        Some(((self.clients * self.samples) as f64, self.dim))
    }

    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        let (d, k) = (self.dim, self.classes);
        let mut centres = seeds.rng(Entity::Data, "blobs/centres", 0);
        let centre: Vec<f64> = (0..k * d)
            .map(|_| self.separation * centres.sample::<f64, _>(StandardNormal))
            .collect();
        let rows = self.samples + split.extra_samples();
        let mut features = Vec::with_capacity(self.clients * rows * d);
        let mut labels = Vec::with_capacity(self.clients * rows);
        let mut clients = Vec::with_capacity(self.clients);
        for c in 0..self.clients {
            let mut rng = seeds.rng(Entity::Data, "blobs/client", c as u64);
            let shares: Vec<f64> = match self.alpha {
                None => vec![1.0; k],
                Some(alpha) => {
                    let gamma = Gamma::new(alpha, 1.0).expect("alpha validated positive");
                    (0..k).map(|_| gamma.sample(&mut rng)).collect()
                }
            };
            let total: f64 = shares.iter().sum();
            let start = labels.len();
            for _ in 0..rows {
                // The label: the first class whose cumulative share passes a uniform draw.
                let u = rng.gen::<f64>() * total;
                let mut cum = 0.0;
                let y = (0..k)
                    .find(|&y| {
                        cum += shares[y];
                        u < cum
                    })
                    .unwrap_or(k - 1);
                features
                    .extend((0..d).map(|j| {
                        (centre[y * d + j] + rng.sample::<f64, _>(StandardNormal)) as f32
                    }));
                labels.push(y as i64);
            }
            clients.push(split.shard(start, self.samples));
        }
        Ok(FederatedData {
            layout: Layout::Flat,
            dim: d,
            classes: k,
            features,
            labels,
            clients,
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DatasetSpec;
    use crate::records::Split;

    #[test]
    fn blobs_are_seeded_and_skewed_by_alpha() {
        let build = |text: &str, seed: u64| {
            let spec: DatasetSpec = serde_yaml::from_str(text).unwrap();
            spec.build(&SplitSpec::default(), &SeedTree::new(seed))
                .unwrap()
        };
        let even = build("{kind: blobs, clients: 4, samples: 300}", 1);
        assert_eq!(even.num_clients(), 4);
        assert_eq!(
            even.features,
            build("{kind: blobs, clients: 4, samples: 300}", 1).features
        );
        assert_ne!(
            even.features,
            build("{kind: blobs, clients: 4, samples: 300}", 2).features
        );
        // Each client's most frequent label: about a third of its rows evenly, most of them
        // with a strong skew.
        let top_share = |data: &FederatedData| {
            (0..data.num_clients())
                .map(|c| {
                    let view = data.view(c, Split::Train);
                    let mut counts = [0usize; 3];
                    view.labels.iter().for_each(|&y| counts[y as usize] += 1);
                    *counts.iter().max().unwrap() as f64 / view.labels.len() as f64
                })
                .sum::<f64>()
                / data.num_clients() as f64
        };
        let skewed = build("{kind: blobs, clients: 4, samples: 300, alpha: 0.05}", 1);
        assert!(top_share(&even) < 0.45, "{}", top_share(&even));
        assert!(top_share(&skewed) > 0.8, "{}", top_share(&skewed));
    }
}
