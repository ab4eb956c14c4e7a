//! A decentralized run's checkpoints: where one is saved (before a peer's mixed model reaches
//! the monitor, when every event waiting is one a checkpoint holds), what it holds (the
//! monitor's rounds in progress, each peer's model, state, inbox, bytes sent, divergence watch
//! and jobs in flight, the models on their way), and how a run resumes from one (the peers'
//! jobs in flight started again, from the model and state they started from, at the time they
//! started). Every distinct model is saved once.
//!
//! This room must not save what the scenario decides (the topology, the system model), nor
//! change a value it saves: a resumed run's peers hold the same bits.

use super::{GossipMsg, Mixed, Monitor, Peer, PeerEffects, PeerJob, PeerMsg};
use crate::actors::checkpoint::{
    decode, decode_from, encode, encode_into, Checkpoints, ModelTable, Restarted, RunState,
    SavedModels,
};
use crate::actors::divergence::DivergenceWatch;
use crate::actors::gossip::InboxState;
use crate::actors::job::JobContext;
use crate::actors::world::{member_entity, Routed, Saver, HUB};
use crate::algorithms::Gossip;
use crate::sim::{EntityId, Payload, Queued, Resume, Saving, SimError, SimTime};
use actix::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::Arc;

/// A peer as a checkpoint saves it, its models as `M` (the models, or their indices).
#[derive(Serialize, Deserialize)]
pub(super) struct PeerState<M, S> {
    pub model: M,
    pub state: S,
    pub inbox: InboxState<M>,
    pub sent: u64,
    pub watch: DivergenceWatch,
    /// Its jobs in flight, in the order they started.
    pub jobs: Vec<PeerJob>,
}

/// The monitor as a checkpoint saves it: the rounds not every peer has mixed yet.
#[derive(Serialize, Deserialize)]
struct MonitorState<M> {
    rounds: Vec<(u32, Vec<Option<M>>, u64, u64)>,
    watch: DivergenceWatch,
}

/// A message of a decentralized run as a checkpoint saves it, its model as `M`.
#[derive(Serialize, Deserialize)]
enum SavedMsg<M> {
    Train {
        peer: u32,
        round: u32,
    },
    Model {
        to: u32,
        round: u32,
        from: u32,
        model: M,
    },
    Absent {
        to: u32,
        round: u32,
        from: u32,
    },
    SatOut {
        peer: u32,
        round: u32,
    },
    /// The result of one of `peer`'s jobs (its results come in the order they are due, then in
    /// the order they started).
    JobResult {
        peer: u32,
    },
    Mixed {
        round: u32,
        peer: u32,
        model: M,
        bytes: u64,
        dropped: bool,
    },
}

/// An event waiting as a checkpoint saves it: when it is due, its sender's rank, and what.
#[derive(Serialize, Deserialize)]
struct SavedEvent<M> {
    at: SimTime,
    origin: u32,
    msg: SavedMsg<M>,
}

impl<M> SavedMsg<M> {
    fn map<N, E>(self, f: impl FnOnce(M) -> Result<N, E>) -> Result<SavedMsg<N>, E> {
        Ok(match self {
            SavedMsg::Train { peer, round } => SavedMsg::Train { peer, round },
            SavedMsg::Model {
                to,
                round,
                from,
                model,
            } => SavedMsg::Model {
                to,
                round,
                from,
                model: f(model)?,
            },
            SavedMsg::Absent { to, round, from } => SavedMsg::Absent { to, round, from },
            SavedMsg::SatOut { peer, round } => SavedMsg::SatOut { peer, round },
            SavedMsg::JobResult { peer } => SavedMsg::JobResult { peer },
            SavedMsg::Mixed {
                round,
                peer,
                model,
                bytes,
                dropped,
            } => SavedMsg::Mixed {
                round,
                peer,
                model: f(model)?,
                bytes,
                dropped,
            },
        })
    }
}

impl<M, S> PeerState<M, S> {
    fn map<N, E>(self, mut f: impl FnMut(M) -> Result<N, E>) -> Result<PeerState<N, S>, E> {
        Ok(PeerState {
            model: f(self.model)?,
            state: self.state,
            inbox: self.inbox.map(&mut f)?,
            sent: self.sent,
            watch: self.watch,
            jobs: self.jobs,
        })
    }
}

/// Asks a peer for its [`PeerState`]; `None` where a job in flight started from a model or
/// state it has since changed.
struct SavePeer<G, S>(std::marker::PhantomData<fn() -> (G, S)>);

type PeerSnapshot<G, S> = Option<PeerState<Arc<G>, S>>;

