//! `sampling:`: which clients a round selects, and how many: the section as written
//! ([`RawSampling`]), the selection it resolves to ([`Sampling`]) and its draw
//! ([`Sampling::select`]), with the strategies as a catalogue ([`STRATEGIES`], one file each)
//! that declare what they need (clients' reported losses, a round size, equal chances).
//!
//! A draw reads only its candidates, the clients' sizes, what the server has heard
//! ([`Feedback`]) and the stream it is given. This room must not read the data, the clock or
//! another section, nor keep state between draws.

mod candidates;
mod catalogue;
mod feedback;
mod oort;
mod poisson;
mod power_of_choice;
mod uniform;
mod weighted;

pub use candidates::{AllBut, Candidates};
pub use catalogue::{
    strategies_declaring, Declared, Draw, Registration, Strategies, StrategySettings, StrategySpec,
    STRATEGIES,
};
pub use feedback::{Feedback, Heard, ReportedLoss};
pub use oort::{Oort, OortSpec};
pub use poisson::PoissonSpec;
pub use power_of_choice::PowerOfChoiceSpec;
pub use uniform::UniformSpec;
pub use weighted::WeightedSpec;

use crate::settings::catalogue::{read_settings, Catalogue};
use crate::settings::{EvalClients, EvaluationPlan, FieldError};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use serde_yaml::{Mapping, Value};

/// How many clients a round wants (K).
#[derive(Clone, Debug, PartialEq)]
pub enum SampleSize {
    /// `max(1, ⌊fraction · T⌋)` of the T training clients, with `fraction` in (0, 1].
    Fraction(f64),
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
}

/// A round's client selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    pub size: SampleSize,
    pub strategy: StrategySpec,
    /// Weighted draws with replacement (duplicates train once, so a round may have fewer
    /// than K distinct clients).
    pub replacement: bool,
    /// Draw only among clients online at selection time.
    pub available_only: bool,
    /// Over-selection o: select ⌈(1 + o)·K⌉ and aggregate the first K updates to arrive.
    pub over_selection: f64,
}

impl Sampling {
    /// Uniform selection of a fraction of the clients: the default.
    pub fn uniform(size: SampleSize) -> Sampling {
        Sampling {
            size,
            strategy: StrategySpec::default(),
            replacement: false,
            available_only: false,
            over_selection: 0.0,
        }
    }

    /// The same selection with `strategy`.
    pub fn with(self, strategy: impl StrategySettings) -> Sampling {
        Sampling {
            strategy: StrategySpec::of(strategy),
            ..self
        }
    }

    /// K, the clients a round wants out of `total` training clients.
    pub fn per_round(&self, total: usize) -> usize {
        match self.size {
            SampleSize::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
            SampleSize::Count(k) => k.clamp(1, total),
        }
    }

    /// Under Poisson participation, each client's chance of joining a round: `fraction`.
    pub fn poisson_rate(&self) -> Option<f64> {
        match (self.strategy.declared().independent, &self.size) {
            (true, SampleSize::Fraction(q)) => Some(*q),
            _ => None,
        }
    }

    /// How many clients to select out of `total`: K, or ⌈(1 + o)·K⌉ with over-selection.
    pub fn to_select(&self, total: usize) -> usize {
        let k = self.per_round(total);
        ((k as f64 * (1.0 + self.over_selection)).ceil() as usize).clamp(k, total)
    }

    /// `count` of the `candidates` (or all of them, if there are no more), sorted by id, for
    /// round `round`, as the strategy draws them. `weight` gives n_t for the strategies that
    /// draw by size; `feedback` is what the loss-guided ones read.
    pub fn select(
        &self,
        candidates: &(impl Candidates + ?Sized),
        count: usize,
        weight: impl Fn(u32) -> f64,
        (feedback, round): (&Feedback, u32),
        rng: &mut ChaCha20Rng,
    ) -> Vec<u32> {
        let fraction = match self.size {
            SampleSize::Fraction(f) => Some(f),
            SampleSize::Count(_) => None,
        };
        let draw = Draw {
            candidates: &candidates::View(candidates),
            count,
            weight: &weight,
            feedback,
            round,
            replacement: self.replacement,
            fraction,
        };
        if self.strategy.declared().independent {
            return self.strategy.draw(&draw, rng);
        }
        let n = candidates.len();
        if count == 0 || n == 0 {
            return Vec::new();
        }
        let mut chosen = if count >= n && !self.replacement {
            candidates.to_vec()
        } else {
            self.strategy.draw(&draw, rng)
        };
        chosen.sort_unstable();
        chosen.dedup();
        chosen
    }
}

/// The section's own fields, beside `strategy` and the strategy's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct OwnFields {
    /// The fraction of the training clients a round selects, in (0, 1] (give this or
    /// `count`; all clients when neither is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fraction: Option<f64>,
    /// The number of clients a round selects, K (give this or `fraction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<usize>,
    /// Weighted draws with replacement (duplicates train once).
    #[serde(default)]
    replacement: bool,
    /// Draw only among clients online at selection time.
    #[serde(default)]
    available_only: bool,
    /// Select ⌈(1 + o)·K⌉ clients and aggregate the first K updates to arrive.
    #[serde(default)]
    over_selection: f64,
}

