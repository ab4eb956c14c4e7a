//! Client selection for a round, drawn from the server's seeded stream (the settings are
//! [`crate::spec::Sampling`]).

use crate::spec::{Sampling, Strategy};
use rand::distributions::{Distribution, WeightedIndex};
use rand::Rng;

/// The clients a draw chooses from, in id order: the draw picks positions, so the same
/// positions give the same clients however the list is held.
pub trait Candidates {
    fn len(&self) -> usize;
    /// The client at position `i` (< `len`).
    fn get(&self, i: usize) -> u32;
    fn to_vec(&self) -> Vec<u32>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Candidates for [u32] {
    fn len(&self) -> usize {
        <[u32]>::len(self)
    }

    fn get(&self, i: usize) -> u32 {
        self[i]
    }

    fn to_vec(&self) -> Vec<u32> {
        <[u32]>::to_vec(self)
    }
}

/// Every client of a sorted list but a few, held as the list and the positions left out:
/// the idle clients of a large population, never copied.
pub struct AllBut<'a> {
    clients: &'a [u32],
    /// Positions in `clients` left out, ascending.
    left_out: Vec<usize>,
}

impl<'a> AllBut<'a> {
    /// `clients` without `left_out`, which must be among them (ascending or not).
    pub fn new(clients: &'a [u32], left_out: impl IntoIterator<Item = u32>) -> Self {
        let mut left_out: Vec<usize> = left_out
            .into_iter()
            .map(|c| {
                clients
                    .binary_search(&c)
                    .expect("a client left out is in the list")
            })
            .collect();
        left_out.sort_unstable();
        left_out.dedup();
        AllBut { clients, left_out }
    }
}

impl Candidates for AllBut<'_> {
    fn len(&self) -> usize {
        self.clients.len() - self.left_out.len()
    }

    fn get(&self, i: usize) -> u32 {
        // The i-th position kept: step over each left-out position at or before it.
        let mut at = i;
        for &gone in &self.left_out {
            if gone > at {
                break;
            }
            at += 1;
        }
        self.clients[at]
    }

    fn to_vec(&self) -> Vec<u32> {
        let mut kept = Vec::with_capacity(self.len());
        let mut from = 0;
        for &gone in &self.left_out {
            kept.extend_from_slice(&self.clients[from..gone]);
            from = gone + 1;
        }
        kept.extend_from_slice(&self.clients[from..]);
        kept
    }
}

impl Sampling {
    /// `count` of the `candidates` (or all of them, if there are no more), sorted by id.
    /// `weight` gives n_t for the weighted strategy. A uniform draw reads only the candidates
    /// it draws, so it costs what the round draws, whatever the population.
    pub fn select(
        &self,
        candidates: &(impl Candidates + ?Sized),
        count: usize,
        weight: impl Fn(u32) -> f64,
        rng: &mut impl Rng,
    ) -> Vec<u32> {
        let n = candidates.len();
        if self.strategy == Strategy::Poisson {
            // `fraction` is the rate (a scenario gives no count with Poisson; a library caller
            // that does asks for `count` of the candidates on average).
            let rate = self
                .poisson_rate()
                .unwrap_or(count as f64 / n.max(1) as f64);
            return poisson(candidates, rate, rng);
        }
        if count == 0 || n == 0 {
            return Vec::new();
        }
        let mut chosen: Vec<u32> = match self.strategy {
            _ if count >= n && !self.replacement => candidates.to_vec(),
            Strategy::Uniform => rand::seq::index::sample(rng, n, count)
                .into_iter()
                .map(|i| candidates.get(i))
                .collect(),
            Strategy::Weighted if self.replacement => {
                let candidates = candidates.to_vec();
                let weights: Vec<f64> = candidates.iter().map(|&c| weight(c)).collect();
                match WeightedIndex::new(&weights) {
                    Ok(dist) => (0..count).map(|_| candidates[dist.sample(rng)]).collect(),
                    Err(_) => Vec::new(),
                }
            }
            Strategy::Weighted => {
                let candidates = candidates.to_vec();
                rand::seq::index::sample_weighted(rng, n, |i| weight(candidates[i]), count)
                    .map(|ix| ix.into_iter().map(|i| candidates[i]).collect())
                    .unwrap_or_default()
            }
            Strategy::Poisson => unreachable!("drawn above"),
        };
        chosen.sort_unstable();
        chosen.dedup();
        chosen
    }
}

