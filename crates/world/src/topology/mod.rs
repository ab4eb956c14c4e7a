//! Who talks to whom in a decentralized run: communication graphs (fixed or time-varying) and
//! the mixing matrices peers average with, each checked and with its spectral gap.
//!
//! Round r's graph and matrix are a pure function of (seed, r): random graphs are drawn from the
//! seed tree's `(run, "topology/…", epoch)` streams, so any peer (or the monitor) asking for a
//! round gets the same answer, in any order. This room draws graphs and computes weights; it
//! knows nothing about models, time or messages.

mod graph;
mod mixing;

pub use graph::Graph;
pub use mixing::{
    FmmcSpec, MaxDegreeSpec, MetropolisHastingsSpec, Mixing, MixingRuleRegistration,
    MixingRuleSettings, MixingRuleSpec, UniformNeighbourSpec, Weights, MIXING_RULES,
    MIXING_TOLERANCE,
};

use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{}{}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    File {
        file: PathBuf,
        line: Option<usize>,
        message: String,
    },
    /// A setting that does not fit the run (known only once the number of peers is).
    #[error("field `topology.{path}`: {message}")]
    Invalid { path: String, message: String },
    #[error("a mixing matrix failed its check (a bug, please report it): {0}")]
    Mixing(String),
}

/// The `topology:` section of a scenario: its presence makes the run decentralized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// The peers' communication graph.
    pub graph: GraphSpec,
    /// How mixing weights W are made from the graph.
    #[serde(default)]
    pub mixing: MixingRuleSpec,
    /// Whether the graph is drawn again over time.
    #[serde(default)]
    pub time_varying: TimeVarying,
    /// What to do with a disconnected draw (or a disconnected user graph).
    #[serde(default)]
    pub disconnected: Disconnected,
    /// When a peer mixes its neighbours' models.
    #[serde(default)]
    pub gossip: GossipMode,
    /// How each peer's local learning rate is scaled (ω_t of Alg. 5).
    #[serde(default)]
    pub step_weights: StepWeights,
}

/// ω_t, the factor on peer t's local learning rate.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StepWeights {
    /// ω_t = T·n_t/n: the n_t/n of D-FedEM's Alg. 4 (line 18), with the number of peers T
    /// folded into the learning rate so that ω averages 1. Mixing with a doubly stochastic W
    /// then descends the n_t-weighted objective that FedEM's server average descends.
    #[default]
    DataSize,
    /// ω_t = 1: every peer's steps count the same, whatever its data (plain D-PSGD).
    Uniform,
}

/// The graph families.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GraphSpec {
    Complete {},
    Ring {},
    /// A `rows × cols` grid with wrap-around; rows·cols must equal the number of peers.
    Torus {
        /// Rows of the grid.
        rows: usize,
        /// Columns of the grid.
        cols: usize,
    },
    /// Every peer linked to `center` only.
    Star {
        /// The peer at the centre.
        #[serde(default)]
        center: u32,
    },
    /// Erdős–Rényi G(n, p).
    ErdosRenyi {
        /// The probability of each link.
        p: f64,
    },
    /// Peers uniform in the unit square, linked when at most `radius` apart.
    Geometric {
        /// The distance within which peers are linked.
        radius: f64,
    },
    /// Peer i linked to i + 2^k (mod n) for every 2^k < n.
    Exponential {},
    /// A CSV file of links, one `a,b` pair of peer ids per line (an optional header line).
    EdgeList {
        /// The CSV file, relative to the working directory.
        path: PathBuf,
    },
}

/// How the graph changes between rounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TimeVarying {
    /// One graph for the whole run.
    Fixed {},
    /// A fresh draw of the (random) graph every `every` rounds.
    Resample { every: u32 },
    /// Each round, every link of the graph is down with probability `p`.
    DropLinks { p: f64 },
}