const OWN_FIELDS: [&str; 5] = [
    "fraction",
    "count",
    "replacement",
    "available_only",
    "over_selection",
];

/// Clients per round: a fraction of the training clients or a count (K), and how they are
/// drawn: `strategy` (an item of [`STRATEGIES`]) with its settings beside the section's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSampling {
    pub fraction: Option<f64>,
    pub count: Option<usize>,
    pub strategy: StrategySpec,
    pub replacement: bool,
    pub available_only: bool,
    pub over_selection: f64,
}

impl RawSampling {
    /// The selection these settings ask for; an error's path is below `sampling`.
    pub fn resolve(&self) -> Result<Sampling, FieldError> {
        let s = self;
        let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
        let size = match (s.fraction, s.count) {
            (Some(_), Some(_)) => {
                return bad(
                    "fraction",
                    "give either `fraction` or `count`, not both".into(),
                )
            }
            (Some(f), None) if !(f > 0.0 && f <= 1.0) => {
                return bad("fraction", format!("must be in (0, 1], got {f}"))
            }
            (Some(f), None) => SampleSize::Fraction(f),
            (None, Some(0)) => return bad("count", "must be at least 1".into()),
            (None, Some(k)) => SampleSize::Count(k),
            (None, None) => SampleSize::Fraction(1.0),
        };
        let declared = s.strategy.declared();
        let name = s.strategy.name();
        if s.replacement && !declared.with_replacement {
            let takers = strategies_declaring(|d| d.with_replacement);
            return bad("replacement", format!("applies to {takers} only"));
        }
        if declared.independent {
            if s.count.is_some() {
                return bad(
                    "count",
                    format!(
                        "`strategy: {name}` takes `fraction` (each client's chance of joining \
                         a round), not a count"
                    ),
                );
            }
            if s.over_selection > 0.0 {
                return bad(
                    "over_selection",
                    format!("`strategy: {name}` has no round size K to over-select; use 0"),
                );
            }
        }
        s.strategy.validate()?;
        FieldError::non_negative("over_selection", s.over_selection)?;
        Ok(Sampling {
            size,
            strategy: s.strategy.clone(),
            replacement: s.replacement,
            available_only: s.available_only,
            over_selection: s.over_selection,
        })
    }

    /// The section's own fields.
    fn own(&self) -> OwnFields {
        OwnFields {
            fraction: self.fraction,
            count: self.count,
            replacement: self.replacement,
            available_only: self.available_only,
            over_selection: self.over_selection,
        }
    }