/// Each candidate independently with probability `rate`, in id order. The gaps between the
/// chosen positions are geometric, drawn one uniform number per chosen client (and one more),
/// so a draw costs what it chooses, whatever the population.
fn poisson(candidates: &(impl Candidates + ?Sized), rate: f64, rng: &mut impl Rng) -> Vec<u32> {
    let n = candidates.len();
    if rate >= 1.0 {
        return candidates.to_vec();
    }
    let log_miss = (1.0 - rate).ln();
    let mut chosen = Vec::new();
    let mut at = 0usize;
    loop {
        // The number of candidates passed over before the next one chosen: P(gap ≥ g) =
        // (1 − rate)^g.
        let u: f64 = rng.gen();
        let gap = ((1.0 - u).ln() / log_miss).floor();
        if gap >= (n - at) as f64 {
            return chosen;
        }
        at += gap as usize;
        chosen.push(candidates.get(at));
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SampleSize;
    use rand::SeedableRng;

    #[test]
    fn counts_and_sorted_unique_choice() {
        let frac = |f| Sampling::uniform(SampleSize::Fraction(f));
        assert_eq!(frac(0.1).per_round(300), 30);
        assert_eq!(frac(0.001).per_round(300), 1);
        assert_eq!(
            Sampling::uniform(SampleSize::Count(500)).per_round(300),
            300
        );
        let over = Sampling {
            over_selection: 0.3,
            ..frac(0.1)
        };
        assert_eq!(over.to_select(100), 13);
        assert_eq!(over.to_select(5), 2);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let all: Vec<u32> = (0..50).collect();
        let s = frac(0.2).select(all.as_slice(), 10, |_| 1.0, &mut rng);
        assert_eq!(s.len(), 10);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.iter().all(|&c| c < 50));
        assert_eq!(
            frac(0.2).select([4, 9].as_slice(), 10, |_| 1.0, &mut rng),
            vec![4, 9]
        );
    }

    #[test]
    fn all_but_a_few_draws_what_the_copied_list_draws() {
        let clients: Vec<u32> = (0..40).map(|c| 3 * c + 1).collect();
        let left_out = [118, 1, 40, 43, 46, 100];
        let view = AllBut::new(&clients, left_out);
        let copied: Vec<u32> = clients
            .iter()
            .copied()
            .filter(|c| !left_out.contains(c))
            .collect();
        assert_eq!(view.to_vec(), copied);
        assert_eq!(view.len(), copied.len());
        for (i, &c) in copied.iter().enumerate() {
            assert_eq!(view.get(i), c, "position {i}");
        }
        for strategy in [Strategy::Uniform, Strategy::Weighted] {
            for count in [1, 5, 34, 40] {
                let s = Sampling {
                    strategy,
                    ..Sampling::uniform(SampleSize::Count(count))
                };
                let weight = |c: u32| (c % 7 + 1) as f64;
                let mut a = rand_chacha::ChaCha20Rng::seed_from_u64(count as u64);
                let mut b = a.clone();
                assert_eq!(
                    s.select(&view, count, weight, &mut a),
                    s.select(copied.as_slice(), count, weight, &mut b)
                );
            }
        }
        assert_eq!(AllBut::new(&clients, []).to_vec(), clients);
    }

    /// Poisson participation: every candidate at rate 1; at rate 0.1 of 2 000 candidates,
    /// rounds of 200 ± 3·13.4 clients, sorted and unique, the same for the same stream, each
    /// client chosen about as often as any other, and cheap where the population is large.
    #[test]
    fn poisson_draws_each_client_with_its_rate() {
        let poisson = |fraction| Sampling {
            strategy: Strategy::Poisson,
            ..Sampling::uniform(SampleSize::Fraction(fraction))
        };
        let all: Vec<u32> = (0..2000).collect();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        assert_eq!(
            poisson(1.0).select(all.as_slice(), 0, |_| 1.0, &mut rng),
            all
        );
        let s = poisson(0.1);
        let mut hits = vec![0u32; 2000];
        for _ in 0..200 {
            let again = rng.clone();
            let round = s.select(all.as_slice(), 0, |_| 1.0, &mut rng);
            assert_eq!(
                round,
                s.select(all.as_slice(), 0, |_| 1.0, &mut again.clone())
            );
            assert!(round.windows(2).all(|w| w[0] < w[1]));
            assert!(
                (200.0f64 - round.len() as f64).abs() < 3.0 * 180f64.sqrt(),
                "{}",
                round.len()
            );
            round.iter().for_each(|&c| hits[c as usize] += 1);
        }
        // 200 rounds: each client about 20 times; the first and last hundred alike.
        let first: u32 = hits[..100].iter().sum();
        let last: u32 = hits[1900..].iter().sum();
        assert!((first as f64 - 2000.0).abs() < 250.0 && (last as f64 - 2000.0).abs() < 250.0);
        // Ten million candidates, about 10 chosen.
        let view = AllBut::new(&all[..1], []);
        assert!(poisson(0.5).select(&view, 0, |_| 1.0, &mut rng).len() <= 1);
        let many = Many(10_000_000);
        let round = poisson(1e-6).select(&many, 0, |_| 1.0, &mut rng);
        assert!(round.len() < 40, "{}", round.len());
    }

    /// Candidates 0..n, never held.
    struct Many(usize);

    impl Candidates for Many {
        fn len(&self) -> usize {
            self.0
        }

        fn get(&self, i: usize) -> u32 {
            i as u32
        }

        fn to_vec(&self) -> Vec<u32> {
            unreachable!("a Poisson draw reads only what it chooses")
        }
    }

    #[test]
    fn weighted_follows_sizes() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let all: Vec<u32> = (0..10).collect();
        // Client 9 has 100 samples, the others 1: it is nearly always drawn.
        let w = |c: u32| if c == 9 { 100.0 } else { 1.0 };
        for replacement in [false, true] {
            let s = Sampling {
                strategy: Strategy::Weighted,
                replacement,
                ..Sampling::uniform(SampleSize::Count(1))
            };
            let hits = (0..200)
                .filter(|_| s.select(all.as_slice(), 1, w, &mut rng) == vec![9])
                .count();
            assert!(hits > 170, "{hits}");
        }
    }
}
