//! Secure aggregation in virtual time (`secure_aggregation:`): what SecAgg (Bonawitz et al.
//! 2017) and SecAgg+ (Bell et al. 2020) add to a synchronous round — their extra message
//! steps, the bytes of keys and shares on the links, the clients' and the server's computation,
//! and what clients dropping out between steps do — without the cryptography: the sum the
//! server ends with is the plain sum, when the protocol succeeds.
//!
//! A round's selected clients U (n of them) run, around the usual download–train–upload:
//!
//! 1. **Advertise keys** (before training): each client sends two public keys (2 × 32 bytes);
//!    once all are in, the server sends each client its neighbours' (64 bytes each). Time: the
//!    slowest upload, then the slowest download.
//! 2. **Share keys**: each client that advertised (U1) agrees a key with each neighbour in U1
//!    (`key_agreement_ms` each) and sends each one encrypted shares of its two secrets (96 bytes
//!    a neighbour); the server forwards to each client those addressed to it. Time: the slowest
//!    compute-and-upload, then the slowest download. Only the clients still there (U2) train.
//! 3. **Masked input**: the round's training job; each client's upload is its update plus
//!    masks (the same bytes). Expanding one mask per neighbour in U2 and a self-mask over the m
//!    floats takes (|N ∩ U2| + 1)·m / `mask_floats_per_second`; the slowest of these is added
//!    after the round's last upload (an upper bound on its effect on the round's end). U3: the
//!    clients whose update arrived in the round (training dropouts and stragglers are gone).
//! 4. **Unmask**: the server sends each client of U3 the list of U3 (4 bytes a client); each
//!    that answers (U5) sends one 32-byte share for itself and for each neighbour in U2 (a
//!    client keeps one share of its own secrets). Time: the slowest download, then the slowest
//!    upload. The server then needs, for every client of U3 (its self-mask) and every client of
//!    U2 missing from U3 with a neighbour in U3 (its pairwise masks), shares from at least
//!    t = ⌈threshold·(|N| + 1)⌉ of its holders (itself and its neighbours) in U5; if any is
//!    short, **the round fails** and aggregates nothing. Otherwise the server recomputes each missing
//!    client's masks with its neighbours in U3 (a key agreement and an m-float expansion each)
//!    and each self-mask (an expansion each), one after the other.
//!
//! Neighbours: SecAgg shares with every other selected client (|N| = n − 1); SecAgg+ with k of
//! them on a Harary graph (each client linked to the k/2 nearest on each side of a ring in an
//! order drawn per round), k = `neighbours` or 2⌈log₂ n⌉ (Bell et al.'s O(log n)), at most
//! n − 1. Each client drops before each of steps 1, 2 and 4 with probability `dropout` (its own
//! stream per round and step). The round's time grows by steps 1–2 (before the training orders
//! go out) and by the masks, step 4 and the server's work (after the round closes).
//!
//! This room is the arithmetic of one round: the server passes the selected clients, how long
//! their links take and who drops; it decides nothing about rounds.

use super::{Link, SystemError};
use crate::settings::FieldError;
use crate::sim::SimDuration;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Bytes of one public key.
pub const PUBLIC_KEY_BYTES: u64 = 32;
/// Bytes of one neighbour's encrypted pair of shares (two 32-byte shares, ids, a 16-byte tag).
pub const SHARE_CIPHERTEXT_BYTES: u64 = 96;
/// Bytes of one share sent in the unmasking step.
pub const SHARE_BYTES: u64 = 32;
/// Bytes of one client id in the list of survivors.
pub const CLIENT_ID_BYTES: u64 = 4;

/// Which protocol.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Bonawitz et al. (2017): every client shares with every other.
    #[default]
    Secagg,
    /// Bell et al. (2020): each client shares with k neighbours on a sparse graph.
    SecaggPlus,
}

/// `secure_aggregation:`: the protocol whose cost a synchronous round pays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecAggSpec {
    /// `secagg` (every client shares with every other) or `secagg_plus` (k neighbours).
    #[serde(default)]
    pub protocol: Protocol,
    /// t as a fraction of the holders of a client's shares (itself and its neighbours): its
    /// secrets are recovered from at least ⌈threshold·(|N| + 1)⌉ of them, in (0, 1].
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// SecAgg+: k, each client's neighbours (even, ≥ 2); 0 for 2⌈log₂ n⌉, n the round's clients.
    #[serde(default)]
    pub neighbours: usize,
    /// The probability that a client drops before each of the protocol's own steps (advertise,
    /// share, unmask), in [0, 1); dropouts during training are `system.dropout`'s.
    #[serde(default)]
    pub dropout: f64,
    /// Milliseconds of one key agreement (with the share encryption it keys), on a client or
    /// the server.
    #[serde(default = "default_key_agreement_ms")]
    pub key_agreement_ms: f64,
    /// Floats a second a client or the server expands a mask at (a PRG over the model).
    #[serde(default = "default_mask_rate")]
    pub mask_floats_per_second: f64,
}

