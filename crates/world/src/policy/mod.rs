//! `policy:`: when the server aggregates and what it does with late updates, one item of the
//! round-policy catalogue ([`POLICIES`], tag `kind`), each declaring what it needs of the
//! algorithm and of the other sections (stale updates, rounds in step).
//!
//! This room holds the policies' settings and what they declare; a policy's behaviour is the
//! server's (`actors::server`, one file per policy). It must not read the data, the machine or
//! another section.

mod catalogue;
mod fedbuff;
mod synchronous;

pub use catalogue::{Declared, Policies, PolicySettings, PolicySpec, Registration, POLICIES};
pub use fedbuff::FedbuffSpec;
pub use synchronous::{LateUpdates, SynchronousSpec};

/// (1 + staleness)^(−exponent): how much a stale update counts.
pub fn staleness_factor(staleness: u32, exponent: f64) -> f64 {
    (1.0 + staleness as f64).powf(-exponent)
}

fn default_exponent() -> f64 {
    0.5
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::catalogue::check_catalogue;

    #[test]
    fn every_policy_reads_its_example_and_validates_it() {
        check_catalogue::<Policies>(|p| {
            PolicySpec(p.clone()).validate().map_err(|e| e.to_string())
        });
    }

    #[test]
    fn the_default_is_synchronous_rounds_dropping_stragglers() {
        let p = PolicySpec::default();
        assert_eq!(p.name(), "synchronous");
        assert!(p.declared().rounds_in_step);
        assert!(!p.needs_stale_updates());
        let text = serde_yaml::to_string(&p).unwrap();
        assert_eq!(
            text,
            "kind: synchronous\nlate_updates: drop\nmax_staleness: 1\nstaleness_exponent: 0.5\n"
        );
    }

    #[test]
    fn stale_updates_are_declared_by_the_settings() {
        let read = |text: &str| serde_yaml::from_str::<PolicySpec>(text).unwrap();
        assert!(read("{kind: synchronous, late_updates: next_round}").needs_stale_updates());
        assert!(!read("{kind: synchronous, deadline_s: 3}").needs_stale_updates());
        let fedbuff = read("{kind: fedbuff, buffer_size: 5, concurrency: 10}");
        assert!(fedbuff.needs_stale_updates());
        assert!(!fedbuff.declared().rounds_in_step);
        assert_eq!(staleness_factor(3, 0.5), 0.5);
    }
}
