//! Convolutional models for images: `cnn` (the FedEM authors' FemnistCNN) and `small_cnn`
//! (the small CNN of the FedEM paper's App. I.1).

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InputShape, Layer};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The FedEM authors' `FemnistCNN` (their EMNIST and FEMNIST experiments): conv 5×5 32 → ReLU
/// → max-pool 2 → conv 5×5 64 → ReLU → max-pool 2 → dense 2048 → ReLU → dense.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CnnSpec {}

/// The small CNN of the FedEM paper's App. I.1 (Keras' MNIST example): conv 3×3 32 → ReLU →
/// conv 3×3 64 → ReLU → max-pool 2 → dropout → dense 128 → ReLU → dropout (twice the rate) →
/// dense.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SmallCnnSpec {
    /// The first dropout layer's rate (the second drops twice as many).
    #[serde(default = "default_dropout")]
    pub dropout: f64,
}

fn default_dropout() -> f64 {
    0.25
}

fn conv(inputs: usize, outputs: usize, kernel: usize) -> Layer {
    Layer::Conv {
        inputs,
        outputs,
        kernel,
        stride: 1,
        padding: 0,
        groups: 1,
        bias: true,
    }
}

fn dense(inputs: usize, outputs: usize) -> Layer {
    Layer::Dense { inputs, outputs }
}

fn image(input: InputShape) -> [usize; 3] {
    let InputShape::Image(image) = input else {
        panic!("a convolutional model needs image inputs (checked by the scenario)");
    };
    image
}

impl ModelSettings for CnnSpec {
    const INPUTS: Inputs = Inputs::Images { min_side: 16 };

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let [c, h, w] = image(input);
        let (h, w) = (((h - 4) / 2 - 4) / 2, ((w - 4) / 2 - 4) / 2);
        Network::of(vec![
            conv(c, 32, 5),
            Layer::Relu,
            Layer::MaxPool,
            conv(32, 64, 5),
            Layer::Relu,
            Layer::MaxPool,
            dense(64 * h * w, 2048),
            Layer::Relu,
            dense(2048, outputs),
        ])
    }
}

impl ModelSettings for SmallCnnSpec {
    const INPUTS: Inputs = Inputs::Images { min_side: 6 };

    fn validate(&self) -> Result<(), FieldError> {
        let dropout = self.dropout;
        if !(0.0..0.5).contains(&dropout) {
            return Err(FieldError::new(
                "dropout".into(),
                format!(
                    "must be in [0, 0.5) (the second dropout layer uses twice the rate), got \
                     {dropout}"
                ),
            ));
        }
        Ok(())
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let [c, h, w] = image(input);
        let (h, w) = ((h - 4) / 2, (w - 4) / 2);
        Network::of(vec![
            conv(c, 32, 3),
            Layer::Relu,
            conv(32, 64, 3),
            Layer::Relu,
            Layer::MaxPool,
            Layer::Dropout { p: self.dropout },
            dense(64 * h * w, 128),
            Layer::Relu,
            Layer::Dropout {
                p: 2.0 * self.dropout,
            },
            dense(128, outputs),
        ])
    }
}
