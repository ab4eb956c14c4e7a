//! Byzantine clients and robust aggregation: the `adversary:` section (which clients lie, and
//! how) and the `aggregation:` section (how the server combines the updates it receives when
//! some of them may be lies).
//!
//! Everything here is arithmetic on the changes clients send: a change is a sent vector minus
//! the global vector it moved from (FedEM: one per component, each combined on its own). An
//! attack either rewrites a malicious client's own change before it leaves ([`Attack::own`]:
//! sign flipping, Gaussian noise, scaling) or, for the attacks that know the honest clients'
//! updates of the round (ALIE, IPM), is crafted by the server from them ([`Attack::crafted`]),
//! every malicious client of the round sending the same vector, as the papers' colluding
//! attackers do. A robust aggregator turns a round's changes into the one change the global
//! model makes, each client counting the same.
//!
//! This room draws only from the streams its callers pass and never knows when a round
//! happens: the clients and the server apply it.

use crate::spec::FieldError;
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// `adversary:`: a seeded set of malicious clients and what they do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdversarySpec {
    /// The share of the participants that are malicious, in (0, 1): ⌊fraction·N⌋ clients drawn
    /// from the run's `adversary` stream (`clients.csv` marks them).
    pub fraction: f64,
    /// What each malicious client sends instead of its honest update.
    pub attack: Attack,
}

impl AdversarySpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            return Err(FieldError::new(
                "fraction".into(),
                format!("must be in (0, 1), got {}", self.fraction),
            ));
        }
        self.attack.validate().map_err(|e| e.within("attack"))
    }

    /// The positions of the malicious clients among `participants` of them: ⌊fraction·N⌋
    /// distinct positions drawn from `rng`, in draw order.
    pub fn draw(&self, participants: usize, rng: &mut impl Rng) -> Vec<usize> {
        let k = (self.fraction * participants as f64).floor() as usize;
        rand::seq::index::sample(rng, participants, k).into_vec()
    }
}

/// A run's malicious clients (sorted) and their attack.
#[derive(Clone, Debug, PartialEq)]
pub struct Adversaries {
    pub attack: Attack,
    pub malicious: Vec<u32>,
}

/// What a malicious client sends (its change Δ: what it would have sent minus the global
/// model).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Attack {
    /// Sign flipping: −scale·Δ.
    SignFlip {
        #[serde(default = "one")]
        scale: f64,
    },
    /// Gaussian updates: a change of independent N(0, std²) values, from the client's `attack`
    /// stream of the job.
    Gaussian {
        #[serde(default = "one")]
        std: f64,
    },
    /// Scaled update (model replacement's boosting, Bagdasaryan et al. 2020): factor·Δ.
    Scaled { factor: f64 },
    /// A little is enough (Baruch et al. 2019): the gradient μ − z·σ, μ and σ the
    /// coordinate-wise mean and standard deviation of the round's honest gradients. A change
    /// is a step against the gradient, so the change sent is μ + z·σ of the honest changes.
    /// Without `z`, Baruch et al.'s z = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f, for the round's n
    /// updates of which f malicious.
    Alie {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        z: Option<f64>,
    },
    /// Inner product manipulation (Xie et al. 2020): −ε·μ, μ the mean of the round's honest
    /// changes.
    Ipm {
        #[serde(default = "default_ipm")]
        epsilon: f64,
    },
    /// Label flipping: each malicious client trains honestly on its training rows with every
    /// label y replaced by C − 1 − y (C classes); its validation and test rows keep theirs.
    /// Data held in memory only.
    LabelFlip,
    /// A backdoor (Bagdasaryan et al. 2020; Sun et al. 2019): each malicious client stamps a
    /// `trigger`×`trigger` square of `value` in the bottom-right corner of every channel of a
    /// `poison` share of its training images (drawn from its `backdoor` stream), labels them
    /// `target`, trains honestly on the rest, and sends `boost`·Δ (model replacement's
    /// boosting; 1: none). Every client's test images of other labels, stamped, measure the
    /// attack's success (`split: backdoor` in `metrics.parquet`, `backdoor_success` in
    /// `summary.csv`). Image data held in memory only.
    Backdoor(Backdoor),
}

