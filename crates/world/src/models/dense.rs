//! Dense models: `linear` (logistic or softmax regression) and `mlp` (ReLU hidden layers).

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InputShape, Layer};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// Logistic regression for two classes (one output), softmax regression otherwise.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinearSpec {}

/// Fully connected ReLU network with the given hidden widths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlpSpec {
    /// The widths of the hidden layers, input side first.
    pub hidden: Vec<usize>,
}

/// Dense layers through `widths`, ReLU between them.
fn dense_stack(widths: &[usize]) -> Network {
    let mut layers = Vec::new();
    for (l, w) in widths.windows(2).enumerate() {
        if l > 0 {
            layers.push(Layer::Relu);
        }
        layers.push(Layer::Dense {
            inputs: w[0],
            outputs: w[1],
        });
    }
    Network::of(layers)
}

impl ModelSettings for LinearSpec {
    const INPUTS: Inputs = Inputs::Any;

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        dense_stack(&[input.len(), outputs])
    }
}

impl ModelSettings for MlpSpec {
    const INPUTS: Inputs = Inputs::Any;
    const EXAMPLE: &'static str = "{hidden: [16]}";

    fn validate(&self) -> Result<(), FieldError> {
        if self.hidden.is_empty() || self.hidden.contains(&0) {
            return Err(FieldError::new(
                "hidden".into(),
                "must list at least one layer width, each at least 1".into(),
            ));
        }
        Ok(())
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let widths: Vec<usize> = std::iter::once(input.len())
            .chain(self.hidden.iter().copied())
            .chain([outputs])
            .collect();
        dense_stack(&widths)
    }
}
