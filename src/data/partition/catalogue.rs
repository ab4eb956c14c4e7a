//! The partitioners a data set can deal its pool with (`partition: {kind: ...}`), one entry
//! each in [`PARTITIONS`]. A partitioner is its file (its settings type, implementing
//! [`PartitionSettings`]) plus one entry here.

use crate::spec::catalogue::{read_settings, unknown, ItemSettings, SchemaOf};
use crate::spec::FieldError;
use rand_chacha::ChaCha20Rng;
use serde_yaml::Value;
use std::any::{Any, TypeId};
use std::fmt;

/// The catalogue: every partitioner a scenario can name, in the order the docs list them.
pub static PARTITIONS: &[Registration] = &[
    Registration::of::<super::NaturalSpec>("natural", "the data's own clients (FEMNIST's writers)"),
    Registration::of::<super::IidSpec>("iid", "shuffled rows in equal parts"),
    Registration::of::<super::DirichletSpec>(
        "dirichlet",
        "each label's rows in Dir(α) proportions (FedEM's split_dataset_by_labels)",
    ),
    Registration::of::<super::ShardsSpec>(
        "shards",
        "label-sorted shards, a few per client (McMahan et al.'s pathological split)",
    ),
    Registration::of::<super::PfedmeSpec>(
        "pfedme",
        "client u holds labels u, u + 1, … (pFedMe's MNIST split)",
    ),
    Registration::of::<super::QuantitySkewSpec>(
        "quantity_skew",
        "shuffled rows, clients' shares of them drawn from Dir(α) (quantity skew)",
    ),
    Registration::of::<super::PachinkoSpec>(
        "pachinko",
        "Pachinko allocation over coarse and fine labels (CIFAR-100 in FedEM)",
    ),
];

/// A partitioner's settings, as its `partition:` section holds them (besides `kind`).
pub trait PartitionSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Checks the settings; a path is below `partition`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// The number of clients, when the partition fixes it.
    fn clients(&self) -> Option<usize> {
        None
    }

    /// For a partitioner that keeps the data's own clients instead of dealing a pool: the
    /// fraction of them kept. `None` (the default) for one that deals a pool.
    fn keeps_own_clients(&self) -> Option<f64> {
        None
    }

    /// Deals `labels` (one per row of the pool, `classes` of them) to clients: each client's
    /// rows, in the order dealt; every draw from `rng`.
    fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String>;
}

/// One entry of the catalogue.
pub struct Registration {
    pub kind: &'static str,
    pub summary: &'static str,
    /// The smallest valid settings ([`PartitionSettings::EXAMPLE`]).
    pub example: &'static str,
    /// The JSON Schema of its settings.
    pub schema: SchemaOf,
    parse: fn(Value) -> Result<Box<dyn Settings>, String>,
    settings_type: fn() -> TypeId,
}

impl Registration {
    pub const fn of<S: PartitionSettings>(kind: &'static str, summary: &'static str) -> Self {
        Registration {
            kind,
            summary,
            example: S::EXAMPLE,
            schema: S::json_schema,
            parse: |fields| Ok(Box::new(read_settings::<S>(fields)?)),
            settings_type: TypeId::of::<S>,
        }
    }

    /// The registered partitioner called `kind`.
    pub fn find(kind: &str) -> Option<&'static Registration> {
        PARTITIONS.iter().find(|r| r.kind == kind)
    }

    /// `{kind: …}` with the example settings, as a `partition:` section (flow style).
    pub fn example_section(&self) -> String {
        crate::spec::catalogue::example_section("kind", self.kind, self.example)
    }
}

/// Settings of some registered partitioner, their type erased.
trait Settings: fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn fields(&self) -> Value;
    fn clone_box(&self) -> Box<dyn Settings>;
    fn validate(&self) -> Result<(), FieldError>;
    fn clients(&self) -> Option<usize>;
    fn keeps_own_clients(&self) -> Option<f64>;
    fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String>;
}

impl<S: PartitionSettings> Settings for S {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn fields(&self) -> Value {
        serde_yaml::to_value(self).unwrap_or(Value::Null)
    }
    fn clone_box(&self) -> Box<dyn Settings> {
        Box::new(self.clone())
    }
    fn validate(&self) -> Result<(), FieldError> {
        PartitionSettings::validate(self)
    }
    fn clients(&self) -> Option<usize> {
        PartitionSettings::clients(self)
    }
    fn keeps_own_clients(&self) -> Option<f64> {
        PartitionSettings::keeps_own_clients(self)
    }
    fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        PartitionSettings::assign(self, labels, classes, rng)
    }
}