/// The backdoor's settings ([`Attack::Backdoor`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Backdoor {
    /// The label a triggered image gets: a class of the data set.
    pub target: i64,
    /// The side of the trigger's square, in pixels (at most the image's height and width).
    #[serde(default = "default_trigger")]
    pub trigger: usize,
    /// The trigger's pixel value; default: the largest feature value of the data set (white).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f32>,
    /// The share of a malicious client's training images it triggers, in (0, 1].
    #[serde(default = "default_poison")]
    pub poison: f64,
    /// The factor on the malicious change, ≥ 1.
    #[serde(default = "one")]
    pub boost: f64,
}

fn default_trigger() -> usize {
    4
}
fn default_poison() -> f64 {
    0.5
}

impl Backdoor {
    /// The trigger's value on `images` of `shape` (row-major, one after another): `value`, or
    /// by default the smallest or largest value of `images`, whichever is farther from the
    /// mean of the trigger's pixels over them (the larger on a tie).
    pub fn value_on(&self, images: &[f32], shape: [usize; 3]) -> f32 {
        if let Some(value) = self.value {
            return value;
        }
        let dim: usize = shape.iter().product();
        let mut mask = vec![0.0f32; dim];
        self.stamp(&mut mask, shape, 1.0);
        let lit: Vec<usize> = (0..dim).filter(|&i| mask[i] == 1.0).collect();
        let (mut low, mut high, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f64);
        for image in images.chunks_exact(dim) {
            for &v in image {
                (low, high) = (low.min(v), high.max(v));
            }
            sum += lit.iter().map(|&i| image[i] as f64).sum::<f64>();
        }
        let mean = sum / (lit.len() * (images.len() / dim)).max(1) as f64;
        if high as f64 - mean >= mean - low as f64 {
            high
        } else {
            low
        }
    }

    /// Stamps the trigger on one image of `shape` (`[channels, height, width]`, row-major).
    pub fn stamp(&self, image: &mut [f32], shape: [usize; 3], value: f32) {
        let [channels, height, width] = shape;
        for c in 0..channels {
            for y in height - self.trigger..height {
                let row = (c * height + y) * width;
                image[row + width - self.trigger..row + width].fill(value);
            }
        }
    }
}

fn one() -> f64 {
    1.0
}
fn default_ipm() -> f64 {
    0.1
}

