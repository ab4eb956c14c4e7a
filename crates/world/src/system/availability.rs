//! When each client is online: always, a two-state Markov process, or a trace of intervals.
//!
//! Every answer is a pure function of the scenario and the seed: the Markov chains are drawn
//! lazily from each client's own stream, so the order of the questions does not change the
//! answers.

use crate::io::FedScaleBehavior;
use crate::sim::{Entity, SeedTree, SimDuration, SimTime};
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, Exp};
use std::sync::Mutex;

/// Online intervals `[start, end)`, sorted and disjoint, optionally repeating every `period`.
#[derive(Clone, Debug, PartialEq)]
pub struct Intervals {
    spans: Vec<(SimTime, SimTime)>,
    period: Option<SimDuration>,
}

impl Intervals {
    /// From seconds; overlapping or touching spans are merged. With a period, spans are
    /// taken modulo nothing: they must lie in `[0, period]`.
    pub fn new(mut spans_s: Vec<(f64, f64)>, period_s: Option<f64>) -> Intervals {
        spans_s.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut spans: Vec<(SimTime, SimTime)> = Vec::new();
        for (s, e) in spans_s {
            let (s, e) = (to_time(s), to_time(e));
            match spans.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => spans.push((s, e)),
            }
        }
        Intervals {
            spans,
            period: period_s.map(SimDuration::from_secs_f64_ceil),
        }
    }

    /// FedScale's trace: online during `[active[i], inactive[i]]`, every `finish_time` seconds.
    pub fn fedscale(t: &FedScaleBehavior) -> Intervals {
        let spans = t
            .active
            .iter()
            .cloned()
            .zip(t.inactive.iter().cloned())
            .collect();
        Intervals::new(spans, Some(t.finish_time))
    }

    /// The time after which this trace is never online again (`None`: it always comes back,
    /// as a periodic trace with some online time does).
    fn ends(&self) -> Option<SimTime> {
        match self.period {
            Some(p) if p.0 > 0 && !self.spans.is_empty() => None,
            _ => Some(self.spans.last().map_or(SimTime::ZERO, |s| s.1)),
        }
    }

    fn online_until(&self, t: SimTime) -> Option<SimTime> {
        let Some(p) = self.period else {
            return span_end(&self.spans, t);
        };
        if p.0 == 0 {
            return None;
        }
        let base = t.0 - t.0 % p.0;
        let end = span_end(&self.spans, SimTime(t.0 % p.0))?;
        // A span that runs to the period's end continues into the next period's first span.
        if end.0 >= p.0 && self.spans[0].0 == SimTime::ZERO {
            if self.spans.len() == 1 {
                return Some(SimTime::MAX);
            }
            return Some(SimTime(base + p.0 + self.spans[0].1 .0));
        }
        Some(SimTime(base + end.0.min(p.0)))
    }

    fn next_online(&self, t: SimTime) -> Option<SimTime> {
        if self.online_until(t).is_some() {
            return Some(t);
        }
        let first_after = |r: SimTime| self.spans.iter().find(|s| s.0 > r).map(|s| s.0);
        match self.period {
            None => first_after(t),
            Some(p) => {
                let base = t.0 - t.0 % p.0;
                match first_after(SimTime(t.0 % p.0)).filter(|s| s.0 < p.0) {
                    Some(s) => Some(SimTime(base + s.0)),
                    None => self.spans.first().map(|s| SimTime(base + p.0 + s.0 .0)),
                }
            }
        }
    }
}

/// The end of the span of sorted disjoint `spans` that holds `t`.
fn span_end(spans: &[(SimTime, SimTime)], t: SimTime) -> Option<SimTime> {
    let i = spans.partition_point(|s| s.0 <= t);
    (i > 0 && t < spans[i - 1].1).then(|| spans[i - 1].1)
}

fn to_time(s: f64) -> SimTime {
    SimTime(SimDuration::from_secs_f64_ceil(s).0)
}