fn default_threshold() -> f64 {
    0.5
}

fn default_key_agreement_ms() -> f64 {
    1.0
}

fn default_mask_rate() -> f64 {
    1e8
}

impl SecAggSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.into(), message));
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return bad(
                "threshold",
                format!("must be in (0, 1], got {}", self.threshold),
            );
        }
        if self.neighbours != 0 && (self.neighbours < 2 || self.neighbours % 2 == 1) {
            return bad(
                "neighbours",
                format!(
                    "must be 0 (2⌈log₂ n⌉) or an even number ≥ 2 (a Harary graph links k/2 \
                     clients on each side), got {}",
                    self.neighbours
                ),
            );
        }
        if self.neighbours != 0 && self.protocol == Protocol::Secagg {
            return bad(
                "neighbours",
                "`secagg` shares with every other client; `neighbours` is for `secagg_plus`".into(),
            );
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(
                "dropout",
                format!("must be in [0, 1), got {}", self.dropout),
            );
        }
        let ms = self.key_agreement_ms;
        if !(ms.is_finite() && ms >= 0.0) {
            return bad(
                "key_agreement_ms",
                format!("must be a number ≥ 0, got {ms}"),
            );
        }
        FieldError::positive("mask_floats_per_second", self.mask_floats_per_second)
    }

    /// Each client's neighbours in a round of `n` clients.
    pub fn neighbours_of(&self, n: usize) -> usize {
        let all = n.saturating_sub(1);
        match self.protocol {
            Protocol::Secagg => all,
            Protocol::SecaggPlus => {
                let k = if self.neighbours == 0 {
                    2 * (n.max(2) as f64).log2().ceil() as usize
                } else {
                    self.neighbours
                };
                k.min(all)
            }
        }
    }

    /// The graph of a round of `n` clients (indices into the round's sorted clients): the
    /// complete graph, or a Harary graph H(n, k) on an order shuffled by `rng`.
    pub fn graph(&self, n: usize, rng: &mut impl Rng) -> Vec<Vec<usize>> {
        let k = self.neighbours_of(n);
        if k + 1 >= n {
            return (0..n)
                .map(|i| (0..n).filter(|&j| j != i).collect())
                .collect();
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(rng);
        let mut graph = vec![Vec::new(); n];
        for (position, &client) in order.iter().enumerate() {
            for step in 1..=k / 2 {
                for other in [(position + step) % n, (position + n - step) % n] {
                    graph[client].push(order[other]);
                }
            }
        }
        for neighbours in &mut graph {
            neighbours.sort_unstable();
            neighbours.dedup();
        }
        graph
    }

    /// t for a client of `degree` neighbours (`degree` + 1 holders of its shares).
    pub fn threshold_of(&self, degree: usize) -> usize {
        ((self.threshold * (degree + 1) as f64).ceil() as usize).max(1)
    }
}

/// The protocol's steps a client can drop before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Advertise,
    Share,
    Unmask,
}

impl Step {
    /// The index of the step's dropout stream within a round.
    pub fn index(self) -> u64 {
        match self {
            Step::Advertise => 0,
            Step::Share => 1,
            Step::Unmask => 2,
        }
    }
}

/// Steps 1 and 2 of a round, before training.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Neighbours by index into the round's clients.
    pub graph: Vec<Vec<usize>>,
    /// U2: who shared keys (and trains), by index.
    pub shared: Vec<bool>,
    pub time: SimDuration,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Clients that dropped in steps 1–2.
    pub dropped: u32,
}

/// Step 3's masks, step 4 and the server's work, after the round closes.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    pub time: SimDuration,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Clients that dropped before answering step 4.
    pub dropped: u32,
    /// Whether the server could remove every mask (otherwise the round aggregates nothing).
    pub unmasked: bool,
}

/// The sum of `parts`, each one the clock counts, where the sum is too (`what` names it).
fn clock_sum(parts: &[SimDuration], what: &str) -> Result<SimDuration, SystemError> {
    let secs: f64 = parts.iter().map(|d| d.as_secs_f64()).sum();
    let total = parts
        .iter()
        .try_fold(0u64, |sum, d| sum.checked_add(d.micros()))
        .filter(|&us| us <= SimDuration::LONGEST.micros());
    total.map(SimDuration).ok_or_else(|| SystemError::Clock {
        what: what.into(),
        secs,
    })
}

