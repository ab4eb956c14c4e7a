//! Partitioners: how a pool of labelled rows becomes clients. Every draw comes from the stream
//! they are given (the data's seed tree), so a partition is a pure function of the seed.
//!
//! This room decides which rows each client gets; it neither reads files nor splits a client's
//! rows into train / val / test (that is [`super::SplitSpec`]).

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Binomial, Distribution, Gamma};
use serde::{Deserialize, Serialize};

/// How rows are dealt to clients (`data.partition` in a scenario).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PartitionSpec {
    /// The data's own clients (FEMNIST's writers): `fraction` of them, drawn.
    Natural {
        #[serde(default = "one")]
        fraction: f64,
    },
    /// Shuffled rows dealt into `clients` parts of equal size (±1).
    Iid { clients: usize },
    /// FedEM's `split_dataset_by_labels`: labels are grouped into `groups` groups (default:
    /// each label its own group); each group's rows go to clients in proportions drawn from
    /// Dir(α·1), counts drawn from the multinomial.
    Dirichlet {
        clients: usize,
        alpha: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        groups: Option<usize>,
    },
    /// McMahan et al.'s pathological split: rows sorted by label, cut into
    /// `clients × shards_per_client` equal shards, each client `shards_per_client` at random.
    Shards {
        clients: usize,
        #[serde(default = "two")]
        shards_per_client: usize,
    },
    /// pFedMe's MNIST split: client u holds labels u, u + 1, … (mod classes),
    /// `labels_per_client` of them; each label's rows are shared among its holders in
    /// proportions ∝ U(1, 3), drawn.
    Pfedme {
        #[serde(default = "twenty")]
        clients: usize,
        #[serde(default = "two")]
        labels_per_client: usize,
    },
}

fn one() -> f64 {
    1.0
}
fn two() -> usize {
    2
}
fn twenty() -> usize {
    20
}