impl Attack {
    fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, what: &str, v: f64| {
            Err(FieldError::new(
                path.into(),
                format!("must be {what}, got {v}"),
            ))
        };
        match *self {
            Attack::SignFlip { scale } if !(scale > 0.0 && scale.is_finite()) => {
                bad("scale", "a positive number", scale)
            }
            Attack::Gaussian { std } if !(std > 0.0 && std.is_finite()) => {
                bad("std", "a positive number", std)
            }
            Attack::Scaled { factor } if !factor.is_finite() => {
                bad("factor", "a finite number", factor)
            }
            Attack::Alie { z: Some(z) } if !z.is_finite() => bad("z", "a finite number", z),
            Attack::Ipm { epsilon } if !(epsilon > 0.0 && epsilon.is_finite()) => {
                bad("epsilon", "a positive number", epsilon)
            }
            Attack::Backdoor(b) if b.target < 0 => bad("target", "a class (≥ 0)", b.target as f64),
            Attack::Backdoor(b) if b.trigger == 0 => bad("trigger", "at least 1 pixel", 0.0),
            Attack::Backdoor(Backdoor { value: Some(v), .. }) if !v.is_finite() => {
                bad("value", "a finite number", v as f64)
            }
            Attack::Backdoor(b) if !(b.poison > 0.0 && b.poison <= 1.0) => {
                bad("poison", "in (0, 1]", b.poison)
            }
            Attack::Backdoor(b) if !(b.boost >= 1.0 && b.boost.is_finite()) => {
                bad("boost", "a finite number ≥ 1", b.boost)
            }
            _ => Ok(()),
        }
    }

    /// Whether the server crafts it from the round's honest updates (ALIE, IPM) rather than
    /// each malicious client from its own.
    pub fn is_crafted(&self) -> bool {
        matches!(self, Attack::Alie { .. } | Attack::Ipm { .. })
    }

    /// Whether each malicious client rewrites its own change ([`Attack::own`]).
    pub fn is_own(&self) -> bool {
        match self {
            Attack::SignFlip { .. } | Attack::Gaussian { .. } | Attack::Scaled { .. } => true,
            Attack::Backdoor(b) => b.boost != 1.0,
            Attack::Alie { .. } | Attack::Ipm { .. } | Attack::LabelFlip => false,
        }
    }

    /// Whether it poisons the malicious clients' training data (label flipping, backdoor).
    pub fn poisons_data(&self) -> bool {
        matches!(self, Attack::LabelFlip | Attack::Backdoor(_))
    }

    /// Its name in the scenario (`kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Attack::SignFlip { .. } => "sign_flip",
            Attack::Gaussian { .. } => "gaussian",
            Attack::Scaled { .. } => "scaled",
            Attack::Alie { .. } => "alie",
            Attack::Ipm { .. } => "ipm",
            Attack::LabelFlip => "label_flip",
            Attack::Backdoor(_) => "backdoor",
        }
    }

    /// A malicious client's own attack on its change `delta` (one sent vector), drawing from
    /// `rng` (Gaussian); crafted attacks leave it to the server.
    pub fn own(&self, delta: &mut [f64], rng: &mut impl Rng) {
        match *self {
            Attack::SignFlip { scale } => delta.iter_mut().for_each(|x| *x *= -scale),
            Attack::Scaled { factor } => delta.iter_mut().for_each(|x| *x *= factor),
            Attack::Backdoor(Backdoor { boost, .. }) => delta.iter_mut().for_each(|x| *x *= boost),
            Attack::Gaussian { std } => delta
                .iter_mut()
                .for_each(|x| *x = std * rng.sample::<f64, _>(StandardNormal)),
            Attack::Alie { .. } | Attack::Ipm { .. } | Attack::LabelFlip => {}
        }
    }

    /// The change every malicious client sends for one vector, crafted from the `honest`
    /// changes of the round (at least one), with `n` updates in the round of which
    /// `malicious` are malicious.
    pub fn crafted(&self, honest: &[&[f64]], n: usize, malicious: usize) -> Vec<f64> {
        let d = honest[0].len();
        let h = honest.len() as f64;
        let mean: Vec<f64> = (0..d)
            .map(|j| honest.iter().map(|v| v[j]).sum::<f64>() / h)
            .collect();
        match *self {
            Attack::Ipm { epsilon } => mean.iter().map(|m| -epsilon * m).collect(),
            Attack::Alie { z } => {
                let z = z.unwrap_or_else(|| alie_z(n, malicious));
                (0..d)
                    .map(|j| {
                        let var = honest.iter().map(|v| (v[j] - mean[j]).powi(2)).sum::<f64>() / h;
                        // μ − z·σ of the gradients: changes point against them.
                        mean[j] + z * var.sqrt()
                    })
                    .collect()
            }
            _ => unreachable!("only ALIE and IPM are crafted"),
        }
    }
}

/// Baruch et al.'s z for `n` updates of which `f` are malicious: Φ⁻¹((n − s)/n),
/// s = ⌊n/2 + 1⌋ − f (the honest clients the attackers need on their side); 0 when no z
/// leaves them enough.
pub fn alie_z(n: usize, f: usize) -> f64 {
    let s = (n / 2 + 1).saturating_sub(f);
    let p = (n - s.min(n)) as f64 / n.max(1) as f64;
    if p <= 0.0 || p >= 1.0 {
        return 0.0;
    }
    inverse_normal_cdf(p)
}