/// A client's on/off Markov chain, drawn as far as it has been asked about: only its last
/// period, `[from, cursor)`, and where its stream stands are kept (32 bytes however long the
/// run). The stream is made again from the client's seed at that position when the chain must
/// go further, and a question about a time before `from` draws the chain again from its start
/// (the same draws, so the same answer), so the answers are those of a chain kept whole.
#[derive(Clone, Copy, Debug)]
struct Chain {
    /// The stream's position (in 32-bit words) after the draws so far.
    word_pos: u64,
    from: SimTime,
    cursor: SimTime,
    /// The state at `cursor`: that of the next period to draw (the last period's is the other).
    online_at_cursor: bool,
}

/// Chains by client, in pages of [`CHAIN_PAGE`] clients made when one of their clients is
/// first asked about: a scan over every client (the server's `available_only` sampling) reads
/// memory in order, and a run that asks about few clients holds few pages.
#[derive(Default)]
pub struct Chains {
    pages: Vec<Option<Box<[Option<Chain>]>>>,
}

const CHAIN_PAGE: usize = 1024;

impl Chains {
    fn slot(&mut self, client: u32) -> &mut Option<Chain> {
        let (page, i) = (client as usize / CHAIN_PAGE, client as usize % CHAIN_PAGE);
        if self.pages.len() <= page {
            self.pages.resize_with(page + 1, || None);
        }
        let page = self.pages[page].get_or_insert_with(|| vec![None; CHAIN_PAGE].into());
        &mut page[i]
    }
}

/// Online and offline durations of a Markov availability class.
pub struct OnOff {
    on: Exp<f64>,
    off: Exp<f64>,
    p_online: f64,
}

impl OnOff {
    /// Exponential online / offline durations of the given means (positive, checked).
    pub fn new(mean_online_s: f64, mean_offline_s: f64) -> OnOff {
        OnOff {
            on: Exp::new(1.0 / mean_online_s).expect("checked mean"),
            off: Exp::new(1.0 / mean_offline_s).expect("checked mean"),
            p_online: mean_online_s / (mean_online_s + mean_offline_s),
        }
    }
}

/// The availability of every client of a run.
pub enum AvailabilityModel {
    Always,
    /// Each client's chain is made when its availability is first asked, from its own stream,
    /// and then drawn as far as the questions reach: only asked-about clients cost memory.
    Markov {
        /// Per availability class: its chain's law, or `None` for always online.
        laws: Vec<Option<OnOff>>,
        /// Each client's class (empty: every client has class 0).
        class_of: Vec<u16>,
        seeds: SeedTree,
        chains: Mutex<Chains>,
    },
    /// Client `c` follows trace `c mod len`.
    Traces(Vec<Intervals>),
}

impl AvailabilityModel {
    /// Two-state chains with exponential online / offline durations of the given means; each
    /// client starts in the stationary distribution, from its own stream.
    pub fn markov(mean_online_s: f64, mean_offline_s: f64, seeds: &SeedTree) -> Self {
        Self::classes(
            vec![Some(OnOff::new(mean_online_s, mean_offline_s))],
            Vec::new(),
            seeds,
        )
    }

    /// Client `c` follows class `class_of[c]`: always online (`None`) or a chain of that law,
    /// drawn as [`AvailabilityModel::markov`] draws it.
    pub fn classes(laws: Vec<Option<OnOff>>, class_of: Vec<u16>, seeds: &SeedTree) -> Self {
        AvailabilityModel::Markov {
            laws,
            class_of,
            seeds: *seeds,
            chains: Mutex::new(Chains::default()),
        }
    }

    /// The period of `client`'s Markov chain that holds `t`: whether it is an online one, and
    /// when it ends (`None`: the client's class is always online).
    fn chain_period(&self, client: u32, t: SimTime) -> Option<(bool, SimTime)> {
        let AvailabilityModel::Markov {
            laws,
            class_of,
            seeds,
            chains,
        } = self
        else {
            unreachable!("only Markov availability has chains")
        };
        let class = class_of.get(client as usize).map_or(0, |&k| k as usize);
        let law = laws[class].as_ref()?;
        let stream = || seeds.rng(Entity::Client(client), "availability", 0);
        let mut chains = chains.lock().expect("no panics while held");
        let slot = chains.slot(client);
        // A chain made now goes on with the stream it was made from (made once, not twice).
        let (chain, made) = match slot {
            Some(chain) => (chain, None),
            None => {
                let mut rng = stream();
                let chain = Chain::start(&mut rng, law);
                (slot.insert(chain), Some(rng))
            }
        };
        if t >= chain.from {
            chain.extend_past(t, law, || made.unwrap_or_else(stream));
            return Some(chain.period());
        }
        // Before the period kept: draw the chain again from its start.
        let mut rng = stream();
        let mut again = Chain::start(&mut rng, law);
        again.extend_past(t, law, || rng);
        Some(again.period())
    }

