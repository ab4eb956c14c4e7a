//! The clients a draw chooses from ([`Candidates`]), held however the server holds them.

/// The clients a draw chooses from, in id order: the draw picks positions, so the same
/// positions give the same clients however the list is held.
pub trait Candidates {
    fn len(&self) -> usize;
    /// The client at position `i` (< `len`).
    fn get(&self, i: usize) -> u32;
    fn to_vec(&self) -> Vec<u32>;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Candidates for [u32] {
    fn len(&self) -> usize {
        <[u32]>::len(self)
    }

    fn get(&self, i: usize) -> u32 {
        self[i]
    }

    fn to_vec(&self) -> Vec<u32> {
        <[u32]>::to_vec(self)
    }
}

/// Every client of a sorted list but a few, held as the list and the positions left out:
/// the idle clients of a large population, never copied.
pub struct AllBut<'a> {
    clients: &'a [u32],
    /// Positions in `clients` left out, ascending.
    left_out: Vec<usize>,
}

impl<'a> AllBut<'a> {
    /// `clients` without `left_out`, which must be among them (ascending or not).
    pub fn new(clients: &'a [u32], left_out: impl IntoIterator<Item = u32>) -> Self {
        let mut left_out: Vec<usize> = left_out
            .into_iter()
            .map(|c| {
                clients
                    .binary_search(&c)
                    .expect("a client left out is in the list")
            })
            .collect();
        left_out.sort_unstable();
        left_out.dedup();
        AllBut { clients, left_out }
    }
}

impl Candidates for AllBut<'_> {
    fn len(&self) -> usize {
        self.clients.len() - self.left_out.len()
    }

    fn get(&self, i: usize) -> u32 {
        // The i-th position kept: step over each left-out position at or before it.
        let mut at = i;
        for &gone in &self.left_out {
            if gone > at {
                break;
            }
            at += 1;
        }
        self.clients[at]
    }

    fn to_vec(&self) -> Vec<u32> {
        let mut kept = Vec::with_capacity(self.len());
        let mut from = 0;
        for &gone in &self.left_out {
            kept.extend_from_slice(&self.clients[from..gone]);
            from = gone + 1;
        }
        kept.extend_from_slice(&self.clients[from..]);
        kept
    }
}

/// Any candidates behind a reference, as a sized value (what a strategy's draw takes as
/// `&dyn Candidates`, slices included).
pub(super) struct View<'a, C: ?Sized>(pub &'a C);

impl<C: Candidates + ?Sized> Candidates for View<'_, C> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> u32 {
        self.0.get(i)
    }

    fn to_vec(&self) -> Vec<u32> {
        self.0.to_vec()
    }
}
