//! Per-client quantities of the system model (speeds, bandwidths, latencies): a constant, or a
//! distribution each client draws its value from once, from its own seeded stream.

use super::SystemError;
use crate::sim::{Entity, SeedTree};
use crate::spec::FieldError;
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

impl Dist {
    /// Checks parameters (not files); an error's path is below this value.
    pub fn validate(&self, positive: bool) -> Result<(), FieldError> {
        let check = |path: &str, v: f64| {
            let ok = v.is_finite() && if positive { v > 0.0 } else { v >= 0.0 };
            if ok {
                Ok(())
            } else {
                let what = if positive { "positive" } else { "non-negative" };
                Err(FieldError::new(
                    path.to_string(),
                    format!("must be a {what} number, got {v}"),
                ))
            }
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

    /// One value per client: client `c` draws from `(seeds, Client(c), purpose)`.
    pub fn per_client(
        &self,
        seeds: &SeedTree,
        purpose: &str,
        clients: usize,
    ) -> Result<Vec<f64>, SystemError> {
        let draw = |f: &dyn Fn(&mut rand_chacha::ChaCha20Rng) -> f64| {
            (0..clients)
                .map(|c| f(&mut seeds.rng(Entity::Client(c as u32), purpose, 0)))
                .collect()
        };
        Ok(match self {
            Dist::Constant(v) => vec![*v; clients],
            Dist::Drawn(DrawnDist::Uniform { low, high }) => {
                draw(&|rng| low + (high - low) * rng.gen::<f64>())
            }
            Dist::Drawn(DrawnDist::Lognormal { median, sigma }) => {
                let ln = LogNormal::new(median.ln(), *sigma).expect("checked parameters");
                draw(&|rng| ln.sample(rng))
            }
            Dist::Drawn(DrawnDist::File { path, column }) => {
                crate::io::per_client_column(path, column, clients)?
            }
        })
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
        let a = d.per_client(&seeds, "speed", 50).unwrap();
        assert_eq!(a, d.per_client(&seeds, "speed", 50).unwrap());
        // A client's value does not depend on how many clients there are.
        assert_eq!(a[..10], d.per_client(&seeds, "speed", 10).unwrap()[..]);
        assert!(a.iter().all(|v| *v > 0.0));
        let u = Dist::Drawn(DrawnDist::Uniform {
            low: 2.0,
            high: 3.0,
        });
        assert!(u
            .per_client(&seeds, "x", 20)
            .unwrap()
            .iter()
            .all(|v| (2.0..=3.0).contains(v)));
    }
}
