//! The partitioners a data set can deal its pool with (`partition: {kind: ...}`), one entry
//! each in [`PARTITIONS`]. A partitioner is its file (its settings type, implementing
//! [`PartitionSettings`]) plus one entry here.

use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;

/// The catalogue: every partitioner a scenario can name, in the order the docs list them.
pub static PARTITIONS: &[Registration] = &[
    entry::<super::NaturalSpec>("natural", "the data's own clients (FEMNIST's writers)"),
    entry::<super::IidSpec>("iid", "shuffled rows in equal parts"),
    entry::<super::DirichletSpec>(
        "dirichlet",
        "each label's rows in Dir(α) proportions (FedEM's split_dataset_by_labels)",
    ),
    entry::<super::ShardsSpec>(
        "shards",
        "label-sorted shards, a few per client (McMahan et al.'s pathological split)",
    ),
    entry::<super::PfedmeSpec>(
        "pfedme",
        "client u holds labels u, u + 1, … (pFedMe's MNIST split)",
    ),
    entry::<super::QuantitySkewSpec>(
        "quantity_skew",
        "shuffled rows, clients' shares of them drawn from Dir(α) (quantity skew)",
    ),
    entry::<super::PachinkoSpec>(
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

catalogue! {
    /// The catalogue of partitioners.
    pub struct Partitions {
        tag: "kind",
        example: "{kind: dirichlet, clients: 100, alpha: 0.5}",
        schema: "PartitionSpec",
        declared: (),
        items: PARTITIONS,
    }
    /// Settings of some registered partitioner, their type erased.
    erases PartitionSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn clients(&self) -> Option<usize>;
        fn keeps_own_clients(&self) -> Option<f64>;
        fn assign(&self, labels: &[i64], classes: usize, rng: &mut ChaCha20Rng) -> Result<Vec<Vec<usize>>, String>;
    }
    /// How rows are dealt to clients (`data.partition` in a scenario).
    section PartitionSpec;
}

/// The entry of the partitioner whose settings are `S`.
const fn entry<S: PartitionSettings>(kind: &'static str, summary: &'static str) -> Registration {
    Registration::new::<S>(kind, summary, S::EXAMPLE, (), |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl PartitionSpec {
    pub fn kind(&self) -> &'static str {
        self.name()
    }

    /// The fraction of the data's own clients kept, for a partitioner that keeps them
    /// (`natural`); `None` for one that deals a pool.
    pub fn natural_fraction(&self) -> Option<f64> {
        self.erased().keeps_own_clients()
    }

    /// Checks the parameters; an error's path is below `partition`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// The number of clients, when the partition fixes it.
    pub fn clients(&self) -> Option<usize> {
        self.erased().clients()
    }

    /// Deals `labels` (one per row of the pool) to clients: each client's rows, in the order
    /// the partition dealt them. Fails when the pool cannot give every client a row.
    pub fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let clients = self.erased().assign(labels, classes, rng)?;
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
                .erased()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partitioner_round_trips() {
        crate::settings::catalogue::check_catalogue::<Partitions>(|spec| {
            PartitionSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
