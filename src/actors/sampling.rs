//! Client selection for a round, drawn from the server's seeded stream.

use rand::Rng;

/// How many clients take part in a round, chosen uniformly without replacement.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampling {
    /// `max(1, ⌊fraction · T⌋)` clients, with `fraction` in (0, 1].
    Fraction(f64),
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
}

impl Sampling {
    pub fn per_round(&self, total: usize) -> usize {
        match *self {
            Sampling::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
            Sampling::Count(k) => k.clamp(1, total),
        }
    }

    /// Selected client ids, sorted.
    pub fn select(&self, total: usize, rng: &mut impl Rng) -> Vec<u32> {
        let k = self.per_round(total);
        let mut chosen: Vec<u32> = if k == total {
            (0..total as u32).collect()
        } else {
            rand::seq::index::sample(rng, total, k)
                .into_iter()
                .map(|i| i as u32)
                .collect()
        };
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn counts_and_sorted_unique_choice() {
        assert_eq!(Sampling::Fraction(0.1).per_round(300), 30);
        assert_eq!(Sampling::Fraction(0.001).per_round(300), 1);
        assert_eq!(Sampling::Count(500).per_round(300), 300);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let s = Sampling::Fraction(0.2).select(50, &mut rng);
        assert_eq!(s.len(), 10);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.iter().all(|&c| c < 50));
    }
}