    /// The section read from its mapping: the own fields, `strategy` (`uniform` when left
    /// out) and the rest as the strategy's settings. A field of another strategy is named as
    /// such.
    fn read(section: Value) -> Result<RawSampling, String> {
        let section = match section {
            Value::Null => Mapping::new(),
            Value::Mapping(map) => map,
            _ => {
                return Err(format!(
                    "expected a mapping, e.g. {}",
                    Strategies::EXAMPLE_SECTION
                ))
            }
        };
        let mut own = Mapping::new();
        let mut rest = Mapping::new();
        let mut name = "uniform".to_string();
        for (key, value) in section {
            match key.as_str() {
                Some("strategy") => match value {
                    Value::String(s) => name = s,
                    other => {
                        let got = serde_yaml::to_string(&other).unwrap_or_default();
                        return Err(format!(
                            "`strategy`: must be a name, one of {}; got {}",
                            names(STRATEGIES.iter().map(|r| r.name)),
                            got.trim_end()
                        ));
                    }
                },
                Some(k) if OWN_FIELDS.contains(&k) => {
                    own.insert(key, value);
                }
                _ => {
                    rest.insert(key, value);
                }
            }
        }
        let own: OwnFields = read_settings(Value::Mapping(own))?;
        if let Some(registration) = Registration::find(&name) {
            let mine = fields_of(registration);
            for key in rest.keys() {
                // A key that is not a string (`1: x`) is named as written.
                let written = serde_yaml::to_string(key).unwrap_or_default();
                let key = key.as_str().unwrap_or(written.trim_end());
                if mine.iter().any(|f| f == key) {
                    continue;
                }
                let owners: Vec<&str> = STRATEGIES
                    .iter()
                    .filter(|r| fields_of(r).iter().any(|f| f == key))
                    .map(|r| r.name)
                    .collect();
                return Err(match owners.as_slice() {
                    [] => {
                        // As serde lists a struct's fields: `strategy` after `count`.
                        let (size, rest) = OWN_FIELDS.split_at(2);
                        let all: Vec<String> = (size.iter().chain(["strategy"].iter()))
                            .chain(rest)
                            .map(|f| f.to_string())
                            .chain(STRATEGIES.iter().flat_map(fields_of))
                            .collect();
                        format!(
                            "unknown field `{key}`, expected one of {}",
                            names(all.iter().map(String::as_str))
                        )
                    }
                    owners => format!(
                        "`{key}`: applies to {} only",
                        owners
                            .iter()
                            .map(|o| format!("`strategy: {o}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                });
            }
        }
        let strategy = StrategySpec::parse(&name, Value::Mapping(rest))?;
        Ok(RawSampling {
            fraction: own.fraction,
            count: own.count,
            strategy,
            replacement: own.replacement,
            available_only: own.available_only,
            over_selection: own.over_selection,
        })
    }
}

/// `a`, `b`, … in backticks, comma-separated (serde's way of listing what is expected).
fn names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fields a strategy's settings hold, from their schema.
fn fields_of(registration: &Registration) -> Vec<String> {
    let mut generator = schemars::SchemaGenerator::default();
    let schema = (registration.schema)(&mut generator).to_value();
    schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

impl Serialize for RawSampling {
    /// The own fields in their order, `strategy` after `count`, the strategy's settings last:
    /// `{fraction: 0.1, strategy: power_of_choice, replacement: false, available_only: false,
    /// over_selection: 0.0, candidates: 20}`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let own = match serde_yaml::to_value(self.own()) {
            Ok(Value::Mapping(own)) => own,
            Ok(_) => Mapping::new(),
            Err(e) => return Err(S::Error::custom(e)),
        };
        let mut out = Mapping::new();
        for (key, value) in own {
            if key.as_str() == Some("replacement") {
                out.insert("strategy".into(), self.strategy.name().into());
            }
            out.insert(key, value);
        }
        if let Ok(Value::Mapping(fields)) = serde_yaml::to_value(&self.strategy) {
            out.extend(
                fields
                    .into_iter()
                    .filter(|(k, _)| k.as_str() != Some("strategy")),
            );
        }
        out.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawSampling {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        RawSampling::read(Value::deserialize(deserializer)?).map_err(D::Error::custom)
    }
}

impl schemars::JsonSchema for RawSampling {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RawSampling".into()
    }

    /// The own fields, `strategy` (one of the catalogue's names) and every strategy's settings,
    /// each described as the setting of its strategy.
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use serde_json::{json, Map, Value as Json};
        let mut schema = OwnFields::json_schema(generator).to_value();
        let own = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut properties = Map::new();
        for (key, value) in own {
            if key == "replacement" {
                let described: Vec<String> = STRATEGIES
                    .iter()
                    .map(|r| format!("`{}` ({})", r.name, r.summary))
                    .collect();
                let (last, rest) = described.split_last().expect("strategies");
                properties.insert(
                    "strategy".into(),
                    json!({
                        "description": format!("{} or {last}.", rest.join(", ")),
                        "oneOf": STRATEGIES
                            .iter()
                            .map(|r| json!({"type": "string", "const": r.name, "description": r.summary}))
                            .collect::<Vec<_>>(),
                        "default": "uniform",
                    }),
                );
            }
            properties.insert(key, value);
        }
        for r in STRATEGIES {
            let item = (r.schema)(generator).to_value();
            if let Some(Json::Object(fields)) = item.get("properties") {
                for (key, mut value) in fields.clone() {
                    if let Some(Json::String(d)) = value.get("description").cloned() {
                        value["description"] = json!(format!("(`strategy: {}`) {d}", r.name));
                    }
                    properties.insert(key, value);
                }
            }
        }
        if let Json::Object(map) = &mut schema {
            map.insert("properties".into(), Json::Object(properties));
            map.insert(
                "description".into(),
                json!(
                    "Clients per round: a fraction of the training clients or a count (K), \
                       and how they are drawn."
                ),
            );
        }
        schemars::Schema::try_from(schema).expect("an object schema")
    }
}

/// Whether `clients` clients can hold out `⌊unseen_fraction · clients⌋` and still give
/// `sampling` its clients.
pub fn check_client_counts(
    clients: usize,
    unseen_fraction: f64,
    sampling: &Sampling,
    evaluation: &EvaluationPlan,
) -> Result<(), FieldError> {
    if let EvalClients::Count(k) = evaluation.clients {
        if k > clients {
            return Err(FieldError::new(
                "evaluation.clients".into(),
                format!("must be at most the number of clients ({clients}), got {k}"),
            ));
        }
    }
    let held_out = (unseen_fraction * clients as f64).floor() as usize;
    if unseen_fraction > 0.0 && (held_out == 0 || held_out >= clients) {
        return Err(FieldError::new(
            "unseen.fraction".into(),
            format!(
                "{unseen_fraction} holds out {held_out} of {clients} clients; it must leave at \
                 least one client on each side"
            ),
        ));
    }
    if let SampleSize::Count(k) = sampling.size {
        if k > clients - held_out {
            return Err(FieldError::new(
                "sampling.count".into(),
                format!(
                    "must be at most the number of training clients ({}), got {k}",
                    clients - held_out
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
