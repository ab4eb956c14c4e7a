//! The server optimizers a `server_optimizer:` section can name (`server_optimizer: {kind:
//! ...}`), one entry each in [`SERVER_OPTIMIZERS`]. An optimizer is its file (its settings
//! type, implementing [`ServerOptimizerSettings`]) plus one entry here.

use super::Moments;
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;

/// The catalogue: every server optimizer a scenario can name, in the order the docs list them.
pub static SERVER_OPTIMIZERS: &[Registration] = &[
    entry::<super::SgdSpec>(
        "sgd",
        "x ← x + η·Δ, Δ the aggregate's change (Reddi et al. 2021's FedAvg with a server rate); \
         at η = 1 the aggregate itself, as without this section.",
    ),
    entry::<super::MomentumSpec>(
        "momentum",
        "FedAvgM (Hsu et al. 2019): m ← β·m + Δ, x ← x + η·m, from m = 0.",
    ),
    entry::<super::AdamSpec>(
        "adam",
        "FedAdam (Reddi et al. 2021, Algorithm 2): m ← β₁m + (1 − β₁)Δ, v ← β₂v + (1 − β₂)Δ², \
         x ← x + η·m / (√v + τ), from m = 0 and v = τ² (no bias correction).",
    ),
    entry::<super::YogiSpec>(
        "yogi",
        "FedYogi (Reddi et al. 2021, Algorithm 2): as `adam`, with v ← v − (1 − β₂)Δ²·sign(v − \
         Δ²).",
    ),
    entry::<super::AdagradSpec>(
        "adagrad",
        "FedAdagrad (Reddi et al. 2021, Algorithm 2): as `adam`, with v ← v + Δ².",
    ),
];

/// A server optimizer's settings, as its `server_optimizer:` section holds them (besides
/// `kind`), and its step.
pub trait ServerOptimizerSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Checks the settings; a path is below `server_optimizer`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// Moves the global vector x (`global`) along the change to the round's `aggregate` x̄
    /// (Δ = x̄ − x), with the `moments` it keeps for this vector, writing the new vector into
    /// `aggregate` (both of one length).
    fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments);
}

catalogue! {
    /// The catalogue of server optimizers.
    pub struct ServerOptimizers {
        tag: "kind",
        example: "{kind: adam, lr: 0.01}",
        schema: "ServerOptimizerSpec",
        declared: (),
        items: SERVER_OPTIMIZERS,
    }
    /// Settings of some registered server optimizer, their type erased.
    erases ServerOptimizerSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments);
    }
    /// `server_optimizer:`: how the server moves the global model along the change its
    /// aggregation makes (the default, without this section, takes the aggregate as it is):
    /// the item of [`SERVER_OPTIMIZERS`] the section names, with its settings.
    section ServerOptimizerSpec;
}

/// The entry of the optimizer whose settings are `S`.
const fn entry<S: ServerOptimizerSettings>(
    kind: &'static str,
    summary: &'static str,
) -> Registration {
    Registration::new::<S>(kind, summary, S::EXAMPLE, (), |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl ServerOptimizerSpec {
    /// Checks the settings; an error's path is below `server_optimizer`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Moves `global` along the change to `aggregate`, writing the new vector into
    /// `aggregate`, with the `moments` kept for this vector
    /// ([`ServerOptimizerSettings::step`]).
    pub fn step(&self, global: &[f32], aggregate: &mut [f32], moments: &mut Moments) {
        assert_eq!(global.len(), aggregate.len(), "a vector and its aggregate");
        self.erased().step(global, aggregate, moments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_optimizer_round_trips() {
        crate::settings::catalogue::check_catalogue::<ServerOptimizers>(|spec| {
            ServerOptimizerSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
