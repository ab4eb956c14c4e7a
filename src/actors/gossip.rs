//! How a peer gathers its neighbours' models for a round: one type per gossip mode, owning
//! what it holds between messages. A peer hands its inbox its own model after local work and
//! every neighbour's outcome, and mixes whatever round the inbox says is complete.
//!
//! An inbox must not read the clock, the topology or the system model: what it decides depends
//! only on the order its peer's messages come in.

use crate::algorithms::{Algorithm, Gossip};
use crate::topology::GossipMode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

type Model<A> = Arc<<A as Algorithm>::Global>;

/// A round ready to mix: this peer's model and the neighbours' models that take part (a
/// neighbour left out leaves its mixing weight on the peer).
pub(super) struct Complete<A: Gossip> {
    pub round: u32,
    pub own: Model<A>,
    pub neighbours: BTreeMap<u32, Model<A>>,
}

pub(super) trait Inbox<A: Gossip> {
    /// The peer sat `round` out (it dropped out of the local work): whether its neighbours
    /// must be told, so that they do not wait for its model.
    fn sat_out(&mut self, round: u32) -> bool;

    /// The peer's own model of `round` after local work; `neighbours` peers send it theirs.
    fn own(&mut self, round: u32, model: Model<A>, neighbours: usize);

    /// Neighbour `from`'s model of `round`, or (`None`) its notice that it sat the round out.
    fn neighbour(&mut self, round: u32, from: u32, model: Option<Model<A>>);

    /// The round to mix now, if one is complete.
    fn complete(&mut self) -> Option<Complete<A>>;

    /// What it holds, as a checkpoint saves it.
    fn saved(&self) -> InboxState<Model<A>>;

    /// Takes back what [`Inbox::saved`] held; `None` where it is another mode's.
    fn restore(&mut self, state: InboxState<Model<A>>) -> Option<()>;
}

/// What an inbox holds, its models as `M` (the models themselves, or where a checkpoint saved
/// them).
#[derive(Serialize, Deserialize)]
pub(super) enum InboxState<M> {
    Synchronous {
        own: Option<(u32, M, usize)>,
        models: Vec<((u32, u32), M)>,
        absent: Vec<(u32, u32)>,
        arrived: Vec<(u32, usize)>,
        sat_out: Vec<u32>,
    },
    Asynchronous {
        own: Option<(u32, M)>,
        newest: Vec<(u32, (u32, M))>,
    },
}

impl<M> InboxState<M> {
    /// The same state with each model `m` as `f(m)`, in a fixed order (own first).
    pub fn map<N, E>(self, mut f: impl FnMut(M) -> Result<N, E>) -> Result<InboxState<N>, E> {
        Ok(match self {
            InboxState::Synchronous {
                own,
                models,
                absent,
                arrived,
                sat_out,
            } => InboxState::Synchronous {
                own: own.map(|(r, m, n)| f(m).map(|m| (r, m, n))).transpose()?,
                models: (models.into_iter())
                    .map(|(k, m)| f(m).map(|m| (k, m)))
                    .collect::<Result<_, _>>()?,
                absent,
                arrived,
                sat_out,
            },
            InboxState::Asynchronous { own, newest } => InboxState::Asynchronous {
                own: own.map(|(r, m)| f(m).map(|m| (r, m))).transpose()?,
                newest: (newest.into_iter())
                    .map(|(from, (r, m))| f(m).map(|m| (from, (r, m))))
                    .collect::<Result<_, _>>()?,
            },
        })
    }
}

/// The inbox of gossip mode `mode`, empty.
pub(super) fn inbox<A: Gossip>(mode: GossipMode) -> Box<dyn Inbox<A>> {
    match mode {
        GossipMode::Synchronous => Box::new(Synchronous::new()),
        GossipMode::Asynchronous => Box::new(Asynchronous::new()),
    }
}