/// Φ⁻¹(p) for p in (0, 1), by Acklam's rational approximation (relative error below
/// 1.15e-9).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// `aggregation:`: how the server combines a round's changes, each client counting the same
/// (the default, without this section, is the algorithm's own weighted mean).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RobustAggregation {
    /// The coordinate-wise median (the mean of the two middle values for an even count).
    Median,
    /// The coordinate-wise mean of what is left after the ⌊trim·n⌋ largest and smallest
    /// values of each coordinate are dropped.
    TrimmedMean {
        /// The share dropped at each end, in [0, 0.5).
        trim: f64,
    },
    /// Krum (Blanchard et al. 2017): the change whose n − f − 2 nearest others are closest
    /// (sum of squared distances; ties: the lower client); with `multi` m > 1, the mean of the
    /// m best (Multi-Krum). Needs n ≥ 2f + 3.
    Krum {
        /// f: the malicious clients to tolerate.
        byzantine: usize,
        /// m: how many of the best-scored changes are averaged.
        #[serde(default = "one_usize")]
        multi: usize,
    },
    /// Bulyan (El Mhamdi et al. 2018): θ = n − 2f changes picked by Krum one at a time, then
    /// per coordinate the mean of the β = θ − 2f values closest to their median. Needs
    /// n ≥ 4f + 3.
    Bulyan {
        /// f: the malicious clients to tolerate.
        byzantine: usize,
    },
    /// The geometric median by the smoothed Weiszfeld iteration (RFA, Pillutla et al. 2022):
    /// from the mean, `iterations` reweighted means with weights 1/max(ν, ‖z − x_i‖).
    GeometricMedian {
        #[serde(default = "default_weiszfeld")]
        iterations: usize,
        /// ν, the smoothing that keeps a weight finite.
        #[serde(default = "default_smoothing")]
        smoothing: f64,
    },
    /// Centered clipping (Karimireddy et al. 2021): from v = the previous round's combined
    /// change (0 in the first round), `iterations` steps v ← v + mean_i clip(x_i − v, τ), clip
    /// scaling to L2 norm at most τ.
    CenteredClipping {
        /// τ.
        radius: f64,
        #[serde(default = "one_usize")]
        iterations: usize,
    },
    /// Norm bounding (Sun et al. 2019): each change scaled to L2 norm at most `bound`, then
    /// the mean.
    NormBounding { bound: f64 },
}

fn one_usize() -> usize {
    1
}
fn default_weiszfeld() -> usize {
    8
}
fn default_smoothing() -> f64 {
    1e-6
}