impl Default for TimeVarying {
    /// One graph for the whole run.
    fn default() -> Self {
        TimeVarying::Fixed {}
    }
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Disconnected {
    /// Draw again until the graph is connected (a fixed disconnected graph is an error).
    #[default]
    Resample,
    /// Run on it anyway; the round's spectral gap is 0 and `connected` false in the results.
    Allow,
}

/// When a peer mixes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GossipMode {
    /// After its local work, a peer waits for every neighbour's model of the same round.
    #[default]
    Synchronous,
    /// A peer mixes whatever neighbours' models arrived since it last mixed (the weight of a
    /// neighbour it has nothing new from stays on itself) and goes on at once.
    Asynchronous,
}

/// Draws of a random graph before giving up on a connected one.
const MAX_DRAWS: usize = 1000;

impl TopologySpec {
    /// Checks what can be checked without the number of peers; an error's path is below
    /// `topology`.
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
        match &self.graph {
            GraphSpec::ErdosRenyi { p } if !(*p > 0.0 && *p <= 1.0) => {
                return bad("graph.p", format!("must be in (0, 1], got {p}"))
            }
            GraphSpec::Geometric { radius } => FieldError::positive("graph.radius", *radius)?,
            GraphSpec::Torus { rows, cols } if *rows == 0 || *cols == 0 => {
                return bad("graph", "`rows` and `cols` must be at least 1".into())
            }
            _ => {}
        }
        self.mixing.validate().map_err(|e| e.within("mixing"))?;
        match self.time_varying {
            TimeVarying::Resample { every: 0 } => {
                bad("time_varying.every", "must be at least 1".into())
            }
            TimeVarying::Resample { .. } if !self.graph.is_random() => bad(
                "time_varying",
                "only `erdos_renyi` and `geometric` graphs are random and can be redrawn; use \
                 `{kind: drop_links, p: …}` to vary a fixed graph"
                    .into(),
            ),
            TimeVarying::DropLinks { p } if !(0.0..1.0).contains(&p) => {
                bad("time_varying.p", format!("must be in [0, 1), got {p}"))
            }
            _ => Ok(()),
        }
    }
}

impl GraphSpec {
    fn is_random(&self) -> bool {
        matches!(
            self,
            GraphSpec::ErdosRenyi { .. } | GraphSpec::Geometric { .. }
        )
    }
}

/// One round's graph and mixing matrix.
#[derive(Debug)]
pub struct RoundTopology {
    pub graph: Graph,
    pub mixing: Mixing,
    pub connected: bool,
}

/// The topology of a run: round r's graph and matrix on demand (recent ones cached).
pub struct Topology {
    spec: TopologySpec,
    peers: usize,
    seeds: SeedTree,
    /// The graph every round starts from (not used when it is redrawn).
    base: Option<Graph>,
    cache: Mutex<Vec<(u64, Arc<RoundTopology>)>>,
}

/// Distinct rounds kept; older ones are recomputed (identically) if asked for again.
const CACHED_ROUNDS: usize = 16;