/// The indices where `set` holds.
fn members(set: &[bool]) -> impl Iterator<Item = usize> + '_ {
    (0..set.len()).filter(move |&i| set[i])
}

/// The slowest of `times` (zero for none), or the first that the clock cannot count.
fn slowest(
    times: impl Iterator<Item = Result<SimDuration, SystemError>>,
) -> Result<SimDuration, SystemError> {
    let mut longest = SimDuration::ZERO;
    for t in times {
        longest = longest.max(t?);
    }
    Ok(longest)
}

impl SecAggSpec {
    /// Steps 1–2 for the round's `clients` (sorted) on `graph`; `link(client, link, bytes)` is
    /// a message's time, `drops(client, step)` whether the client drops before the step. An
    /// error where a time is more than the virtual clock counts.
    pub fn setup(
        &self,
        clients: &[u32],
        graph: Vec<Vec<usize>>,
        link: impl Fn(u32, Link, u64) -> Result<SimDuration, SystemError>,
        drops: impl Fn(u32, Step) -> bool,
    ) -> Result<Setup, SystemError> {
        let n = clients.len();
        let advertised: Vec<bool> = clients
            .iter()
            .map(|&c| !drops(c, Step::Advertise))
            .collect();
        let present = |set: &[bool], i: usize| graph[i].iter().filter(|&&j| set[j]).count() as u64;
        let mut bytes_up = 0;
        let mut bytes_down = 0;
        // Step 1.
        let up1 = slowest(members(&advertised).map(|i| {
            bytes_up += 2 * PUBLIC_KEY_BYTES;
            link(clients[i], Link::Up, 2 * PUBLIC_KEY_BYTES)
        }))?;
        let down1 = slowest(members(&advertised).map(|i| {
            let bytes = 2 * PUBLIC_KEY_BYTES * present(&advertised, i);
            bytes_down += bytes;
            link(clients[i], Link::Down, bytes)
        }))?;
        // Step 2.
        let shared: Vec<bool> = (0..n)
            .map(|i| advertised[i] && !drops(clients[i], Step::Share))
            .collect();
        let key_agreement = self.key_agreement_ms / 1e3;
        let up2 = slowest(members(&shared).map(|i| {
            let others = present(&advertised, i);
            let bytes = SHARE_CIPHERTEXT_BYTES * others;
            bytes_up += bytes;
            let agree = super::duration(others as f64 * key_agreement, || {
                format!(
                    "client {}'s {others} key agreements (secure_aggregation.key_agreement_ms: \
                     {} ms each)",
                    clients[i],
                    crate::settings::number(self.key_agreement_ms)
                )
            })?;
            Ok(agree + link(clients[i], Link::Up, bytes)?)
        }))?;
        let down2 = slowest(members(&shared).map(|i| {
            let bytes = SHARE_CIPHERTEXT_BYTES * present(&shared, i);
            bytes_down += bytes;
            link(clients[i], Link::Down, bytes)
        }))?;
        let dropped = shared.iter().filter(|&&s| !s).count() as u32;
        Ok(Setup {
            graph,
            shared,
            time: clock_sum(
                &[up1, down1, up2, down2],
                "secure aggregation's setup steps",
            )?,
            bytes_up,
            bytes_down,
            dropped,
        })
    }

