//! Undirected communication graphs on peers `0..n`: the named families, user edge lists, and
//! connectivity.

use super::TopologyError;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use std::path::Path;

/// An undirected simple graph (no self loops); neighbour lists are sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    adjacency: Vec<Vec<u32>>,
}

impl Graph {
    /// The graph with `n` nodes and the given edges (duplicates and orientation ignored).
    /// Panics on a self loop or a node out of range: callers check user input first.
    pub fn from_edges(n: usize, edges: impl IntoIterator<Item = (u32, u32)>) -> Graph {
        let mut adjacency = vec![Vec::new(); n];
        for (a, b) in edges {
            assert!(a != b, "self loop at node {a}");
            adjacency[a as usize].push(b);
            adjacency[b as usize].push(a);
        }
        for list in &mut adjacency {
            list.sort_unstable();
            list.dedup();
        }
        Graph { adjacency }
    }

    pub fn complete(n: usize) -> Graph {
        Graph::from_edges(n, pairs(n))
    }

    /// Node i linked to i ± 1 (mod n).
    pub fn ring(n: usize) -> Graph {
        let m = n as u32;
        Graph::from_edges(
            n,
            (0..m)
                .filter(|_| n > 1)
                .map(|i| (i, (i + 1) % m))
                .filter(|(a, b)| a != b),
        )
    }

    /// A `rows × cols` grid with wrap-around; node (r, c) is `r·cols + c`.
    pub fn torus(rows: usize, cols: usize) -> Graph {
        let id = |r: usize, c: usize| (r * cols + c) as u32;
        let mut edges = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                for (r2, c2) in [((r + 1) % rows, c), (r, (c + 1) % cols)] {
                    if id(r, c) != id(r2, c2) {
                        edges.push((id(r, c), id(r2, c2)));
                    }
                }
            }
        }
        Graph::from_edges(rows * cols, edges)
    }

    /// Every node linked to `center` only.
    pub fn star(n: usize, center: u32) -> Graph {
        Graph::from_edges(
            n,
            (0..n as u32).filter(|&i| i != center).map(|i| (center, i)),
        )
    }

    /// Erdős–Rényi G(n, p): each pair linked independently with probability p.
    pub fn erdos_renyi(n: usize, p: f64, rng: &mut ChaCha20Rng) -> Graph {
        Graph::from_edges(n, pairs(n).filter(|_| rng.gen::<f64>() < p))
    }

    /// Random geometric graph: n points uniform in the unit square, linked when at most
    /// `radius` apart.
    pub fn geometric(n: usize, radius: f64, rng: &mut ChaCha20Rng) -> Graph {
        let points: Vec<(f64, f64)> = (0..n).map(|_| (rng.gen(), rng.gen())).collect();
        Graph::from_edges(
            n,
            pairs(n).filter(|&(a, b)| {
                let (p, q) = (points[a as usize], points[b as usize]);
                (p.0 - q.0).hypot(p.1 - q.1) <= radius
            }),
        )
    }

    /// The (undirected) exponential graph: node i linked to i + 2^k (mod n) for every
    /// 2^k < n.
    pub fn exponential(n: usize) -> Graph {
        let m = n as u64;
        let edges = (0..m).flat_map(|i| {
            std::iter::successors(Some(1u64), |h| Some(h * 2))
                .take_while(move |&h| h < m)
                .map(move |h| (i as u32, ((i + h) % m) as u32))
        });
        Graph::from_edges(n, edges.filter(|(a, b)| a != b))
    }

    /// Reads an edge list: one `a,b` pair of peer ids per line; an optional header line
    /// (anything not starting with a digit) and blank lines are skipped.
    pub fn read_edge_list(path: &Path, n: usize) -> Result<Graph, TopologyError> {
        let text = crate::io::read_text(path, crate::io::SizeLimit::memory("an edge list"))
            .map_err(|e| TopologyError::File {
                file: path.to_path_buf(),
                line: None,
                message: e.to_string(),
            })?;
        let mut edges = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            let bad = |message: String| TopologyError::File {
                file: path.to_path_buf(),
                line: Some(i + 1),
                message,
            };
            if line.is_empty() || (i == 0 && !line.starts_with(|c: char| c.is_ascii_digit())) {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() != 2 {
                return Err(bad(format!("expected two peer ids `a,b`, got `{line}`")));
            }
            let id = |s: &str| -> Result<u32, TopologyError> {
                match s.parse::<u32>() {
                    Ok(v) if (v as usize) < n => Ok(v),
                    _ => Err(bad(format!(
                        "`{s}` is not a peer id: ids are whole numbers 0..{}",
                        n.saturating_sub(1)
                    ))),
                }
            };
            let (a, b) = (id(fields[0])?, id(fields[1])?);
            if a == b {
                return Err(bad(format!("self loop at peer {a}: links join two peers")));
            }
            edges.push((a, b));
        }
        Ok(Graph::from_edges(n, edges))
    }

    pub fn len(&self) -> usize {
        self.adjacency.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adjacency.is_empty()
    }

    pub fn neighbors(&self, i: u32) -> &[u32] {
        &self.adjacency[i as usize]
    }

    pub fn degree(&self, i: u32) -> usize {
        self.adjacency[i as usize].len()
    }

    pub fn max_degree(&self) -> usize {
        self.adjacency.iter().map(Vec::len).max().unwrap_or(0)
    }

    pub fn has_edge(&self, a: u32, b: u32) -> bool {
        self.adjacency[a as usize].binary_search(&b).is_ok()
    }

    /// Each edge once, as `(a, b)` with `a < b`, in increasing order.
    pub fn edges(&self) -> Vec<(u32, u32)> {
        self.adjacency
            .iter()
            .enumerate()
            .flat_map(|(a, list)| {
                list.iter()
                    .filter(move |&&b| b > a as u32)
                    .map(move |&b| (a as u32, b))
            })
            .collect()
    }

    pub fn edge_count(&self) -> usize {
        self.adjacency.iter().map(Vec::len).sum::<usize>() / 2
    }

    /// Whether every node can reach every other (a graph with ≤ 1 node is connected).
    pub fn is_connected(&self) -> bool {
        let n = self.len();
        if n <= 1 {
            return true;
        }
        let mut seen = vec![false; n];
        let mut stack = vec![0u32];
        seen[0] = true;
        let mut reached = 1;
        while let Some(i) = stack.pop() {
            for &j in self.neighbors(i) {
                if !seen[j as usize] {
                    seen[j as usize] = true;
                    reached += 1;
                    stack.push(j);
                }
            }
        }
        reached == n
    }

    /// This graph without the edges `keep` rejects (asked once per edge, in [`Graph::edges`]
    /// order).
    pub fn filter_edges(&self, mut keep: impl FnMut(u32, u32) -> bool) -> Graph {
        let edges: Vec<(u32, u32)> = self
            .edges()
            .into_iter()
            .filter(|&(a, b)| keep(a, b))
            .collect();
        Graph::from_edges(self.len(), edges)
    }
}

