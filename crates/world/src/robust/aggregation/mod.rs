//! Robust aggregation (`aggregation:`): the catalogue of rules that combine a round's changes
//! into the one change the global model makes, each client counting the same, and the
//! arithmetic they share (coordinate-wise reductions, distances, Krum's scores).
//!
//! This room is arithmetic on a round's changes, given in client order: it draws no random
//! number and never knows when a round happens (the server applies it).

mod bulyan;
mod catalogue;
mod centered_clipping;
mod geometric_median;
mod krum;
mod median;
mod norm_bounding;
mod trimmed_mean;

pub use bulyan::BulyanSpec;
pub use catalogue::{
    Registration as RobustRuleRegistration, RobustRuleSettings, RobustRuleSpec, ROBUST_RULES,
};
pub use centered_clipping::CenteredClippingSpec;
pub use geometric_median::GeometricMedianSpec;
pub use krum::KrumSpec;
pub use median::MedianSpec;
pub use norm_bounding::NormBoundingSpec;
pub use trimmed_mean::TrimmedMeanSpec;

use super::mean_of;

/// The median of sorted values (the mean of the two middle ones for an even count).
fn median_of_sorted(column: &[f64]) -> f64 {
    let m = column.len();
    if m % 2 == 1 {
        column[m / 2]
    } else {
        (column[m / 2 - 1] + column[m / 2]) / 2.0
    }
}

/// Each coordinate's sorted values across `changes`, reduced by `f`.
fn coordinatewise(changes: &[&[f64]], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let d = changes[0].len();
    let mut column = vec![0.0; changes.len()];
    (0..d)
        .map(|j| {
            for (c, x) in column.iter_mut().zip(changes) {
                *c = x[j];
            }
            column.sort_by(f64::total_cmp);
            f(&column)
        })
        .collect()
}

fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// Squared L2 distances between every two changes.
fn squared_distances(changes: &[&[f64]]) -> Vec<Vec<f64>> {
    let n = changes.len();
    let mut squares = vec![vec![0.0; n]; n];
    for i in 0..n {
        for k in i + 1..n {
            let s = distance(changes[i], changes[k]).powi(2);
            squares[i][k] = s;
            squares[k][i] = s;
        }
    }
    squares
}