    /// If `client` is online at `t`: when it goes offline ([`SimTime::MAX`]: never).
    pub fn online_until(&self, client: u32, t: SimTime) -> Option<SimTime> {
        match self {
            AvailabilityModel::Always => Some(SimTime::MAX),
            AvailabilityModel::Traces(ts) => ts[client as usize % ts.len()].online_until(t),
            AvailabilityModel::Markov { .. } => match self.chain_period(client, t) {
                None => Some(SimTime::MAX),
                Some((online, end)) => online.then_some(end),
            },
        }
    }

    /// The time after which none of the first `clients` clients is ever online again (`None`:
    /// some always comes back, as with Markov chains or periodic traces).
    pub fn all_gone_after(&self, clients: u32) -> Option<SimTime> {
        match self {
            AvailabilityModel::Always | AvailabilityModel::Markov { .. } => None,
            AvailabilityModel::Traces(ts) => ts
                .iter()
                .take(clients as usize)
                .map(Intervals::ends)
                .try_fold(SimTime::ZERO, |latest, end| Some(latest.max(end?))),
        }
    }

    /// Whether every client is always online.
    pub fn is_always(&self) -> bool {
        matches!(self, AvailabilityModel::Always)
    }

    /// The first time at or after `t` when `client` is online (`None`: never again).
    pub fn next_online(&self, client: u32, t: SimTime) -> Option<SimTime> {
        match self {
            AvailabilityModel::Always => Some(t),
            AvailabilityModel::Traces(ts) => ts[client as usize % ts.len()].next_online(t),
            AvailabilityModel::Markov { .. } => match self.chain_period(client, t) {
                None => Some(t),
                Some((true, _)) => Some(t),
                // Offline at `t`: online again when the offline period ends.
                Some((false, end)) => Some(end),
            },
        }
    }
}

impl Chain {
    /// A chain before its first period, its first state drawn from `rng` (the client's
    /// stream) in the stationary distribution.
    fn start(rng: &mut ChaCha20Rng, law: &OnOff) -> Chain {
        let online = rng.gen::<f64>() < law.p_online;
        Chain {
            word_pos: rng.get_word_pos() as u64,
            from: SimTime::ZERO,
            cursor: SimTime::ZERO,
            online_at_cursor: online,
        }
    }

    /// Draws periods until the cursor is past `t`, so the last period holds `t` (if `t` is not
    /// before it), from the client's `stream` made again at the chain's position.
    fn extend_past(&mut self, t: SimTime, law: &OnOff, stream: impl FnOnce() -> ChaCha20Rng) {
        if self.cursor > t {
            return;
        }
        let mut rng = stream();
        rng.set_word_pos(self.word_pos.into());
        while self.cursor <= t {
            let dist = if self.online_at_cursor {
                &law.on
            } else {
                &law.off
            };
            let d = SimDuration::from_secs_f64_ceil(dist.sample(&mut rng)).max(SimDuration(1));
            self.from = self.cursor;
            self.cursor += d;
            self.online_at_cursor = !self.online_at_cursor;
        }
        self.word_pos = rng.get_word_pos() as u64;
    }

