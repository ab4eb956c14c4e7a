//! Partitioners: how a pool of labelled rows becomes clients. Every draw comes from the stream
//! they are given (the data's seed tree), so a partition is a pure function of the seed.
//!
//! This room decides which rows each client gets; it neither reads files nor splits a client's
//! rows into train / val / test (that is [`super::SplitSpec`]).

use crate::spec::FieldError;
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
    /// Pachinko allocation over coarse and fine labels (Li & McCallum 2006; Reddi et al. 2021
    /// and FedEM split CIFAR-100 so): every client gets ⌊rows / clients⌋ rows. It draws its
    /// weights over the coarse labels from Dir(α) and, for each coarse label, weights over its
    /// fine labels from Dir(β); each of its rows picks a coarse label, then a fine label, then
    /// a row of that label not dealt yet. A fine label whose rows run out leaves its coarse
    /// label's weights, a coarse label whose rows run out leaves the client's (both
    /// renormalised), as in FedEM's `pachinko_allocation_split`.
    Pachinko {
        clients: usize,
        #[serde(default = "d_pachinko_alpha")]
        alpha: f64,
        #[serde(default = "d_pachinko_beta")]
        beta: f64,
        /// Fine label i's coarse label [default: CIFAR-100's 20 superclasses].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        coarse: Option<Vec<usize>>,
    },
}

