//! Client selection for a round, drawn from the server's seeded stream (the settings are
//! [`crate::settings::Sampling`]). Loss-guided strategies (power-of-choice, Oort) read only
//! [`Feedback`]: what clients reported with updates that have reached the server, never what a
//! client would report if asked now.

use crate::settings::{Oort, Sampling, Strategy};
use crate::sim::SimDuration;
use rand::distributions::{Distribution, WeightedIndex};
use rand::Rng;
use std::collections::BTreeMap;

/// The per-row losses of the model a client started a job from, on its training rows (its
/// F_k(w) when it trained), summarised: what it reports with its update under a loss-guided
/// strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReportedLoss {
    pub rows: usize,
    /// Σ ℓ / n, in f64 in row order.
    pub mean: f64,
    /// Σ ℓ² / n.
    pub mean_square: f64,
}

impl ReportedLoss {
    pub fn of(losses: &[f32]) -> Self {
        let n = losses.len().max(1) as f64;
        ReportedLoss {
            rows: losses.len(),
            mean: losses.iter().map(|&l| l as f64).sum::<f64>() / n,
            mean_square: losses.iter().map(|&l| (l as f64).powi(2)).sum::<f64>() / n,
        }
    }

    /// Oort's statistical utility |B|·√(Σ ℓ² / |B|); 0 for a loss that is not finite (a
    /// diverged model tells nothing of what training on the client would be worth).
    pub fn utility(&self) -> f64 {
        let u = self.rows as f64 * self.mean_square.sqrt();
        if u.is_finite() {
            u
        } else {
            0.0
        }
    }
}

/// What the server last heard from a client: the loss its update reported, how long its job
/// took (sent to update received, on the server's clock) and the round it was sent for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Heard {
    pub loss: ReportedLoss,
    pub duration: SimDuration,
    pub round: u32,
}

/// What the server has heard from each client so far, by client.
#[derive(Debug, Default)]
pub struct Feedback {
    heard: BTreeMap<u32, Heard>,
}

impl Feedback {
    /// Nothing heard yet.
    pub const EMPTY: Feedback = Feedback {
        heard: BTreeMap::new(),
    };

    pub fn hear(&mut self, client: u32, heard: Heard) {
        self.heard.insert(client, heard);
    }

    pub fn get(&self, client: u32) -> Option<&Heard> {
        self.heard.get(&client)
    }

    /// Oort's preferred round duration T: the `percentile` of the durations heard (`None`:
    /// at 100, or before any, no client is slower than preferred).
    fn preferred_duration(&self, percentile: f64) -> Option<SimDuration> {
        if percentile >= 100.0 || self.heard.is_empty() {
            return None;
        }
        let mut durations: Vec<SimDuration> = self.heard.values().map(|h| h.duration).collect();
        durations.sort_unstable();
        let at = ((durations.len() as f64 * percentile / 100.0) as usize).min(durations.len() - 1);
        Some(durations[at])
    }
}

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
    /// `count` of the `candidates` (or all of them, if there are no more), sorted by id, for
    /// round `round`. `weight` gives n_t for the weighted strategies; `feedback` is what the
    /// loss-guided ones read. A uniform draw reads only the candidates it draws, so it costs
    /// what the round draws, whatever the population.
    pub fn select(
        &self,
        candidates: &(impl Candidates + ?Sized),
        count: usize,
        weight: impl Fn(u32) -> f64,
        (feedback, round): (&Feedback, u32),
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
            Strategy::PowerOfChoice => {
                let d = self.candidates_for(count, n);
                power_of_choice(&candidates.to_vec(), count, d, weight, feedback, rng)
            }
            Strategy::Oort => oort(
                &self.oort,
                &candidates.to_vec(),
                count,
                weight,
                (feedback, round),
                rng,
            ),
            Strategy::Poisson => unreachable!("drawn above"),
        };
        chosen.sort_unstable();
        chosen.dedup();
        chosen
    }
}

/// `count` of `candidates` (all of them where there are fewer) drawn without replacement with
/// probability proportional to `weight`, in draw order. A weight that is not a positive
/// finite number counts as the least positive one.
fn weighted_draw(
    candidates: &[u32],
    weight: impl Fn(u32) -> f64,
    count: usize,
    rng: &mut impl Rng,
) -> Vec<u32> {
    let weight = |i: usize| match weight(candidates[i]) {
        w if w.is_finite() => w.max(f64::MIN_POSITIVE),
        _ => f64::MIN_POSITIVE,
    };
    let count = count.min(candidates.len());
    rand::seq::index::sample_weighted(rng, candidates.len(), weight, count)
        .map(|ix| ix.into_iter().map(|i| candidates[i]).collect())
        .unwrap_or_default()
}

