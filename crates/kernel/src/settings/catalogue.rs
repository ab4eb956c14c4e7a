//! What every catalogue (algorithms, data sets, models, partitioners, compressors, robust
//! rules, attacks, mixing rules) shares: its entries ([`Registration`]) and a scenario's section of it ([`Chosen`]),
//! read and written here once.
//! The item is named by a tag field (`name:` or `kind:`), the other fields are the item's own
//! settings, read by the item's serde type; errors inside them put their path first
//! (`` `a.b`: message ``), which the scenario turns into a field path. A catalogue itself
//! (a marker type implementing [`Catalogue`]) lists its items and says what it declares of
//! them; this room holds no item.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_yaml::{Mapping, Value};
use std::any::{Any, TypeId};
use std::fmt;

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

/// The names of catalogue `C`'s items whose declaration `wanted` accepts, in catalogue order and
/// in prose (each in backticks, the last two joined by `joiner`, "or" or "and"): "`a`",
/// "`a` or `b`", "`a`, `b` or `c`". For messages that say which items can do something.
pub fn names_declaring<C: Catalogue>(
    wanted: impl Fn(&C::Declared) -> bool,
    joiner: &str,
) -> String {
    let names = C::items().iter().filter(|r| wanted(&r.declared));
    in_prose(names.map(|r| r.name), joiner)
}

/// `names` in prose, each in backticks, the last two joined by `joiner`.
fn in_prose(names: impl Iterator<Item = &'static str>, joiner: &str) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} {joiner} {last}", rest.join(", ")),
    }
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

/// A catalogue of one concept's items (algorithms, data sets, models, partitioners,
/// compressors, robust rules, attacks, mixing rules), named by a marker type: its items are
/// [`Registration`]s, a scenario's section of it is a [`Chosen`].
/// What differs between catalogues is what each declares of an item beyond its settings
/// ([`Catalogue::Declared`]) and the trait its settings implement ([`Catalogue::Settings`]).
pub trait Catalogue: Sized + 'static {
    /// The field that names an item in a scenario (`name` or `kind`).
    const TAG: &'static str;
    /// A section of this catalogue, for the message when one is not a mapping.
    const EXAMPLE_SECTION: &'static str;
    /// The name of a section's JSON Schema (its Rust type's name, e.g. `DatasetSpec`).
    const SCHEMA_NAME: &'static str;
    /// What the catalogue declares of each item beyond its settings (an algorithm's
    /// capabilities, a model's inputs, where a data set's rows come from).
    type Declared: Sync + 'static;
    /// Some item's settings, their type erased (`dyn` of the catalogue's own settings trait).
    type Settings: ?Sized + ErasedSettings;
    /// Every item, in the order the docs list them.
    fn items() -> &'static [Registration<Self>];
    /// A copy of `settings`.
    fn clone_settings(settings: &Self::Settings) -> Box<Self::Settings>;
}