/// Synchronous gossip: round r is complete once the peer's own model and every neighbour's
/// round-r outcome (model or notice of absence) are in. What reaches a peer for a round it sat
/// out is dropped.
struct Synchronous<A: Gossip> {
    /// The own model of the round in progress, with the number of neighbours' outcomes it waits
    /// for.
    own: Option<(u32, Model<A>, usize)>,
    /// Neighbours' models by (round, neighbour); neighbours that sat a round out; how many
    /// outcomes of both kinds arrived per round.
    models: BTreeMap<(u32, u32), Model<A>>,
    absent: BTreeSet<(u32, u32)>,
    arrived: BTreeMap<u32, usize>,
    /// Rounds this peer sat out.
    sat_out: BTreeSet<u32>,
}

impl<A: Gossip> Synchronous<A> {
    fn new() -> Self {
        Synchronous {
            own: None,
            models: BTreeMap::new(),
            absent: BTreeSet::new(),
            arrived: BTreeMap::new(),
            sat_out: BTreeSet::new(),
        }
    }
}

impl<A: Gossip> Inbox<A> for Synchronous<A> {
    fn sat_out(&mut self, round: u32) -> bool {
        self.sat_out.insert(round);
        self.models.retain(|&(r, _), _| r != round);
        self.absent.retain(|&(r, _)| r != round);
        self.arrived.remove(&round);
        true
    }

    fn own(&mut self, round: u32, model: Model<A>, neighbours: usize) {
        self.own = Some((round, model, neighbours));
    }

    fn neighbour(&mut self, round: u32, from: u32, model: Option<Model<A>>) {
        if self.sat_out.contains(&round) {
            return;
        }
        match model {
            Some(model) => {
                self.models.insert((round, from), model);
            }
            None => {
                self.absent.insert((round, from));
            }
        }
        *self.arrived.entry(round).or_insert(0) += 1;
    }

    fn saved(&self) -> InboxState<Model<A>> {
        InboxState::Synchronous {
            own: self.own.clone(),
            models: (self.models.iter()).map(|(k, m)| (*k, m.clone())).collect(),
            absent: self.absent.iter().copied().collect(),
            arrived: self.arrived.iter().map(|(r, n)| (*r, *n)).collect(),
            sat_out: self.sat_out.iter().copied().collect(),
        }
    }

    fn restore(&mut self, state: InboxState<Model<A>>) -> Option<()> {
        let InboxState::Synchronous {
            own,
            models,
            absent,
            arrived,
            sat_out,
        } = state
        else {
            return None;
        };
        self.own = own;
        self.models = models.into_iter().collect();
        self.absent = absent.into_iter().collect();
        self.arrived = arrived.into_iter().collect();
        self.sat_out = sat_out.into_iter().collect();
        Some(())
    }

    fn complete(&mut self) -> Option<Complete<A>> {
        let (round, _, expected) = self.own.as_ref()?;
        let round = *round;
        if self.arrived.get(&round).copied().unwrap_or(0) < *expected {
            return None;
        }
        self.arrived.remove(&round);
        let (_, own, _) = self.own.take().expect("checked above");
        self.absent.retain(|&(r, _)| r != round);
        let later = self.models.split_off(&(round + 1, 0));
        let neighbours = std::mem::replace(&mut self.models, later)
            .into_iter()
            .filter(|&((r, _), _)| r == round)
            .map(|((_, from), model)| (from, model))
            .collect();
        Some(Complete {
            round,
            own,
            neighbours,
        })
    }
}

/// Asynchronous gossip: a round is complete right after the peer's local work, with the newest
/// model of each neighbour that arrived since the peer last mixed. Neighbours never send
/// notices of absence in this mode.
struct Asynchronous<A: Gossip> {
    own: Option<(u32, Model<A>)>,
    /// The newest model of each neighbour since the last mix, with its round.
    newest: BTreeMap<u32, (u32, Model<A>)>,
}

impl<A: Gossip> Asynchronous<A> {
    fn new() -> Self {
        Asynchronous {
            own: None,
            newest: BTreeMap::new(),
        }
    }
}

impl<A: Gossip> Inbox<A> for Asynchronous<A> {
    fn sat_out(&mut self, _round: u32) -> bool {
        false
    }

    fn own(&mut self, round: u32, model: Model<A>, _neighbours: usize) {
        self.own = Some((round, model));
    }

