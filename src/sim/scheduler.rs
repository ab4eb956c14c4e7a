//! The scheduler actor: owns the clock and the event queue, and delivers one event at a time.

use super::{EventQueue, SimDuration, SimTime};
use actix::prelude::*;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::oneshot;

/// An addressable entity. Its number is its rank: the tie-break at equal times.
/// Ranks come from the scenario (server 0, then clients in id order, or peers in id order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityId(pub u32);

/// Errors that stop a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("a parallel job failed: {0}")]
    JobFailed(String),
    #[error("an actor stopped before answering: {0}")]
    ActorGone(String),
    #[error("{0}")]
    Model(String),
}

/// The result of work running outside the simulation (on the trainer pool). It is awaited
/// only when the event carrying it is due.
pub type Pending<M> = oneshot::Receiver<Result<M, String>>;

/// A message as it waits in the queue.
pub enum Payload<M> {
    Ready(M),
    Pending(Pending<M>),
}

struct Event<M> {
    to: EntityId,
    payload: Payload<M>,
}

/// What an entity asks for when it handles a message. Entities return effects; they never
/// send to each other directly.
pub struct Effects<M, R> {
    sends: Vec<(EntityId, SimDuration, Payload<M>)>,
    records: Vec<R>,
    stop: bool,
}

impl<M, R> Default for Effects<M, R> {
    fn default() -> Self {
        Effects {
            sends: Vec::new(),
            records: Vec::new(),
            stop: false,
        }
    }
}

impl<M, R> Effects<M, R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Deliver `msg` to `to` after `delay`.
    pub fn send(&mut self, to: EntityId, delay: SimDuration, msg: M) {
        self.sends.push((to, delay, Payload::Ready(msg)));
    }

    /// Deliver the result of a parallel job to `to` after `delay`.
    pub fn send_pending(&mut self, to: EntityId, delay: SimDuration, pending: Pending<M>) {
        self.sends.push((to, delay, Payload::Pending(pending)));
    }

    /// Append a result record (kept in event order).
    pub fn record(&mut self, r: R) {
        self.records.push(r);
    }

    /// End the simulation after this event, dropping whatever is still queued.
    pub fn stop(&mut self) {
        self.stop = true;
    }
}

/// What delivering a message yields: the receiving entity's effects, once it has handled it.
pub type Delivery<M, R> = Pin<Box<dyn Future<Output = Result<Effects<M, R>, SimError>>>>;

/// The entities of a simulation as seen by the scheduler: something that delivers a message to
/// an entity and returns that entity's effects. Implementations hold actix addresses.
pub trait World: Clone + Unpin + 'static {
    type Msg: Unpin + 'static;
    type Record: Unpin + 'static;

    fn deliver(
        &self,
        now: SimTime,
        to: EntityId,
        msg: Self::Msg,
    ) -> Delivery<Self::Msg, Self::Record>;
}

/// What a finished simulation hands back.
pub struct Outcome<R> {
    pub records: Vec<R>,
    pub end_time: SimTime,
    pub events: u64,
}

type Observer<R> = Box<dyn FnMut(&R)>;

/// The only place where the clock advances.
pub struct Scheduler<W: World> {
    world: W,
    queue: EventQueue<Event<W::Msg>>,
    now: SimTime,
    events: u64,
    records: Vec<W::Record>,
    observer: Observer<W::Record>,
    done: Option<oneshot::Sender<Result<Outcome<W::Record>, SimError>>>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Step;

impl<W: World> Scheduler<W> {
    /// Runs a simulation to its end: until an entity asks to stop or no event is left.
    /// `initial` events are scheduled at time zero, in the given order, with the rank of their
    /// `(origin, target)`. `observer` sees every record as it is made (for progress bars).
    /// Must be awaited inside a running actix `System`.
    pub async fn run(
        world: W,
        initial: Vec<(EntityId, EntityId, W::Msg)>,
        observer: impl FnMut(&W::Record) + 'static,
    ) -> Result<Outcome<W::Record>, SimError> {
        let (tx, rx) = oneshot::channel();
        let mut queue = EventQueue::new();
        for (origin, to, msg) in initial {
            queue.push(
                SimTime::ZERO,
                origin.0,
                Event {
                    to,
                    payload: Payload::Ready(msg),
                },
            );
        }
        Scheduler {
            world,
            queue,
            now: SimTime::ZERO,
            events: 0,
            records: Vec::new(),
            observer: Box::new(observer),
            done: Some(tx),
        }
        .start();
        rx.await
            .map_err(|_| SimError::ActorGone("scheduler".into()))?
    }

    fn finish(&mut self, result: Result<(), SimError>, ctx: &mut Context<Self>) {
        if let Some(done) = self.done.take() {
            let outcome = result.map(|()| Outcome {
                records: std::mem::take(&mut self.records),
                end_time: self.now,
                events: self.events,
            });
            let _ = done.send(outcome);
        }
        ctx.stop();
    }

    fn apply(&mut self, origin: EntityId, effects: Effects<W::Msg, W::Record>) -> bool {
        for (to, delay, payload) in effects.sends {
            self.queue
                .push(self.now + delay, origin.0, Event { to, payload });
        }
        for r in effects.records {
            (self.observer)(&r);
            self.records.push(r);
        }
        effects.stop
    }
}

impl<W: World> Actor for Scheduler<W> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Step);
    }
}

impl<W: World> Handler<Step> for Scheduler<W> {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Step, _ctx: &mut Context<Self>) -> Self::Result {
        let Some((key, event)) = self.queue.pop() else {
            return AtomicResponse::new(Box::pin(
                fut::ready(()).map(|(), act: &mut Self, ctx| act.finish(Ok(()), ctx)),
            ));
        };
        debug_assert!(key.time >= self.now, "time never goes backwards");
        self.now = key.time;
        self.events += 1;
        let world = self.world.clone();
        let now = self.now;
        let to = event.to;
        let delivery = async move {
            let msg = match event.payload {
                Payload::Ready(m) => m,
                Payload::Pending(rx) => rx
                    .await
                    .map_err(|_| SimError::JobFailed("job dropped without a result".into()))?
                    .map_err(SimError::JobFailed)?,
            };
            world.deliver(now, to, msg).await
        };
        AtomicResponse::new(Box::pin(delivery.into_actor(self).map(
            move |result, act, ctx| match result {
                Ok(effects) => {
                    if act.apply(to, effects) {
                        act.finish(Ok(()), ctx);
                    } else {
                        ctx.notify(Step);
                    }
                }
                Err(e) => act.finish(Err(e), ctx),
            },
        )))
    }
}