impl PartitionSpec {
    /// Checks the parameters; errors are `(field below partition, message)`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let at_least_one = |field: &str, v: usize| {
            if v == 0 {
                Err((field.to_string(), "must be at least 1".to_string()))
            } else {
                Ok(())
            }
        };
        match *self {
            PartitionSpec::Natural { fraction } => {
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err((
                        "fraction".into(),
                        format!("must be in (0, 1], got {fraction}"),
                    ));
                }
                Ok(())
            }
            PartitionSpec::Iid { clients } => at_least_one("clients", clients),
            PartitionSpec::Dirichlet {
                clients,
                alpha,
                groups,
            } => {
                at_least_one("clients", clients)?;
                if !(alpha > 0.0 && alpha.is_finite()) {
                    return Err(("alpha".into(), format!("must be positive, got {alpha}")));
                }
                if let Some(g) = groups {
                    at_least_one("groups", g)?;
                }
                Ok(())
            }
            PartitionSpec::Shards {
                clients,
                shards_per_client,
            } => {
                at_least_one("clients", clients)?;
                at_least_one("shards_per_client", shards_per_client)
            }
            PartitionSpec::Pfedme {
                clients,
                labels_per_client,
            } => {
                at_least_one("clients", clients)?;
                at_least_one("labels_per_client", labels_per_client)
            }
        }
    }

    /// The number of clients, when the partition fixes it.
    pub fn clients(&self) -> Option<usize> {
        match *self {
            PartitionSpec::Natural { .. } => None,
            PartitionSpec::Iid { clients }
            | PartitionSpec::Dirichlet { clients, .. }
            | PartitionSpec::Shards { clients, .. }
            | PartitionSpec::Pfedme { clients, .. } => Some(clients),
        }
    }

    /// Deals `labels` (one per row of the pool) to clients: each client's rows, in the order
    /// the partition dealt them. Fails when the pool cannot give every client a row.
    pub fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let n = labels.len();
        let by_label = |rows: &[usize]| {
            let mut out = vec![Vec::new(); classes];
            for &r in rows {
                out[labels[r] as usize].push(r);
            }
            out
        };
        let clients = match *self {
            PartitionSpec::Natural { .. } => {
                return Err(
                    "`natural` keeps the data's own clients; this data set has none \
                            (use iid, dirichlet, shards or pfedme)"
                        .into(),
                )
            }
            PartitionSpec::Iid { clients } => {
                let mut rows: Vec<usize> = (0..n).collect();
                rows.shuffle(rng);
                (0..clients)
                    .map(|c| rows[c * n / clients..(c + 1) * n / clients].to_vec())
                    .collect()
            }
            PartitionSpec::Dirichlet {
                clients,
                alpha,
                groups,
            } => {
                let groups = groups.unwrap_or(classes).min(classes);
                let mut order: Vec<usize> = (0..classes).collect();
                order.shuffle(rng);
                let mut group_of = vec![0; classes];
                for (g, chunk) in (0..groups)
                    .map(|g| &order[g * classes / groups..(g + 1) * classes / groups])
                    .enumerate()
                {
                    chunk.iter().for_each(|&l| group_of[l] = g);
                }
                let mut members = vec![Vec::new(); groups];
                for r in 0..n {
                    members[group_of[labels[r] as usize]].push(r);
                }
                let mut out = vec![Vec::new(); clients];
                for mut rows in members {
                    rows.shuffle(rng);
                    let weights = dirichlet(alpha, clients, rng);
                    let counts = multinomial(rows.len(), &weights, rng);
                    let mut at = 0;
                    for (c, k) in counts.into_iter().enumerate() {
                        out[c].extend_from_slice(&rows[at..at + k]);
                        at += k;
                    }
                }
                out
            }
            PartitionSpec::Shards {
                clients,
                shards_per_client,
            } => {
                let mut rows: Vec<usize> = (0..n).collect();
                rows.shuffle(rng);
                rows.sort_by_key(|&r| labels[r]);
                let shards = clients * shards_per_client;
                let mut ids: Vec<usize> = (0..shards).collect();
                ids.shuffle(rng);
                ids.chunks(shards_per_client)
                    .map(|mine| {
                        mine.iter()
                            .flat_map(|&s| rows[s * n / shards..(s + 1) * n / shards].to_vec())
                            .collect()
                    })
                    .collect()
            }
            PartitionSpec::Pfedme {
                clients,
                labels_per_client,
            } => {
                let mut rows: Vec<usize> = (0..n).collect();
                rows.shuffle(rng);
                let mut out = vec![Vec::new(); clients];
                for (label, mut pool) in by_label(&rows).into_iter().enumerate() {
                    let holders: Vec<usize> = (0..clients)
                        .filter(|&u| (0..labels_per_client).any(|j| (u + j) % classes == label))
                        .collect();
                    if holders.is_empty() {
                        continue;
                    }
                    pool.shuffle(rng);
                    let shares: Vec<f64> =
                        holders.iter().map(|_| rng.gen_range(1.0..3.0)).collect();
                    let total: f64 = shares.iter().sum();
                    let mut at = 0usize;
                    let mut cum = 0.0;
                    for (h, share) in holders.iter().zip(&shares) {
                        cum += share;
                        let end = ((cum / total) * pool.len() as f64).round() as usize;
                        out[*h].extend_from_slice(&pool[at..end.min(pool.len())]);
                        at = end.min(pool.len());
                    }
                }
                out
            }
        };
        if let Some(c) = clients.iter().position(Vec::is_empty) {
            return Err(format!(
                "client {c} got no rows ({} rows for {} clients); use fewer clients, more data \
                 or a larger alpha",
                n,
                clients.len()
            ));
        }
        Ok(clients)
    }
}

/// A draw from Dir(α·1_k), by normalised Gamma(α, 1) draws.
fn dirichlet(alpha: f64, k: usize, rng: &mut ChaCha20Rng) -> Vec<f64> {
    let gamma = Gamma::new(alpha, 1.0).expect("alpha validated positive");
    let mut w: Vec<f64> = (0..k).map(|_| gamma.sample(rng)).collect();
    let total: f64 = w.iter().sum();
    if total > 0.0 {
        w.iter_mut().for_each(|v| *v /= total);
    } else {
        // Every draw underflowed (tiny α): one client at random takes all.
        w = vec![0.0; k];
        w[rng.gen_range(0..k)] = 1.0;
    }
    w
}

