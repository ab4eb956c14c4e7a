//! The event queue: a min-heap ordered by `(time, origin rank, FIFO sequence)`.

use super::SimTime;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The total order of events. `seq` is unique per queue, so no two keys are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventKey {
    pub time: SimTime,
    pub origin_rank: u32,
    pub seq: u64,
}

struct Entry<T> {
    key: EventKey,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    // BinaryHeap is a max-heap: reverse so that the smallest key comes out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// Events waiting for their time. Popping always yields the smallest [`EventKey`].
pub struct EventQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> EventQueue<T> {
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    /// Schedules `item` at `time` on behalf of the entity of rank `origin_rank`.
    pub fn push(&mut self, time: SimTime, origin_rank: u32, item: T) -> EventKey {
        let key = EventKey {
            time,
            origin_rank,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.heap.push(Entry { key, item });
        key
    }

    pub fn pop(&mut self) -> Option<(EventKey, T)> {
        self.heap.pop().map(|e| (e.key, e.item))
    }

    /// Every item with its key, in the order they pop.
    pub fn in_order(&self) -> Vec<(EventKey, &T)> {
        let mut all: Vec<(EventKey, &T)> = self.heap.iter().map(|e| (e.key, &e.item)).collect();
        all.sort_unstable_by_key(|(key, _)| *key);
        all
    }

    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.key.time)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_time_then_rank_then_fifo() {
        let mut q = EventQueue::new();
        q.push(SimTime(10), 2, "t10-r2-a");
        q.push(SimTime(5), 9, "t5-r9");
        q.push(SimTime(10), 1, "t10-r1");
        q.push(SimTime(10), 2, "t10-r2-b");
        q.push(SimTime(0), 3, "t0");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, s)| s)).collect();
        assert_eq!(order, ["t0", "t5-r9", "t10-r1", "t10-r2-a", "t10-r2-b"]);
    }

    #[test]
    fn fifo_among_many_equal_keys() {
        let mut q = EventQueue::new();
        for i in 0..1000 {
            q.push(SimTime(7), 0, i);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, i)| i)).collect();
        assert_eq!(order, (0..1000).collect::<Vec<_>>());
    }
}