    fn neighbour(&mut self, round: u32, from: u32, model: Option<Model<A>>) {
        let Some(model) = model else { return };
        if self.newest.get(&from).is_none_or(|(r, _)| *r <= round) {
            self.newest.insert(from, (round, model));
        }
    }

    fn saved(&self) -> InboxState<Model<A>> {
        InboxState::Asynchronous {
            own: self.own.clone(),
            newest: (self.newest.iter()).map(|(k, v)| (*k, v.clone())).collect(),
        }
    }

    fn restore(&mut self, state: InboxState<Model<A>>) -> Option<()> {
        let InboxState::Asynchronous { own, newest } = state else {
            return None;
        };
        self.own = own;
        self.newest = newest.into_iter().collect();
        Some(())
    }

    /// Everything that arrived goes: models from peers that are no longer neighbours
    /// (time-varying graphs) are dropped by the mix.
    fn complete(&mut self) -> Option<Complete<A>> {
        let (round, own) = self.own.take()?;
        let neighbours = std::mem::take(&mut self.newest)
            .into_iter()
            .map(|(from, (_, model))| (from, model))
            .collect();
        Some(Complete {
            round,
            own,
            neighbours,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::FedAvg;

    fn model(v: f32) -> Model<FedAvg> {
        Arc::new(vec![v])
    }

    /// `round r: own x; j: y, ...` (the neighbours' models in order).
    fn summary(c: Option<Complete<FedAvg>>) -> Option<String> {
        c.map(|c| {
            let neighbours: Vec<String> = c
                .neighbours
                .iter()
                .map(|(j, m)| format!("{j}: {}", m[0]))
                .collect();
            format!(
                "round {}: own {}; {}",
                c.round,
                c.own[0],
                neighbours.join(", ")
            )
        })
    }

    #[test]
    fn synchronous_rounds_wait_for_every_outcome_and_keep_later_rounds() {
        let mut inbox = inbox::<FedAvg>(GossipMode::Synchronous);
        inbox.neighbour(1, 5, Some(model(5.0)));
        inbox.neighbour(2, 5, Some(model(50.0)));
        inbox.own(1, model(1.0), 2);
        assert!(inbox.complete().is_none(), "neighbour 7 is still out");
        inbox.neighbour(1, 7, None);
        assert_eq!(
            summary(inbox.complete()),
            Some("round 1: own 1; 5: 5".into()),
            "7 sat out: its weight stays on the peer"
        );
        assert!(inbox.complete().is_none(), "mixed once");
        inbox.own(2, model(2.0), 1);
        assert_eq!(
            summary(inbox.complete()),
            Some("round 2: own 2; 5: 50".into())
        );
    }

    #[test]
    fn a_synchronous_peer_drops_what_reaches_it_for_a_round_it_sat_out() {
        let mut inbox = inbox::<FedAvg>(GossipMode::Synchronous);
        inbox.neighbour(3, 4, Some(model(4.0)));
        assert!(inbox.sat_out(3), "neighbours are told");
        inbox.neighbour(3, 6, Some(model(6.0)));
        inbox.own(4, model(1.0), 0);
        assert_eq!(summary(inbox.complete()), Some("round 4: own 1; ".into()));
    }

    #[test]
    fn asynchronous_rounds_mix_the_newest_model_of_each_neighbour_at_once() {
        let mut inbox = inbox::<FedAvg>(GossipMode::Asynchronous);
        assert!(!inbox.sat_out(1), "nobody waits for an asynchronous peer");
        inbox.neighbour(2, 5, Some(model(52.0)));
        inbox.neighbour(1, 5, Some(model(51.0)));
        inbox.neighbour(1, 7, Some(model(71.0)));
        inbox.neighbour(3, 7, Some(model(73.0)));
        assert!(inbox.complete().is_none(), "nothing before local work");
        inbox.own(2, model(1.0), 2);
        assert_eq!(
            summary(inbox.complete()),
            Some("round 2: own 1; 5: 52, 7: 73".into()),
            "an older model does not replace a newer one"
        );
        inbox.own(3, model(2.0), 2);
        assert_eq!(summary(inbox.complete()), Some("round 3: own 2; ".into()));
    }
}
