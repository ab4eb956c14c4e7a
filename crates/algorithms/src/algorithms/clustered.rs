//! Clustered FL (Sattler et al. 2020). The server keeps clusters of clients, each with its own
//! model, starting from one cluster of everybody. Each round a client trains from its cluster's
//! model and sends its update Δ (new − old parameters). Within a cluster whose weighted mean
//! update is small (‖mean Δ‖ < tol1: near a stationary point of the joint objective) while some
//! client still moves a lot (max ‖Δ_i‖ > tol2) and that has more than two reporting clients, the
//! server splits the reporting clients in two by complete-linkage clustering of the cosine
//! similarities of their updates. Each cluster's model then moves by the weighted (n_t) mean
//! update of its reporting members. Norms are L2 norms (the FedEM authors' code took a max
//! absolute coordinate, a bug).
//!
//! With client sampling, a split sees only the sampled members; the unsampled ones follow the
//! larger part (ties: the part holding the smallest client id), and the part holding the smallest
//! client id keeps the cluster's id while the other gets the next free id. Cluster ids appear
//! in the results (`cluster` column).

use super::LocalUpdate;
use super::{
    weighted_average, Algorithm, LocalContext, SentRuns, SgdRun, SgdUpdate, Tested, Updates,
};
use crate::models::{Architecture, InitialModels};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusteredSpec {
    /// Split only when the cluster's mean update norm is below this.
    #[serde(default = "d_tol1")]
    pub tol1: f64,
    /// ... and the largest client update norm above this.
    #[serde(default = "d_tol2")]
    pub tol2: f64,
}

fn d_tol1() -> f64 {
    0.4
}
fn d_tol2() -> f64 {
    1.6
}

impl super::AlgorithmSettings for ClusteredSpec {
    type Algorithm = Clustered;

    fn build(&self, population: &super::Population) -> Clustered {
        Clustered {
            spec: self.clone(),
            num_clients: population.clients as u32,
        }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::non_negative("tol1", self.tol1)?;
        crate::settings::FieldError::non_negative("tol2", self.tol2)
    }
}

#[derive(Clone, Debug)]
pub struct Clustered {
    pub spec: ClusteredSpec,
    pub num_clients: u32,
}

/// The server's clusters: members (sorted) and model of each, and each client's cluster.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Clusters {
    pub members: Vec<Vec<u32>>,
    pub models: Vec<Vec<f32>>,
    pub of_client: Vec<u32>,
}

impl super::Finite for Clusters {
    fn is_finite(&self) -> bool {
        self.models.is_finite()
    }
}

/// A client's change to its cluster's model, with its weight n_t.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ClusterUpdate {
    pub delta: Vec<f32>,
    pub weight: f64,
}

impl super::Finite for ClusterUpdate {
    fn is_finite(&self) -> bool {
        self.delta.is_finite() && self.weight.is_finite()
    }
}

impl crate::io::Floats for ClusterUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.delta]
    }
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()
}

/// Splits items `0..n` in two by agglomerative clustering with complete linkage on the
/// distance 1 − similarity; ties merge the lowest-numbered pair first. Returns the two parts,
/// each sorted, the part holding item 0 first. `similarity` is a symmetric n × n matrix.
pub fn complete_linkage_bipartition(similarity: &[Vec<f64>]) -> (Vec<usize>, Vec<usize>) {
    let n = similarity.len();
    assert!(n >= 2, "need two items to split");
    let mut groups: Vec<Option<Vec<usize>>> = (0..n).map(|i| Some(vec![i])).collect();
    let mut dist: Vec<Vec<f64>> = similarity
        .iter()
        .map(|row| row.iter().map(|s| 1.0 - s).collect())
        .collect();
    for _ in 0..n - 2 {
        let mut best: Option<(f64, usize, usize)> = None;
        for i in 0..n {
            if groups[i].is_none() {
                continue;
            }
            for j in i + 1..n {
                if groups[j].is_some() && best.is_none_or(|(d, _, _)| dist[i][j] < d) {
                    best = Some((dist[i][j], i, j));
                }
            }
        }
        let (_, i, j) = best.expect("more than two groups left");
        let moved = groups[j].take().expect("live group");
        groups[i].as_mut().expect("live group").extend(moved);
        // Complete linkage: the merged group's distance is the larger of the two.
        let merged: Vec<f64> = dist[i]
            .iter()
            .zip(&dist[j])
            .map(|(a, b)| a.max(*b))
            .collect();
        for (k, d) in merged.into_iter().enumerate() {
            (dist[i][k], dist[k][i]) = (d, d);
        }
    }
    let mut parts: Vec<Vec<usize>> = groups.into_iter().flatten().collect();
    parts.iter_mut().for_each(|p| p.sort_unstable());
    parts.sort();
    let second = parts.pop().expect("two parts");
    let first = parts.pop().expect("two parts");
    (first, second)
}