impl<G: 'static, S: 'static> Message for SavePeer<G, S> {
    type Result = PeerSnapshot<G, S>;
}

impl<A: Gossip> Handler<SavePeer<A::Global, A::ClientState>> for Peer<A> {
    type Result = PeerSnapshot<A::Global, A::ClientState>;

    fn handle(
        &mut self,
        _: SavePeer<A::Global, A::ClientState>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        if self
            .in_flight
            .iter()
            .any(|(_, version)| *version != self.version)
        {
            return None;
        }
        // Where cohorts keep momentum on the device, a started shard holds its buffer.
        let training = (self.in_flight.iter()).any(|(j, _)| matches!(j, PeerJob::Training { .. }));
        if training && self.shared.dispatch.keeps_state_outside_clients() {
            return None;
        }
        Some(PeerState {
            model: self.model.clone(),
            state: self.state.clone(),
            inbox: self.inbox.saved(),
            sent: self.sent,
            watch: self.watch,
            jobs: self.in_flight.iter().map(|(job, _)| *job).collect(),
        })
    }
}

/// Asks the monitor for its [`MonitorState`].
struct SaveMonitor<G>(std::marker::PhantomData<fn() -> G>);

impl<G: 'static> Message for SaveMonitor<G> {
    type Result = MonitorState<Arc<G>>;
}

impl<A: Gossip> Handler<SaveMonitor<A::Global>> for Monitor<A> {
    type Result = MessageResult<SaveMonitor<A::Global>>;

    fn handle(&mut self, _: SaveMonitor<A::Global>, _: &mut Context<Self>) -> Self::Result {
        let rounds = (self.rounds.iter())
            .map(|(&round, (models, bytes, dropped))| (round, models.clone(), *bytes, *dropped))
            .collect();
        MessageResult(MonitorState {
            rounds,
            watch: self.watch,
        })
    }
}

impl<A: Gossip> Monitor<A> {
    fn restore(&mut self, state: MonitorState<Arc<A::Global>>) {
        self.rounds = (state.rounds.into_iter())
            .map(|(round, models, bytes, dropped)| (round, (models, bytes, dropped)))
            .collect();
        self.watch = state.watch;
    }
}

impl<A: Gossip> Peer<A> {
    /// Takes back what [`SavePeer`] saved, less its jobs (started again by [`RestartPeer`]).
    pub(super) fn restore(
        &mut self,
        state: PeerState<Arc<A::Global>, A::ClientState>,
    ) -> Result<Vec<PeerJob>, SimError> {
        self.model = state.model;
        self.state = state.state;
        self.inbox.restore(state.inbox).ok_or_else(|| {
            SimError::Internal("a checkpoint's peer does not match the scenario's gossip".into())
        })?;
        self.sent = state.sent;
        self.watch = state.watch;
        Ok(state.jobs)
    }
}

/// Starts a peer's saved jobs again, each at the time it started, in the order they started.
struct RestartPeer<A>(Vec<PeerJob>, std::marker::PhantomData<fn() -> A>);

impl<A: Gossip> Message for RestartPeer<A> {
    type Result = Result<Vec<(SimTime, PeerEffects<A>)>, SimError>;
}

impl<A: Gossip> Handler<RestartPeer<A>> for Peer<A> {
    type Result = Result<Vec<(SimTime, PeerEffects<A>)>, SimError>;

    fn handle(&mut self, r: RestartPeer<A>, _: &mut Context<Self>) -> Self::Result {
        let mut restarted = Vec::with_capacity(r.0.len());
        for job in r.0 {
            let mut eff = PeerEffects::<A>::new();
            let started = match job {
                PeerJob::Training { started, round } => {
                    self.train(started, round, &mut eff)?;
                    started
                }
                PeerJob::Evaluation { started, round } => {
                    self.evaluate(started, round, &mut eff);
                    started
                }
            };
            restarted.push((started, eff));
        }
        Ok(restarted)
    }
}

