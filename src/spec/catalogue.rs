//! What every catalogue (algorithms, data sets, models, partitioners) shares in reading and
//! writing its section: the item is named by a tag field (`name:` or `kind:`), the other
//! fields are the item's own settings, read by the item's serde type; errors inside them put
//! their path first (`` `a.b`: message ``), which the scenario turns into a field path.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::{Mapping, Value};

/// Reads an item's settings from its `fields` (a mapping without the tag; `null` reads as an
/// empty mapping). An error names the path inside the section where serde found it.
pub fn read_settings<S: DeserializeOwned>(fields: Value) -> Result<S, String> {
    let fields = match fields {
        Value::Null => Value::Mapping(Mapping::new()),
        other => other,
    };
    serde_path_to_error::deserialize(fields).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // An item within reads its own fields the same way: "`kernel`: …" under `layers[3]`
        // is "`layers[3].kernel`: …".
        let inner = message
            .strip_prefix('`')
            .and_then(|m| m.split_once("`: "))
            .filter(|(inner, _)| {
                inner
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_.[]".contains(c))
            });
        match (path.as_str(), inner) {
            (".", _) => message,
            (_, Some((inner, rest))) => {
                let dot = if inner.starts_with('[') { "" } else { "." };
                format!("`{path}{dot}{inner}`: {rest}")
            }
            _ => format!("`{path}`: {message}"),
        }
    })
}

/// A section's `tag` and the rest of its fields; `example` shows what a section looks like.
pub fn split_tag(section: Value, tag: &str, example: &str) -> Result<(String, Value), String> {
    let Value::Mapping(mut map) = section else {
        return Err(format!("expected a mapping with `{tag}`, e.g. {example}"));
    };
    match map.remove(tag) {
        None => Err(format!("missing field `{tag}`")),
        Some(Value::String(name)) => Ok((name, Value::Mapping(map))),
        Some(other) => Err(format!("`{tag}` must be a string, got {other:?}")),
    }
}

/// The section as the resolved scenario writes it: the tag first, then the settings.
pub fn tagged(tag: &str, name: &str, settings: &impl Serialize) -> Mapping {
    let mut map = Mapping::new();
    map.insert(tag.into(), name.into());
    if let Ok(Value::Mapping(fields)) = serde_yaml::to_value(settings) {
        map.extend(fields);
    }
    map
}

/// `{tag: name}` with an item's `example` settings (a YAML flow mapping), as a scenario's
/// section of that item (flow style).
pub fn example_section(tag: &str, name: &str, example: &str) -> String {
    let mut section = Mapping::new();
    section.insert(tag.into(), name.into());
    if let Ok(Value::Mapping(fields)) = serde_yaml::from_str::<Value>(example) {
        section.extend(fields);
    }
    super::compact(&Value::Mapping(section))
}

/// The message for a name that is not in a catalogue: the known ones, as serde says it.
pub fn unknown(name: &str, known: impl Iterator<Item = &'static str>) -> String {
    let known: Vec<String> = known.map(|k| format!("`{k}`")).collect();
    format!(
        "unknown variant `{name}`, expected one of {}",
        known.join(", ")
    )
}

/// What every item's settings type is, whatever its catalogue: read and written by serde
/// (`deny_unknown_fields`), described by its JSON Schema, compared, and shared across threads.
pub trait ItemSettings:
    Serialize
    + DeserializeOwned
    + schemars::JsonSchema
    + Clone
    + std::fmt::Debug
    + PartialEq
    + Send
    + Sync
    + 'static
{
}

impl<S> ItemSettings for S where
    S: Serialize
        + DeserializeOwned
        + schemars::JsonSchema
        + Clone
        + std::fmt::Debug
        + PartialEq
        + Send
        + Sync
        + 'static
{
}