impl Topology {
    /// Checks the spec against `peers` and builds round 1 (so that errors come before the run).
    pub fn build(
        spec: &TopologySpec,
        peers: usize,
        seeds: SeedTree,
    ) -> Result<Topology, TopologyError> {
        let invalid = |path: &str, message: String| TopologyError::Invalid {
            path: path.into(),
            message,
        };
        if peers < 2 {
            return Err(invalid(
                "graph",
                format!("a decentralized run needs at least 2 peers, got {peers}"),
            ));
        }
        let base = match &spec.graph {
            GraphSpec::Complete {} => Some(Graph::complete(peers)),
            GraphSpec::Ring {} => Some(Graph::ring(peers)),
            GraphSpec::Torus { rows, cols } => {
                if rows * cols != peers {
                    return Err(invalid(
                        "graph",
                        format!(
                            "rows × cols = {} must equal the number of peers ({peers})",
                            rows * cols
                        ),
                    ));
                }
                Some(Graph::torus(*rows, *cols))
            }
            GraphSpec::Star { center } => {
                if *center as usize >= peers {
                    return Err(invalid(
                        "graph.center",
                        format!("must be a peer id below {peers}, got {center}"),
                    ));
                }
                Some(Graph::star(peers, *center))
            }
            GraphSpec::Exponential {} => Some(Graph::exponential(peers)),
            GraphSpec::EdgeList { path } => Some(Graph::read_edge_list(path, peers)?),
            GraphSpec::ErdosRenyi { .. } | GraphSpec::Geometric { .. } => None,
        };
        let mut topology = Topology {
            spec: spec.clone(),
            peers,
            seeds,
            base,
            cache: Mutex::new(Vec::new()),
        };
        let redrawn = matches!(spec.time_varying, TimeVarying::Resample { .. });
        if topology.base.is_none() && !redrawn {
            // A random graph that is kept (fixed, or with links dropped from it).
            topology.base = Some(topology.draw_random(0)?);
        }
        if let Some(g) = &topology.base {
            if !g.is_connected() && spec.disconnected == Disconnected::Resample {
                return Err(invalid(
                    "graph",
                    format!(
                        "the graph on {peers} peers is disconnected; link every peer, or set \
                         `topology.disconnected: allow` to run on it anyway"
                    ),
                ));
            }
        }
        topology.at(1)?;
        Ok(topology)
    }

    pub fn spec(&self) -> &TopologySpec {
        &self.spec
    }

    pub fn peers(&self) -> usize {
        self.peers
    }

    /// Rounds sharing one graph share an epoch.
    fn epoch(&self, round: u32) -> u64 {
        match self.spec.time_varying {
            TimeVarying::Fixed {} => 0,
            TimeVarying::Resample { every } => (round.max(1) as u64 - 1) / every as u64,
            TimeVarying::DropLinks { .. } => round as u64,
        }
    }

    /// Round `round`'s graph and mixing matrix.
    pub fn at(&self, round: u32) -> Result<Arc<RoundTopology>, TopologyError> {
        let epoch = self.epoch(round);
        let mut cache = self.cache.lock().expect("topology cache poisoned");
        if let Some((_, t)) = cache.iter().find(|(e, _)| *e == epoch) {
            return Ok(t.clone());
        }
        let graph = match (&self.base, &self.spec.time_varying) {
            (Some(base), TimeVarying::DropLinks { p }) => self.drop_links(base, *p, epoch)?,
            (Some(base), _) => base.clone(),
            (None, _) => self.draw_random(epoch)?,
        };
        let mixing = Mixing::build(&graph, &self.spec.mixing)?;
        let connected = graph.is_connected();
        let t = Arc::new(RoundTopology {
            graph,
            mixing,
            connected,
        });
        if cache.len() >= CACHED_ROUNDS {
            cache.remove(0);
        }
        cache.push((epoch, t.clone()));
        Ok(t)
    }

    /// A draw of the random family for `epoch`: the first connected one of the epoch's stream
    /// (or the first one, with `disconnected: allow`).
    fn draw_random(&self, epoch: u64) -> Result<Graph, TopologyError> {
        let mut rng = self.seeds.rng(Entity::Run, "topology/graph", epoch);
        let n = self.peers;
        for _ in 0..MAX_DRAWS {
            let g = match self.spec.graph {
                GraphSpec::ErdosRenyi { p } => Graph::erdos_renyi(n, p, &mut rng),
                GraphSpec::Geometric { radius } => Graph::geometric(n, radius, &mut rng),
                _ => unreachable!("only random families are drawn"),
            };
            if self.spec.disconnected == Disconnected::Allow || g.is_connected() {
                return Ok(g);
            }
        }
        Err(TopologyError::Invalid {
            path: "graph".into(),
            message: format!(
                "{MAX_DRAWS} draws on {n} peers were all disconnected; make links likelier, or \
                 set `topology.disconnected: allow`"
            ),
        })
    }

