//! AFL (Mohri et al. 2019, "Agnostic Federated Learning"): the model that does best for the
//! worst mixture of the clients, min_w max_λ Σ_k λ_k·F_k(w) over λ in the simplex, by
//! stochastic gradient descent on w and projected ascent on λ, as the authors' baseline in
//! the q-FFL code runs it.
//!
//! Each round, every sampled client k measures F_k(w), its mean training loss at the server's
//! model (in a cohort, in an E-step's stacked forward passes), and runs local SGD from w (one
//! step in the paper: its gradient). The server then
//! - moves w to the λ-weighted mean of the trained models, Σ λ_k·w̄_k / Σ λ_k (one local step:
//!   w − η·Σ λ_k g_k / Σ λ_k),
//! - moves each sampled client's weight by λ_k ← λ_k + γ_λ·F_k(w) and projects λ back onto the
//!   simplex of the participants (Wang & Carreira-Perpiñán 2013), from λ = 1/m,
//! - and averages the iterates: w̃ ← w̃ + (w − w̃)/t after t rounds.
//!
//! Clients are tested with the averaged model w̃, whose guarantee the paper gives; each
//! evaluated client reports its λ_k as the extra `afl_weight` (`extras.parquet`).
//!
//! With `groups` (the paper's domains, each of many clients), λ is one weight per group g and
//! L_g(w) is the loss over all the group's rows: a sampled client's model weighs λ_g·n_k/N_g
//! (its share N_g of the group's training rows), and λ_g moves by γ_λ times the row-weighted
//! mean of the sampled members' F_k(w). One client a group is the plain form above.

use super::{
    Algorithm, ClientReport, LocalContext, LocalUpdate, SentRuns, SgdRun, SgdUpdate, Summed,
    Tested, WeightedSum,
};
use crate::models::{Architecture, InitialModels};
use crate::records::{ModelKind, Split};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AflSpec {
    /// γ_λ, the step of the mixture weights' ascent (the q-FFL code uses 0.01 and 0.1).
    pub lambda_lr: f64,
    /// The groups (domains) the weights are over, each client's from a population file
    /// [default: each client its own group].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<GroupsSpec>,
}

/// Each client's group, from a population file: CSV or Parquet with a `client` column and
/// `column`, one row per client; groups are named by any text and ordered by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupsSpec {
    /// The file, relative to the working directory.
    pub path: std::path::PathBuf,
    /// The column of each client's group.
    #[serde(default = "default_group_column")]
    pub column: String,
}

fn default_group_column() -> String {
    "group".into()
}

impl GroupsSpec {
    /// Each client's group, numbered in the order of their names, and the names.
    fn read(&self, clients: usize) -> Result<(Vec<u32>, Vec<String>), FieldError> {
        let names = crate::io::population::per_client_text(&self.path, &self.column, clients)
            .map_err(|e| FieldError::new("groups".into(), e.to_string()))?;
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        let group_of = (names.iter())
            .map(|n| distinct.binary_search(n).expect("a listed name") as u32)
            .collect();
        Ok((group_of, distinct))
    }
}

impl super::AlgorithmSettings for AflSpec {
    const EXAMPLE: &'static str = "{lambda_lr: 0.01}";

    type Algorithm = Afl;