/// How a registration keeps the JSON Schema of its item's settings (`S::json_schema`).
pub type SchemaOf = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// The schema of a catalogue section: one of its items, each an object with the `tag` field
/// fixed to the item's name, titled by the name and described by its summary. Every item's
/// settings are a struct (a mapping, maybe empty); anything else panics here, which the schema
/// tests reach.
pub fn section_schema(
    tag: &str,
    generator: &mut schemars::SchemaGenerator,
    items: impl Iterator<Item = (&'static str, &'static str, SchemaOf)>,
) -> schemars::Schema {
    use serde_json::{json, Map, Value as Json};
    let variants: Vec<Json> = items
        .map(|(name, summary, schema_of)| {
            let mut item = schema_of(generator).to_value();
            // Settings that wrap another type (`#[serde(transparent)]`) are a reference to it.
            if let Some(Json::String(r)) = item.get("$ref") {
                let name = r.rsplit('/').next().unwrap_or(r);
                item = generator.definitions().get(name).cloned().unwrap_or(item);
            }
            let Json::Object(mut item) = item else {
                panic!("`{name}`: an item's settings are a struct (a mapping)");
            };
            assert_eq!(
                item.get("type"),
                Some(&json!("object")),
                "`{name}`: an item's settings are a struct (a mapping)"
            );
            let mut properties = Map::from_iter([(
                tag.to_string(),
                json!({"const": name, "description": summary}),
            )]);
            if let Some(Json::Object(own)) = item.remove("properties") {
                properties.extend(own);
            }
            let mut required = vec![json!(tag)];
            if let Some(Json::Array(own)) = item.remove("required") {
                required.extend(own);
            }
            let mut out = Map::new();
            out.insert("title".into(), json!(name));
            out.insert("description".into(), json!(summary));
            out.insert("type".into(), json!("object"));
            out.insert("properties".into(), Json::Object(properties));
            out.insert("required".into(), Json::Array(required));
            out.insert("additionalProperties".into(), json!(false));
            Json::Object(out)
        })
        .collect();
    schemars::json_schema!({
        "description": format!("One of the items below, named by `{tag}`."),
        "oneOf": variants,
    })
}

/// The traits a catalogue's section type shares, written once. The type is
/// `$spec { registration, settings: Box<dyn ...> }` with a `parse(name, fields)` constructor
/// and the accessor `$name` of its item's name; its settings trait object has `fields()` and
/// `clone_box()`. The section is written and read as `{$tag: <name>, <settings>...}`; its
/// JSON Schema is one of the items of `$catalogue` (registrations with `$name`, `summary` and
/// `schema`).
macro_rules! section_traits {
    ($spec:ident, $name:ident, $tag:literal, $example:literal, $catalogue:expr) => {
        impl schemars::JsonSchema for $spec {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($spec).into()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                $crate::spec::catalogue::section_schema(
                    $tag,
                    generator,
                    $catalogue.iter().map(|r| (r.$name, r.summary, r.schema)),
                )
            }
        }

        impl Clone for $spec {
            fn clone(&self) -> Self {
                $spec {
                    registration: self.registration,
                    settings: self.settings.clone_box(),
                }
            }
        }

        impl std::fmt::Debug for $spec {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{} {:?}", self.$name(), self.settings)
            }
        }

        impl PartialEq for $spec {
            fn eq(&self, other: &Self) -> bool {
                self.$name() == other.$name() && self.settings.fields() == other.settings.fields()
            }
        }

        impl serde::Serialize for $spec {
            fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
                let section =
                    $crate::spec::catalogue::tagged($tag, self.$name(), &self.settings.fields());
                serde::Serialize::serialize(&section, serializer)
            }
        }

        impl<'de> serde::Deserialize<'de> for $spec {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let section = <serde_yaml::Value as serde::Deserialize>::deserialize(deserializer)?;
                let (name, fields) = $crate::spec::catalogue::split_tag(section, $tag, $example)
                    .map_err(D::Error::custom)?;
                $spec::parse(&name, fields).map_err(D::Error::custom)
            }
        }
    };
}
pub(crate) use section_traits;
