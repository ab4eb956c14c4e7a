//! The scheduler actor: owns the clock and the event queue, and delivers one event at a time.

use super::{EventKey, EventQueue, SimDuration, SimTime};
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
    /// A scenario field that only the loaded data could check.
    #[error(transparent)]
    Scenario(#[from] crate::settings::FieldError),
    /// The run could not be set up (its system model or topology): the cause.
    #[error(transparent)]
    Setup(Box<dyn std::error::Error + Send + Sync>),
    #[error("entity {0} was sent a message of another kind of entity")]
    Misrouted(u32),
    /// A model's time that the virtual clock cannot count (what gave it, in words).
    #[error(transparent)]
    Model(Box<dyn std::error::Error + Send + Sync>),
    /// An event later than the clock can count ([`SimTime::LAST`]).
    #[error(
        "the virtual clock cannot count past {} s (about 292 000 years): a message to entity \
         {to} at {now} s was to arrive {delay} s later",
        SimTime::LAST.as_secs_f64(),
        now = now.as_secs_f64(),
        delay = delay.as_secs_f64()
    )]
    Clock {
        now: SimTime,
        delay: SimDuration,
        to: u32,
    },
    /// The run's checkpoint could not be written (the cause says where and why).
    #[error(
        "writing the run's checkpoint failed (make room there, or pass --checkpoint-every off \
         to run without checkpoints)"
    )]
    Checkpoint(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The run was stopped from outside before it ended ([`super::interrupt`]).
    #[error("the run was interrupted")]
    Interrupted,
    /// A rule of the simulation broke: a bug in fedsim, never a user's input.
    #[error("internal error (a bug in fedsim; please report it): {0}")]
    Internal(String),
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

    /// The messages asked for, in order: target, delay, and the message (`None`: a pending
    /// job's result).
    pub fn sends(&self) -> impl Iterator<Item = (EntityId, SimDuration, Option<&M>)> {
        self.sends.iter().map(|(to, delay, p)| {
            let msg = match p {
                Payload::Ready(m) => Some(m),
                Payload::Pending(_) => None,
            };
            (*to, *delay, msg)
        })
    }

    /// The pending jobs' results, in order (for tests that await them, in any crate).
    pub fn into_pending(self) -> Vec<Pending<M>> {
        self.sends
            .into_iter()
            .filter_map(|(_, _, p)| match p {
                Payload::Pending(pending) => Some(pending),
                Payload::Ready(_) => None,
            })
            .collect()
    }

    /// The records, in order.
    pub fn records(&self) -> &[R] {
        &self.records
    }

    /// Whether the simulation ends after this event.
    pub fn stops(&self) -> bool {
        self.stop
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

    /// Called before the scheduler waits for a pending result: work that entities queued
    /// since the last wait (a cohort of training jobs) must start now. Calls come at points of
    /// the event order alone, never of timing.
    fn flush(&self) {}

    /// Whether the world may save its state ([`World::may_save`]): asked before each event,
    /// so that a world that never does costs nothing there.
    fn saves(&self) -> bool {
        false
    }

    /// Called before the scheduler delivers each event that is a plain message: a point where
    /// everything that decides the rest of the run is in the entities' state and the events
    /// waiting (plain messages, and the results of jobs in flight, which the world can start
    /// again from what it keeps). The world may save both there (a checkpoint, [`Resume`]
    /// starts from it); the future it returns runs before the next event is delivered. Calls
    /// come at points of the event order alone.
    fn may_save(&self, _at: SavePoint<'_, Self::Msg>) -> Option<Saving> {
        None
    }
}

/// An event as it waits in the queue: when it is due, its origin (whose rank orders it among
/// events due together), its target and its message.
#[derive(Clone, Copy)]
pub struct Queued<M> {
    pub at: SimTime,
    pub origin: EntityId,
    pub to: EntityId,
    pub msg: M,
}

/// A point where a world may save its run ([`World::may_save`]).
pub struct SavePoint<'a, M> {
    /// Events delivered before the next one.
    pub events: u64,
    /// The next event.
    pub next: Queued<&'a M>,
    /// The events after it.
    queue: &'a EventQueue<Event<M>>,
}

