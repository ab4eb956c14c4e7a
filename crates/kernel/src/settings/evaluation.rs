//! `eval_every` and `evaluation:`: which rounds are evaluated, on how many clients, and on
//! which of their splits.

use super::FieldError;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// How many clients an evaluation tests: `all`, a count, or a fraction of the population.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum EvalClients {
    #[default]
    All,
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
    /// `max(1, ⌊fraction · T⌋)` of the T clients, with `fraction` in (0, 1].
    Fraction(f64),
}

impl EvalClients {
    pub fn is_all(&self) -> bool {
        *self == EvalClients::All
    }

    /// How many of `total` clients are evaluated.
    pub fn count(&self, total: usize) -> usize {
        match *self {
            EvalClients::All => total,
            EvalClients::Count(k) => k.min(total),
            EvalClients::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
        }
    }

    /// The problem with these settings, if any.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            EvalClients::Count(0) => Err("a count of clients must be at least 1".into()),
            EvalClients::Fraction(f) if !(f > 0.0 && f <= 1.0) => Err(format!(
                "a fraction of the clients must be in (0, 1], got {f}"
            )),
            _ => Ok(()),
        }
    }
}

const EVAL_CLIENTS_ALLOWED: &str =
    "`all`, a number of clients (an integer ≥ 1) or a fraction of them in (0, 1]";

impl schemars::JsonSchema for EvalClients {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EvalClients".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": format!("{EVAL_CLIENTS_ALLOWED}."),
            "anyOf": [
                {"const": "all"},
                {"type": "integer", "minimum": 1},
                {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            ],
        })
    }
}

