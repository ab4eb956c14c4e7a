//! The messages of a run with a server, each in its recipient's own type, and what they carry.
//! This room holds types only: no handler, no scheduling, no I/O.

use super::world::Routed;
use crate::algorithms::{Algorithm, ClientReport, Evaluation, NoveltyShare};
use crate::io::Stored;
use crate::records::{NoveltyScores, Record};
use crate::sampling::ReportedLoss;
use crate::sim::{Effects, SimDuration, SimTime};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The messages of a run with a server, each in its recipient's own type.
pub(super) type Msg<A> = Routed<ToServer<A>, ToClient<A>>;

/// The server's messages.
pub enum ToServer<A: Algorithm> {
    /// Begin round `round` (FedBuff: start the first jobs).
    StartRound { round: u32 },
    /// Round `round`'s deadline has come.
    Deadline { round: u32 },
    /// (FedBuff) A client may have come online; start jobs if slots are free.
    Wake,
    /// A client's update has arrived (`bytes`: what it took on the uplink).
    Update {
        round: u32,
        client: u32,
        update: Stored<A::Update>,
        bytes: u64,
        compute: SimDuration,
        privacy: PrivacyNote,
        /// Under a loss-guided strategy, the loss of the model it started from.
        loss: Option<ReportedLoss>,
    },
    /// (`evaluation.novelty: max_over_clients` or `mean_weights`) What `client` scores
    /// novelty with at round `round`'s evaluation.
    NoveltyShare {
        round: u32,
        client: u32,
        share: NoveltyShare,
    },
    /// A client that was not asked to upload has finished training.
    Done {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
    /// A client dropped out or went offline; its job is lost (the server notices when it
    /// happens, as a broken connection).
    Failed {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
}

/// What every evaluated client's rows are scored by once all of a round's
/// [`NoveltyShare`]s are in (`evaluation.novelty`).
#[derive(Debug, PartialEq)]
pub enum PooledNovelty<G> {
    /// Every evaluated client's classifier, in client order (`max_over_clients`).
    Classifiers(Vec<Vec<f32>>),
    /// The evaluated training clients' mean mixture weights, with the global model they were
    /// evaluated with (`mean_weights`).
    MeanWeights { weights: Vec<f64>, global: Arc<G> },
}

/// A client's messages.
pub enum ToClient<A: Algorithm> {
    /// Train, as the order says.
    Train(TrainOrder<A>),
    /// (From its own training job) Local work is done.
    Trained(FinishedWork<A>),
    /// Evaluate your model after `round`.
    Evaluate { round: u32, global: Arc<A::Global> },
    /// (From its own evaluation job) Results per model and split, and what the algorithm
    /// reports about the state it was evaluated with.
    Evaluated {
        round: u32,
        results: Vec<Evaluation>,
        report: ClientReport,
    },
    /// (`evaluation.novelty: max_over_clients` or `mean_weights`) Score your rows of round
    /// `round`'s evaluation by what every evaluated client shared.
    ScoreNovelty {
        round: u32,
        pooled: Arc<PooledNovelty<A::Global>>,
    },
    /// (From its own scoring job) Its test and novel rows' scores.
    NoveltyScored {
        round: u32,
        scores: Option<NoveltyScores>,
    },
}

/// The server's order to a client: train from `global` with learning rate `lr` for round
/// `round`; `job` indexes the client's random streams (the round, in synchronous runs). Send
/// the update if `upload`, else only a completion notice (pFedMe's unsampled clients train but
/// are not aggregated).
pub struct TrainOrder<A: Algorithm> {
    pub round: u32,
    pub job: u64,
    pub global: Arc<A::Global>,
    pub lr: f64,
    pub upload: bool,
    /// With privacy: the bound the update is clipped to (the round's, under adaptive clipping).
    pub clip: Option<f64>,
    /// Under `late_updates: partial_work`: when the job's compute must end, for its upload to
    /// make the round's deadline; the client trains only the steps that fit.
    pub compute_by: Option<crate::sim::SimTime>,
}

/// A client's local work for `round`, done after `compute` of simulated time.
pub struct FinishedWork<A: Algorithm> {
    pub round: u32,
    /// Spilled on the pool where the run spills values of its size, as is `state`.
    pub update: Stored<A::Update>,
    /// The update's bytes on the uplink (counted on the pool): 4 a float
    /// ([`Algorithm::update_len`]), or what compression makes of them.
    pub bytes: u64,
    pub state: Stored<A::ClientState>,
    /// Under error feedback, what compression has not sent yet (see [`CompressorSpec`](crate::compression::CompressorSpec)).
    pub residual: Option<Stored<Vec<f32>>>,
    /// Whether the server asked for the update.
    pub upload: bool,
    pub compute: SimDuration,
    /// Whether the update and the state hold only finite numbers (checked on the pool).
    pub finite: bool,
    pub privacy: PrivacyNote,
    /// Under a loss-guided strategy, the loss of the model the job started from on the
    /// client's training rows (measured on the pool).
    pub loss: Option<ReportedLoss>,
}

/// What privacy tells the server about an update besides the update itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivacyNote {
    /// Client-level privacy: clipping scaled the update down (it was above the bound).
    pub clipped: bool,
    /// DP-SGD: the minibatch steps whose rows the update has seen (the job's steps of each local
    /// run, for each vector it sends), what the server's accountant composes for the client's
    /// records.
    pub dp_sgd_steps: u64,
}

pub(super) type FlEffects<A> = Effects<Msg<A>, Record>;

/// An event waiting at a point where a checkpoint is saved: when it is due, its sender's rank
/// (which orders it among the events due then), and what it is.
#[derive(Serialize, Deserialize)]
pub(super) struct SavedEvent<U> {
    pub at: SimTime,
    pub origin: u32,
    pub event: Saved<U>,
}

/// A message as a checkpoint saves it: the messages of a run with a server that can wait
/// where one is saved, without the models they carry (a training order's model is the base of
/// its job, which the server saves), and a job's result still to come as the client whose job
/// it is (which the client starts again from what it saves).
#[derive(Serialize, Deserialize)]
pub(super) enum Saved<U> {
    StartRound {
        round: u32,
    },
    Deadline {
        round: u32,
    },
    Wake,
    Update {
        round: u32,
        client: u32,
        update: U,
        bytes: u64,
        compute: SimDuration,
        privacy: PrivacyNote,
        loss: Option<ReportedLoss>,
    },
    Done {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
    Failed {
        round: u32,
        client: u32,
        compute: SimDuration,
    },
    /// A training order on its way to `client`.
    Train {
        client: u32,
        order: SavedOrder,
    },
    /// The result of one of `client`'s jobs (training or evaluation; its jobs' results come
    /// in the order they are due, then in the order they started).
    JobResult {
        client: u32,
    },
}

/// A [`TrainOrder`] less its model.
#[derive(Clone, Copy, Serialize, Deserialize)]
pub(super) struct SavedOrder {
    pub round: u32,
    pub job: u64,
    pub lr: f64,
    pub upload: bool,
    pub clip: Option<f64>,
    pub compute_by: Option<SimTime>,
}

impl<A: Algorithm> TrainOrder<A> {
    /// The order as a checkpoint saves it (less its model).
    pub(super) fn saved(&self) -> SavedOrder {
        SavedOrder {
            round: self.round,
            job: self.job,
            lr: self.lr,
            upload: self.upload,
            clip: self.clip,
            compute_by: self.compute_by,
        }
    }

    /// The order a checkpoint saved, with its model `global`.
    pub(super) fn from_saved(order: SavedOrder, global: Arc<A::Global>) -> Self {
        let SavedOrder {
            round,
            job,
            lr,
            upload,
            clip,
            compute_by,
        } = order;
        TrainOrder {
            round,
            job,
            global,
            lr,
            upload,
            clip,
            compute_by,
        }
    }
}