/// Saves a checkpoint before a peer's mixed model of a round reaches the monitor, where one is
/// due and every event waiting is one a checkpoint holds (no evaluation's result is a plain
/// message) and every peer can be saved.
pub(super) fn checkpoint_saver<A: Gossip>(
    checkpoints: Checkpoints,
    monitor: Addr<Monitor<A>>,
    peers: Arc<Vec<Addr<Peer<A>>>>,
    jobs: Arc<JobContext<A>>,
) -> Saver<Mixed<A>, PeerMsg<A>> {
    let checkpoints = Rc::new(RefCell::new(checkpoints));
    let asked = checkpoints.clone();
    let wants = Rc::new(move |msg: &Mixed<A>| (asked.borrow_mut().due)(msg.round));
    let save = Rc::new(move |events, queued: Vec<Queued<Option<&GossipMsg<A>>>>| {
        let now = queued.first()?.at;
        let Some(Routed::Hub(Mixed { round, .. })) = queued.first()?.msg else {
            return None;
        };
        let round = *round;
        let waiting: Vec<SavedEvent<Arc<A::Global>>> = (queued.iter())
            .map(|q| {
                Some(SavedEvent {
                    at: q.at,
                    origin: q.origin.0,
                    msg: saved_msg(q.to, q.msg)?,
                })
            })
            .collect::<Option<_>>()?;
        let (checkpoints, monitor, peers) = (checkpoints.clone(), monitor.clone(), peers.clone());
        let jobs = jobs.clone();
        let saving: Saving = Box::pin(async move {
            let gone =
                |who: String| move |e: MailboxError| SimError::ActorGone(format!("{who}: {e}"));
            let monitor = (monitor.send(SaveMonitor(Default::default())).await)
                .map_err(gone("the gossip monitor".into()))?;
            let mut saved = Vec::with_capacity(peers.len());
            for (p, peer) in peers.iter().enumerate() {
                let state = peer.send(SavePeer(Default::default())).await;
                let Some(state) = state.map_err(gone(format!("peer {p}")))? else {
                    return Ok(());
                };
                saved.push(state);
            }
            let mut table = ModelTable::new();
            let mut index = |m: Arc<A::Global>| Ok::<_, SimError>(table.index(&m));
            let waiting: Vec<SavedEvent<u32>> = (waiting.into_iter())
                .map(|e| {
                    let (at, origin) = (e.at, e.origin);
                    let msg = e.msg.map(&mut index)?;
                    Ok::<_, SimError>(SavedEvent { at, origin, msg })
                })
                .collect::<Result<_, _>>()?;
            let monitor = MonitorState {
                rounds: (monitor.rounds.into_iter())
                    .map(|(round, models, bytes, dropped)| {
                        let models = (models.into_iter())
                            .map(|m| m.map(&mut index).transpose())
                            .collect::<Result<_, _>>()?;
                        Ok::<_, SimError>((round, models, bytes, dropped))
                    })
                    .collect::<Result<_, _>>()?,
                watch: monitor.watch,
            };
            let peers: Vec<PeerState<u32, A::ClientState>> = (saved.into_iter())
                .map(|p| p.map(&mut index))
                .collect::<Result<_, _>>()?;
            let state = RunState {
                now,
                events,
                round,
                waiting: encode(&waiting),
                server: encode(&monitor),
            };
            let models = table.models();
            (checkpoints.borrow_mut().save)(&state, &mut |w: &mut dyn Write| {
                encode_into(&(models.len() as u64), w)?;
                for m in models {
                    encode_into(&**m, w)?;
                }
                for p in &peers {
                    encode_into(p, w)?;
                }
                jobs.resident_momenta.write_kept(w)
            })
        });
        Some(saving)
    });
    Saver { wants, save }
}

/// The message `msg` to `to` as a checkpoint saves it (`None`: a job's result to come); `None`
/// where it is not a kind a checkpoint holds.
fn saved_msg<A: Gossip>(
    to: EntityId,
    msg: Option<&GossipMsg<A>>,
) -> Option<SavedMsg<Arc<A::Global>>> {
    let peer = to.0.checked_sub(1);
    let Some(msg) = msg else {
        return peer.map(|peer| SavedMsg::JobResult { peer });
    };
    Some(match (peer, msg) {
        (None, Routed::Hub(m)) => SavedMsg::Mixed {
            round: m.round,
            peer: m.peer,
            model: m.model.clone(),
            bytes: m.bytes,
            dropped: m.dropped,
        },
        (Some(peer), Routed::Member(m)) => match m {
            &PeerMsg::Train { round } => SavedMsg::Train { peer, round },
            PeerMsg::Model { round, from, model } => SavedMsg::Model {
                to: peer,
                round: *round,
                from: *from,
                model: model.clone(),
            },
            &PeerMsg::Absent { round, from } => SavedMsg::Absent {
                to: peer,
                round,
                from,
            },
            &PeerMsg::SatOut { round } => SavedMsg::SatOut { peer, round },
            PeerMsg::Trained { .. } | PeerMsg::Evaluated { .. } => return None,
        },
        _ => return None,
    })
}

/// A decentralized run's checkpoint, read: the monitor's and each peer's state (in peer
/// order), and the events waiting.
pub(super) struct ResumedPeers<A: Gossip> {
    pub now: SimTime,
    pub events: u64,
    monitor: MonitorState<Arc<A::Global>>,
    pub peers: Vec<PeerState<Arc<A::Global>, A::ClientState>>,
    waiting: Vec<SavedEvent<Arc<A::Global>>>,
}

