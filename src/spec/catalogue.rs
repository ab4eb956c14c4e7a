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
        if path == "." {
            message
        } else {
            format!("`{path}`: {message}")
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

/// The message for a name that is not in a catalogue: the known ones, as serde says it.
pub fn unknown(name: &str, known: impl Iterator<Item = &'static str>) -> String {
    let known: Vec<String> = known.map(|k| format!("`{k}`")).collect();
    format!(
        "unknown variant `{name}`, expected one of {}",
        known.join(", ")
    )
}

/// The traits a catalogue's section type shares, written once. The type is
/// `$spec { registration, settings: Box<dyn ...> }` with a `parse(name, fields)` constructor
/// and the accessor `$name` of its item's name; its settings trait object has `fields()` and
/// `clone_box()`. The section is written and read as `{$tag: <name>, <settings>...}`.
macro_rules! section_traits {
    ($spec:ident, $name:ident, $tag:literal, $example:literal) => {
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