impl Serialize for EvalClients {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            EvalClients::All => s.serialize_str("all"),
            EvalClients::Count(k) => s.serialize_u64(k as u64),
            EvalClients::Fraction(f) => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for EvalClients {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EvalClients;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EVAL_CLIENTS_ALLOWED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EvalClients, E> {
                match v {
                    "all" => Ok(EvalClients::All),
                    _ => Err(E::custom(format!(
                        "expected {EVAL_CLIENTS_ALLOWED}, got `{v}`"
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EvalClients, E> {
                Ok(EvalClients::Count(v as usize))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EvalClients, E> {
                usize::try_from(v)
                    .map(EvalClients::Count)
                    .map_err(|_| E::custom(format!("expected {EVAL_CLIENTS_ALLOWED}, got {v}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<EvalClients, E> {
                Ok(EvalClients::Fraction(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a sample of clients is drawn once for the whole run or anew at each evaluation.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EvalSample {
    /// The same clients at every evaluation: curves over rounds follow the same population.
    #[default]
    Fixed,
    /// A fresh draw at every evaluation.
    Fresh,
}

/// How a row's typicality is scored for novelty detection (`evaluation.novelty`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NoveltyScoring {
    /// By the client's own model, as the algorithm scores it (its global, cluster, personal
    /// or mixture model; FedGMM's density).
    #[default]
    Own,
    /// By the most confident of the evaluated clients' classifiers: a row's score is the
    /// highest confidence maxᵧ p(y | x) any of them gives it, as the FedGMM paper scores its
    /// personalized baselines (Table 4). Every evaluated client's classifier is held at once
    /// at each evaluation, and each client's rows are scored by all of them.
    MaxOverClients,
    /// By one mixture for every client: the algorithm's own score (FedEM's
    /// `algorithm.novelty_score`) with the mixture weights averaged over the evaluated clients
    /// that train (in client order), in place of each client's own, as the FedGMM authors
    /// score FedEM (`ood_em.py`: the training clients' mean π). For algorithms whose clients
    /// weigh shared components (FedEM), with a server.
    MeanWeights,
}

impl NoveltyScoring {
    pub fn is_own(&self) -> bool {
        *self == NoveltyScoring::Own
    }
}

/// A split an evaluation can measure (`evaluation.splits`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EvalSplit {
    Train,
    Val,
    Test,
}

/// Which of the clients' splits an evaluation measures. The test split always: the summary,
/// the reports and a sweep's check that a run finished read it. A backdoor's triggered test
/// images are measured with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvaluatedSplits {
    pub train: bool,
    pub val: bool,
}

impl EvaluatedSplits {
    /// Every split (the default).
    pub const ALL: EvaluatedSplits = EvaluatedSplits {
        train: true,
        val: true,
    };

    /// As the scenario lists them, in split order.
    pub fn listed(&self) -> Vec<EvalSplit> {
        let mut listed = Vec::new();
        if self.train {
            listed.push(EvalSplit::Train);
        }
        if self.val {
            listed.push(EvalSplit::Val);
        }
        listed.push(EvalSplit::Test);
        listed
    }
}

/// When, on whom and on which splits a run evaluates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvaluationPlan {
    /// Evaluate after every this many rounds (and always after the last one).
    pub every: u32,
    pub clients: EvalClients,
    pub sample: EvalSample,
    pub splits: EvaluatedSplits,
    pub novelty: NoveltyScoring,
}

impl EvaluationPlan {
    /// Every client after every `every` rounds, on every split.
    pub fn all_every(every: u32) -> EvaluationPlan {
        EvaluationPlan {
            every,
            clients: EvalClients::All,
            sample: EvalSample::Fixed,
            splits: EvaluatedSplits::ALL,
            novelty: NoveltyScoring::Own,
        }
    }

    /// Whether the run evaluates after `round` of `rounds`.
    pub fn is_due(&self, round: u32, rounds: u32) -> bool {
        round % self.every == 0 || round == rounds
    }
}

/// Evaluation on a sample of the clients, for large populations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEvaluation {
    /// Same as the top-level `eval_every` (give one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u32>,
    /// `all`, a number of clients, or a fraction of them.
    #[serde(default, skip_serializing_if = "EvalClients::is_all")]
    pub clients: EvalClients,
    /// `fixed`: the same sample at every evaluation; `fresh`: a new one each time.
    #[serde(default)]
    pub sample: EvalSample,
    /// The splits measured: any of `train`, `val` and `test`, with `test` among them (the
    /// summary reads it). Default: all three, as every earlier run measured them (training
    /// loss curves, and the paper reproductions' files unchanged); `[test]` pays only for what
    /// the summary reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<Vec<EvalSplit>>,
    /// How rows are scored for novelty detection, where the data set has novel rows: `own`,
    /// by each client's own model as its algorithm scores it (default); `max_over_clients`,
    /// by the highest confidence maxᵧ p(y | x) any evaluated client's classifier gives the
    /// row (the FedGMM paper's score for personalized baselines, Table 4; algorithms that
    /// score by one classifier's confidence, with a server); `mean_weights`, by the
    /// algorithm's score with the evaluated training clients' mean mixture weights (the FedGMM
    /// authors' score for FedEM; algorithms with mixture weights, with a server).
    #[serde(default, skip_serializing_if = "NoveltyScoring::is_own")]
    pub novelty: NoveltyScoring,
}

impl RawEvaluation {
    /// The plan these settings and the top-level `eval_every` ask for (give the period in one
    /// of the two places; 1 when neither says); an error's path is from the scenario's top.
    pub fn resolve(&self, eval_every: Option<u32>) -> Result<EvaluationPlan, FieldError> {
        let (every, path) = match (eval_every, self.every) {
            (Some(_), Some(_)) => {
                return Err(FieldError::new(
                    "evaluation.every".into(),
                    "give either `eval_every` or `evaluation.every`, not both".into(),
                ))
            }
            (Some(e), None) => (e, "eval_every"),
            (None, Some(e)) => (e, "evaluation.every"),
            (None, None) => (1, "eval_every"),
        };
        if every == 0 {
            return Err(FieldError::new(
                path.into(),
                "must be at least 1 (the last round is always evaluated)".into(),
            ));
        }
        self.clients
            .check()
            .map_err(|m| FieldError::new("evaluation.clients".into(), m))?;
        let splits = match &self.splits {
            None => EvaluatedSplits::ALL,
            Some(listed) => {
                let bad = |message: &str| {
                    Err(FieldError::new("evaluation.splits".into(), message.into()))
                };
                let mut sorted = listed.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != listed.len() {
                    return bad("lists a split twice; list each of `train`, `val`, `test` once");
                }
                if !sorted.contains(&EvalSplit::Test) {
                    return bad(
                        "must include `test`: the summary, the reports and a sweep's check \
                         that a run finished read the test split (e.g. `[test]` or \
                         `[val, test]`)",
                    );
                }
                EvaluatedSplits {
                    train: sorted.contains(&EvalSplit::Train),
                    val: sorted.contains(&EvalSplit::Val),
                }
            }
        };
        Ok(EvaluationPlan {
            every,
            clients: self.clients,
            sample: self.sample,
            splits,
            novelty: self.novelty,
        })
    }
}