impl<A: Gossip> ResumedPeers<A> {
    /// Reads what [`checkpoint_saver`] wrote of a run of `peers` peers.
    pub fn read(
        mut from: crate::actors::checkpoint::Resumed,
        peers: usize,
        jobs: &JobContext<A>,
    ) -> Result<Self, SimError> {
        let r: &mut dyn Read = &mut from.clients;
        let count: u64 = decode_from(r, "the number of models")?;
        let models: Vec<Arc<A::Global>> = (0..count)
            .map(|_| decode_from(r, "a model").map(Arc::new))
            .collect::<Result<_, _>>()?;
        let models = SavedModels(models);
        let get = |m: u32| models.get(m);
        let peers = (0..peers)
            .map(|_| {
                let p: PeerState<u32, A::ClientState> = decode_from(r, "a peer's state")?;
                p.map(get)
            })
            .collect::<Result<_, _>>()?;
        jobs.resident_momenta.read_kept(r)?;
        let monitor: MonitorState<u32> = decode(&from.state.server, "the monitor's state")?;
        let monitor = MonitorState {
            rounds: (monitor.rounds.into_iter())
                .map(|(round, models, bytes, dropped)| {
                    let models = (models.into_iter())
                        .map(|m| m.map(get).transpose())
                        .collect::<Result<_, _>>()?;
                    Ok::<_, SimError>((round, models, bytes, dropped))
                })
                .collect::<Result<_, _>>()?,
            watch: monitor.watch,
        };
        let waiting: Vec<SavedEvent<u32>> = decode(&from.state.waiting, "the events waiting")?;
        let waiting = (waiting.into_iter())
            .map(|e| {
                let msg = e.msg.map(get)?;
                Ok::<_, SimError>(SavedEvent {
                    at: e.at,
                    origin: e.origin,
                    msg,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(ResumedPeers {
            now: from.state.now,
            events: from.state.events,
            monitor,
            peers,
            waiting,
        })
    }

    /// Gives the monitor its saved state.
    pub fn restore_monitor(&mut self, monitor: &mut Monitor<A>) {
        let state = std::mem::replace(
            &mut self.monitor,
            MonitorState {
                rounds: Vec::new(),
                watch: monitor.watch,
            },
        );
        monitor.restore(state);
    }

    /// Starts the peers' saved jobs again (`jobs`, by peer) and queues every event that was
    /// waiting, each job's result where its saved event was.
    pub async fn resume(
        self,
        peers: &[Addr<Peer<A>>],
        jobs: Vec<Vec<PeerJob>>,
    ) -> Result<Resume<GossipMsg<A>>, SimError> {
        let mut restarted = Restarted::new("peer");
        for (p, jobs) in (0..).zip(jobs) {
            if jobs.is_empty() {
                continue;
            }
            let sent = (peers[p as usize])
                .send(RestartPeer(jobs, Default::default()))
                .await;
            let started = sent.map_err(|e| SimError::ActorGone(format!("peer {p}: {e}")))??;
            restarted.add(p, started)?;
        }
        let mut waiting = Vec::with_capacity(self.waiting.len());
        for SavedEvent { at, origin, msg } in self.waiting {
            let member = |p: u32, m| (member_entity(p), Payload::Ready(Routed::Member(m)));
            let (to, msg) = match msg {
                SavedMsg::Train { peer, round } => member(peer, PeerMsg::Train { round }),
                SavedMsg::Model {
                    to,
                    round,
                    from,
                    model,
                } => member(to, PeerMsg::Model { round, from, model }),
                SavedMsg::Absent { to, round, from } => member(to, PeerMsg::Absent { round, from }),
                SavedMsg::SatOut { peer, round } => member(peer, PeerMsg::SatOut { round }),
                SavedMsg::Mixed {
                    round,
                    peer,
                    model,
                    bytes,
                    dropped,
                } => {
                    let mixed = Mixed {
                        round,
                        peer,
                        model,
                        bytes,
                        dropped,
                    };
                    (HUB, Payload::Ready(Routed::Hub(mixed)))
                }
                SavedMsg::JobResult { peer } => {
                    let result = restarted.take(peer, at)?;
                    (member_entity(peer), Payload::Pending(result))
                }
            };
            waiting.push(Queued {
                at,
                origin: EntityId(origin),
                to,
                msg,
            });
        }
        restarted.finish()?;
        Ok(Resume {
            now: self.now,
            events: self.events,
            waiting,
        })
    }
}