    fn build(&self, population: &super::Population) -> Afl {
        let groups = self.groups.as_ref().map(|spec| {
            let (group_of, names) = spec
                .read(population.clients)
                .expect("checked with the data");
            let mut rows = vec![0.0; names.len()];
            for c in 0..population.clients as u32 {
                if population.unseen.binary_search(&c).is_err() {
                    let n = population.data.split_len(c as usize, Split::Train);
                    rows[group_of[c as usize] as usize] += n as f64;
                }
            }
            Groups { group_of, rows }
        });
        Afl {
            lambda_lr: self.lambda_lr,
            clients: population.clients,
            unseen: population.unseen.clone(),
            groups,
        }
    }

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("lambda_lr", self.lambda_lr)
    }

    /// The groups' file names a group for every client, where the scenario says how many.
    fn check_files(&self, clients: Option<usize>) -> Result<(), FieldError> {
        match (&self.groups, clients) {
            (Some(spec), Some(clients)) => spec.read(clients).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The groups' file names a group for every client.
    fn check_data(&self, population: &super::Population) -> Result<(), FieldError> {
        if let Some(spec) = &self.groups {
            spec.read(population.clients)?;
        }
        Ok(())
    }
}

/// Clients grouped into domains: each client's group, and each group's training rows (of its
/// participants).
#[derive(Clone, Debug)]
pub struct Groups {
    pub group_of: Vec<u32>,
    pub rows: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct Afl {
    pub lambda_lr: f64,
    /// All clients, held-out ones included.
    pub clients: usize,
    /// The held-out clients, sorted: their λ stays 0.
    pub unseen: Vec<u32>,
    /// The groups λ is over; `None`: each client its own.
    pub groups: Option<Groups>,
}

impl Afl {
    /// The index of `client`'s weight in λ: its group's, or its own.
    fn weight_of(&self, client: u32) -> usize {
        match &self.groups {
            Some(g) => g.group_of[client as usize] as usize,
            None => client as usize,
        }
    }

    /// The weight in the average of `client`'s model, trained on `rows` rows, under
    /// `lambdas`: λ_k, or with groups λ_g·n_k/N_g.
    fn weight(&self, lambdas: &[f64], client: u32, rows: usize) -> f64 {
        let lambda = lambdas[self.weight_of(client)];
        match &self.groups {
            Some(g) => lambda * rows as f64 / g.rows[self.weight_of(client)].max(1.0),
            None => lambda,
        }
    }

    /// The weights λ is made of, and whether each has a participant (the simplex is theirs).
    fn weighted(&self) -> Vec<bool> {
        let seen = |c: u32| self.unseen.binary_search(&c).is_err();
        match &self.groups {
            Some(g) => {
                let mut any = vec![false; g.rows.len()];
                for c in (0..self.clients as u32).filter(|&c| seen(c)) {
                    any[g.group_of[c as usize] as usize] = true;
                }
                any
            }
            None => (0..self.clients as u32).map(seen).collect(),
        }
    }
}

/// The server's iterate w, the average w̃ of the iterates so far, how many (t), and the mixture
/// weights λ, one per client or group (0 for held-out clients and groups of them only).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct AflGlobal {
    pub model: Vec<f32>,
    pub average: Vec<f32>,
    pub iterates: u64,
    pub lambdas: Vec<f64>,
}

impl super::Finite for AflGlobal {
    fn is_finite(&self) -> bool {
        self.model.is_finite() && self.average.is_finite() && self.lambdas.is_finite()
    }
}

/// A client's trained model with its weight in the average (λ_k as it received it; with
/// groups λ_g·n_k/N_g), F_k(w) and its training rows.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct AflUpdate {
    pub params: Vec<f32>,
    pub client: u32,
    pub weight: f64,
    pub loss: f64,
    pub rows: usize,
}

impl super::Finite for AflUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.weight.is_finite() && self.loss.is_finite()
    }
}

impl crate::io::Floats for AflUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params]
    }
}

/// The Euclidean projection of `y` onto the simplex {x ≥ 0, Σ x = 1} (Wang & Carreira-Perpiñán
/// 2013, Algorithm 1): with u the values sorted down, ρ the largest j with
/// u_j + (1 − Σ_{i≤j} u_i)/j > 0 and τ = (1 − Σ_{i≤ρ} u_i)/ρ, x_i = max(y_i + τ, 0). (The
/// q-FFL code leaves u_j out of the sum in the test, which can leave points off the simplex.)
pub fn project_onto_simplex(y: &[f64]) -> Vec<f64> {
    let mut u = y.to_vec();
    u.sort_by(|a, b| b.total_cmp(a));
    let (mut rho, mut prefix, mut kept) = (0, 0.0, 0.0);
    for (i, &v) in u.iter().enumerate() {
        prefix += v;
        if v + (1.0 - prefix) / (i + 1) as f64 > 0.0 {
            rho = i + 1;
            kept = prefix;
        }
    }
    let tau = (1.0 - kept) / rho.max(1) as f64;
    y.iter().map(|&v| (v + tau).max(0.0)).collect()
}

impl Algorithm for Afl {
    type Global = AflGlobal;
    /// The momentum buffer (empty unless momentum is kept across rounds).
    type ClientState = Vec<f32>;
    type Update = AflUpdate;