/// Writes the glue every catalogue shares, once: its marker type and [`Catalogue`] impl, its
/// `Registration` alias, and its `Settings` trait (an item's settings with their type erased),
/// each method of which forwards to the item's own trait `$item`. A catalogue's file then holds
/// only what is its own: its list, what it declares of an item, and its item trait.
///
/// ```text
/// catalogue! {
///     /// The catalogue of compressors.
///     pub struct Compressors {
///         tag: "kind", example: "{kind: top_k, fraction: 0.01}", schema: "CompressorSpec",
///         declared: Declared, items: COMPRESSORS,
///     }
///     /// Settings of some registered compressor, their type erased.
///     erases CompressorSettings {
///         fn validate(&self) -> Result<(), FieldError>;
///         fn bytes(&self, d: usize) -> u64;
///     }
///     /// One compressor, as a scenario's section names it.
///     section CompressorSpec;
/// }
/// ```
///
/// `section` (optional) writes the type of a scenario's section of the catalogue: a newtype of
/// [`Chosen`] local to the catalogue's crate, which that crate can give methods and defaults
/// (Rust lets a crate write `impl` blocks only for its own types), with `of(settings)` (the
/// registered item whose settings those are) and `parse(name, fields)`.
#[macro_export]
macro_rules! catalogue {
    (
        $(#[$doc:meta])*
        $vis:vis struct $cat:ident {
            tag: $tag:literal,
            example: $example:literal,
            schema: $schema:literal,
            declared: $declared:ty,
            items: $items:expr $(,)?
        }
        $(#[$settings_doc:meta])*
        erases $item:ident {
            $( $(#[$method_doc:meta])* fn $method:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $out:ty)?; )*
        }
        $(
            $(#[$section_doc:meta])*
            section $section:ident;
        )?
    ) => {
        $(
            $(#[$section_doc])*
            ///
            /// A [`Chosen`]($crate::settings::catalogue::Chosen) of this catalogue, as a type of
            /// the catalogue's own crate (so that the crate can give it methods); it derefs to
            /// the `Chosen`.
            #[derive(Clone, PartialEq)]
            pub struct $section(pub $crate::settings::catalogue::Chosen<$cat>);

            impl ::std::ops::Deref for $section {
                type Target = $crate::settings::catalogue::Chosen<$cat>;
                fn deref(&self) -> &Self::Target {
                    &self.0
                }
            }

            impl $section {
                /// The item `name` with `fields` (see [`Chosen::parse`](
                /// $crate::settings::catalogue::Chosen::parse)).
                pub fn parse(name: &str, fields: ::serde_yaml::Value) -> Result<Self, String> {
                    $crate::settings::catalogue::Chosen::parse(name, fields).map($section)
                }

                /// The registered item whose settings are `settings`.
                pub fn of<S: $item>(settings: S) -> Self {
                    let boxed: Box<dyn Settings> = Box::new(settings);
                    $section($crate::settings::catalogue::Chosen::of_boxed::<S>(boxed))
                }
            }

            impl ::std::fmt::Debug for $section {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    ::std::fmt::Debug::fmt(&self.0, f)
                }
            }

            impl ::serde::Serialize for $section {
                fn serialize<Z: ::serde::Serializer>(&self, z: Z) -> Result<Z::Ok, Z::Error> {
                    self.0.serialize(z)
                }
            }

            impl<'de> ::serde::Deserialize<'de> for $section {
                fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    $crate::settings::catalogue::Chosen::deserialize(d).map($section)
                }
            }

            impl ::schemars::JsonSchema for $section {
                fn schema_name() -> ::std::borrow::Cow<'static, str> {
                    <$crate::settings::catalogue::Chosen<$cat> as ::schemars::JsonSchema>::schema_name()
                }
                fn json_schema(generator: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                    <$crate::settings::catalogue::Chosen<$cat> as ::schemars::JsonSchema>::json_schema(
                        generator,
                    )
                }
            }
        )?

        $(#[$doc])*
        $vis struct $cat;

        impl $crate::settings::catalogue::Catalogue for $cat {
            const TAG: &'static str = $tag;
            const EXAMPLE_SECTION: &'static str = $example;
            const SCHEMA_NAME: &'static str = $schema;
            type Declared = $declared;
            type Settings = dyn Settings;
            fn items() -> &'static [Registration] {
                $items
            }
            fn clone_settings(settings: &dyn Settings) -> Box<dyn Settings> {
                settings.clone_box()
            }
        }

        /// One entry of the catalogue.
        pub type Registration = $crate::settings::catalogue::Registration<$cat>;

        $(#[$settings_doc])*
        pub trait Settings: $crate::settings::catalogue::ErasedSettings {
            fn clone_box(&self) -> Box<dyn Settings>;
            $( $(#[$method_doc])* fn $method(&self $(, $arg: $ty)*) $(-> $out)?; )*
        }

        impl<S: $item> Settings for S {
            fn clone_box(&self) -> Box<dyn Settings> {
                Box::new(self.clone())
            }
            $( fn $method(&self $(, $arg: $ty)*) $(-> $out)? {
                <S as $item>::$method(self $(, $arg)*)
            } )*
        }
    };
}
pub use crate::catalogue;

/// What every item's settings can do once their type is erased.
pub trait ErasedSettings: fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    /// The settings as a scenario writes them (without the tag).
    fn fields(&self) -> Value;
}

impl<S: ItemSettings> ErasedSettings for S {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn fields(&self) -> Value {
        serde_yaml::to_value(self).unwrap_or(Value::Null)
    }
}

/// One item of catalogue `C`: its name, what it is, and how its settings are read.
pub struct Registration<C: Catalogue> {
    /// The item's name: the value of the catalogue's tag (`name: fedavg`, `kind: mnist`).
    pub name: &'static str,
    pub summary: &'static str,
    /// The smallest valid settings (a YAML flow mapping without the tag), for tests and docs.
    pub example: &'static str,
    /// The JSON Schema of its settings.
    pub schema: SchemaOf,
    /// What the catalogue declares of it ([`Catalogue::Declared`]).
    pub declared: C::Declared,
    parse: fn(Value) -> Result<Box<C::Settings>, String>,
    settings_type: fn() -> TypeId,
}

impl<C: Catalogue> Registration<C> {
    /// The entry of the item whose settings are `S`, read by `parse` (which boxes them as the
    /// catalogue keeps them; only the catalogue can).
    pub const fn new<S: ItemSettings>(
        name: &'static str,
        summary: &'static str,
        example: &'static str,
        declared: C::Declared,
        parse: fn(Value) -> Result<Box<C::Settings>, String>,
    ) -> Self {
        Registration {
            name,
            summary,
            example,
            schema: S::json_schema,
            declared,
            parse,
            settings_type: TypeId::of::<S>,
        }
    }

    /// The item called `name`.
    pub fn find(name: &str) -> Option<&'static Registration<C>> {
        C::items().iter().find(|r| r.name == name)
    }

    /// The item whose settings are of type `S`.
    fn of_type<S: 'static>() -> &'static Registration<C> {
        C::items()
            .iter()
            .find(|r| (r.settings_type)() == TypeId::of::<S>())
            .expect("an item's settings type has its entry in the catalogue")
    }

    /// `{tag: name}` with the example settings, as a scenario's section (flow style).
    pub fn example_section(&self) -> String {
        example_section(C::TAG, self.name, self.example)
    }
}

/// A scenario's section of catalogue `C`: the item it names, with its settings, written and
/// read as `{tag: name, settings...}`.
pub struct Chosen<C: Catalogue> {
    registration: &'static Registration<C>,
    settings: Box<C::Settings>,
}

impl<C: Catalogue> Chosen<C> {
    /// The item `name` with `fields` (a mapping of its settings, without the tag). An unknown
    /// name is an error at the tag (`` `kind`: unknown variant … ``).
    pub fn parse(name: &str, fields: Value) -> Result<Self, String> {
        let registration = Registration::find(name).ok_or_else(|| {
            let known = unknown(name, C::items().iter().map(|r| r.name));
            format!("`{}`: {known}", C::TAG)
        })?;
        Ok(Chosen {
            registration,
            settings: (registration.parse)(fields)?,
        })
    }

    /// The item whose settings are `settings` (`S`), boxed by the catalogue.
    pub fn of_boxed<S: 'static>(settings: Box<C::Settings>) -> Self {
        Chosen {
            registration: Registration::of_type::<S>(),
            settings,
        }
    }

    /// The item's name.
    pub fn name(&self) -> &'static str {
        self.registration.name
    }

    pub fn registration(&self) -> &'static Registration<C> {
        self.registration
    }

    /// What the catalogue declares of the item.
    pub fn declared(&self) -> &'static C::Declared {
        &self.registration.declared
    }

    /// The settings as their own type, where they are of type `S`.
    pub fn settings<S: 'static>(&self) -> Option<&S> {
        self.settings.as_any().downcast_ref()
    }

    /// The settings as the catalogue's trait object.
    pub fn erased(&self) -> &C::Settings {
        &self.settings
    }
}