/// CIFAR-100's superclass of each of its 100 labels (torchvision's label order).
const CIFAR100_COARSE: [usize; 100] = [
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
    /// Checks the parameters; an error's path is below `partition`.
    pub fn validate(&self) -> Result<(), FieldError> {
        let at_least_one = |field: &str, v: usize| {
            if v == 0 {
                Err(FieldError::new(
                    field.to_string(),
                    "must be at least 1".to_string(),
                ))
            } else {
                Ok(())
            }
        };
        match *self {
            PartitionSpec::Natural { fraction } => {
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err(FieldError::new(
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
                    return Err(FieldError::new(
                        "alpha".into(),
                        format!("must be positive, got {alpha}"),
                    ));
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
            PartitionSpec::Pachinko {
                clients,
                alpha,
                beta,
                ref coarse,
            } => {
                at_least_one("clients", clients)?;
                for (field, v) in [("alpha", alpha), ("beta", beta)] {
                    if !(v > 0.0 && v.is_finite()) {
                        return Err(FieldError::new(
                            field.into(),
                            format!("must be positive, got {v}"),
                        ));
                    }
                }
                match coarse {
                    Some(map) if map.iter().any(|&c| c >= map.len()) => Err(FieldError::new(
                        "coarse".into(),
                        format!(
                            "coarse labels are numbered from 0 and below the number of \
                             entries ({}); got {}",
                            map.len(),
                            map.iter().max().copied().unwrap_or_default()
                        ),
                    )),
                    _ => Ok(()),
                }
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
            | PartitionSpec::Pfedme { clients, .. }
            | PartitionSpec::Pachinko { clients, .. } => Some(clients),
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
                            (use iid, dirichlet, shards, pfedme or pachinko)"
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
            PartitionSpec::Pachinko {
                clients,
                alpha,
                beta,
                ref coarse,
            } => {
                let coarse = coarse.as_deref().unwrap_or(&CIFAR100_COARSE);
                check_coarse_map(coarse, classes)?;
                pachinko(labels, classes, coarse, clients, alpha, beta, rng)
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

/// Pachinko allocation (see [`PartitionSpec::Pachinko`]): each client's rows in the order drawn.
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

/// An index drawn with probabilities `weights` (summing to 1); the last one takes what
/// rounding leaves.
fn categorical(weights: &[f64], rng: &mut ChaCha20Rng) -> usize {
    let u: f64 = rng.gen();
    let mut cum = 0.0;
    for (i, w) in weights.iter().enumerate() {
        cum += w;
        if u < cum {
            return i;
        }
    }
    weights.len() - 1
}

/// Drops entry `i` and rescales the rest to sum to 1 (equal weights if nothing is left of
/// the mass).
fn remove_and_renormalise(weights: &mut Vec<f64>, i: usize) {
    weights.remove(i);
    let total: f64 = weights.iter().sum();
    if total > 0.0 {
        weights.iter_mut().for_each(|w| *w /= total);
    } else if !weights.is_empty() {
        let k = weights.len() as f64;
        weights.iter_mut().for_each(|w| *w = 1.0 / k);
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
    fn pachinko_deals_equal_parts_skewed_by_alpha() {
        // 10 fine labels in 5 coarse pairs (fine / 2), 2 000 rows, 20 clients of 100.
        let y = labels(2000, 10);
        let coarse: Vec<usize> = (0..10).map(|f| f / 2).collect();
        let deal = |alpha: f64, seed: u64| {
            PartitionSpec::Pachinko {
                clients: 20,
                alpha,
                beta: 10.0,
                coarse: Some(coarse.clone()),
            }
            .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(seed))
            .unwrap()
        };
        // Mean over clients of the number of coarse labels holding 10 % of its rows or more.
        let coarse_spread = |p: &[Vec<usize>]| {
            p.iter()
                .map(|c| {
                    let mut counts = [0usize; 5];
                    c.iter().for_each(|&r| counts[y[r] as usize / 2] += 1);
                    counts.iter().filter(|&&k| k * 10 >= c.len()).count() as f64
                })
                .sum::<f64>()
                / p.len() as f64
        };
        let skewed = deal(0.05, 7);
        // Every row once, and each client exactly ⌊2000 / 20⌋ rows.
        check_disjoint_cover(&skewed, 2000);
        assert!(skewed.iter().all(|c| c.len() == 100));
        let even = deal(100.0, 7);
        let (s, e) = (coarse_spread(&skewed), coarse_spread(&even));
        assert!(s < 2.5 && e > 4.5, "{s} {e}");
        assert_eq!(deal(0.4, 8), deal(0.4, 8));
        // Rows that do not divide evenly are left out (as FedEM's split does).
        let y = labels(2019, 10);
        let p = PartitionSpec::Pachinko {
            clients: 20,
            alpha: 0.4,
            beta: 10.0,
            coarse: Some(coarse.clone()),
        }
        .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(9))
        .unwrap();
        assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 2000);
    }

    #[test]
    fn pachinko_defaults_to_cifar100s_superclasses_and_checks_the_map() {
        // 20 superclasses of 5 labels each.
        let mut sizes = [0; 20];
        CIFAR100_COARSE.iter().for_each(|&c| sizes[c] += 1);
        assert_eq!(sizes, [5; 20]);
        let spec = PartitionSpec::Pachinko {
            clients: 2,
            alpha: 0.4,
            beta: 10.0,
            coarse: None,
        };
        let err = spec
            .assign(&labels(100, 10), 10, &mut ChaCha20Rng::seed_from_u64(1))
            .unwrap_err();
        assert!(
            err.contains("for 100 fine labels; the data has 10 classes")
                && err.contains("the default is CIFAR-100's"),
            "{err}"
        );
        let p = spec
            .assign(&labels(1000, 100), 100, &mut ChaCha20Rng::seed_from_u64(1))
            .unwrap();
        check_disjoint_cover(&p, 1000);
        let bad = PartitionSpec::Pachinko {
            clients: 2,
            alpha: 0.0,
            beta: 10.0,
            coarse: None,
        };
        assert_eq!(bad.validate().unwrap_err().path, "alpha");
        // A coarse label past the map's length (it would size the coarse groups) is refused.
        let bad = PartitionSpec::Pachinko {
            clients: 2,
            alpha: 0.4,
            beta: 10.0,
            coarse: Some(vec![0, 1, 1_000_000_000]),
        };
        let crate::spec::FieldError {
            path: field,
            message,
        } = bad.validate().unwrap_err();
        assert_eq!(field, "coarse");
        assert!(
            message.contains("below the number of entries (3); got 1000000000"),
            "{message}"
        );
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
