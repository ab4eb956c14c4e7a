//! `lstm`: the FedEM authors' next-character model for token windows.

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InputShape, Layer};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// Embedding → stacked LSTM → dense decoder of the last step's hidden state (their Shakespeare
/// model: embedding 8, two layers of 256).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LstmSpec {
    /// The width of a character's embedding.
    #[serde(default = "default_embedding")]
    pub embedding: usize,
    /// The width of each LSTM layer's hidden state.
    #[serde(default = "default_hidden")]
    pub hidden: usize,
    /// Stacked LSTM layers.
    #[serde(default = "default_layers")]
    pub layers: usize,
}

fn default_embedding() -> usize {
    8
}
fn default_hidden() -> usize {
    256
}
fn default_layers() -> usize {
    2
}

impl ModelSettings for LstmSpec {
    const INPUTS: Inputs = Inputs::Tokens;

    fn validate(&self) -> Result<(), FieldError> {
        [
            ("embedding", self.embedding),
            ("hidden", self.hidden),
            ("layers", self.layers),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0)
        .map_or(Ok(()), |(field, _)| {
            Err(FieldError::new(field.into(), "must be at least 1".into()))
        })
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let InputShape::Tokens { vocab, .. } = input else {
            panic!("an LSTM needs token inputs (checked by the scenario)");
        };
        Network::of(vec![
            Layer::Embedding {
                vocab,
                dim: self.embedding,
            },
            Layer::Lstm {
                inputs: self.embedding,
                hidden: self.hidden,
                layers: self.layers,
            },
            Layer::Dense {
                inputs: self.hidden,
                outputs,
            },
        ])
    }
}
