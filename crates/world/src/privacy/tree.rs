//! DP-FTRL's tree aggregation (Kairouz et al. 2021; `privacy: {mechanism: dp_ftrl}`): the
//! server releases noised *prefix sums* of the clipped updates instead of noising each round
//! afresh, so no amplification by sampling is needed for the guarantee.
//!
//! The releases (aggregations with something in them) are the leaves 1, 2, 3, … of a binary
//! tree; node (h, j) covers the leaves j·2^h + 1 … (j + 1)·2^h and carries its own Gaussian
//! noise vector z_(h,j) of standard deviation σ·S (S the sensitivity of one release's sum). The
//! prefix 1 … ℓ is the disjoint union of one node per set bit of ℓ ([`prefix_nodes`]), and its
//! noise Z_ℓ is theirs summed. The model after release ℓ is the model before plus the release's
//! average plus (Z_ℓ − Z_(ℓ−1))/divisor, so it carries Z_ℓ/divisor in all, never more than
//! ⌊log₂ ℓ⌋ + 1 nodes' noise ([`increment`]: the nodes that enter and leave). This is FTRL with
//! a quadratic regulariser and no momentum, as Kairouz et al.'s Algorithm 1 with momentum 0: for
//! the FedAvg family, the server's step is the sum of the releases so far.
//!
//! Every node is a Gaussian mechanism on the sum of the clipped updates of its leaves: a client
//! in m of a node's leaves moves it by at most m·S. All the nodes released so far together are
//! one Gaussian mechanism of sensitivity S·√(Σ m²) and noise σ·S per coordinate, so a client's
//! ε is that of the Gaussian mechanism of multiplier σ/√(Σ m²), exactly (Balle and Wang 2018;
//! no composition theorem, no sampling). [`TreeAccountant`] keeps Σ m² over the nodes released
//! so far for every client, and the ε reported is the largest. Who takes part depends on the
//! sampling and the system model, never on the data, so this holds for the participation
//! the run had.
//!
//! This room is arithmetic only: which nodes, how much noise; the server draws each node's
//! noise from its own stream, so a node drawn again (when it leaves the prefix) is the same
//! vector.

use std::collections::BTreeMap;

/// A node of the tree: level `h` (0 for a leaf) and index `j` among that level's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Node {
    pub level: u32,
    pub index: u64,
}

impl Node {
    /// The last leaf it covers.
    pub fn last_leaf(&self) -> u64 {
        (self.index + 1) << self.level
    }

    /// The index of the seed-tree stream its noise comes from.
    pub fn stream(&self) -> u64 {
        ((self.level as u64) << 48) | self.index
    }
}

/// The nodes whose union is the leaves 1 … `leaf`, one per set bit, the largest first (none
/// for 0).
pub fn prefix_nodes(leaf: u64) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut start = 0u64;
    for level in (0..u64::BITS).rev() {
        if leaf & (1 << level) != 0 {
            nodes.push(Node {
                level,
                index: start >> level,
            });
            start += 1 << level;
        }
    }
    nodes
}

/// The nodes whose noise enters (first) and leaves (second) the prefix at release `leaf` ≥ 1,
/// each sorted.
pub fn increment(leaf: u64) -> (Vec<Node>, Vec<Node>) {
    let (now, before) = (prefix_nodes(leaf), prefix_nodes(leaf - 1));
    let mut enter: Vec<Node> = now
        .iter()
        .filter(|n| !before.contains(n))
        .copied()
        .collect();
    let mut leave: Vec<Node> = before
        .iter()
        .filter(|n| !now.contains(n))
        .copied()
        .collect();
    enter.sort();
    leave.sort();
    (enter, leave)
}

/// Each client's Σ m² over the nodes released so far, and the largest.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TreeAccountant {
    clients: BTreeMap<u32, ClientNodes>,
    /// The leaves released so far.
    released: u64,
    /// The levels whose nodes can be released within the run.
    levels: usize,
}

/// One client's open nodes (one per level: the index and how many of its leaves it has) and
/// Σ m² over the nodes it has left behind (all released).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct ClientNodes {
    open: Vec<(u64, u64)>,
    closed: u64,
}