impl<'a, M> SavePoint<'a, M> {
    /// Every event waiting, in the order they are delivered, the next one first; a job's
    /// result still to come has no message (`None`). It sorts the queue: a world asks only
    /// where it saves (these points come at most events).
    pub fn waiting(&self) -> Vec<Queued<Option<&'a M>>> {
        let Queued {
            at,
            origin,
            to,
            msg,
        } = self.next;
        let next = Queued {
            at,
            origin,
            to,
            msg: Some(msg),
        };
        let later = self.queue.in_order().into_iter();
        std::iter::once(next)
            .chain(later.map(|(key, event)| queued(&key, event)))
            .collect()
    }
}

/// What saving a run's state at a [`SavePoint`] amounts to.
pub type Saving = Pin<Box<dyn Future<Output = Result<(), SimError>>>>;

/// Where a simulation resumes ([`Scheduler::resume`]): a point that was saved, whose entities
/// have been given their saved state.
pub struct Resume<M> {
    /// The clock (when the next event is due).
    pub now: SimTime,
    /// Events delivered before the next one.
    pub events: u64,
    /// The events that were waiting, in the order they are delivered: messages, and the
    /// results of the jobs in flight then (started again).
    pub waiting: Vec<Queued<Payload<M>>>,
}

/// What a finished simulation hands back.
pub struct Outcome<R> {
    pub records: Vec<R>,
    pub end_time: SimTime,
    pub events: u64,
}

/// Who sees a simulation's records as they are made (in event order), and whether the
/// [`Outcome`] keeps them. A run that streams its records to disk keeps none, so its memory
/// does not grow with the records.
pub struct RecordObserver<R> {
    see: Box<dyn FnMut(&R)>,
    keep: bool,
}

impl<R> RecordObserver<R> {
    /// Shows every record to `see` and keeps them all in the outcome.
    pub fn keeping(see: impl FnMut(&R) + 'static) -> Self {
        RecordObserver {
            see: Box::new(see),
            keep: true,
        }
    }

    /// Shows every record to `see` and keeps none.
    pub fn streaming(see: impl FnMut(&R) + 'static) -> Self {
        RecordObserver {
            see: Box::new(see),
            keep: false,
        }
    }

    /// Shows `r`, and hands it back when the outcome keeps it.
    pub fn see(&mut self, r: R) -> Option<R> {
        (self.see)(&r);
        self.keep.then_some(r)
    }
}

/// The only place where the clock advances.
pub struct Scheduler<W: World> {
    world: W,
    queue: EventQueue<Event<W::Msg>>,
    now: SimTime,
    events: u64,
    records: Vec<W::Record>,
    observer: RecordObserver<W::Record>,
    done: Option<oneshot::Sender<Result<Outcome<W::Record>, SimError>>>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Step;

impl<W: World> Scheduler<W> {
    /// Runs a simulation to its end: until an entity asks to stop or no event is left.
    /// `initial` events are scheduled at time zero, in the given order, with the rank of their
    /// `(origin, target)`. `observer` sees every record as it is made (for progress bars and
    /// streamed result files) and says whether the outcome keeps it.
    /// Must be awaited inside a running actix `System`.
    pub async fn run(
        world: W,
        initial: Vec<(EntityId, EntityId, W::Msg)>,
        observer: RecordObserver<W::Record>,
    ) -> Result<Outcome<W::Record>, SimError> {
        let initial = initial
            .into_iter()
            .map(|(origin, to, msg)| (SimTime::ZERO, origin, to, Payload::Ready(msg)));
        Self::start_with(world, SimTime::ZERO, 0, initial.collect(), observer).await
    }

    /// Runs a simulation from a point that [`World::may_save`] saved: the clock and the count
    /// of events as they were, and the events that were waiting, queued again in their order
    /// (so they keep it among themselves and before every event sent later, as in the run
    /// that saved them).
    pub async fn resume(
        world: W,
        from: Resume<W::Msg>,
        observer: RecordObserver<W::Record>,
    ) -> Result<Outcome<W::Record>, SimError> {
        let waiting = (from.waiting.into_iter())
            .map(|q| (q.at, q.origin, q.to, q.msg))
            .collect();
        Self::start_with(world, from.now, from.events, waiting, observer).await
    }