/// Power-of-choice in its rpow-d form (Cho, Wang and Joshi 2022): `d` candidates drawn by
/// `weight` (n_t), of which the `count` with the highest loss last heard are chosen; a
/// candidate not heard from yet ranks above every one heard from (its loss is unknown, so
/// taken as the highest), ties go to the lower id.
fn power_of_choice(
    candidates: &[u32],
    count: usize,
    d: usize,
    weight: impl Fn(u32) -> f64,
    feedback: &Feedback,
    rng: &mut impl Rng,
) -> Vec<u32> {
    let mut drawn = weighted_draw(candidates, weight, d, rng);
    let loss = |c: u32| feedback.get(c).map_or(f64::INFINITY, |h| h.loss.mean);
    drawn.sort_by(|&a, &b| loss(b).total_cmp(&loss(a)).then(a.cmp(&b)));
    drawn.truncate(count);
    drawn
}

/// Oort's training selection (Lai et al. 2021, Algorithm 1, as FedScale implements it; see
/// [`crate::settings::Oort`] for the settings). Of the `count` clients:
/// - about (1 − ε)·`count` are exploited among the candidates heard from. Each scores its
///   utility (clipped at the `clip_quantile` of those heard, scaled to [0, 1]) plus
///   √(0.1·ln R / r), r the round it was last sent for and R this `round`, times
///   (T / its duration)^α if it was slower than the preferred duration T. They are drawn by
///   score among those within `cutoff` of the last score a plain ranking would take;
/// - the rest are explored: drawn by `weight` (n_t) among the `sample_window` times as many
///   largest candidates not heard from yet (FedScale ranks them by size too);
/// - where one group runs short, the other fills the round.
fn oort(
    settings: &Oort,
    candidates: &[u32],
    count: usize,
    weight: impl Fn(u32) -> f64,
    (feedback, round): (&Feedback, u32),
    rng: &mut impl Rng,
) -> Vec<u32> {
    let (heard, unheard): (Vec<u32>, Vec<u32>) =
        candidates.iter().partition(|&&c| feedback.get(c).is_some());
    let explore_share = (count as f64 * settings.exploration_at(round)).floor() as usize;
    let explore = unheard
        .len()
        .min(count - (count - explore_share).min(heard.len()));
    let exploit = (count - explore).min(heard.len());
    let mut chosen = exploit_scored(settings, &heard, exploit, (feedback, round), rng);
    // Exploration: the largest first, drawn by size within the window.
    let mut unheard = unheard;
    unheard.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)).then(a.cmp(&b)));
    let window = ((settings.sample_window * explore as f64).ceil() as usize).min(unheard.len());
    chosen.extend(weighted_draw(&unheard[..window], weight, explore, rng));
    chosen
}

