//! Per-client quantities of the system model (speeds, bandwidths, latencies): a constant, or a
//! distribution each client draws its value from once, from its own seeded stream.

use super::SystemError;
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::path::PathBuf;

/// A per-client value: write a number for a constant, or a map with a `dist` tag.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Dist {
    Constant(f64),
    Drawn(DrawnDist),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum DrawnDist {
    /// Uniform on [low, high].
    Uniform { low: f64, high: f64 },
    /// Lognormal with the given median and σ of the underlying normal.
    Lognormal { median: f64, sigma: f64 },
    /// One value per client from a CSV file with a header: the row whose `client` column is
    /// the client id, the value in `column`.
    File { path: PathBuf, column: String },
}

/// What a per-client quantity is: its field below `system` (for messages), the stream its
/// draws come from, and whether it must be positive (else non-negative). Every value, inline,
/// drawn or read from a file, is held to the same rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantity {
    pub field: &'static str,
    pub purpose: &'static str,
    pub positive: bool,
    /// The most a value may be, and why (for messages): for a span of simulated time (in its
    /// own unit: seconds, milliseconds), [`CLOCK_SPAN`]; `None` for a rate.
    pub most: Option<(f64, &'static str)>,
}

/// Why a span of simulated time has a most: the virtual clock must count it.
pub const CLOCK_SPAN: &str = "the longest span the virtual clock counts";

impl Quantity {
    /// A rate (a speed, a bandwidth): positive, as large as it likes.
    pub const fn rate(field: &'static str, purpose: &'static str) -> Quantity {
        Quantity {
            field,
            purpose,
            positive: true,
            most: None,
        }
    }

    /// `Err` with what a value must be, where `v` is not a finite positive (or non-negative)
    /// number, or more than [`Quantity::most`].
    pub fn check(&self, v: f64) -> Result<(), String> {
        let sign_ok = v.is_finite() && if self.positive { v > 0.0 } else { v >= 0.0 };
        let what = if self.positive {
            "a positive number"
        } else {
            "a non-negative number"
        };
        match self.most {
            _ if !sign_ok => Err(format!("must be {what}")),
            Some((most, why)) if v > most => Err(format!(
                "must be {what} of at most {} ({why})",
                crate::settings::number(most)
            )),
            _ => Ok(()),
        }
    }
}

impl Dist {
    /// Checks parameters (not files); an error's path is below this value.
    pub fn validate(&self, rule: Quantity) -> Result<(), FieldError> {
        let check = |path: &str, v: f64| {
            rule.check(v)
                .map_err(|must| FieldError::new(path.to_string(), format!("{must}, got {v}")))
        };
        match self {
            Dist::Constant(v) => check("", *v),
            Dist::Drawn(DrawnDist::Uniform { low, high }) => {
                check("low", *low)?;
                check("high", *high)?;
                if low > high {
                    return Err(FieldError::new(
                        "high".into(),
                        format!("must be at least low ({low})"),
                    ));
                }
                Ok(())
            }
            Dist::Drawn(DrawnDist::Lognormal { median, sigma }) => {
                check("median", *median)?;
                if !(*sigma >= 0.0 && sigma.is_finite()) {
                    return Err(FieldError::new(
                        "sigma".into(),
                        format!("must be ≥ 0, got {sigma}"),
                    ));
                }
                Ok(())
            }
            Dist::Drawn(DrawnDist::File { .. }) => Ok(()),
        }
    }

    /// One value per client of `quantity`: client `c` draws from `(seeds, Client(c),
    /// quantity.purpose)`. Every value must pass [`Quantity::check`]: a file's is refused
    /// naming the file, line or row and column; a drawn one that is not (a lognormal's draw
    /// that underflows to 0) naming the client and the field.
    pub fn per_client(
        &self,
        seeds: &SeedTree,
        quantity: Quantity,
        clients: usize,
    ) -> Result<Vec<f64>, SystemError> {
        let draw = |f: &dyn Fn(&mut rand_chacha::ChaCha20Rng) -> f64| -> Vec<f64> {
            (0..clients)
                .map(|c| f(&mut seeds.rng(Entity::Client(c as u32), quantity.purpose, 0)))
                .collect()
        };
        let values = match self {
            Dist::Constant(v) => vec![*v; clients],
            Dist::Drawn(DrawnDist::Uniform { low, high }) => {
                draw(&|rng| low + (high - low) * rng.gen::<f64>())
            }
            Dist::Drawn(DrawnDist::Lognormal { median, sigma }) => {
                let ln = LogNormal::new(median.ln(), *sigma).expect("checked parameters");
                draw(&|rng| ln.sample(rng))
            }
            Dist::Drawn(DrawnDist::File { path, column }) => {
                let rule = |v: &f64| quantity.check(*v);
                return Ok(crate::io::per_client_column(path, column, clients, &rule)?);
            }
        };
        if let Some((c, v)) =
            (values.iter().enumerate()).find(|(_, v)| quantity.check(**v).is_err())
        {
            return Err(SystemError::Spec {
                field: quantity.field.into(),
                message: format!(
                    "client {c} drew {v}, and {}; narrow the law",
                    quantity.check(*v).unwrap_err()
                ),
            });
        }
        Ok(values)
    }
}

