//! The draws by hand, one test per strategy, and the catalogue's own checks.

use super::*;
use crate::settings::catalogue::check_catalogue;
use crate::sim::SimDuration;
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
    for strategy in [
        StrategySpec::of(UniformSpec {}),
        StrategySpec::of(WeightedSpec {}),
    ] {
        for count in [1, 5, 34, 40] {
            let s = Sampling {
                strategy: strategy.clone(),
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
    let poisson = |fraction| Sampling::uniform(SampleSize::Fraction(fraction)).with(PoissonSpec {});
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
            replacement,
            ..Sampling::uniform(SampleSize::Count(1)).with(WeightedSpec {})
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
    let poc = |d| {
        Sampling::uniform(SampleSize::Count(2)).with(PowerOfChoiceSpec {
            candidates: Some(d),
        })
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
    let weighted = Sampling::uniform(SampleSize::Count(2)).with(WeightedSpec {});
    let mut again = rng.clone();
    assert_eq!(
        poc(2).select(all.as_slice(), 2, weight, (&every, 2), &mut rng),
        weighted.select(all.as_slice(), 2, weight, NOTHING, &mut again)
    );
    let d = |candidates| PowerOfChoiceSpec { candidates };
    assert_eq!(d(Some(1)).candidates_for(2, 6), 2);
    assert_eq!(d(Some(9)).candidates_for(2, 6), 6);
    assert_eq!(d(None).candidates_for(2, 6), 4);
}

/// Oort by hand. Utilities 10·√(Σℓ²/n) = 10, 20, 30, 40, 50 score (u − 9.99)/40.01 in
/// round 1 (no staleness bonus): with cutoff 1 and no exploration, the two highest. A
/// client ten times slower than the preferred 1 s keeps (1/10)² of its score.
#[test]
fn oort_exploits_utility_penalises_slowness_and_explores_by_size() {
    let oort = |settings: Oort, count| {
        Sampling::uniform(SampleSize::Count(count)).with(OortSpec {
            oort: Some(settings),
        })
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

#[test]
fn every_strategy_reads_its_example_and_validates_it() {
    check_catalogue::<Strategies>(|s| {
        StrategySpec(s.clone())
            .validate()
            .map_err(|e| e.to_string())
    });
}

/// The section reads and writes as it always has: `strategy` after `count`, the own fields
/// always written, the strategy's settings last; a strategy's field under another is named.
#[test]
fn the_section_reads_and_writes_its_strategy_beside_its_own_fields() {
    let read = |text: &str| serde_yaml::from_str::<RawSampling>(text);
    let poc = read("{strategy: power_of_choice, fraction: 0.2, candidates: 8}").unwrap();
    assert_eq!(
        serde_yaml::to_string(&poc).unwrap(),
        "fraction: 0.2\nstrategy: power_of_choice\nreplacement: false\navailable_only: false\n\
         over_selection: 0.0\ncandidates: 8\n"
    );
    assert_eq!(read(&serde_yaml::to_string(&poc).unwrap()).unwrap(), poc);
    let default = read("{}").unwrap();
    assert_eq!(default, RawSampling::default());
    assert_eq!(default.strategy.name(), "uniform");
    let err = |text: &str| read(text).unwrap_err().to_string();
    let starts = |text: &str, start: &str| {
        let e = err(text);
        assert!(e.starts_with(start), "{text}: {e}");
    };
    starts(
        "{candidates: 3}",
        "`candidates`: applies to `strategy: power_of_choice` only",
    );
    starts(
        "{strategy: uniform, oort: {}}",
        "`oort`: applies to `strategy: oort` only",
    );
    starts(
        "{strategy: fastest}",
        "`strategy`: unknown variant `fastest`",
    );
    starts(
        "{fraktion: 0.1}",
        "unknown field `fraktion`, expected one of `fraction`, `count`, `strategy`, \
         `replacement`, `available_only`, `over_selection`, `candidates`, `oort`",
    );
    starts("{1: 0.1}", "unknown field `1`, expected one of `fraction`");
    let resolve = |text: &str| read(text).unwrap().resolve().unwrap_err();
    let e = resolve("{strategy: uniform, replacement: true}");
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("replacement", "applies to `strategy: weighted` only")
    );
    assert_eq!(resolve("{strategy: poisson, count: 3}").path, "count");
    assert_eq!(
        resolve("{strategy: oort, oort: {cutoff: 2}}").path,
        "oort.cutoff"
    );
    assert_eq!(
        resolve("{strategy: power_of_choice, candidates: 0}").path,
        "candidates"
    );
}

/// What each strategy declares, as the other sections ask it.
#[test]
fn strategies_declare_what_they_need() {
    let declared = |name| &Registration::find(name).unwrap().declared;
    assert!(declared("oort").uses_feedback && declared("power_of_choice").uses_feedback);
    assert!(!declared("uniform").uses_feedback);
    assert_eq!(
        strategies_declaring(|d| d.same_chance),
        "`strategy: uniform` or `strategy: poisson`"
    );
    assert_eq!(
        strategies_declaring(|d| d.fills_slots),
        "`strategy: uniform` or `strategy: weighted`"
    );
    assert!(declared("poisson").independent && !declared("weighted").independent);
}