    async fn start_with(
        world: W,
        now: SimTime,
        events: u64,
        initial: Vec<(SimTime, EntityId, EntityId, Payload<W::Msg>)>,
        observer: RecordObserver<W::Record>,
    ) -> Result<Outcome<W::Record>, SimError> {
        let (tx, rx) = oneshot::channel();
        let mut queue = EventQueue::new();
        for (at, origin, to, payload) in initial {
            queue.push(at, origin.0, Event { to, payload });
        }
        Scheduler {
            world,
            queue,
            now,
            events,
            records: Vec::new(),
            observer,
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

    fn apply(
        &mut self,
        origin: EntityId,
        effects: Effects<W::Msg, W::Record>,
    ) -> Result<bool, SimError> {
        for r in effects.records {
            self.records.extend(self.observer.see(r));
        }
        for (to, delay, payload) in effects.sends {
            let at = self.now.checked_add(delay).ok_or(SimError::Clock {
                now: self.now,
                delay,
                to: to.0,
            })?;
            self.queue.push(at, origin.0, Event { to, payload });
        }
        Ok(effects.stop)
    }
}

/// `event` (due at `key`) as it waits: its message, or `None` for a job's result to come.
fn queued<'a, M>(key: &EventKey, event: &'a Event<M>) -> Queued<Option<&'a M>> {
    Queued {
        at: key.time,
        origin: EntityId(key.origin_rank),
        to: event.to,
        msg: match &event.payload {
            Payload::Ready(msg) => Some(msg),
            Payload::Pending(_) => None,
        },
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
        if super::interrupted() {
            return AtomicResponse::new(Box::pin(
                fut::ready(())
                    .map(|(), act: &mut Self, ctx| act.finish(Err(SimError::Interrupted), ctx)),
            ));
        }
        let Some((key, event)) = self.queue.pop() else {
            return AtomicResponse::new(Box::pin(
                fut::ready(()).map(|(), act: &mut Self, ctx| act.finish(Ok(()), ctx)),
            ));
        };
        debug_assert!(key.time >= self.now, "time never goes backwards");
        let saving = match &event.payload {
            Payload::Ready(msg) if self.world.saves() => {
                let next = Queued {
                    at: key.time,
                    origin: EntityId(key.origin_rank),
                    to: event.to,
                    msg,
                };
                self.world.may_save(SavePoint {
                    events: self.events,
                    next,
                    queue: &self.queue,
                })
            }
            _ => None,
        };
        self.now = key.time;
        self.events += 1;
        if matches!(event.payload, Payload::Pending(_)) {
            self.world.flush();
        }
        let world = self.world.clone();
        let now = self.now;
        let to = event.to;
        let delivery = async move {
            if let Some(saving) = saving {
                saving.await?;
            }
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
            move |result, act, ctx| match result.and_then(|effects| act.apply(to, effects)) {
                Ok(true) => act.finish(Ok(()), ctx),
                Ok(false) => ctx.notify(Step),
                Err(e) => act.finish(Err(e), ctx),
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Log = Rc<RefCell<Vec<(u64, u32, &'static str)>>>;
    type Script = dyn Fn(EntityId, &'static str) -> Result<Effects<&'static str, String>, SimError>;

    /// A world whose entities log every delivery (time, entity, message) and answer by a script.
    #[derive(Clone)]
    struct Toy {
        log: Log,
        script: Rc<Script>,
    }

    impl World for Toy {
        type Msg = &'static str;
        type Record = String;

        fn deliver(
            &self,
            now: SimTime,
            to: EntityId,
            msg: &'static str,
        ) -> Delivery<&'static str, String> {
            self.log.borrow_mut().push((now.0, to.0, msg));
            let effects = (self.script)(to, msg);
            Box::pin(async move { effects })
        }
    }

    type Initial = Vec<(EntityId, EntityId, &'static str)>;

    /// A run's outcome and its delivery log.
    type Ran = (
        Result<Outcome<String>, SimError>,
        Vec<(u64, u32, &'static str)>,
    );

    fn run(
        initial: Initial,
        script: impl Fn(EntityId, &'static str) -> Result<Effects<&'static str, String>, SimError>
            + 'static,
    ) -> Ran {
        let log = Log::default();
        let world = Toy {
            log: log.clone(),
            script: Rc::new(script),
        };
        let out = actix::System::new().block_on(Scheduler::run(
            world,
            initial,
            RecordObserver::keeping(|_| {}),
        ));
        let log = log.take();
        (out, log)
    }

    const fn e(n: u32) -> EntityId {
        EntityId(n)
    }

    fn after(us: u64) -> SimDuration {
        SimDuration(us)
    }

    #[test]
    fn equal_times_go_by_origin_rank_then_fifo() {
        let initial = vec![(e(2), e(5), "a"), (e(1), e(6), "b"), (e(1), e(7), "c")];
        let (out, log) = run(initial, |_, _| Ok(Effects::new()));
        assert_eq!(log, [(0, 6, "b"), (0, 7, "c"), (0, 5, "a")]);
        assert_eq!(out.unwrap().events, 3);
    }

    #[test]
    fn messages_scheduled_for_the_same_time_keep_the_order_of_their_senders_ranks() {
        // Entity 1 (rank 1) handles its start before entity 3, although entity 3's start was
        // queued first; at t = 10, entity 1's "z" comes before entity 3's "x" and "y", which
        // keep the order entity 3 sent them in.
        let initial = vec![(e(3), e(3), "go"), (e(1), e(1), "go")];
        let (_, log) = run(initial, |to, msg| {
            let mut eff = Effects::new();
            match (to.0, msg) {
                (3, "go") => {
                    eff.send(e(10), after(10), "x");
                    eff.send(e(11), after(10), "y");
                }
                (1, "go") => eff.send(e(12), after(10), "z"),
                _ => {}
            }
            Ok(eff)
        });
        assert_eq!(
            log,
            [
                (0, 1, "go"),
                (0, 3, "go"),
                (10, 12, "z"),
                (10, 10, "x"),
                (10, 11, "y")
            ]
        );
    }

    #[test]
    fn a_pending_result_enters_at_its_due_time_not_when_its_job_finishes() {
        // "slow" is due first but its job finishes last (after 100 ms of wall time); "fast"
        // is finished at once but due last. Events stay in simulated-time order.
        let (out, log) = run(vec![(e(1), e(1), "go")], |to, msg| {
            let mut eff = Effects::new();
            if (to.0, msg) == (1, "go") {
                let (slow_tx, slow) = oneshot::channel();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    let _ = slow_tx.send(Ok("slow"));
                });
                let (fast_tx, fast) = oneshot::channel();
                let _ = fast_tx.send(Ok("fast"));
                eff.send_pending(e(2), after(5), slow);
                eff.send(e(3), after(10), "ready");
                eff.send_pending(e(4), after(20), fast);
            }
            Ok(eff)
        });
        assert_eq!(
            log,
            [
                (0, 1, "go"),
                (5, 2, "slow"),
                (10, 3, "ready"),
                (20, 4, "fast")
            ]
        );
        assert_eq!(out.unwrap().end_time, SimTime(20));
    }

    #[test]
    fn stop_drops_what_is_still_queued_and_keeps_the_records() {
        let (out, log) = run(vec![(e(1), e(1), "go")], |to, msg| {
            let mut eff = Effects::new();
            match (to.0, msg) {
                (1, "go") => eff.send(e(2), after(10), "tick"),
                (2, "tick") => {
                    eff.send(e(3), after(1), "never");
                    eff.record("stopped here".to_string());
                    eff.stop();
                }
                _ => {}
            }
            Ok(eff)
        });
        assert_eq!(log, [(0, 1, "go"), (10, 2, "tick")]);
        let out = out.unwrap();
        assert_eq!(
            (out.end_time, out.records),
            (SimTime(10), vec!["stopped here".into()])
        );
    }

    #[test]
    fn an_event_past_the_clocks_last_time_ends_the_run_naming_it() {
        let (out, log) = run(vec![(e(1), e(1), "go")], |to, msg| {
            let mut eff = Effects::new();
            if (to.0, msg) == (1, "go") {
                eff.send(e(2), SimDuration(SimTime::LAST.0), "last");
            } else if msg == "last" {
                eff.send(e(3), SimDuration(1), "too late");
            }
            Ok(eff)
        });
        assert_eq!(log, [(0, 1, "go"), (SimTime::LAST.0, 2, "last")]);
        let e = out.err().expect("refused");
        assert!(matches!(e, SimError::Clock { to: 3, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("the virtual clock cannot count past"),
            "{e}"
        );
    }

    #[test]
    fn a_failed_job_or_entity_ends_the_run_with_its_error() {
        let (out, _) = run(vec![(e(1), e(1), "go")], |_, msg| {
            let mut eff = Effects::new();
            if msg == "go" {
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(Err("boom".into()));
                eff.send_pending(e(2), after(1), rx);
            }
            Ok(eff)
        });
        assert!(matches!(out, Err(SimError::JobFailed(m)) if m == "boom"));
        let (out, log) = run(vec![(e(1), e(1), "go"), (e(1), e(2), "later")], |_, _| {
            Err(SimError::Internal("refused".into()))
        });
        assert!(matches!(out, Err(SimError::Internal(m)) if m == "refused"));
        assert_eq!(log.len(), 1, "nothing is delivered after an error");
    }

    /// A point a test keeps: events before it, and the waiting events (`None`: a job's
    /// result to come).
    type Point = (u64, Vec<(u64, u32, u32, Option<&'static str>)>);

    /// [`Toy`], saving every point it is offered (the entities keep no state: the waiting
    /// events are all there is to save, and a job's result is made again from its target).
    #[derive(Clone)]
    struct Keeping {
        toy: Toy,
        points: Rc<RefCell<Vec<Point>>>,
    }

    impl World for Keeping {
        type Msg = &'static str;
        type Record = String;

        fn deliver(
            &self,
            now: SimTime,
            to: EntityId,
            msg: Self::Msg,
        ) -> Delivery<Self::Msg, String> {
            self.toy.deliver(now, to, msg)
        }

        fn saves(&self) -> bool {
            true
        }

        fn may_save(&self, at: SavePoint<'_, Self::Msg>) -> Option<Saving> {
            let waiting = (at.waiting().iter())
                .map(|q| (q.at.0, q.origin.0, q.to.0, q.msg.copied()))
                .collect();
            self.points.borrow_mut().push((at.events, waiting));
            None
        }
    }

    /// Entity 1 starts two messages due together and a job due after them; they start more,
    /// one of them from the same entity at the same time as another's.
    fn chain(to: EntityId, msg: &'static str) -> Result<Effects<&'static str, String>, SimError> {
        let mut eff = Effects::new();
        match (to.0, msg) {
            (1, "go") => {
                eff.send(e(2), after(5), "a");
                eff.send(e(3), after(5), "b");
                let (tx, job) = oneshot::channel();
                let _ = tx.send(Ok("job"));
                eff.send_pending(e(4), after(7), job);
            }
            (2, "a") => {
                eff.send(e(5), after(20), "late");
                eff.send(e(2), after(1), "tick");
            }
            (2, "tick") => eff.send(e(3), after(19), "c"),
            (3, "c") => eff.send(e(1), after(0), "end"),
            _ => {}
        }
        Ok(eff)
    }

    /// Resuming from any saved point, with its waiting events and its job started again,
    /// delivers what the whole run delivered after it, at the same times and in the same
    /// order.
    #[test]
    fn a_run_resumed_from_any_saved_point_delivers_the_rest_of_the_run() {
        let whole_log = Log::default();
        let points = Rc::new(RefCell::new(Vec::new()));
        let toy = |log: &Log| Toy {
            log: log.clone(),
            script: Rc::new(chain),
        };
        let world = Keeping {
            toy: toy(&whole_log),
            points: points.clone(),
        };
        let initial = vec![(e(1), e(1), "go")];
        let observer = || RecordObserver::keeping(|_| {});
        let whole = actix::System::new()
            .block_on(Scheduler::run(world, initial, observer()))
            .unwrap();
        let whole_log = whole_log.take();
        assert_eq!(whole.events, 8);
        let points = points.take();
        let at: Vec<u64> = points.iter().map(|(events, _)| *events).collect();
        // Not at the job's result (event 4), but with it waiting (events 1 to 3).
        assert_eq!(at, [0, 1, 2, 3, 5, 6, 7]);
        assert_eq!(
            points[1].1,
            [(5, 1, 2, Some("a")), (5, 1, 3, Some("b")), (7, 1, 4, None)]
        );
        // "late" and "c" are due together from the same sender: they keep its order.
        assert_eq!(
            points[4].1,
            [(25, 2, 5, Some("late")), (25, 2, 3, Some("c"))]
        );
        for (events, waiting) in points {
            let log = Log::default();
            let payload = |msg: Option<&'static str>| match msg {
                Some(msg) => Payload::Ready(msg),
                None => {
                    let (tx, job) = oneshot::channel();
                    let _ = tx.send(Ok("job"));
                    Payload::Pending(job)
                }
            };
            let from = Resume {
                now: SimTime(waiting[0].0),
                events,
                waiting: (waiting.iter())
                    .map(|&(at, origin, to, msg)| Queued {
                        at: SimTime(at),
                        origin: e(origin),
                        to: e(to),
                        msg: payload(msg),
                    })
                    .collect(),
            };
            let resumed = actix::System::new()
                .block_on(Scheduler::resume(toy(&log), from, observer()))
                .unwrap();
            assert_eq!(log.take(), whole_log[events as usize..], "from {events}");
            assert_eq!(
                (resumed.events, resumed.end_time),
                (whole.events, whole.end_time)
            );
        }
    }
}
