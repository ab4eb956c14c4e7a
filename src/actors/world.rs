//! The world adapter: the entities of a run (a hub and its members) as the kernel's scheduler
//! sees them, the typed sends between them, and the run loop that drives them. It knows no
//! algorithm, no model and no scenario.

use crate::records::Record;
use crate::sim::{
    Delivery, Effects, EntityId, Pending, Queued, RecordObserver, Resume, SavePoint, Saving,
    Scheduler, SimDuration, SimError, SimTime, World,
};
use actix::dev::ToEnvelope;
use actix::prelude::*;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

/// What a finished run hands back.
pub struct SimOutput {
    pub records: Vec<Record>,
    pub end_time: SimTime,
    pub events: u64,
}

/// A message of a world with a hub (rank 0: the server, or a decentralized run's monitor) and
/// members (rank `c + 1`: clients, or peers), in its recipient's own type. Entities send
/// through `Outbox`, which pairs each type with its ranks, so each handler matches only its
/// own messages; the world's `deliver` is the one place that checks a rank against a kind.
pub enum Routed<H, M> {
    Hub(H),
    Member(M),
}

/// Sends of a hub world's entities, typed by recipient.
pub(super) trait Outbox<H, M> {
    /// `msg` to the hub, after `delay`.
    fn to_hub(&mut self, delay: SimDuration, msg: H);
    /// `msg` to member `member`, after `delay`.
    fn to_member(&mut self, member: u32, delay: SimDuration, msg: M);
    /// Member `member`'s own job's result (a [`Routed::Member`] message), due after `delay`.
    fn to_member_pending(
        &mut self,
        member: u32,
        delay: SimDuration,
        pending: Pending<Routed<H, M>>,
    );
}

impl<H, M> Outbox<H, M> for Effects<Routed<H, M>, Record> {
    fn to_hub(&mut self, delay: SimDuration, msg: H) {
        self.send(HUB, delay, Routed::Hub(msg));
    }

    fn to_member(&mut self, member: u32, delay: SimDuration, msg: M) {
        self.send(member_entity(member), delay, Routed::Member(msg));
    }

    fn to_member_pending(
        &mut self,
        member: u32,
        delay: SimDuration,
        pending: Pending<Routed<H, M>>,
    ) {
        self.send_pending(member_entity(member), delay, pending);
    }
}

/// Runs an entity's handling of one message: a panic inside it (a bug) becomes an error that
/// ends the run, which then keeps its results so far, instead of taking the actor system down
/// with it (`who` names the entity in the message).
pub(super) fn guarded<T>(
    who: impl FnOnce() -> String,
    handle: impl FnOnce() -> Result<T, SimError>,
) -> Result<T, SimError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(handle)).unwrap_or_else(|panic| {
        Err(SimError::Internal(format!(
            "{} panicked: {}",
            who(),
            super::trainer::panic_message(&*panic)
        )))
    })
}

/// A message handed to an actor by the scheduler: `msg` in, the effects (sends of the world's
/// message type `W`) out.
pub(super) struct Deliver<In, W> {
    pub(super) now: SimTime,
    pub(super) msg: In,
    world: PhantomData<fn() -> W>,
}

impl<In, W> Deliver<In, W> {
    pub(super) fn new(now: SimTime, msg: In) -> Self {
        Deliver {
            now,
            msg,
            world: PhantomData,
        }
    }
}

impl<In: 'static, W: 'static> Message for Deliver<In, W> {
    type Result = Result<Effects<W, Record>, SimError>;
}

/// What the scheduler calls before it waits for a pending result (a queue of cohort jobs
/// starts them).
pub(super) trait Flush {
    fn flush(&self);
}

/// The members of a hub world, by index: actors that are always there (peers), or clients
/// woken on demand (the [`client::Roster`]); they take `In` in a world of messages `W`.
pub(super) trait Members<In: 'static, W: 'static>: Clone + Unpin + 'static {
    type Actor: Actor + Handler<Deliver<In, W>>;
    fn addr(&self, index: u32) -> Addr<Self::Actor>;
}