impl RobustAggregation {
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.into(), message));
        match *self {
            RobustAggregation::TrimmedMean { trim } if !(0.0..0.5).contains(&trim) => {
                bad("trim", format!("must be in [0, 0.5), got {trim}"))
            }
            RobustAggregation::Krum { multi: 0, .. } => bad("multi", "must be at least 1".into()),
            RobustAggregation::GeometricMedian {
                iterations,
                smoothing,
            } => {
                if iterations == 0 {
                    bad("iterations", "must be at least 1".into())
                } else if !(smoothing > 0.0 && smoothing.is_finite()) {
                    bad(
                        "smoothing",
                        format!("must be a positive number, got {smoothing}"),
                    )
                } else {
                    Ok(())
                }
            }
            RobustAggregation::CenteredClipping { radius, iterations } => {
                if !(radius > 0.0 && radius.is_finite()) {
                    bad("radius", format!("must be a positive number, got {radius}"))
                } else if iterations == 0 {
                    bad("iterations", "must be at least 1".into())
                } else {
                    Ok(())
                }
            }
            RobustAggregation::NormBounding { bound } if !(bound > 0.0 && bound.is_finite()) => {
                bad("bound", format!("must be a positive number, got {bound}"))
            }
            _ => Ok(()),
        }
    }

    /// The fewest updates a round needs for this rule, and why (Krum: 2f + 3; Bulyan:
    /// 4f + 3; Multi-Krum also m).
    pub fn least_updates(&self) -> Option<(usize, String)> {
        match *self {
            RobustAggregation::Krum { byzantine, multi } => Some((
                (2 * byzantine + 3).max(multi),
                format!("Krum with byzantine: {byzantine} needs 2f + 3 updates a round (and at least multi: {multi})"),
            )),
            RobustAggregation::Bulyan { byzantine } => Some((
                4 * byzantine + 3,
                format!("Bulyan with byzantine: {byzantine} needs 4f + 3 updates a round"),
            )),
            _ => None,
        }
    }

    /// The change the global vector makes from the round's `changes` (one per client, in
    /// client order, all of one length); `previous` is the change this rule made the last time
    /// (centered clipping starts from it; empty: none yet). A round with fewer changes than the
    /// rule needs falls back to the coordinate-wise median.
    pub fn combine(&self, changes: &[&[f64]], previous: &[f64]) -> Vec<f64> {
        let n = changes.len();
        assert!(n > 0, "a robust aggregation of no updates");
        let d = changes[0].len();
        let mean_of = |set: &[&[f64]]| -> Vec<f64> {
            (0..d)
                .map(|j| set.iter().map(|v| v[j]).sum::<f64>() / set.len() as f64)
                .collect()
        };
        if self.least_updates().is_some_and(|(least, _)| n < least) {
            return RobustAggregation::Median.combine(changes, previous);
        }
        match *self {
            RobustAggregation::Median => coordinatewise(changes, |column| {
                let m = column.len();
                if m % 2 == 1 {
                    column[m / 2]
                } else {
                    (column[m / 2 - 1] + column[m / 2]) / 2.0
                }
            }),
            RobustAggregation::TrimmedMean { trim } => {
                let cut = (trim * n as f64).floor() as usize;
                coordinatewise(changes, |column| {
                    let kept = &column[cut..column.len() - cut];
                    kept.iter().sum::<f64>() / kept.len() as f64
                })
            }
            RobustAggregation::Krum { byzantine, multi } => {
                let all: Vec<usize> = (0..n).collect();
                let chosen = krum_order(&squared_distances(changes), &all, byzantine);
                let best: Vec<&[f64]> = chosen[..multi].iter().map(|&i| changes[i]).collect();
                mean_of(&best)
            }
            RobustAggregation::Bulyan { byzantine } => {
                let theta = n - 2 * byzantine;
                let squares = squared_distances(changes);
                let mut left: Vec<usize> = (0..n).collect();
                let mut picked = Vec::with_capacity(theta);
                while picked.len() < theta {
                    let best = krum_order(&squares, &left, byzantine)[0];
                    left.retain(|&i| i != best);
                    picked.push(changes[best]);
                }
                let beta = theta - 2 * byzantine;
                coordinatewise(&picked, |column| {
                    let m = column.len();
                    let median = if m % 2 == 1 {
                        column[m / 2]
                    } else {
                        (column[m / 2 - 1] + column[m / 2]) / 2.0
                    };
                    let mut by_distance = column.to_vec();
                    by_distance.sort_by(|a, b| (a - median).abs().total_cmp(&(b - median).abs()));
                    by_distance[..beta].iter().sum::<f64>() / beta as f64
                })
            }
            RobustAggregation::GeometricMedian {
                iterations,
                smoothing,
            } => {
                let mut z = mean_of(changes);
                for _ in 0..iterations {
                    let weights: Vec<f64> = changes
                        .iter()
                        .map(|x| 1.0 / distance(&z, x).max(smoothing))
                        .collect();
                    let total: f64 = weights.iter().sum();
                    z = (0..d)
                        .map(|j| {
                            changes
                                .iter()
                                .zip(&weights)
                                .map(|(x, w)| w * x[j])
                                .sum::<f64>()
                                / total
                        })
                        .collect();
                }
                z
            }
            RobustAggregation::CenteredClipping { radius, iterations } => {
                let mut v = if previous.len() == d {
                    previous.to_vec()
                } else {
                    vec![0.0; d]
                };
                for _ in 0..iterations {
                    let mut step = vec![0.0; d];
                    for x in changes {
                        let norm = distance(&v, x);
                        let scale = if norm > radius { radius / norm } else { 1.0 };
                        for j in 0..d {
                            step[j] += scale * (x[j] - v[j]) / n as f64;
                        }
                    }
                    v.iter_mut().zip(step).for_each(|(a, s)| *a += s);
                }
                v
            }
            RobustAggregation::NormBounding { bound } => {
                let mut sum = vec![0.0; d];
                for x in changes {
                    let norm = x.iter().map(|a| a * a).sum::<f64>().sqrt();
                    let scale = if norm > bound { bound / norm } else { 1.0 };
                    sum.iter_mut()
                        .zip(x.iter())
                        .for_each(|(s, a)| *s += scale * a);
                }
                sum.iter().map(|s| s / n as f64).collect()
            }
        }
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
    use rand::SeedableRng;

    fn rule(text: &str) -> RobustAggregation {
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
    fn attacks_by_hand() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut d = vec![1.0, -2.0];
        Attack::SignFlip { scale: 2.0 }.own(&mut d, &mut rng);
        assert_eq!(d, [-2.0, 4.0]);
        Attack::Scaled { factor: 0.5 }.own(&mut d, &mut rng);
        assert_eq!(d, [-1.0, 2.0]);
        let backdoor: Attack = serde_yaml::from_str("{kind: backdoor, target: 1}").unwrap();
        assert!(
            backdoor.poisons_data() && !backdoor.is_own(),
            "no boost: honest updates"
        );
        let boosted: Attack =
            serde_yaml::from_str("{kind: backdoor, target: 1, boost: 3}").unwrap();
        assert!(boosted.is_own());
        boosted.own(&mut d, &mut rng);
        assert_eq!(d, [-3.0, 6.0]);
        // A 2-pixel trigger on a 2×3×3 image: the bottom-right 2×2 of both channels.
        let Attack::Backdoor(b) = boosted else {
            unreachable!()
        };
        let mut image = vec![0.0f32; 18];
        (Backdoor { trigger: 2, ..b }).stamp(&mut image, [2, 3, 3], 1.0);
        let lit: Vec<usize> = (0..18).filter(|&i| image[i] == 1.0).collect();
        assert_eq!(lit, [4, 5, 7, 8, 13, 14, 16, 17]);
        // By default, the extreme farthest from the corners: two 1×2×2 images whose corner
        // pixel (a 1-pixel trigger) holds 0.2 and 0.4, values in [0.1, 0.9]: mean 0.3, so 0.9;
        // corners 0.8 and 0.9: 0.1.
        let one = Backdoor { trigger: 1, ..b };
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.2, 0.1, 0.5, 0.5, 0.4], [1, 2, 2]),
            0.9
        );
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.8, 0.1, 0.5, 0.5, 0.9], [1, 2, 2]),
            0.1
        );
        let set = Backdoor {
            value: Some(-3.0),
            ..one
        };
        assert_eq!(set.value_on(&[0.0; 4], [1, 2, 2]), -3.0);
        let honest: Vec<&[f64]> = vec![&[1.0, 0.0], &[3.0, 2.0]];
        // μ = (2, 1), σ = (1, 1).
        let ipm = Attack::Ipm { epsilon: 0.5 }.crafted(&honest, 3, 1);
        assert_eq!(ipm, [-1.0, -0.5]);
        // ALIE: the gradients' μ − 1.5·σ is the changes' μ + 1.5·σ.
        let alie = Attack::Alie { z: Some(1.5) }.crafted(&honest, 3, 1);
        assert_eq!(alie, [3.5, 2.5]);
    }

    #[test]
    fn alie_z_follows_baruch() {
        // n = 50, f = 12 (their setting): s = 26 − 12 = 14, Φ⁻¹(36/50) = 0.5828…
        // (References: Python's statistics.NormalDist().inv_cdf.)
        assert!((alie_z(50, 12) - 0.582_841_507_271_216).abs() < 1e-9);
        assert!((inverse_normal_cdf(0.975) - 1.959_963_984_540_054).abs() < 3e-9);
        assert!((inverse_normal_cdf(0.001) + 3.090_232_306_167_813).abs() < 4e-9);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let err = |t: &str| rule(t).validate().unwrap_err().path;
        assert_eq!(err("{kind: trimmed_mean, trim: 0.5}"), "trim");
        assert_eq!(err("{kind: centered_clipping, radius: 0}"), "radius");
        assert_eq!(err("{kind: krum, byzantine: 1, multi: 0}"), "multi");
        let adversary: AdversarySpec =
            serde_yaml::from_str("{fraction: 0.2, attack: {kind: gaussian, std: -1}}").unwrap();
        assert_eq!(adversary.validate().unwrap_err().path, "attack.std");
        for (field, text) in [
            ("target", "{target: -1}"),
            ("trigger", "{target: 0, trigger: 0}"),
            ("poison", "{target: 0, poison: 0}"),
            ("boost", "{target: 0, boost: 0.5}"),
        ] {
            let attack = text.replace('{', "{kind: backdoor, ");
            let adversary: AdversarySpec =
                serde_yaml::from_str(&format!("{{fraction: 0.1, attack: {attack}}}")).unwrap();
            assert_eq!(
                adversary.validate().unwrap_err().path,
                format!("attack.{field}")
            );
        }
    }
}