    /// Step 3's masks, step 4 and the server's work, once the round's updates are in:
    /// `uploaded[i]` whether client i's arrived (U3), over `floats` floats. An error where a
    /// time is more than the virtual clock counts.
    pub fn finish(
        &self,
        clients: &[u32],
        setup: &Setup,
        uploaded: &[bool],
        floats: usize,
        link: impl Fn(u32, Link, u64) -> Result<SimDuration, SystemError>,
        drops: impl Fn(u32, Step) -> bool,
    ) -> Result<Finish, SystemError> {
        let n = clients.len();
        let (graph, shared) = (&setup.graph, &setup.shared);
        let survivors = uploaded.iter().filter(|&&u| u).count() as u64;
        if survivors == 0 {
            return Ok(Finish {
                time: SimDuration::ZERO,
                bytes_up: 0,
                bytes_down: 0,
                dropped: 0,
                unmasked: true,
            });
        }
        let present = |set: &[bool], i: usize| graph[i].iter().filter(|&&j| set[j]).count();
        let expand = |masks: usize| masks as f64 * floats as f64 / self.mask_floats_per_second;
        let masks = slowest((0..n).filter(|&i| uploaded[i]).map(|i| {
            let masks = present(shared, i) + 1;
            super::duration(expand(masks), || {
                format!(
                    "client {}'s expansion of {masks} masks of {floats} floats \
                     (secure_aggregation.mask_floats_per_second: {})",
                    clients[i],
                    crate::settings::number(self.mask_floats_per_second)
                )
            })
        }))?;
        let answered: Vec<bool> = (0..n)
            .map(|i| uploaded[i] && !drops(clients[i], Step::Unmask))
            .collect();
        let (mut bytes_up, mut bytes_down) = (0, 0);
        let down = slowest((0..n).filter(|&i| uploaded[i]).map(|i| {
            let bytes = CLIENT_ID_BYTES * survivors;
            bytes_down += bytes;
            link(clients[i], Link::Down, bytes)
        }))?;
        let up = slowest((0..n).filter(|&i| answered[i]).map(|i| {
            let bytes = SHARE_BYTES * (present(shared, i) as u64 + 1);
            bytes_up += bytes;
            link(clients[i], Link::Up, bytes)
        }))?;
        // Whose secrets the server needs, and whether enough neighbours answered for each.
        let needed = (0..n).filter(|&i| uploaded[i] || (shared[i] && present(uploaded, i) > 0));
        let holders = |i: usize| present(&answered, i) + answered[i] as usize;
        let unmasked = needed
            .clone()
            .all(|i| holders(i) >= self.threshold_of(graph[i].len()));
        let mut server = 0.0;
        for i in needed {
            server += if uploaded[i] {
                expand(1)
            } else {
                let pairs = present(uploaded, i);
                pairs as f64 * self.key_agreement_ms / 1e3 + expand(pairs)
            };
        }
        let server = if unmasked {
            super::duration(server, || {
                "the server's unmasking (secure_aggregation.key_agreement_ms and \
                 mask_floats_per_second)"
                    .into()
            })?
        } else {
            SimDuration::ZERO
        };
        Ok(Finish {
            time: clock_sum(
                &[masks, down, up, server],
                "secure aggregation's last steps",
            )?,
            bytes_up,
            bytes_down,
            dropped: (0..n).filter(|&i| uploaded[i] && !answered[i]).count() as u32,
            unmasked,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn spec(yaml: &str) -> SecAggSpec {
        let s: SecAggSpec = serde_yaml::from_str(yaml).unwrap();
        s.validate().unwrap();
        s
    }

    /// Every link: 10 ms latency and 1 ms per 100 bytes (0.8 Mbit/s).
    fn link(_: u32, _: Link, bytes: u64) -> Result<SimDuration, SystemError> {
        Ok(SimDuration::from_micros(10_000 + 10 * bytes))
    }

    /// SecAgg over 4 clients, nobody drops, 1 000 floats at 1e6 floats/s, key agreement 1 ms.
    /// Step 1: up 64 B (10.64 ms), down 3 × 64 B (11.92 ms). Step 2: 3 key agreements (3 ms)
    /// and 3 × 96 B up (12.88 ms), 3 × 96 B down (12.88 ms): setup 51.32 ms, 4·64 + 4·288 up.
    /// Finish: masks (3 + 1) × 1 000 / 1e6 = 4 ms; down 4 × 4 B (10.16 ms); up (3 + 1) × 32 B
    /// (11.28 ms); the server's 4 self-masks, 4 ms: 29.44 ms.
    #[test]
    fn a_secagg_round_by_hand() {
        let s = spec("{protocol: secagg, key_agreement_ms: 1, mask_floats_per_second: 1.0e6}");
        let clients = [3, 5, 8, 9];
        let graph = s.graph(4, &mut ChaCha20Rng::seed_from_u64(1));
        assert_eq!(graph[0], vec![1, 2, 3]);
        let setup = s.setup(&clients, graph, link, |_, _| false).unwrap();
        assert_eq!(
            setup.time,
            SimDuration::from_micros(10_640 + 11_920 + 15_880 + 12_880)
        );
        assert_eq!(
            (setup.bytes_up, setup.bytes_down),
            (4 * 64 + 4 * 288, 4 * 192 + 4 * 288)
        );
        assert_eq!((setup.dropped, setup.shared.clone()), (0, vec![true; 4]));
        let finish = (s.finish(&clients, &setup, &[true; 4], 1_000, link, |_, _| false)).unwrap();
        assert!(finish.unmasked);
        assert_eq!(
            finish.time,
            SimDuration::from_micros(4_000 + 10_160 + 11_280 + 4_000)
        );
        assert_eq!((finish.bytes_up, finish.bytes_down), (4 * 128, 4 * 16));
    }

    /// The same round, client 9 dropping before step 2 and client 3's update lost in training:
    /// U2 = {3, 5, 8}, U3 = {5, 8}. Client 8 drops before unmasking: U5 = {5}. The server needs
    /// the secrets of 3 (missing, with neighbours in U3), 5 and 8 (uploaded); each has four
    /// holders of which only client 5 answers. Threshold 0.5 (t = 2): the round fails;
    /// threshold 0.25 (t = 1): it succeeds.
    #[test]
    fn dropouts_between_steps_by_hand() {
        let drops = |c: u32, step: Step| {
            (c == 9 && step == Step::Share) || (c == 8 && step == Step::Unmask)
        };
        for (threshold, unmasked) in [(0.5, false), (0.25, true)] {
            let s = spec(&format!(
                "{{threshold: {threshold}, key_agreement_ms: 1, mask_floats_per_second: 1.0e6}}"
            ));
            let clients = [3, 5, 8, 9];
            let graph = s.graph(4, &mut ChaCha20Rng::seed_from_u64(1));
            let setup = s.setup(&clients, graph, link, drops).unwrap();
            assert_eq!(setup.shared, vec![true, true, true, false]);
            assert_eq!(setup.dropped, 1);
            // Step 2's uploads still carry shares for all three advertised neighbours; the
            // downloads only those from the 2 others of U2.
            assert_eq!(setup.bytes_up, 4 * 64 + 3 * 288);
            assert_eq!(setup.bytes_down, 4 * 192 + 3 * 192);
            let uploaded = [false, true, true, false];
            let finish = (s.finish(&clients, &setup, &uploaded, 1_000, link, drops)).unwrap();
            assert_eq!(finish.dropped, 1);
            assert_eq!(finish.unmasked, unmasked, "threshold {threshold}");
            // Client 5 answers with a share for itself and its 2 neighbours in U2.
            assert_eq!(finish.bytes_up, 3 * 32);
            // Masks: client 5 and 8 each expand 2 pairwise + 1 self = 3 ms; down 2 × 4 B
            // (10.08 ms); up 96 B (10.96 ms); the server (when it unmasks): client 3's two
            // pairs (2 × (1 ms + 1 ms)) and two self-masks (2 ms).
            let server = if unmasked { 6_000 } else { 0 };
            assert_eq!(
                finish.time,
                SimDuration::from_micros(3_000 + 10_080 + 10_960 + server)
            );
        }
    }

    /// Key agreements of 1e300 ms cannot be counted by the virtual clock: the setup says so,
    /// naming the setting, instead of saturating.
    #[test]
    fn costs_past_the_clock_are_an_error_naming_the_setting() {
        let s = spec("{protocol: secagg, key_agreement_ms: 1.0e300}");
        let graph = s.graph(3, &mut ChaCha20Rng::seed_from_u64(1));
        let e = s.setup(&[0, 1, 2], graph, link, |_, _| false).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(
                "client 0's 2 key agreements (secure_aggregation.key_agreement_ms: 1e300 ms \
                 each) takes 2e297 s of simulated time, more than the virtual clock counts (at \
                 most 4.6e12 s"
            ),
            "{text}"
        );
    }

    /// SecAgg+ on 100 clients: k = 2⌈log₂ 100⌉ = 14 neighbours each, symmetric, no self-loops;
    /// the graph is the stream's.
    #[test]
    fn secagg_plus_graph_is_a_harary_graph() {
        let s = spec("{protocol: secagg_plus}");
        assert_eq!(s.neighbours_of(100), 14);
        assert_eq!(s.neighbours_of(5), 4);
        let graph = s.graph(100, &mut ChaCha20Rng::seed_from_u64(7));
        for (i, neighbours) in graph.iter().enumerate() {
            assert_eq!(neighbours.len(), 14, "client {i}");
            assert!(!neighbours.contains(&i));
            for &j in neighbours {
                assert!(graph[j].contains(&i), "{i}–{j} one way only");
            }
        }
        assert_eq!(graph, s.graph(100, &mut ChaCha20Rng::seed_from_u64(7)));
        assert_ne!(graph, s.graph(100, &mut ChaCha20Rng::seed_from_u64(8)));
        let bad: SecAggSpec =
            serde_yaml::from_str("{protocol: secagg_plus, neighbours: 3}").unwrap();
        assert!(bad.validate().unwrap_err().to_string().contains("even"));
    }
}