/// The members of `set` (indices into `squares`) by Krum score, best first (ties: the earlier
/// in `set`): each one's sum of squared distances to its |set| − f − 2 nearest others in `set`
/// (at least one).
fn krum_order(squares: &[Vec<f64>], set: &[usize], byzantine: usize) -> Vec<usize> {
    let n = set.len();
    let nearest = n.saturating_sub(byzantine + 2).max(1).min(n - 1);
    let scores: Vec<f64> = (set.iter())
        .map(|&i| {
            let mut others: Vec<f64> = set
                .iter()
                .filter(|&&k| k != i)
                .map(|&k| squares[i][k])
                .collect();
            others.sort_by(f64::total_cmp);
            others[..nearest].iter().sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    order.into_iter().map(|p| set[p]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> RobustRuleSpec {
        serde_yaml::from_str(text).unwrap()
    }

    fn combine(text: &str, changes: &[Vec<f64>]) -> Vec<f64> {
        let refs: Vec<&[f64]> = changes.iter().map(Vec::as_slice).collect();
        rule(text).combine(&refs, &[])
    }

    #[test]
    fn coordinatewise_rules_by_hand() {
        let x = vec![
            vec![1.0, 10.0],
            vec![2.0, -5.0],
            vec![100.0, 0.0],
            vec![3.0, 1.0],
        ];
        // Sorted columns: [1, 2, 3, 100] and [-5, 0, 1, 10].
        assert_eq!(combine("{kind: median}", &x), [2.5, 0.5]);
        assert_eq!(combine("{kind: trimmed_mean, trim: 0.25}", &x), [2.5, 0.5]);
        assert_eq!(combine("{kind: trimmed_mean, trim: 0}", &x), [26.5, 1.5]);
        // Norm bounding at 5: (1, 10) and (2, -5) scaled by 5/√101 and 5/√29, (100, 0) to
        // (5, 0), (3, 1) kept.
        let nb = combine("{kind: norm_bounding, bound: 5}", &x);
        let (a, b) = (5.0 / 101f64.sqrt(), 5.0 / 29f64.sqrt());
        assert!((nb[0] - (a + 2.0 * b + 5.0 + 3.0) / 4.0).abs() < 1e-12);
        assert!((nb[1] - (10.0 * a - 5.0 * b + 0.0 + 1.0) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn krum_picks_the_change_among_its_neighbours() {
        // Four close changes and one far: n = 5, f = 1 → 2 nearest others.
        let x = vec![
            vec![0.0, 0.0],
            vec![1.0, 0.0],
            vec![0.0, 1.0],
            vec![50.0, 50.0],
            vec![0.5, 0.5],
        ];
        // Scores: 0: 0.5 + 1 = 1.5; 4: 0.5 + 0.5 = 1; others larger.
        assert_eq!(combine("{kind: krum, byzantine: 1}", &x), [0.5, 0.5]);
        // Multi-Krum over the best 2: (0.5, 0.5) and (0, 0).
        assert_eq!(
            combine("{kind: krum, byzantine: 1, multi: 2}", &x),
            [0.25, 0.25]
        );
        // Too few updates for f = 2 (needs 7): the median instead.
        assert_eq!(
            combine("{kind: krum, byzantine: 2}", &x),
            combine("{kind: median}", &x)
        );
    }

    #[test]
    fn geometric_median_and_centered_clipping_resist_an_outlier() {
        let x = vec![vec![1.0], vec![1.0], vec![1.0], vec![1000.0]];
        let gm = combine("{kind: geometric_median, iterations: 50}", &x);
        assert!((gm[0] - 1.0).abs() < 1e-3, "{gm:?}");
        // τ = 2 from 0: (1 + 1 + 1 + 2) / 4 = 1.25; a second step moves 3·(−0.25)/4 + 2/4.
        let cc = combine("{kind: centered_clipping, radius: 2}", &x);
        assert_eq!(cc, [1.25]);
        let cc2 = combine("{kind: centered_clipping, radius: 2, iterations: 2}", &x);
        assert!((cc2[0] - (1.25 + (3.0 * -0.25 + 2.0) / 4.0)).abs() < 1e-12);
        // From the previous round's 1: (0 + 0 + 0 + 2) / 4 more.
        let refs: Vec<&[f64]> = x.iter().map(Vec::as_slice).collect();
        let from_last = rule("{kind: centered_clipping, radius: 2}").combine(&refs, &[1.0]);
        assert_eq!(from_last, [1.5]);
    }

    #[test]
    fn bulyan_by_hand() {
        // n = 7, f = 1: θ = 5 picked by Krum, β = 3 closest to the median per coordinate.
        let x: Vec<Vec<f64>> = [0.0, 1.0, 2.0, 3.0, 4.0, 100.0, -100.0]
            .iter()
            .map(|&v| vec![v])
            .collect();
        // Krum drops the two outliers first-last; the 5 kept are 0..=4, whose median is 2 and
        // whose 3 closest to it are 1, 2, 3.
        assert_eq!(combine("{kind: bulyan, byzantine: 1}", &x), [2.0]);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let err = |t: &str| rule(t).validate().unwrap_err().path;
        assert_eq!(err("{kind: trimmed_mean, trim: 0.5}"), "trim");
        assert_eq!(err("{kind: centered_clipping, radius: 0}"), "radius");
        assert_eq!(err("{kind: krum, byzantine: 1, multi: 0}"), "multi");
        assert_eq!(err("{kind: geometric_median, smoothing: 0}"), "smoothing");
        assert_eq!(err("{kind: norm_bounding, bound: -1}"), "bound");
    }
}