    fn drop_links(&self, base: &Graph, p: f64, epoch: u64) -> Result<Graph, TopologyError> {
        use rand::Rng;
        let mut rng = self.seeds.rng(Entity::Run, "topology/drop_links", epoch);
        for _ in 0..MAX_DRAWS {
            let g = base.filter_edges(|_, _| !rng.gen_bool(p));
            if self.spec.disconnected == Disconnected::Allow || g.is_connected() {
                return Ok(g);
            }
        }
        Err(TopologyError::Invalid {
            path: "time_varying.p".into(),
            message: format!(
                "dropping links with probability {p} disconnected the graph in {MAX_DRAWS} \
                 draws; lower it, or set `topology.disconnected: allow`"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(graph: GraphSpec, time_varying: TimeVarying) -> TopologySpec {
        TopologySpec {
            graph,
            mixing: MixingRuleSpec::default(),
            time_varying,
            disconnected: Disconnected::Resample,
            gossip: GossipMode::Synchronous,
            step_weights: StepWeights::DataSize,
        }
    }

    #[test]
    fn rounds_are_reproducible_and_vary_as_asked() {
        let seeds = SeedTree::new(3);
        let er = GraphSpec::ErdosRenyi { p: 0.2 };
        let fixed = Topology::build(&spec(er.clone(), TimeVarying::Fixed {}), 30, seeds).unwrap();
        assert_eq!(fixed.at(1).unwrap().graph, fixed.at(7).unwrap().graph);
        let every2 =
            Topology::build(&spec(er, TimeVarying::Resample { every: 2 }), 30, seeds).unwrap();
        let (r1, r2, r3) = (
            every2.at(1).unwrap(),
            every2.at(2).unwrap(),
            every2.at(3).unwrap(),
        );
        assert_eq!(r1.graph, r2.graph);
        assert_ne!(r2.graph, r3.graph);
        assert!(r1.connected && r3.connected);
        // Asked again after eviction, or from another instance: the same graph.
        for r in 4..40 {
            every2.at(r).unwrap();
        }
        let again = Topology::build(
            &spec(
                GraphSpec::ErdosRenyi { p: 0.2 },
                TimeVarying::Resample { every: 2 },
            ),
            30,
            seeds,
        )
        .unwrap();
        assert_eq!(every2.at(3).unwrap().graph, again.at(3).unwrap().graph);
        let drop = Topology::build(
            &spec(GraphSpec::Complete {}, TimeVarying::DropLinks { p: 0.5 }),
            20,
            seeds,
        )
        .unwrap();
        let (a, b) = (drop.at(1).unwrap(), drop.at(2).unwrap());
        assert_ne!(a.graph, b.graph);
        assert!(a.graph.edge_count() < 190 && a.connected);
    }

    #[test]
    fn disconnected_graphs_are_never_silent() {
        let seeds = SeedTree::new(1);
        // G(40, 0.01) is almost never connected.
        let sparse = spec(GraphSpec::ErdosRenyi { p: 0.01 }, TimeVarying::Fixed {});
        let e = Topology::build(&sparse, 40, seeds)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("topology.graph") && e.contains("disconnected: allow"),
            "{e}"
        );
        let allowed = TopologySpec {
            disconnected: Disconnected::Allow,
            ..sparse
        };
        let t = Topology::build(&allowed, 40, seeds).unwrap();
        let r = t.at(1).unwrap();
        assert!(!r.connected && r.mixing.spectral_gap() == 0.0);
        let torus = spec(GraphSpec::Torus { rows: 3, cols: 4 }, TimeVarying::Fixed {});
        let e = Topology::build(&torus, 10, seeds)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("rows × cols = 12") && e.contains("(10)"), "{e}");
        let bad = spec(GraphSpec::Ring {}, TimeVarying::Resample { every: 1 });
        assert!(bad.validate().unwrap_err().path == "time_varying");
    }
}