impl<In, W, C> Members<In, W> for Arc<Vec<Addr<C>>>
where
    In: 'static,
    W: 'static,
    C: Actor + Handler<Deliver<In, W>>,
{
    type Actor = C;
    fn addr(&self, index: u32) -> Addr<C> {
        self[index as usize].clone()
    }
}

/// What a hub world does where it may save its run (checkpoints): whether it saves before the
/// hub's next message `wants` says (cheap: asked at most events), then `save` (with the events
/// delivered before, and every event waiting, `None` for a job's result to come).
#[allow(clippy::type_complexity)]
pub(super) struct Saver<HM, MM> {
    pub(super) wants: Rc<dyn Fn(&HM) -> bool>,
    pub(super) save: Rc<dyn Fn(u64, Vec<Queued<Option<&Routed<HM, MM>>>>) -> Option<Saving>>,
}

impl<HM, MM> Clone for Saver<HM, MM> {
    fn clone(&self) -> Self {
        Saver {
            wants: self.wants.clone(),
            save: self.save.clone(),
        }
    }
}

/// The entities of a run as the scheduler sees them: a hub with rank 0 (the server, or the
/// monitor of a decentralized run) that takes `HM`, and members with rank `c + 1` (clients,
/// or peers) that take `MM`.
pub(super) struct HubWorld<H: Actor, Ms, HM, MM> {
    hub: Addr<H>,
    members: Ms,
    /// The cohort queue the scheduler flushes before it waits, if members train in cohorts.
    pub(super) cohorts: Option<Arc<dyn Flush>>,
    /// What to do where the run may be saved before a message to the hub (checkpoints), if
    /// anything.
    pub(super) saver: Option<Saver<HM, MM>>,
    _msg: PhantomData<fn() -> (HM, MM)>,
}

impl<H: Actor, Ms, HM, MM> HubWorld<H, Ms, HM, MM> {
    pub(super) fn new(hub: Addr<H>, members: Ms) -> Self {
        HubWorld {
            hub,
            members,
            cohorts: None,
            saver: None,
            _msg: PhantomData,
        }
    }
}

impl<H: Actor, Ms: Clone, HM, MM> Clone for HubWorld<H, Ms, HM, MM> {
    fn clone(&self) -> Self {
        HubWorld {
            hub: self.hub.clone(),
            members: self.members.clone(),
            cohorts: self.cohorts.clone(),
            saver: self.saver.clone(),
            _msg: PhantomData,
        }
    }
}

impl<H, Ms, HM, MM> World for HubWorld<H, Ms, HM, MM>
where
    HM: Send + Unpin + 'static,
    MM: Send + Unpin + 'static,
    H: Actor + Handler<Deliver<HM, Routed<HM, MM>>>,
    H::Context: ToEnvelope<H, Deliver<HM, Routed<HM, MM>>>,
    Ms: Members<MM, Routed<HM, MM>>,
    <Ms::Actor as Actor>::Context: ToEnvelope<Ms::Actor, Deliver<MM, Routed<HM, MM>>>,
{
    type Msg = Routed<HM, MM>;
    type Record = Record;

    fn deliver(&self, now: SimTime, to: EntityId, msg: Self::Msg) -> Delivery<Self::Msg, Record> {
        let gone = move |e: MailboxError| SimError::ActorGone(format!("entity {}: {e}", to.0));
        match (to, msg) {
            (HUB, Routed::Hub(msg)) => {
                let req = self.hub.send(Deliver::new(now, msg));
                Box::pin(async move { req.await.map_err(gone)? })
            }
            (EntityId(rank @ 1..), Routed::Member(msg)) => {
                let req = self.members.addr(rank - 1).send(Deliver::new(now, msg));
                Box::pin(async move { req.await.map_err(gone)? })
            }
            (EntityId(rank), _) => Box::pin(std::future::ready(Err(SimError::Misrouted(rank)))),
        }
    }

    fn flush(&self) {
        if let Some(queue) = &self.cohorts {
            queue.flush();
        }
    }

    fn saves(&self) -> bool {
        self.saver.is_some()
    }

    fn may_save(&self, at: SavePoint<'_, Self::Msg>) -> Option<Saving> {
        let saver = self.saver.as_ref()?;
        let (HUB, Routed::Hub(next)) = (at.next.to, at.next.msg) else {
            return None;
        };
        if !(saver.wants)(next) {
            return None;
        }
        (saver.save)(at.events, at.waiting())
    }
}

