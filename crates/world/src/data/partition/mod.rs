//! Partitioners: how a pool of labelled rows becomes clients. Every draw comes from the stream
//! they are given (the data's seed tree), so a partition is a pure function of the seed.
//!
//! This room decides which rows each client gets; it neither reads files nor splits a client's
//! rows into train / val / test (that is [`super::SplitSpec`]).

mod catalogue;
mod dirichlet;
mod iid;
mod natural;
mod pachinko;
mod pfedme;
mod quantity_skew;
mod shards;

pub use catalogue::{
    PartitionSettings, PartitionSpec, Registration as PartitionRegistration, PARTITIONS,
};
pub use dirichlet::DirichletSpec;
pub use iid::IidSpec;
pub use natural::NaturalSpec;
pub use pachinko::PachinkoSpec;
pub use pfedme::PfedmeSpec;
pub use quantity_skew::QuantitySkewSpec;
pub use shards::ShardsSpec;

use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Binomial, Distribution, Gamma};

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
    use super::pachinko::CIFAR100_COARSE;
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
        let p = PartitionSpec::of(IidSpec { clients: 10 })
            .assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(1))
            .unwrap();
        check_disjoint_cover(&p, 103);
        assert!(p.iter().all(|c| c.len() == 10 || c.len() == 11));
    }

    #[test]
    fn shards_give_each_client_few_labels() {
        let y = labels(1000, 10);
        let p = PartitionSpec::of(ShardsSpec {
            clients: 50,
            shards_per_client: 2,
        })
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
            let p = PartitionSpec::of(DirichletSpec {
                clients: 20,
                alpha,
                groups: None,
            })
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
        let spec = PartitionSpec::of(DirichletSpec {
            clients: 20,
            alpha: 0.4,
            groups: Some(3),
        });
        let a = spec.assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(4));
        let b = spec.assign(&y, 10, &mut ChaCha20Rng::seed_from_u64(4));
        assert_eq!(a, b);
    }

    #[test]
    fn pfedme_gives_client_u_labels_u_and_u_plus_one() {
        let y = labels(7000, 10);
        let p = PartitionSpec::of(PfedmeSpec {
            clients: 20,
            labels_per_client: 2,
        })
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
            PartitionSpec::of(PachinkoSpec {
                clients: 20,
                alpha,
                beta: 10.0,
                coarse: Some(coarse.clone()),
            })
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
        let p = PartitionSpec::of(PachinkoSpec {
            clients: 20,
            alpha: 0.4,
            beta: 10.0,
            coarse: Some(coarse.clone()),
        })
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
        let spec = PartitionSpec::of(PachinkoSpec {
            clients: 2,
            alpha: 0.4,
            beta: 10.0,
            coarse: None,
        });
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
        let bad = PartitionSpec::of(PachinkoSpec {
            clients: 2,
            alpha: 0.0,
            beta: 10.0,
            coarse: None,
        });
        assert_eq!(bad.validate().unwrap_err().path, "alpha");
        // A coarse label past the map's length (it would size the coarse groups) is refused.
        let bad = PartitionSpec::of(PachinkoSpec {
            clients: 2,
            alpha: 0.4,
            beta: 10.0,
            coarse: Some(vec![0, 1, 1_000_000_000]),
        });
        let crate::settings::FieldError {
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
        let err = PartitionSpec::of(IidSpec { clients: 10 })
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
