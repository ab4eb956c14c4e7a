//! How each client's samples are divided into train / validation / test.

use super::ClientShard;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// Per-client split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SplitSpec {
    /// Split each client's samples by fractions (the FedEM paper: 0.6 / 0.2 / 0.2).
    Fractions {
        /// The fraction of each client's rows for training.
        #[serde(default = "default_train")]
        train: f64,
        /// The fraction of each client's rows for validation.
        #[serde(default = "default_val")]
        val: f64,
        /// The fraction of each client's rows for testing.
        #[serde(default = "default_test")]
        test: f64,
    },
    /// All of a client's samples are for training (and `val` of them for validation); the
    /// test set is `test_samples` extra samples drawn from the client's distribution
    /// (the FedEM authors' generator draws 5000).
    ExtraTest {
        /// Extra test rows drawn per client.
        test_samples: usize,
        /// The fraction of each client's rows for validation.
        #[serde(default)]
        val: f64,
    },
}

fn default_train() -> f64 {
    0.6
}
fn default_val() -> f64 {
    0.2
}
fn default_test() -> f64 {
    0.2
}

impl Default for SplitSpec {
    fn default() -> Self {
        SplitSpec::Fractions {
            train: 0.6,
            val: 0.2,
            test: 0.2,
        }
    }
}

/// Row counts of one client's splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitSizes {
    pub train: usize,
    pub val: usize,
    pub test: usize,
}

impl SplitSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let frac = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(FieldError::new(
                    name.to_string(),
                    format!("must be a fraction in [0, 1], got {v}"),
                ))
            }
        };
        match *self {
            SplitSpec::Fractions { train, val, test } => {
                frac("train", train)?;
                frac("val", val)?;
                frac("test", test)?;
                if train <= 0.0 {
                    return Err(FieldError::new(
                        "train".into(),
                        "must be greater than 0".into(),
                    ));
                }
                if ((train + val + test) - 1.0).abs() > 1e-9 {
                    return Err(FieldError::new(
                        "train".into(),
                        format!("train + val + test must be 1, got {}", train + val + test),
                    ));
                }
                Ok(())
            }
            SplitSpec::ExtraTest { test_samples, val } => {
                FieldError::at_least_one("test_samples", test_samples)?;
                frac("val", val)?;
                if val >= 1.0 {
                    return Err(FieldError::new(
                        "val".into(),
                        "must be below 1 (train would be empty)".into(),
                    ));
                }
                Ok(())
            }
        }
    }

    /// Extra samples to draw per client beyond its own `n` (the extra test set).
    pub fn extra_samples(&self) -> usize {
        match *self {
            SplitSpec::Fractions { .. } => 0,
            SplitSpec::ExtraTest { test_samples, .. } => test_samples,
        }
    }

    /// The ranges of a client whose rows start at `start`: its `n` own samples (train, then
    /// val, then test), followed by the extra test samples if any.
    pub fn shard(&self, start: usize, n: usize) -> ClientShard {
        let s = self.sizes(n);
        let train = start..start + s.train;
        let val = train.end..train.end + s.val;
        let test = match self {
            SplitSpec::Fractions { .. } => val.end..val.end + s.test,
            SplitSpec::ExtraTest { .. } => start + n..start + n + s.test,
        };
        ClientShard { train, val, test }
    }

    /// How `n` own samples (plus the extra ones) are divided. Train keeps at least one row.
    pub fn sizes(&self, n: usize) -> SplitSizes {
        let round = |f: f64| ((n as f64) * f).round() as usize;
        match *self {
            SplitSpec::Fractions { val, test, .. } => {
                let test_n = round(test).min(n.saturating_sub(1));
                let val_n = round(val).min(n.saturating_sub(1 + test_n));
                SplitSizes {
                    train: n - val_n - test_n,
                    val: val_n,
                    test: test_n,
                }
            }
            SplitSpec::ExtraTest { test_samples, val } => {
                let val_n = round(val).min(n.saturating_sub(1));
                SplitSizes {
                    train: n - val_n,
                    val: val_n,
                    test: test_samples,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_and_keep_train_nonempty() {
        let s = SplitSpec::default();
        assert_eq!(
            s.sizes(100),
            SplitSizes {
                train: 60,
                val: 20,
                test: 20
            }
        );
        assert_eq!(
            s.sizes(51),
            SplitSizes {
                train: 31,
                val: 10,
                test: 10
            }
        );
        assert_eq!(
            s.sizes(1),
            SplitSizes {
                train: 1,
                val: 0,
                test: 0
            }
        );
    }

    #[test]
    fn extra_test_keeps_own_samples_for_training() {
        let s = SplitSpec::ExtraTest {
            test_samples: 1000,
            val: 0.0,
        };
        assert_eq!(
            s.sizes(57),
            SplitSizes {
                train: 57,
                val: 0,
                test: 1000
            }
        );
        assert_eq!(s.extra_samples(), 1000);
    }

    #[test]
    fn shards_lay_out_own_then_extra_rows() {
        let s = SplitSpec::default().shard(10, 10);
        assert_eq!((s.train, s.val, s.test), (10..16, 16..18, 18..20));
        let s = SplitSpec::ExtraTest {
            test_samples: 5,
            val: 0.2,
        }
        .shard(10, 10);
        assert_eq!((s.train, s.val, s.test), (10..18, 18..20, 20..25));
    }

    #[test]
    fn rejects_bad_fractions() {
        assert!(SplitSpec::Fractions {
            train: 0.5,
            val: 0.2,
            test: 0.2
        }
        .validate()
        .is_err());
        assert!(SplitSpec::Fractions {
            train: 1.2,
            val: -0.2,
            test: 0.0
        }
        .validate()
        .is_err());
        assert!(SplitSpec::ExtraTest {
            test_samples: 0,
            val: 0.0
        }
        .validate()
        .is_err());
    }
}