    fn init_global(
        &self,
        _: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> AflGlobal {
        let model = init.model();
        let weighted = self.weighted();
        let participants = weighted.iter().filter(|&&w| w).count().max(1) as f64;
        let lambdas = (weighted.iter())
            .map(|&w| if w { 1.0 / participants } else { 0.0 })
            .collect();
        AflGlobal {
            average: model.clone(),
            model,
            iterates: 0,
            lambdas,
        }
    }

    fn init_client(&self, _: &AflGlobal, _: u32) -> Vec<f32> {
        Vec::new()
    }

    /// The averaged model w̃, which clients are tested with.
    fn models(&self, global: &AflGlobal) -> Vec<Vec<f32>> {
        vec![global.average.clone()]
    }

    /// Only w travels.
    fn broadcast_len(&self, global: &AflGlobal) -> usize {
        global.model.len()
    }

    fn update_len(&self, update: &AflUpdate) -> usize {
        update.params.len()
    }

    /// F_k(w) from the training rows' losses under w; one run from w with the client's
    /// momentum.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: Some(|global| vec![&global.model[..]]),
        begin: |_, _, global, momentum, _| {
            vec![SgdRun {
                params: Cow::Borrowed(&global.model),
                momentum: std::mem::take(momentum),
                ..SgdRun::default()
            }]
        },
        finish: |alg, ctx, global, momentum, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            *momentum = run.momentum;
            let rows = ctx.train_view().len();
            AflUpdate {
                params: run.params.into_owned(),
                client: ctx.client,
                weight: alg.weight(&global.lambdas, ctx.client, rows),
                loss: ctx.mean_train_loss(&global.model),
                rows,
            }
        },
        sends: SentRuns::All,
        keeps: None,
    });

    /// w ← Σ λ_k·w̄_k / Σ λ_k summed in client order; λ_k ← λ_k + γ_λ·F_k for the round's
    /// clients, then projected onto the participants' simplex; w̃ ← w̃ + (w − w̃)/t. A round
    /// whose clients all weigh 0 leaves w as it is. With groups, a client weighs λ_g·n_k/N_g
    /// and λ_g moves by γ_λ times its sampled members' row-weighted mean F_k.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, _| update.weight,
        finish: |alg, global, sums, updates| {
            let [sum] = <[WeightedSum; 1]>::try_from(sums).expect("one vector");
            let model = match sum.total() > 0.0 {
                true => sum.average(),
                false => global.model.clone(),
            };
            let mut lambdas = global.lambdas.clone();
            match &alg.groups {
                None => {
                    for u in &updates {
                        lambdas[u.client as usize] += alg.lambda_lr * u.loss;
                    }
                }
                Some(g) => {
                    // Each sampled group's loss: its members' F_k weighted by their rows.
                    let mut losses = vec![(0.0, 0.0); g.rows.len()];
                    for u in &updates {
                        let (sum, rows) = &mut losses[g.group_of[u.client as usize] as usize];
                        *sum += u.rows as f64 * u.loss;
                        *rows += u.rows as f64;
                    }
                    for (l, (sum, rows)) in lambdas.iter_mut().zip(losses) {
                        if rows > 0.0 {
                            *l += alg.lambda_lr * sum / rows;
                        }
                    }
                }
            }
            let weighted = alg.weighted();
            let seen: Vec<usize> = (0..lambdas.len()).filter(|&k| weighted[k]).collect();
            let projected =
                project_onto_simplex(&seen.iter().map(|&c| lambdas[c]).collect::<Vec<_>>());
            for (&c, l) in seen.iter().zip(projected) {
                lambdas[c] = l;
            }
            let iterates = global.iterates + 1;
            let average = (global.average.iter().zip(&model))
                .map(|(&a, &w)| (a as f64 + (w as f64 - a as f64) / iterates as f64) as f32)
                .collect();
            AflGlobal {
                model,
                average,
                iterates,
                lambdas,
            }
        },
    });

    fn aggregate(&self, global: &AflGlobal, updates: super::Updates<AflUpdate>) -> AflGlobal {
        super::summed_aggregate(self, global, updates)
    }

    /// λ_k (its group's) as `afl_weight`; with groups, the group's number (in the order of
    /// the names) as `afl_group`.
    fn report(&self, global: &AflGlobal, _: &Vec<f32>, client: u32) -> ClientReport {
        let mut extras = vec![(
            "afl_weight".into(),
            vec![global.lambdas[self.weight_of(client)]],
        )];
        if let Some(g) = &self.groups {
            extras.push(("afl_group".into(), vec![g.group_of[client as usize] as f64]));
        }
        ClientReport {
            extras,
            ..ClientReport::default()
        }
    }

    /// Novelty is scored by the averaged model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, global, _| &global.average);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a AflGlobal,
        _: &'a Vec<f32>,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global.average[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_onto_the_simplex_by_hand() {
        // Already on it: unchanged.
        assert_eq!(project_onto_simplex(&[0.25, 0.75]), [0.25, 0.75]);
        // (0.5, 0.5, 0.5): τ = −1/6, each 1/3.
        let p = project_onto_simplex(&[0.5, 0.5, 0.5]);
        assert!(p.iter().all(|&x| (x - 1.0 / 3.0).abs() < 1e-12), "{p:?}");
        // (1, 0.1, 0): 1 + (1 − 1)/1 > 0 and 0.1 + (1 − 1.1)/2 > 0, but 0 + (1 − 1.1)/3 < 0,
        // so ρ = 2 and τ = (1 − 1.1)/2 = −0.05: (0.95, 0.05, 0).
        let p = project_onto_simplex(&[1.0, 0.1, 0.0]);
        for (a, b) in p.iter().zip([0.95, 0.05, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{p:?}");
        }
        // (2, 0.6): 0.6 + (1 − 2.6)/2 < 0, so ρ = 1 and τ = −1: (1, 0). Leaving 0.6 out of the
        // sum (0.6 + (1 − 2)/2 > 0) would give ρ = 2 and (1.2, 0), off the simplex.
        assert_eq!(project_onto_simplex(&[2.0, 0.6]), [1.0, 0.0]);
    }

    /// Three clients, the third held out; a round of clients 0 and 1 with losses 2 and 1 at
    /// γ_λ = 0.1 from λ = (1/2, 1/2, 0): λ = (0.7, 0.6) projected, τ = −0.15, so (0.55, 0.45,
    /// 0). The model moves to the λ-weighted mean of the trained ones (as received: 1/2 each),
    /// and the average of the iterates is that model after one round.
    #[test]
    fn a_round_by_hand() {
        let afl = Afl {
            lambda_lr: 0.1,
            clients: 3,
            unseen: vec![2],
            groups: None,
        };
        let global = AflGlobal {
            model: vec![0.0],
            average: vec![0.0],
            iterates: 0,
            lambdas: vec![0.5, 0.5, 0.0],
        };
        let update = |client: u32, w: f32, loss: f64| AflUpdate {
            params: vec![w],
            client,
            weight: global.lambdas[client as usize],
            loss,
            rows: 1,
        };
        let updates = vec![(0, update(0, 1.0, 2.0)), (1, update(1, 3.0, 1.0))];
        let next = afl.aggregate(&global, super::super::Updates::from(updates));
        assert_eq!(next.model, [2.0]);
        assert_eq!(next.average, [2.0]);
        for (a, b) in next.lambdas.iter().zip([0.55, 0.45, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{:?}", next.lambdas);
        }
    }

    /// Groups A = {0, 1} and B = {2, 3} with 10, 30, 20 and 20 training rows (N_A = N_B = 40),
    /// λ = (1/2, 1/2), γ_λ = 0.1; clients 0, 1 and 2 train to 1, 2 and 4 with losses 1, 3
    /// and 2. Weights 0.5·10/40 = 0.125, 0.375 and 0.25: w = (0.125 + 0.75 + 1)/0.75 = 2.5.
    /// L_A = (10·1 + 30·3)/40 = 2.5 and L_B = 2: λ = (0.75, 0.7), projected with τ = −0.225 to
    /// (0.525, 0.475). Client 3 reports its group's λ and group.
    #[test]
    fn a_round_over_groups_by_hand() {
        let afl = Afl {
            lambda_lr: 0.1,
            clients: 4,
            unseen: Vec::new(),
            groups: Some(Groups {
                group_of: vec![0, 0, 1, 1],
                rows: vec![40.0, 40.0],
            }),
        };
        let global = AflGlobal {
            model: vec![0.0],
            average: vec![0.0],
            iterates: 0,
            lambdas: vec![0.5, 0.5],
        };
        assert_eq!(afl.weighted(), [true, true]);
        let update = |client: u32, w: f32, loss: f64, rows: usize| AflUpdate {
            params: vec![w],
            client,
            weight: afl.weight(&global.lambdas, client, rows),
            loss,
            rows,
        };
        let updates = vec![
            (0, update(0, 1.0, 1.0, 10)),
            (1, update(1, 2.0, 3.0, 30)),
            (2, update(2, 4.0, 2.0, 20)),
        ];
        assert_eq!(
            updates.iter().map(|(_, u)| u.weight).collect::<Vec<_>>(),
            [0.125, 0.375, 0.25]
        );
        let next = afl.aggregate(&global, super::super::Updates::from(updates));
        assert_eq!(next.model, [2.5]);
        for (a, b) in next.lambdas.iter().zip([0.525, 0.475]) {
            assert!((a - b).abs() < 1e-12, "{:?}", next.lambdas);
        }
        let report = afl.report(&next, &Vec::new(), 3);
        assert_eq!(report.extras[0].0, "afl_weight");
        assert!((report.extras[0].1[0] - 0.475).abs() < 1e-12);
        assert_eq!(report.extras[1], ("afl_group".to_string(), vec![1.0]));
    }
}
