//! Which idle participants are online, kept by each participant's availability changes
//! instead of asked of every participant at each draw.
//!
//! Built at the first draw that needs it (one question per participant), then moved forward
//! to each draw's time: a participant is asked again only when its availability changes, so
//! a draw costs the changes since the last one plus what it draws, not the population. The
//! online idle participants are counted by position in the sorted participant list (a
//! Fenwick tree), so a draw of positions gives the clients a scan of the list would give.
//!
//! This room must not answer for a time before the last it was moved to, nor order anything
//! by what is not a time or a position.

use crate::sampling::Candidates;
use crate::sim::SimTime;
use crate::system::SystemModel;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct OnlineIdle {
    /// Per position: 1 while the participant is online and idle.
    counts: Fenwick,
    online: Vec<bool>,
    idle: Vec<bool>,
    /// Each participant's next availability change: (time, position).
    changes: BinaryHeap<Reverse<(SimTime, u32)>>,
    /// Changes up to this time are applied.
    at: SimTime,
}

impl OnlineIdle {
    /// The `participants` (sorted) at `now`, those for which `busy` holds having a job out.
    pub fn new(
        participants: &[u32],
        system: &SystemModel,
        now: SimTime,
        busy: impl Fn(u32) -> bool,
    ) -> Self {
        let n = participants.len();
        let mut index = OnlineIdle {
            counts: Fenwick::new(n),
            online: vec![false; n],
            idle: participants.iter().map(|&c| !busy(c)).collect(),
            changes: BinaryHeap::with_capacity(n),
            at: now,
        };
        for position in 0..n {
            index.ask(participants, system, position, now);
        }
        index
    }

    /// Applies every availability change up to `now`.
    pub fn advance(&mut self, participants: &[u32], system: &SystemModel, now: SimTime) {
        debug_assert!(now >= self.at, "availability is asked forward in time");
        self.at = now;
        while let Some(&Reverse((t, position))) = self.changes.peek() {
            if t > now {
                break;
            }
            self.changes.pop();
            self.ask(participants, system, position as usize, t);
        }
    }

    /// Whether the participant at `position` is online at `t`, and when to ask again.
    fn ask(&mut self, participants: &[u32], system: &SystemModel, position: usize, t: SimTime) {
        let client = participants[position];
        let (online, next) = match system.online_until(client, t) {
            Some(end) => (true, Some(end)),
            None => (false, system.next_online(client, t)),
        };
        self.set(position, online, self.idle[position]);
        // Asking again no later than the change keeps the answer exact; a change that does
        // not move forward is asked again a tick later.
        if let Some(next) = next.filter(|&next| next != SimTime::MAX) {
            let next = next.max(SimTime(t.0 + 1));
            self.changes.push(Reverse((next, position as u32)));
        }
    }

    /// The participant at `position` has a job out (`idle` false) or no longer.
    pub fn set_idle(&mut self, position: usize, idle: bool) {
        self.set(position, self.online[position], idle);
    }

    fn set(&mut self, position: usize, online: bool, idle: bool) {
        let was = self.online[position] && self.idle[position];
        (self.online[position], self.idle[position]) = (online, idle);
        match (was, online && idle) {
            (false, true) => self.counts.add(position, 1),
            (true, false) => self.counts.add(position, -1),
            _ => {}
        }
    }

    /// The online idle participants, as a list a draw picks positions from.
    pub fn view<'a>(&'a self, participants: &'a [u32]) -> OnlineIdleView<'a> {
        OnlineIdleView {
            index: self,
            participants,
        }
    }
}

/// The online idle participants in id order ([`OnlineIdle::view`]).
pub(super) struct OnlineIdleView<'a> {
    index: &'a OnlineIdle,
    participants: &'a [u32],
}

impl Candidates for OnlineIdleView<'_> {
    fn len(&self) -> usize {
        self.index.counts.total() as usize
    }

    fn get(&self, i: usize) -> u32 {
        self.participants[self.index.counts.position_of(i as i64)]
    }

    fn to_vec(&self) -> Vec<u32> {
        let index = self.index;
        (0..self.participants.len())
            .filter(|&p| index.online[p] && index.idle[p])
            .map(|p| self.participants[p])
            .collect()
    }
}

/// Counts per position with prefix sums and the position of the i-th unit, in O(log n).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick {
            tree: vec![0; n + 1],
        }
    }

    fn add(&mut self, position: usize, delta: i64) {
        let mut i = position + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    fn total(&self) -> i64 {
        let mut i = self.tree.len() - 1;
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// The position holding the `i`-th unit (0-based; `i` < the total).
    fn position_of(&self, i: i64) -> usize {
        let n = self.tree.len() - 1;
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        let (mut at, mut left) = (0, i);
        while step > 0 {
            if at + step <= n && self.tree[at + step] <= left {
                at += step;
                left -= self.tree[at];
            }
            step >>= 1;
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SeedTree;
    use crate::system::{SampleCost, SystemSpec};

    #[test]
    fn fenwick_finds_each_unit() {
        let mut f = Fenwick::new(11);
        let units = [0, 3, 4, 10];
        for &p in &units {
            f.add(p, 1);
        }
        assert_eq!(f.total(), 4);
        for (i, &p) in units.iter().enumerate() {
            assert_eq!(f.position_of(i as i64), p);
        }
        f.add(3, -1);
        assert_eq!((f.total(), f.position_of(1)), (3, 4));
    }

    #[test]
    fn kept_by_changes_it_answers_what_asking_everyone_answers() {
        let spec: SystemSpec = serde_yaml::from_str(
            "availability: {kind: markov, mean_online_s: 30, mean_offline_s: 60}",
        )
        .unwrap();
        let clients = 500;
        let cost = SampleCost {
            batch_size: 50,
            training_flops: 1.0,
        };
        let system =
            SystemModel::build(&spec, &SeedTree::new(4), clients as usize, cost, None).unwrap();
        // Held-out clients are not participants: every third is left out.
        let participants: Vec<u32> = (0..clients).filter(|c| c % 3 != 1).collect();
        let mut busy = vec![false; clients as usize];
        let mut index = OnlineIdle::new(&participants, &system, SimTime::ZERO, |_| false);
        let mut now = SimTime::ZERO;
        for step in 0..300u64 {
            now = SimTime(now.0 + (step * 7_919 % 5_000) * 1_000_000);
            index.advance(&participants, &system, now);
            // Some participants start or end a job.
            for position in [step as usize * 13 % participants.len(), step as usize % 29] {
                let client = participants[position] as usize;
                busy[client] = !busy[client];
                index.set_idle(position, !busy[client]);
            }
            let scanned: Vec<u32> = participants
                .iter()
                .copied()
                .filter(|&c| !busy[c as usize] && system.online_until(c, now).is_some())
                .collect();
            let view = index.view(&participants);
            assert_eq!(view.to_vec(), scanned, "at {now:?}");
            assert_eq!(view.len(), scanned.len());
            for (i, &c) in scanned.iter().enumerate().step_by(7) {
                assert_eq!(view.get(i), c);
            }
        }
        assert!(now > SimTime(100_000 * 1_000_000), "many periods pass");
    }
}