impl<C: Catalogue> schemars::JsonSchema for Chosen<C> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        C::SCHEMA_NAME.into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        section_schema(
            C::TAG,
            generator,
            C::items().iter().map(|r| (r.name, r.summary, r.schema)),
        )
    }
}

impl<C: Catalogue> Clone for Chosen<C> {
    fn clone(&self) -> Self {
        Chosen {
            registration: self.registration,
            settings: C::clone_settings(&self.settings),
        }
    }
}

impl<C: Catalogue> fmt::Debug for Chosen<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.name(), self.settings)
    }
}

impl<C: Catalogue> PartialEq for Chosen<C> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.settings.fields() == other.settings.fields()
    }
}

impl<C: Catalogue> Serialize for Chosen<C> {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        tagged(C::TAG, self.name(), &self.settings.fields()).serialize(serializer)
    }
}

impl<'de, C: Catalogue> serde::Deserialize<'de> for Chosen<C> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let section = Value::deserialize(deserializer)?;
        let (name, fields) =
            split_tag(section, C::TAG, C::EXAMPLE_SECTION).map_err(D::Error::custom)?;
        Chosen::parse(&name, fields).map_err(D::Error::custom)
    }
}

/// Checks that catalogue `C`'s names are unique and found, and that every item reads its
/// example, writes it back tag first and reads that again, and that the example is `valid`:
/// for each catalogue's unit test, in whichever crate the catalogue lives.
pub fn check_catalogue<C: Catalogue>(valid: impl Fn(&Chosen<C>) -> Result<(), String>) {
    let items = C::items();
    for (i, r) in items.iter().enumerate() {
        assert!(items[..i].iter().all(|o| o.name != r.name), "{}", r.name);
        assert!(std::ptr::eq(Registration::<C>::find(r.name).unwrap(), r));
        let fields: Value = serde_yaml::from_str(r.example).unwrap();
        let spec = Chosen::<C>::parse(r.name, fields).unwrap_or_else(|e| panic!("{}: {e}", r.name));
        let text = serde_yaml::to_string(&spec).unwrap();
        assert!(
            text.starts_with(&format!("{}: {}\n", C::TAG, r.name)),
            "{text}"
        );
        let back: Chosen<C> = serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, spec);
        valid(&spec).unwrap_or_else(|e| panic!("{}: example invalid: {e}", r.name));
    }
}
