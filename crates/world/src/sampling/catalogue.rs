//! The sampling strategies a `sampling:` section can name (`strategy: ...`), one entry each in
//! [`STRATEGIES`]. A strategy is its file (its settings type, implementing
//! [`StrategySettings`], and its draw) plus one entry here. Unlike the other catalogues, a
//! strategy's settings sit beside the section's own fields (`sampling: {fraction: 0.1,
//! strategy: power_of_choice, candidates: 20}`), and `strategy` may be left out (`uniform`).

use super::{Candidates, Feedback};
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;

/// The catalogue: every sampling strategy a scenario can name, in the order the docs list them.
pub static STRATEGIES: &[Registration] = &[
    entry::<super::UniformSpec>("uniform", "K without replacement"),
    entry::<super::WeightedSpec>("weighted", "by training-set size n_t"),
    entry::<super::PoissonSpec>(
        "poisson",
        "each client independently with probability `fraction`",
    ),
    entry::<super::PowerOfChoiceSpec>(
        "power_of_choice",
        "the K of `candidates` drawn by n_t with the highest loss last reported",
    ),
    entry::<super::OortSpec>(
        "oort",
        "by reported utility and speed, exploring clients not heard from yet",
    ),
];

/// One draw's question: choose `count` of the `candidates` (sorted by id) for round `round`.
pub struct Draw<'a> {
    pub candidates: &'a dyn Candidates,
    pub count: usize,
    /// n_t, for the strategies that draw by size.
    pub weight: &'a dyn Fn(u32) -> f64,
    /// What the loss-guided strategies read.
    pub feedback: &'a Feedback,
    pub round: u32,
    /// `sampling.replacement` (only where the strategy declares it).
    pub replacement: bool,
    /// `sampling.fraction`, where the section gives one.
    pub fraction: Option<f64>,
}

/// A sampling strategy's settings, as its section holds them (besides `strategy` and the
/// section's own fields), what it declares, and its draw.
pub trait StrategySettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `strategy`).
    const EXAMPLE: &'static str = "{}";
    /// The draw reads what clients reported with their updates ([`Feedback`]), so clients
    /// measure their loss when they train.
    const USES_FEEDBACK: bool = false;
    /// It takes `sampling.replacement: true`.
    const WITH_REPLACEMENT: bool = false;
    /// Each client joins independently with probability `fraction`: there is no round size
    /// K (no `count`, no over-selection), and a round may have no client.
    const INDEPENDENT: bool = false;
    /// Every candidate has the same chance, whatever the data (what privacy's accountants
    /// assume).
    const SAME_CHANCE: bool = false;
    /// It can choose clients for free slots one by one (FedBuff's `concurrency`).
    const FILLS_SLOTS: bool = false;

    /// Checks the settings; a path is below `sampling`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// The chosen clients, in any order (the section sorts them and drops duplicates).
    /// Strategies that are not [`StrategySettings::INDEPENDENT`] are asked only for
    /// 0 < `count` < the number of candidates (or with replacement).
    fn draw(&self, draw: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32>;
}

catalogue! {
    /// The catalogue of sampling strategies.
    pub struct Strategies {
        tag: "strategy",
        example: "{fraction: 0.1, strategy: uniform}",
        schema: "Strategy",
        declared: Declared,
        items: STRATEGIES,
    }
    /// Settings of some registered strategy, their type erased.
    erases StrategySettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn draw(&self, draw: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32>;
    }
    /// A section's strategy: the item of [`STRATEGIES`] it names, with its settings.
    section StrategySpec;
}

/// What the catalogue declares of a strategy (its [`StrategySettings`] constants).
pub struct Declared {
    pub uses_feedback: bool,
    pub with_replacement: bool,
    pub independent: bool,
    pub same_chance: bool,
    pub fills_slots: bool,
}

/// The entry of the strategy whose settings are `S`.
const fn entry<S: StrategySettings>(name: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        uses_feedback: S::USES_FEEDBACK,
        with_replacement: S::WITH_REPLACEMENT,
        independent: S::INDEPENDENT,
        same_chance: S::SAME_CHANCE,
        fills_slots: S::FILLS_SLOTS,
    };
    Registration::new::<S>(name, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl StrategySpec {
    /// Checks the settings; an error's path is below `sampling`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Whether clients report the loss of the model they start from (the draw reads it).
    pub fn uses_feedback(&self) -> bool {
        self.declared().uses_feedback
    }

    pub(super) fn draw(&self, draw: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        self.erased().draw(draw, rng)
    }
}

impl Default for StrategySpec {
    fn default() -> Self {
        StrategySpec::of(super::UniformSpec {})
    }
}

/// The strategies declaring what `wanted` accepts, as a message names them:
/// "`strategy: a`", "`strategy: a` or `strategy: b`".
pub fn strategies_declaring(wanted: impl Fn(&Declared) -> bool) -> String {
    let names: Vec<String> = STRATEGIES
        .iter()
        .filter(|r| wanted(&r.declared))
        .map(|r| format!("`strategy: {}`", r.name))
        .collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}
