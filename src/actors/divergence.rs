//! An entity's watch for non-finite numbers (`on_divergence`). It records what it sees and may
//! stop the run; it sends no message and touches no model.

use crate::algorithms::Evaluation;
use crate::records::{DivergenceRecord, DivergenceStage, Record};
use crate::settings::OnDivergence;
use crate::sim::{Effects, SimTime};

/// One entity's watch for non-finite numbers: the first time it sees some, it records a
/// [`DivergenceRecord`] (later ones are not recorded again) and, under
/// `on_divergence: stop`, ends the run after the current event.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct DivergenceWatch {
    policy: OnDivergence,
    pub(super) seen: bool,
}

/// When and where a check looks: after `round`, at `time`, at `client` (`None`: the server or
/// the monitor).
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub(super) round: u32,
    pub(super) time: SimTime,
    pub(super) client: Option<u32>,
}

impl DivergenceWatch {
    pub(super) fn new(policy: OnDivergence) -> Self {
        DivergenceWatch {
            policy,
            seen: false,
        }
    }

    /// Whether `finite` holds; if not, records where it was `seen`, at `stage`, once.
    pub(super) fn check<M>(
        &mut self,
        finite: bool,
        seen: Seen,
        stage: DivergenceStage,
        eff: &mut Effects<M, Record>,
    ) -> bool {
        if finite {
            return true;
        }
        if !self.seen {
            self.seen = true;
            eff.record(Record::Diverged(DivergenceRecord {
                round: seen.round,
                time: seen.time,
                client: seen.client,
                stage,
            }));
        }
        if self.policy.is_stop() {
            eff.stop();
        }
        false
    }

    /// Checks the losses of an evaluation.
    pub(super) fn check_evaluation<M>(
        &mut self,
        results: &[Evaluation],
        seen: Seen,
        eff: &mut Effects<M, Record>,
    ) {
        let finite = results.iter().all(|e| e.stats.loss.is_finite());
        self.check(finite, seen, DivergenceStage::Evaluation, eff);
    }
}