/// Counts of `n` draws over `weights` (summing to 1), by successive binomials.
fn multinomial(n: usize, weights: &[f64], rng: &mut ChaCha20Rng) -> Vec<usize> {
    let mut left = n as u64;
    let mut mass = 1.0f64;
    let mut out = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let k = if i + 1 == weights.len() || left == 0 {
            left
        } else {
            let p = (w / mass).clamp(0.0, 1.0);
            Binomial::new(left, p).expect("p in [0, 1]").sample(rng)
        };
        out.push(k as usize);
        left -= k;
        mass -= w;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn labels(n: usize, classes: usize) -> Vec<i64> {
        (0..n).map(|i| (i % classes) as i64).collect()
    }

    fn check_disjoint_cover(parts: &[Vec<usize>], n: usize) {
        let mut all: Vec<usize> = parts.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn iid_deals_equal_parts() {
        let y = labels(103, 10);
        let p = PartitionSpec::Iid { clients: 10 }
            .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(1))
            .unwrap();
        check_disjoint_cover(&p, 103);
        assert!(p.iter().all(|c| c.len() == 10 || c.len() == 11));
    }

    #[test]
    fn shards_give_each_client_few_labels() {
        let y = labels(1000, 10);
        let p = PartitionSpec::Shards {
            clients: 50,
            shards_per_client: 2,
        }
        .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(2))
        .unwrap();
        check_disjoint_cover(&p, 1000);
        for c in &p {
            let mut ls: Vec<i64> = c.iter().map(|&r| y[r]).collect();
            ls.sort();
            ls.dedup();
            assert!(ls.len() <= 2, "{ls:?}");
            assert_eq!(c.len(), 20);
        }
    }

    #[test]
    fn dirichlet_skew_follows_alpha_and_is_seeded() {
        let y = labels(5000, 10);
        let label_entropy = |alpha: f64| {
            let p = PartitionSpec::Dirichlet {
                clients: 20,
                alpha,
                groups: None,
            }
            .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(3))
            .unwrap();
            check_disjoint_cover(&p, 5000);
            // Mean over clients of the entropy of the client's label shares.
            p.iter()
                .map(|c| {
                    let mut counts = [0f64; 10];
                    c.iter().for_each(|&r| counts[y[r] as usize] += 1.0);
                    let n: f64 = counts.iter().sum();
                    -counts
                        .iter()
                        .filter(|&&k| k > 0.0)
                        .map(|&k| (k / n) * (k / n).ln())
                        .sum::<f64>()
                })
                .sum::<f64>()
                / 20.0
        };
        let (skewed, even) = (label_entropy(0.1), label_entropy(100.0));
        assert!(skewed < 1.2 && even > 2.2, "{skewed} {even}");
        let spec = PartitionSpec::Dirichlet {
            clients: 20,
            alpha: 0.4,
            groups: Some(3),
        };
        let a = spec.assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(4));
        let b = spec.assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(4));
        assert_eq!(a, b);
    }

    #[test]
    fn pfedme_gives_client_u_labels_u_and_u_plus_one() {
        let y = labels(7000, 10);
        let p = PartitionSpec::Pfedme {
            clients: 20,
            labels_per_client: 2,
        }
        .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(5))
        .unwrap();
        check_disjoint_cover(&p, 7000);
        for (u, c) in p.iter().enumerate() {
            let mut ls: Vec<i64> = c.iter().map(|&r| y[r]).collect();
            ls.sort();
            ls.dedup();
            let mut want = vec![(u % 10) as i64, ((u + 1) % 10) as i64];
            want.sort();
            assert_eq!(ls, want, "client {u}");
        }
    }

    #[test]
    fn too_many_clients_is_an_error() {
        let y = labels(5, 2);
        let err = PartitionSpec::Iid { clients: 10 }
            .assign(&y, 2, &mut ChaCha20Rng::seed_from_u64(1))
            .err()
            .unwrap();
        assert!(err.contains("got no rows"), "{err}");
        assert!(
            multinomial(10, &[0.5, 0.5], &mut ChaCha20Rng::seed_from_u64(1))
                .iter()
                .sum::<usize>()
                == 10
        );
    }
}