/// How rows are dealt to clients (`data.partition` in a scenario).
pub struct PartitionSpec {
    registration: &'static Registration,
    settings: Box<dyn Settings>,
}

impl PartitionSpec {
    /// The partitioner `kind` with `fields` (its settings, without `kind`).
    pub fn parse(kind: &str, fields: Value) -> Result<PartitionSpec, String> {
        let registration = Registration::find(kind)
            .ok_or_else(|| unknown(kind, PARTITIONS.iter().map(|r| r.kind)))?;
        Ok(PartitionSpec {
            registration,
            settings: (registration.parse)(fields)?,
        })
    }

    /// The registered partitioner whose settings are `settings`.
    pub fn of<S: PartitionSettings>(settings: S) -> PartitionSpec {
        let registration = PARTITIONS
            .iter()
            .find(|r| (r.settings_type)() == TypeId::of::<S>())
            .expect("a partitioner's settings type has its entry in the catalogue");
        PartitionSpec {
            registration,
            settings: Box::new(settings),
        }
    }

    pub fn kind(&self) -> &'static str {
        self.registration.kind
    }

    /// The settings as their own type, where they are of type `S`.
    pub fn settings<S: PartitionSettings>(&self) -> Option<&S> {
        self.settings.as_any().downcast_ref()
    }

    /// The fraction of the data's own clients kept, for a partitioner that keeps them
    /// (`natural`); `None` for one that deals a pool.
    pub fn natural_fraction(&self) -> Option<f64> {
        self.settings.keeps_own_clients()
    }

    /// Checks the parameters; an error's path is below `partition`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.settings.validate()
    }

    /// The number of clients, when the partition fixes it.
    pub fn clients(&self) -> Option<usize> {
        self.settings.clients()
    }

    /// Deals `labels` (one per row of the pool) to clients: each client's rows, in the order
    /// the partition dealt them. Fails when the pool cannot give every client a row.
    pub fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let clients = self.settings.assign(labels, classes, rng)?;
        every_client_has_rows(clients, labels.len())
    }

    /// Deals each group of the pool's rows (`groups[g]`: row numbers into `labels`) on its own
    /// draws (`rng_of(g)`), and gives each client its rows of every group, group after group.
    /// One group of rows 0..n on `rng_of(0)` deals exactly as [`PartitionSpec::assign`].
    pub fn assign_groups(
        &self,
        labels: &[i64],
        groups: &[Vec<usize>],
        classes: usize,
        rng_of: impl Fn(usize) -> ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let mut clients: Vec<Vec<usize>> = Vec::new();
        for (g, rows) in groups.iter().enumerate() {
            let group_labels: Vec<i64> = rows.iter().map(|&r| labels[r]).collect();
            let dealt = self
                .settings
                .assign(&group_labels, classes, &mut rng_of(g))?;
            clients.resize(dealt.len().max(clients.len()), Vec::new());
            for (c, members) in dealt.into_iter().enumerate() {
                clients[c].extend(members.into_iter().map(|i| rows[i]));
            }
        }
        every_client_has_rows(clients, groups.iter().map(Vec::len).sum())
    }
}

/// `clients`, unless one of them got no rows (of `rows` dealt).
fn every_client_has_rows(clients: Vec<Vec<usize>>, rows: usize) -> Result<Vec<Vec<usize>>, String> {
    if let Some(c) = clients.iter().position(Vec::is_empty) {
        return Err(format!(
            "client {c} got no rows ({rows} rows for {} clients); use fewer clients, more data \
             or a larger alpha",
            clients.len()
        ));
    }
    Ok(clients)
}

crate::spec::catalogue::section_traits!(
    PartitionSpec,
    kind,
    "kind",
    "{kind: dirichlet, clients: 100, alpha: 0.5}",
    PARTITIONS
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partitioner_round_trips() {
        for (i, r) in PARTITIONS.iter().enumerate() {
            assert!(
                PARTITIONS[..i].iter().all(|o| o.kind != r.kind),
                "{}",
                r.kind
            );
            let fields: Value = serde_yaml::from_str(r.example).unwrap();
            let spec = PartitionSpec::parse(r.kind, fields).unwrap();
            let text = serde_yaml::to_string(&spec).unwrap();
            assert!(text.starts_with(&format!("kind: {}\n", r.kind)), "{text}");
            let back: PartitionSpec = serde_yaml::from_str(&text).unwrap();
            assert_eq!(back, spec);
            spec.validate().unwrap();
        }
    }
}