/// Cosine similarities of the vectors (0 where one of them is zero).
fn cosine_similarities(vectors: &[&[f32]]) -> Vec<Vec<f64>> {
    let norms: Vec<f64> = vectors.iter().map(|v| norm(v)).collect();
    vectors
        .iter()
        .enumerate()
        .map(|(i, a)| {
            vectors
                .iter()
                .enumerate()
                .map(|(j, b)| {
                    let dot: f64 = a.iter().zip(*b).map(|(&x, &y)| x as f64 * y as f64).sum();
                    let den = norms[i] * norms[j];
                    if den > 0.0 {
                        dot / den
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect()
}

/// `model` moved by the weighted mean of the updates.
fn moved(model: &[f32], updates: &[&(u32, ClusterUpdate)]) -> Vec<f32> {
    let mean = weighted_average(updates.iter().map(|(_, u)| (u.weight, &u.delta[..])));
    model.iter().zip(&mean).map(|(m, d)| m + d).collect()
}

impl Algorithm for Clustered {
    type Global = Clusters;
    /// The momentum buffer.
    type ClientState = Vec<f32>;
    type Update = ClusterUpdate;

    fn init_global(&self, _: &Architecture, init: &mut InitialModels<'_, ChaCha20Rng>) -> Clusters {
        Clusters {
            members: vec![(0..self.num_clients).collect()],
            models: vec![init.model()],
            of_client: vec![0; self.num_clients as usize],
        }
    }

    fn init_client(&self, _: &Clusters, _: u32) -> Vec<f32> {
        Vec::new()
    }

    fn models(&self, global: &Clusters) -> Vec<Vec<f32>> {
        global.models.clone()
    }

    /// A client receives its own cluster's model.
    fn broadcast_len(&self, global: &Clusters) -> usize {
        global.models[0].len()
    }

    fn update_len(&self, update: &ClusterUpdate) -> usize {
        update.delta.len()
    }

    fn report(&self, global: &Clusters, _: &Vec<f32>, client: u32) -> super::ClientReport {
        super::ClientReport {
            cluster: Some(global.of_client[client as usize]),
            ..Default::default()
        }
    }

    /// One run from the client's cluster model; the update is the change.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |_, ctx, global, momentum, _| {
            vec![SgdRun {
                params: Cow::Borrowed(
                    &global.models[global.of_client[ctx.client as usize] as usize],
                ),
                momentum: std::mem::take(momentum),
                ..SgdRun::default()
            }]
        },
        finish: |_, ctx, global, momentum, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            *momentum = run.momentum;
            let start = &global.models[global.of_client[ctx.client as usize] as usize];
            ClusterUpdate {
                delta: run.params.iter().zip(start).map(|(p, s)| p - s).collect(),
                weight: ctx.train_view().len() as f64,
            }
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    fn aggregate(&self, global: &Clusters, updates: Updates<ClusterUpdate>) -> Clusters {
        let updates = &updates.into_vec()[..];
        let mut next = global.clone();
        for c in 0..global.members.len() {
            let mine: Vec<&(u32, ClusterUpdate)> = updates
                .iter()
                .filter(|(client, _)| global.of_client[*client as usize] == c as u32)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mean = weighted_average(mine.iter().map(|(_, u)| (u.weight, &u.delta[..])));
            let max_norm = mine.iter().map(|(_, u)| norm(&u.delta)).fold(0.0, f64::max);
            let split = norm(&mean) < self.spec.tol1 && max_norm > self.spec.tol2 && mine.len() > 2;
            if !split {
                next.models[c] = moved(&global.models[c], &mine);
                continue;
            }
            let deltas: Vec<&[f32]> = mine.iter().map(|(_, u)| &u.delta[..]).collect();
            let (a, b) = complete_linkage_bipartition(&cosine_similarities(&deltas));
            let part = |idx: &[usize]| idx.iter().map(|&i| mine[i]).collect::<Vec<_>>();
            let (ups_a, ups_b) = (part(&a), part(&b));
            let reported: Vec<u32> = mine.iter().map(|(client, _)| *client).collect();
            let rest = global.members[c]
                .iter()
                .copied()
                .filter(|m| reported.binary_search(m).is_err());
            // `a` holds the smallest reporting client, so ties go to it.
            let (mut members_a, mut members_b): (Vec<u32>, Vec<u32>) = (
                ups_a.iter().map(|(id, _)| *id).collect(),
                ups_b.iter().map(|(id, _)| *id).collect(),
            );
            if members_a.len() >= members_b.len() {
                members_a.extend(rest);
            } else {
                members_b.extend(rest);
            }
            members_a.sort_unstable();
            members_b.sort_unstable();
            let (model_a, model_b) = (
                moved(&global.models[c], &ups_a),
                moved(&global.models[c], &ups_b),
            );
            // The part holding the cluster's smallest member keeps its id.
            let (keep, new) = if members_a[0] < members_b[0] {
                ((members_a, model_a), (members_b, model_b))
            } else {
                ((members_b, model_b), (members_a, model_a))
            };
            next.members[c] = keep.0;
            next.models[c] = keep.1;
            next.members.push(new.0);
            next.models.push(new.1);
        }
        for (c, members) in next.members.iter().enumerate() {
            for &m in members {
                next.of_client[m as usize] = c as u32;
            }
        }
        next
    }

    /// Novelty is scored by the client's cluster model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|client, global, _| &global.models[global.of_client[client as usize] as usize]);

    fn tested_models<'a>(
        &'a self,
        ctx: &LocalContext<'_>,
        global: &'a Clusters,
        _: &'a Vec<f32>,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let model = &global.models[global.of_client[ctx.client as usize] as usize];
        vec![Tested::params(ModelKind::Cluster, &model[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(delta: Vec<f32>) -> ClusterUpdate {
        ClusterUpdate { delta, weight: 1.0 }
    }

    #[test]
    fn complete_linkage_separates_two_directions() {
        let v: Vec<Vec<f32>> = vec![
            vec![1.0, 0.1],
            vec![-1.0, 0.0],
            vec![0.9, 0.0],
            vec![-1.0, -0.2],
        ];
        let refs: Vec<&[f32]> = v.iter().map(|x| &x[..]).collect();
        let (a, b) = complete_linkage_bipartition(&cosine_similarities(&refs));
        assert_eq!((a, b), (vec![0, 2], vec![1, 3]));
    }

    #[test]
    fn splits_only_when_the_mean_is_small_and_some_update_is_large() {
        let alg = Clustered {
            spec: ClusteredSpec {
                tol1: 0.4,
                tol2: 1.6,
            },
            num_clients: 5,
        };
        let global = Clusters {
            members: vec![vec![0, 1, 2, 3, 4]],
            models: vec![vec![0.0, 0.0]],
            of_client: vec![0; 5],
        };
        // Clients 0, 2 push (+2, 0), clients 1, 3 push (−2, 0): mean 0, max norm 2 → split.
        // Client 4 was not sampled and follows the larger part (a tie: the part of client 0).
        let ups = vec![
            (0, update(vec![2.0, 0.0])),
            (1, update(vec![-2.0, 0.0])),
            (2, update(vec![2.0, 0.0])),
            (3, update(vec![-2.0, 0.0])),
        ];
        let next = alg.aggregate(&global, ups.clone().into());
        assert_eq!(next.members, vec![vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(next.models, vec![vec![2.0, 0.0], vec![-2.0, 0.0]]);
        assert_eq!(next.of_client, vec![0, 1, 0, 1, 0]);
        // Same directions but small: no split; the model moves by the mean (0).
        let small: Vec<(u32, ClusterUpdate)> = ups
            .iter()
            .map(|(c, u)| (*c, update(u.delta.iter().map(|d| d / 4.0).collect())))
            .collect();
        let next = alg.aggregate(&global, small.into());
        assert_eq!(next.members.len(), 1);
        assert_eq!(next.models[0], vec![0.0, 0.0]);
        // A large mean update: no split either; the model moves by it.
        let along: Vec<(u32, ClusterUpdate)> =
            (0..4).map(|c| (c, update(vec![2.0, 0.0]))).collect();
        let next = alg.aggregate(&global, along.into());
        assert_eq!(next.members.len(), 1);
        assert_eq!(next.models[0], vec![2.0, 0.0]);
    }
}
