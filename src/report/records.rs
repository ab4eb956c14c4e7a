//! Plain result records, as the simulation emits them in event order.

use crate::algorithms::ModelKind;
use crate::data::Split;
use crate::sim::SimTime;

/// One evaluation of one client's model on one split.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalRecord {
    pub round: u32,
    pub time: SimTime,
    pub client: u32,
    pub split: Split,
    pub model: ModelKind,
    pub n_samples: usize,
    pub loss: f64,
    pub accuracy: f64,
    /// Whether the client trained in this round.
    pub sampled: bool,
    /// The client's cluster, for algorithms that cluster clients (Clustered FL).
    pub cluster: Option<u32>,
    /// The client was held out of training (`unseen` in the scenario).
    pub unseen: bool,
}

/// One finished round as the server saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundRecord {
    pub round: u32,
    pub start: SimTime,
    pub end: SimTime,
    pub selected: u32,
    pub completed: u32,
    pub bytes_down: u64,
    pub bytes_up: u64,
}

/// A client's mixture weights at an evaluation (FedEM).
#[derive(Clone, Debug, PartialEq)]
pub struct MixtureRecord {
    pub round: u32,
    pub client: u32,
    pub weights: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Eval(EvalRecord),
    Round(RoundRecord),
    Mixture(MixtureRecord),
    /// The server's models after the last round (FedAvg: one; FedEM: the M components;
    /// Clustered FL: one per cluster), flat in parameter order.
    FinalModels(Vec<Vec<f32>>),
}
