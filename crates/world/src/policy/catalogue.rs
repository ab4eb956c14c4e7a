//! The round policies a `policy:` section can name (`kind: ...`), one entry each in
//! [`POLICIES`]. A policy is its settings file here, its behaviour in the server
//! (`actors::server`), and one entry below.

use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;

/// The catalogue: every round policy a scenario can name, in the order the docs list them.
pub static POLICIES: &[Registration] = &[
    entry::<super::SynchronousSpec>(
        "synchronous",
        "Rounds one after the other. A round ends when every selected client has reported (its \
         update, or its dropout), when the first K updates are in (with \
         `sampling.over_selection`), or at the deadline, whichever comes first.",
    ),
    entry::<super::FedbuffSpec>(
        "fedbuff",
        "Asynchronous buffered aggregation (FedBuff, Nguyen et al. 2022): up to `concurrency` \
         clients train at any time, each starting as soon as a slot is free and it is online; \
         the server aggregates every `buffer_size` arrivals (one \"round\" per aggregation).",
    ),
];

/// A round policy's settings, as its section holds them (besides `kind`), and what it
/// declares.
pub trait PolicySettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Whether rounds run in step: a round draws its clients (`sampling:`) and closes before
    /// the next starts. Otherwise clients start whenever a slot is free.
    const ROUNDS_IN_STEP: bool;

    /// Checks the settings; a path is below `policy`.
    fn validate(&self) -> Result<(), FieldError>;

    /// Whether the policy hands the algorithm stale updates (trained from an older model).
    fn needs_stale_updates(&self) -> bool;
}

catalogue! {
    /// The catalogue of round policies.
    pub struct Policies {
        tag: "kind",
        example: "{kind: synchronous, deadline_s: 30}",
        schema: "PolicySpec",
        declared: Declared,
        items: POLICIES,
    }
    /// Settings of some registered round policy, their type erased.
    erases PolicySettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn needs_stale_updates(&self) -> bool;
    }
    /// A scenario's round policy: the item of [`POLICIES`] its `policy:` section names, with its
    /// settings.
    section PolicySpec;
}

/// What the catalogue declares of a round policy.
pub struct Declared {
    /// [`PolicySettings::ROUNDS_IN_STEP`].
    pub rounds_in_step: bool,
}

/// The entry of the policy whose settings are `S`.
const fn entry<S: PolicySettings>(kind: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        rounds_in_step: S::ROUNDS_IN_STEP,
    };
    Registration::new::<S>(kind, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl PolicySpec {
    /// Checks the settings; an error's path is below `policy`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Whether the policy hands the algorithm stale updates.
    pub fn needs_stale_updates(&self) -> bool {
        self.erased().needs_stale_updates()
    }
}

impl Default for PolicySpec {
    /// Synchronous rounds without a deadline, stragglers dropped.
    fn default() -> Self {
        PolicySpec::of(super::SynchronousSpec::default())
    }
}