    /// The last period drawn: whether it is an online one, and its end.
    fn period(&self) -> (bool, SimTime) {
        (!self.online_at_cursor, self.cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> SimTime {
        SimTime(x * 1_000_000)
    }

    #[test]
    fn plain_intervals() {
        let iv = Intervals::new(vec![(10.0, 20.0), (15.0, 30.0), (50.0, 60.0)], None);
        assert_eq!(iv.online_until(s(5)), None);
        assert_eq!(iv.online_until(s(10)), Some(s(30)));
        assert_eq!(iv.online_until(s(30)), None);
        assert_eq!(iv.next_online(s(31)), Some(s(50)));
        assert_eq!(iv.next_online(s(61)), None);
    }

    #[test]
    fn a_trace_without_a_period_ends_at_its_last_span() {
        let traces = |spans: Vec<Intervals>| AvailabilityModel::Traces(spans);
        let a = Intervals::new(vec![(0.0, 5.0), (8.0, 10.5)], None);
        let b = Intervals::new(vec![(1.0, 7.0)], None);
        let never = Intervals::new(vec![], None);
        let periodic = Intervals::new(vec![(1.0, 2.0)], Some(10.0));
        let t = |x: f64| SimTime(SimDuration::from_secs_f64_ceil(x).0);
        let all = traces(vec![a.clone(), b.clone(), never.clone()]);
        assert_eq!(all.all_gone_after(3), Some(t(10.5)));
        // Clients follow trace `c mod len`: one client reads only the first trace.
        assert_eq!(
            traces(vec![b.clone(), a.clone()]).all_gone_after(1),
            Some(t(7.0))
        );
        assert_eq!(traces(vec![never]).all_gone_after(4), Some(SimTime::ZERO));
        assert_eq!(traces(vec![a, periodic]).all_gone_after(2), None);
        let seeds = SeedTree::new(1);
        assert_eq!(
            AvailabilityModel::markov(1.0, 1.0, &seeds).all_gone_after(9),
            None
        );
        assert_eq!(AvailabilityModel::Always.all_gone_after(9), None);
    }

    #[test]
    fn periodic_intervals_as_fedscale() {
        let iv = Intervals::fedscale(&FedScaleBehavior {
            active: vec![0.0, 40.0],
            inactive: vec![10.0, 100.0],
            finish_time: 100.0,
        });
        assert_eq!(iv.online_until(s(105)), Some(s(110)));
        assert_eq!(iv.online_until(s(20)), None);
        assert_eq!(iv.next_online(s(120)), Some(s(140)));
        // The span reaching the period's end runs on into the next period's first one.
        assert_eq!(iv.online_until(s(90)), Some(s(110)));
    }

    #[test]
    fn markov_is_order_independent_and_has_the_right_duty_cycle() {
        let seeds = SeedTree::new(9);
        let a = AvailabilityModel::markov(60.0, 240.0, &seeds);
        let b = AvailabilityModel::markov(60.0, 240.0, &seeds);
        // Ask `a` far ahead first, `b` in order: same answers (`a` draws its chain again from
        // the start for each earlier time, `b` goes on from the period it kept).
        let far = a.online_until(2, s(100_000));
        let mut online = 0;
        for k in 0..100_000u64 {
            let t = s(k);
            let x = b.online_until(2, t);
            assert_eq!(x, a.online_until(2, t));
            assert_eq!(b.next_online(2, t), a.next_online(2, t));
            if let Some(end) = x {
                assert!(end > t);
                online += 1;
            } else {
                assert!(b.next_online(2, t).unwrap() > t);
            }
        }
        assert_eq!(far, b.online_until(2, s(100_000)));
        let duty = online as f64 / 100_000.0;
        assert!((duty - 0.2).abs() < 0.05, "{duty}");
    }

    #[test]
    fn classes_give_each_client_its_own_law() {
        let seeds = SeedTree::new(9);
        let one = AvailabilityModel::markov(60.0, 240.0, &seeds);
        // Clients 0 and 2 always online; client 1 the chain `markov` gives it.
        let laws = vec![None, Some(OnOff::new(60.0, 240.0))];
        let mixed = AvailabilityModel::classes(laws, vec![0, 1, 0], &seeds);
        for k in (0..5_000u64).step_by(7) {
            let t = s(k);
            assert_eq!(mixed.online_until(0, t), Some(SimTime::MAX));
            assert_eq!(mixed.next_online(2, t), Some(t));
            assert_eq!(mixed.online_until(1, t), one.online_until(1, t));
            assert_eq!(mixed.next_online(1, t), one.next_online(1, t));
        }
    }
}