/// All pairs `(a, b)`, `a < b`, in increasing order.
fn pairs(n: usize) -> impl Iterator<Item = (u32, u32)> {
    (0..n as u32).flat_map(move |a| (a + 1..n as u32).map(move |b| (a, b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn families_have_the_expected_degrees() {
        assert!(Graph::complete(5).edges().len() == 10);
        let ring = Graph::ring(6);
        assert!((0..6).all(|i| ring.degree(i) == 2) && ring.is_connected());
        let torus = Graph::torus(3, 4);
        assert!((0..12).all(|i| torus.degree(i) == 4) && torus.is_connected());
        let star = Graph::star(5, 2);
        assert_eq!(star.degree(2), 4);
        assert!(star.neighbors(0) == [2]);
        // n = 8: offsets 1, 2, 4 (4 links i to i + 4 both ways: one edge).
        let exp = Graph::exponential(8);
        assert_eq!(exp.neighbors(0), &[1, 2, 4, 6, 7]);
        assert!(exp.is_connected());
        assert!(!Graph::from_edges(4, [(0, 1), (2, 3)]).is_connected());
        assert!(Graph::ring(2).edges() == [(0, 1)]);
    }

    #[test]
    fn random_families_follow_their_parameters() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let g = Graph::erdos_renyi(200, 0.5, &mut rng);
        let density = g.edge_count() as f64 / (200.0 * 199.0 / 2.0);
        assert!((density - 0.5).abs() < 0.02, "{density}");
        let geo = Graph::geometric(100, 2f64.sqrt(), &mut rng);
        assert_eq!(geo.edge_count(), 100 * 99 / 2, "radius √2 links every pair");
        assert_eq!(Graph::geometric(50, 0.0, &mut rng).edge_count(), 0);
    }

    #[test]
    fn edge_lists_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("edges.csv");
        std::fs::write(&p, "source,target\n0,1\n1, 2\n\n2,0\n").unwrap();
        let g = Graph::read_edge_list(&p, 4).unwrap();
        assert_eq!(g.edges(), [(0, 1), (0, 2), (1, 2)]);
        std::fs::write(&p, "0,1\n1,7\n").unwrap();
        let e = Graph::read_edge_list(&p, 4).unwrap_err().to_string();
        assert!(e.contains("edges.csv:2") && e.contains("0..3"), "{e}");
        std::fs::write(&p, "0,1,2\n").unwrap();
        let e = Graph::read_edge_list(&p, 4).unwrap_err().to_string();
        assert!(e.contains(":1") && e.contains("two peer ids"), "{e}");
    }
}