/// Oort's exploitation: `count` of the `heard` candidates, drawn by score (see [`oort`]).
fn exploit_scored(
    settings: &Oort,
    heard: &[u32],
    count: usize,
    (feedback, round): (&Feedback, u32),
    rng: &mut impl Rng,
) -> Vec<u32> {
    if count == 0 {
        return Vec::new();
    }
    let known = |c: u32| feedback.get(c).expect("a candidate heard from");
    let mut utilities: Vec<f64> = heard.iter().map(|&c| known(c).loss.utility()).collect();
    utilities.sort_by(f64::total_cmp);
    let last = utilities.len() - 1;
    let clip = utilities[((utilities.len() as f64 * settings.clip_quantile) as usize).min(last)];
    let low = utilities[0] * 0.999;
    let range = (utilities[last] - low).max(1e-4);
    let preferred = feedback.preferred_duration(settings.preferred_percentile);
    let score = |c: u32| {
        let h = known(c);
        let staleness = (0.1 * (round as f64).ln() / h.round.max(1) as f64).sqrt();
        let score = (h.loss.utility().min(clip) - low) / range + staleness;
        match preferred {
            Some(t) if h.duration > t => {
                score * (t.0 as f64 / h.duration.0 as f64).powf(settings.penalty)
            }
            _ => score,
        }
    };
    let mut scored: Vec<(u32, f64)> = heard.iter().map(|&c| (c, score(c))).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let cut = scored[count - 1].1 * settings.cutoff;
    let admitted: Vec<u32> = scored
        .iter()
        .take_while(|(_, s)| *s >= cut)
        .map(|&(c, _)| c)
        .collect();
    let score_of: BTreeMap<u32, f64> = scored.into_iter().collect();
    weighted_draw(&admitted, |c| score_of[&c], count, rng)
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
    use crate::settings::SampleSize;
    use rand::SeedableRng;

    const NOTHING: (&Feedback, u32) = (&Feedback::EMPTY, 1);

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
        let s = frac(0.2).select(all.as_slice(), 10, |_| 1.0, NOTHING, &mut rng);
        assert_eq!(s.len(), 10);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.iter().all(|&c| c < 50));
        assert_eq!(
            frac(0.2).select([4, 9].as_slice(), 10, |_| 1.0, NOTHING, &mut rng),
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
                    s.select(&view, count, weight, NOTHING, &mut a),
                    s.select(copied.as_slice(), count, weight, NOTHING, &mut b)
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
            poisson(1.0).select(all.as_slice(), 0, |_| 1.0, NOTHING, &mut rng),
            all
        );
        let s = poisson(0.1);
        let mut hits = vec![0u32; 2000];
        for _ in 0..200 {
            let again = rng.clone();
            let round = s.select(all.as_slice(), 0, |_| 1.0, NOTHING, &mut rng);
            assert_eq!(
                round,
                s.select(all.as_slice(), 0, |_| 1.0, NOTHING, &mut again.clone())
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
        assert!(
            poisson(0.5)
                .select(&view, 0, |_| 1.0, NOTHING, &mut rng)
                .len()
                <= 1
        );
        let many = Many(10_000_000);
        let round = poisson(1e-6).select(&many, 0, |_| 1.0, NOTHING, &mut rng);
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
                .filter(|_| s.select(all.as_slice(), 1, w, NOTHING, &mut rng) == vec![9])
                .count();
            assert!(hits > 170, "{hits}");
        }
    }

    /// What the server heard from clients `0..`: `(Σℓ²/n with n = 10, duration in s, round)`.
    fn heard(reports: &[(f64, u64, u32)]) -> Feedback {
        let mut feedback = Feedback::default();
        for (c, &(mean_square, secs, round)) in reports.iter().enumerate() {
            let loss = ReportedLoss {
                rows: 10,
                mean: mean_square.sqrt(),
                mean_square,
            };
            let duration = SimDuration(secs * 1_000_000);
            feedback.hear(
                c as u32,
                Heard {
                    loss,
                    duration,
                    round,
                },
            );
        }
        feedback
    }

    #[test]
    fn reported_losses_by_hand() {
        let loss = ReportedLoss::of(&[1.0, 3.0]);
        assert_eq!((loss.rows, loss.mean, loss.mean_square), (2, 2.0, 5.0));
        assert_eq!(loss.utility(), 2.0 * 5f64.sqrt());
        // Durations 1, 1, 1, 1, 10 s: the 30th percentile is the second, 1 s; at 100, none.
        let feedback = heard(&[
            (1.0, 1, 1),
            (1.0, 1, 1),
            (1.0, 10, 1),
            (1.0, 1, 1),
            (1.0, 1, 1),
        ]);
        assert_eq!(
            feedback.preferred_duration(30.0),
            Some(SimDuration(1_000_000))
        );
        assert_eq!(
            feedback.preferred_duration(90.0),
            Some(SimDuration(10_000_000))
        );
        assert_eq!(feedback.preferred_duration(100.0), None);
        let oort = Oort::default();
        assert!((oort.exploration_at(1) - 0.9 * 0.98).abs() < 1e-15);
        assert_eq!(oort.exploration_at(100), 0.3);
    }

    /// Power-of-choice: clients not heard from first, then the highest loss (ties to the lower
    /// id); with d = K it is the weighted draw itself.
    #[test]
    fn power_of_choice_takes_the_highest_losses_of_its_candidates() {
        let poc = |d| Sampling {
            strategy: Strategy::PowerOfChoice,
            candidates: Some(d),
            ..Sampling::uniform(SampleSize::Count(2))
        };
        let all: Vec<u32> = (0..6).collect();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        // Losses √(Σℓ²/n): 0.5, 2, 1, 2, then clients 4 and 5 unheard.
        let some = heard(&[(0.25, 1, 1), (4.0, 1, 1), (1.0, 1, 1), (4.0, 1, 1)]);
        let chosen = poc(6).select(all.as_slice(), 2, |_| 1.0, (&some, 2), &mut rng);
        assert_eq!(chosen, [4, 5]);
        let every = heard(&[
            (0.25, 1, 1),
            (4.0, 1, 1),
            (1.0, 1, 1),
            (4.0, 1, 1),
            (0.01, 1, 1),
            (0.09, 1, 1),
        ]);
        let chosen = poc(6).select(all.as_slice(), 2, |_| 1.0, (&every, 2), &mut rng);
        assert_eq!(chosen, [1, 3]);
        let weight = |c: u32| (c + 1) as f64;
        let weighted = Sampling {
            strategy: Strategy::Weighted,
            ..Sampling::uniform(SampleSize::Count(2))
        };
        let mut again = rng.clone();
        assert_eq!(
            poc(2).select(all.as_slice(), 2, weight, (&every, 2), &mut rng),
            weighted.select(all.as_slice(), 2, weight, NOTHING, &mut again)
        );
        assert_eq!(poc(1).candidates_for(2, 6), 2);
        assert_eq!(poc(9).candidates_for(2, 6), 6);
        assert_eq!(
            Sampling::uniform(SampleSize::Count(2)).candidates_for(2, 6),
            4
        );
    }

    /// Oort by hand. Utilities 10·√(Σℓ²/n) = 10, 20, 30, 40, 50 score (u − 9.99)/40.01 in
    /// round 1 (no staleness bonus): with cutoff 1 and no exploration, the two highest. A
    /// client ten times slower than the preferred 1 s keeps (1/10)² of its score.
    #[test]
    fn oort_exploits_utility_penalises_slowness_and_explores_by_size() {
        let oort = |settings: Oort, count| Sampling {
            strategy: Strategy::Oort,
            oort: settings,
            ..Sampling::uniform(SampleSize::Count(count))
        };
        let exploit_only = Oort {
            exploration: 0.0,
            exploration_min: 0.0,
            cutoff: 1.0,
            clip_quantile: 1.0,
            ..Oort::default()
        };
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let five: Vec<u32> = (0..5).collect();
        let reports = [
            (1.0, 1, 1),
            (4.0, 1, 1),
            (9.0, 1, 1),
            (16.0, 1, 1),
            (25.0, 1, 1),
        ];
        let s = oort(exploit_only.clone(), 2);
        let chosen = s.select(five.as_slice(), 2, |_| 1.0, (&heard(&reports), 1), &mut rng);
        assert_eq!(chosen, [3, 4]);
        let mut slow = reports;
        slow[4].1 = 10;
        let chosen = s.select(five.as_slice(), 2, |_| 1.0, (&heard(&slow), 1), &mut rng);
        assert_eq!(chosen, [2, 3]);
        // Equal utilities in round 10: the bonus √(0.1·ln 10 / r) goes to the stalest.
        let stale = heard(&[(1.0, 1, 9), (1.0, 1, 1), (1.0, 1, 5), (1.0, 1, 9)]);
        let s1 = oort(exploit_only, 1);
        assert_eq!(
            s1.select(&five[..4], 1, |_| 1.0, (&stale, 10), &mut rng),
            [1]
        );
        // ε = 0.5 of 4: two exploited (3, 4) and two explored, the largest unheard with a
        // window of 1 (6 and 7 of sizes 1, 100, 50).
        let half = Oort {
            exploration: 0.5,
            exploration_decay: 1.0,
            exploration_min: 0.5,
            cutoff: 1.0,
            clip_quantile: 1.0,
            sample_window: 1.0,
            ..Oort::default()
        };
        let eight: Vec<u32> = (0..8).collect();
        let size = |c: u32| match c {
            6 => 100.0,
            7 => 50.0,
            _ => 1.0,
        };
        let s4 = oort(half, 4);
        let feedback = heard(&reports);
        assert_eq!(
            s4.select(eight.as_slice(), 4, size, (&feedback, 1), &mut rng),
            [3, 4, 6, 7]
        );
        // One unheard client: it is explored and the heard fill the round.
        assert_eq!(
            s4.select(&eight[..6], 4, size, (&feedback, 1), &mut rng),
            [2, 3, 4, 5]
        );
        // Nothing heard yet: every client explored.
        let chosen = s4.select(eight.as_slice(), 4, size, NOTHING, &mut rng);
        assert_eq!(chosen, [0, 1, 6, 7]);
    }
}
