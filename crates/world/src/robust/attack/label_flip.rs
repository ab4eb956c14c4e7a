//! `label_flip`: malicious clients train on their training rows with every label flipped.

use super::catalogue::AttackSettings;
use crate::data::FederatedData;
use serde::{Deserialize, Serialize};

/// The settings of `label_flip`: none (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelFlipSpec {}

impl AttackSettings for LabelFlipSpec {
    const POISONS_DATA: bool = true;

    fn poison(
        &self,
        data: &mut FederatedData,
        malicious: &[u32],
        _seed: u64,
    ) -> Result<(), String> {
        data.flip_train_labels(malicious);
        Ok(())
    }
}