/// Rank 0 is the hub (the server, or a decentralized run's monitor); member `c` (client or
/// peer) has rank `c + 1`.
pub(super) const HUB: EntityId = EntityId(0);

pub(super) fn member_entity(c: u32) -> EntityId {
    EntityId(c + 1)
}

/// Where a world's run starts.
pub(super) enum Start<M> {
    /// From the `start` events, with records that come first in the output (and are shown to
    /// the observer first).
    Fresh {
        start: Vec<(EntityId, EntityId, M)>,
        first: Vec<Record>,
    },
    /// From a checkpoint (whose records the caller has).
    Resume(Resume<M>),
}

/// Runs `world` from `start`.
pub(super) async fn run_world<W: World<Record = Record>>(
    world: W,
    start: Start<W::Msg>,
    mut observer: RecordObserver<Record>,
) -> Result<SimOutput, SimError> {
    let (outcome, mut records) = match start {
        Start::Fresh { start, first } => {
            let first: Vec<Record> = (first.into_iter())
                .filter_map(|r| observer.see(r))
                .collect();
            (Scheduler::run(world, start, observer).await?, first)
        }
        Start::Resume(from) => (Scheduler::resume(world, from, observer).await?, Vec::new()),
    };
    records.extend(outcome.records);
    Ok(SimOutput {
        records,
        end_time: outcome.end_time,
        events: outcome.events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oort's panic on non-finite feedback ended runs as "Mailbox has closed": a panic inside
    /// an entity is now an error that names it and what it said.
    #[test]
    fn a_panic_inside_an_entity_is_an_error_naming_it() {
        let handled: Result<(), SimError> = guarded(
            || "client 3".into(),
            || panic!("`amount` of samples must be less than or equal to `length`"),
        );
        let e = handled.unwrap_err().to_string();
        assert_eq!(
            e,
            "internal error (a bug in fedsim; please report it): client 3 panicked: `amount` of \
             samples must be less than or equal to `length`"
        );
        assert_eq!(guarded(|| "the server".into(), || Ok(7)).unwrap(), 7);
    }

    /// An actor that answers every message with no effects.
    struct Quiet;

    impl Actor for Quiet {
        type Context = Context<Self>;
    }

    type Words = Routed<&'static str, u32>;

    impl Handler<Deliver<&'static str, Words>> for Quiet {
        type Result = Result<Effects<Words, Record>, SimError>;
        fn handle(
            &mut self,
            _: Deliver<&'static str, Words>,
            _: &mut Context<Self>,
        ) -> Self::Result {
            Ok(Effects::new())
        }
    }

    impl Handler<Deliver<u32, Words>> for Quiet {
        type Result = Result<Effects<Words, Record>, SimError>;
        fn handle(&mut self, _: Deliver<u32, Words>, _: &mut Context<Self>) -> Self::Result {
            Ok(Effects::new())
        }
    }

    #[test]
    fn a_world_delivers_each_kind_only_to_its_ranks() {
        actix::System::new().block_on(async {
            let members = Arc::new(vec![Quiet.start(), Quiet.start()]);
            let world: HubWorld<Quiet, _, &'static str, u32> =
                HubWorld::new(Quiet.start(), members);
            let now = SimTime::ZERO;
            assert!(world.deliver(now, HUB, Routed::Hub("start")).await.is_ok());
            let to_member = world.deliver(now, member_entity(1), Routed::Member(7));
            assert!(to_member.await.is_ok());
            let member_kind_to_hub = world.deliver(now, HUB, Routed::Member(7)).await;
            assert!(matches!(member_kind_to_hub, Err(SimError::Misrouted(0))));
            let hub_kind_to_member = world.deliver(now, member_entity(1), Routed::Hub("x")).await;
            assert!(matches!(hub_kind_to_member, Err(SimError::Misrouted(2))));
        });
    }
}