impl ClientNodes {
    /// Σ m² over the nodes released by leaf `released`.
    fn released_squares(&self, released: u64) -> u64 {
        let open = self
            .open
            .iter()
            .enumerate()
            .filter(|&(level, &(index, _))| {
                Node {
                    level: level as u32,
                    index,
                }
                .last_leaf()
                    <= released
            });
        self.closed + open.map(|(_, &(_, m))| m * m).sum::<u64>()
    }
}

impl TreeAccountant {
    /// Nothing released yet, of at most `max_leaves` releases.
    pub fn new(max_leaves: u64) -> Self {
        Self {
            clients: BTreeMap::new(),
            released: 0,
            levels: (u64::BITS - max_leaves.leading_zeros()) as usize,
        }
    }

    /// Release `leaf` (the next one) made of the updates of `clients`.
    pub fn release(&mut self, leaf: u64, clients: impl IntoIterator<Item = u32>) {
        assert_eq!(leaf, self.released + 1, "releases are numbered 1, 2, 3, …");
        assert!(
            leaf < 1 << self.levels,
            "release {leaf} beyond the run's {} levels",
            self.levels
        );
        self.released = leaf;
        for client in clients {
            let nodes = self.clients.entry(client).or_default();
            for level in 0..self.levels {
                let index = (leaf - 1) >> level;
                match nodes.open.get_mut(level) {
                    Some((open, m)) if *open == index => *m += 1,
                    Some(slot) => {
                        nodes.closed += slot.1 * slot.1;
                        *slot = (index, 1);
                    }
                    None => nodes.open.push((index, 1)),
                }
            }
        }
    }

    /// The largest Σ m² of any client over the nodes released so far (0 before any).
    pub fn worst_squares(&self) -> u64 {
        (self.clients.values())
            .map(|c| c.released_squares(self.released))
            .max()
            .unwrap_or(0)
    }

    /// The largest ε at `delta` of any client so far under noise multiplier `sigma` (∞ with
    /// σ = 0 once anyone has taken part).
    pub fn worst_epsilon(&self, sigma: f64, delta: f64) -> f64 {
        tree_epsilon(sigma, self.worst_squares(), delta)
    }
}

/// ε at `delta` of a client whose leaves make Σ m² = `squares` over the released nodes.
pub fn tree_epsilon(sigma: f64, squares: u64, delta: f64) -> f64 {
    if squares == 0 {
        0.0
    } else if sigma == 0.0 {
        f64::INFINITY
    } else {
        super::pld::gaussian_epsilon(sigma / (squares as f64).sqrt(), delta)
    }
}

/// Σ m² for a client in every one of `leaves` releases: level h has ⌊leaves/2^h⌋ released
/// nodes of 2^h of its leaves each (the most a client can spend).
pub fn every_release_squares(leaves: u64) -> u64 {
    (0..u64::BITS - leaves.leading_zeros())
        .map(|h| (leaves >> h) << (2 * h))
        .sum()
}