impl schemars::JsonSchema for Dist {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Dist".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let drawn = generator.subschema_for::<DrawnDist>();
        schemars::json_schema!({
            "description": "A number (the same for every client), or a map with `dist: \
                            uniform | lognormal | file` each client draws its value from.",
            "anyOf": [{"type": "number"}, drawn],
        })
    }
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dist;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a number, or a map with `dist: uniform | lognormal | file` and its parameters",
                )
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dist, E> {
                Ok(Dist::Constant(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dist, E> {
                Ok(Dist::Constant(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dist, E> {
                Ok(Dist::Constant(v as f64))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Dist, A::Error> {
                DrawnDist::deserialize(de::value::MapAccessDeserializer::new(map)).map(Dist::Drawn)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_maps_parse() {
        let c: Dist = serde_yaml::from_str("250").unwrap();
        assert_eq!(c, Dist::Constant(250.0));
        let u: Dist = serde_yaml::from_str("{dist: uniform, low: 1, high: 3}").unwrap();
        assert_eq!(
            u,
            Dist::Drawn(DrawnDist::Uniform {
                low: 1.0,
                high: 3.0
            })
        );
        let e = serde_yaml::from_str::<Dist>("{dist: gamma, k: 1}").unwrap_err();
        assert!(e.to_string().contains("uniform"), "{e}");
        // Round trip through the resolved scenario.
        assert_eq!(
            serde_yaml::to_string(&u).unwrap(),
            serde_yaml::to_string(
                &serde_yaml::from_str::<Dist>(&serde_yaml::to_string(&u).unwrap()).unwrap()
            )
            .unwrap()
        );
    }

    #[test]
    fn draws_are_per_client_streams() {
        let seeds = SeedTree::new(4);
        let d = Dist::Drawn(DrawnDist::Lognormal {
            median: 100.0,
            sigma: 0.5,
        });
        let speed = Quantity {
            field: "compute.samples_per_second",
            purpose: "speed",
            positive: true,
            most: None,
        };
        let a = d.per_client(&seeds, speed, 50).unwrap();
        assert_eq!(a, d.per_client(&seeds, speed, 50).unwrap());
        // A client's value does not depend on how many clients there are.
        assert_eq!(a[..10], d.per_client(&seeds, speed, 10).unwrap()[..]);
        assert!(a.iter().all(|v| *v > 0.0));
        let u = Dist::Drawn(DrawnDist::Uniform {
            low: 2.0,
            high: 3.0,
        });
        let x = Quantity {
            purpose: "x",
            ..speed
        };
        assert!(u
            .per_client(&seeds, x, 20)
            .unwrap()
            .iter()
            .all(|v| (2.0..=3.0).contains(v)));
        // A lognormal whose draws underflow to 0 is refused, naming a client.
        let wide = Dist::Drawn(DrawnDist::Lognormal {
            median: 1.0,
            sigma: 1e3,
        });
        let e = wide.per_client(&seeds, speed, 50).unwrap_err().to_string();
        assert!(
            e.starts_with("system.compute.samples_per_second: client ")
                && e.contains("must be a positive number; narrow the law"),
            "{e}"
        );
    }

    /// A file's values meet the inline rule: −1, NaN or 0 speeds and latencies below 0 are
    /// refused naming the file, its line and column; a latency of 0 is allowed.
    #[test]
    fn a_files_values_meet_the_rule_of_inline_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pop.csv");
        let seeds = SeedTree::new(1);
        let file = Dist::Drawn(DrawnDist::File {
            path: path.clone(),
            column: "v".into(),
        });
        let speed = Quantity {
            field: "compute.samples_per_second",
            purpose: "device/samples_per_second",
            positive: true,
            most: None,
        };
        let latency = Quantity {
            field: "network.latency_ms",
            purpose: "network/latency",
            positive: false,
            most: Some((1e15, CLOCK_SPAN)),
        };
        for (bad, shown) in [("-1", "-1.0"), ("NaN", "NaN"), ("0", "0.0"), ("inf", "inf")] {
            std::fs::write(&path, format!("client,v\n0,5\n1,{bad}\n")).unwrap();
            let e = file.per_client(&seeds, speed, 2).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "{}: line 3: column `v` (client 1): must be a positive number, got {shown}",
                    path.display()
                )
            );
        }
        std::fs::write(&path, "client,v\n0,0\n1,2.5\n").unwrap();
        assert_eq!(file.per_client(&seeds, latency, 2).unwrap(), [0.0, 2.5]);
        std::fs::write(&path, "client,v\n0,-0.5\n1,2.5\n").unwrap();
        let e = file.per_client(&seeds, latency, 2).unwrap_err().to_string();
        assert!(
            e.ends_with("must be a non-negative number, got -0.5"),
            "{e}"
        );
        std::fs::write(&path, "client,v\n0,1e300\n1,2.5\n").unwrap();
        let e = file.per_client(&seeds, latency, 2).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "column `v` (client 0): must be a non-negative number of at most 1e15 (the \
                 longest span the virtual clock counts), got 1e300"
            ),
            "{e}"
        );
    }
}