/// Σ m² for a client in one release, at its worst (the first leaf, in a released node at every
/// level up to `leaves`): ⌊log₂ leaves⌋ + 1.
pub fn one_release_squares(leaves: u64) -> u64 {
    (u64::BITS - leaves.leading_zeros()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(level: u32, index: u64) -> Node {
        Node { level, index }
    }

    /// 6 = 4 + 2: leaves 1–4 (node (2, 0)) and 5–6 (node (1, 2)); 7 adds leaf 7 (node (0, 6));
    /// 8 replaces all three by 1–8 (node (3, 0)).
    #[test]
    fn prefixes_and_increments_by_hand() {
        assert_eq!(prefix_nodes(0), vec![]);
        assert_eq!(prefix_nodes(6), vec![node(2, 0), node(1, 2)]);
        assert_eq!(prefix_nodes(7), vec![node(2, 0), node(1, 2), node(0, 6)]);
        assert_eq!(increment(7), (vec![node(0, 6)], vec![]));
        assert_eq!(
            increment(8),
            (vec![node(3, 0)], vec![node(0, 6), node(1, 2), node(2, 0)])
        );
        assert_eq!(increment(1), (vec![node(0, 0)], vec![]));
        assert_eq!(increment(2), (vec![node(1, 0)], vec![node(0, 0)]));
        assert_eq!(node(1, 2).last_leaf(), 6);
    }

    /// Client 1 in leaves 1, 2, 3 of 4 releases, client 2 in leaf 4 alone. After release 3:
    /// client 1 has leaves 1, 2, 3 (m = 1 each), node 1–2 (m = 2): 1 + 1 + 1 + 4 = 7 (nodes 3–4
    /// and 1–4 not released yet). After release 4: node 3–4 has m = 1 and node 1–4 m = 3:
    /// 7 + 1 + 9 = 17; client 2: leaf 4, node 3–4 and node 1–4, one each: 3. A client in all
    /// four: 4 leaves, two pairs (4 each), the quadruple (16): 28.
    #[test]
    fn squares_by_hand() {
        let mut tree = TreeAccountant::new(4);
        tree.release(1, [1]);
        assert_eq!(tree.worst_squares(), 1);
        tree.release(2, [1]);
        assert_eq!(tree.worst_squares(), 1 + 1 + 4);
        tree.release(3, [1]);
        assert_eq!(tree.worst_squares(), 7);
        tree.release(4, [2]);
        assert_eq!(tree.worst_squares(), 17);
        assert_eq!(tree.clients[&2].released_squares(4), 3);
        assert_eq!(every_release_squares(4), 28);
        assert_eq!(one_release_squares(4), 3);
        // Seven releases, all: leaves 7, pairs 3 × 4, one quadruple 16: 35.
        assert_eq!(every_release_squares(7), 7 + 3 * 4 + 16);
    }

    /// Adding each release's increment, the vector carries exactly the prefix's nodes' noise
    /// (to f32 rounding): Z_ℓ = Σ z over [`prefix_nodes`] (ℓ).
    #[test]
    fn increments_add_up_to_the_prefix_noise() {
        use crate::privacy::ClientLevelPrivacy;
        use rand::{Rng, SeedableRng};
        use rand_chacha::ChaCha20Rng;
        use rand_distr::StandardNormal;
        let stream = |n: &Node| ChaCha20Rng::seed_from_u64(n.stream());
        let mut carried = vec![0.0f32; 5];
        for leaf in 1..=13u64 {
            let (enter, leave) = increment(leaf);
            let mut enter: Vec<_> = enter.iter().map(stream).collect();
            let mut leave: Vec<_> = leave.iter().map(stream).collect();
            ClientLevelPrivacy::add_tree_noise(&mut [&mut carried], 1.0, &mut enter, &mut leave);
            let mut prefix = vec![0.0f64; 5];
            for node in prefix_nodes(leaf) {
                let mut rng = stream(&node);
                for p in prefix.iter_mut() {
                    *p += rng.sample::<f64, _>(StandardNormal);
                }
            }
            for (c, p) in carried.iter().zip(&prefix) {
                assert!(
                    (*c as f64 - p).abs() < 1e-5,
                    "leaf {leaf}: {carried:?} vs {prefix:?}"
                );
            }
        }
    }

    /// One release is the Gaussian mechanism of σ; a client in every one of 4 releases spends
    /// that of σ/√28.
    #[test]
    fn epsilon_is_the_gaussian_of_the_released_nodes() {
        let mut tree = TreeAccountant::new(4);
        assert_eq!(tree.worst_epsilon(1.0, 1e-5), 0.0);
        tree.release(1, [9]);
        let one = super::super::pld::gaussian_epsilon(1.0, 1e-5);
        assert_eq!(tree.worst_epsilon(1.0, 1e-5), one);
        for leaf in 2..=4 {
            tree.release(leaf, [9]);
        }
        let four = super::super::pld::gaussian_epsilon(1.0 / 28f64.sqrt(), 1e-5);
        assert_eq!(tree.worst_epsilon(1.0, 1e-5), four);
        assert_eq!(tree.worst_epsilon(0.0, 1e-5), f64::INFINITY);
    }
}
