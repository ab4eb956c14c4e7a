//! `lenet5`: LeNet-5 (LeCun et al. 1998) with ReLU and max-pooling, as most FL papers use it.

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InputShape, Layer};
use serde::{Deserialize, Serialize};

/// conv 5×5 6 → ReLU → max-pool 2 → conv 5×5 16 → ReLU → max-pool 2 → dense 120 → ReLU →
/// dense 84 → ReLU → dense.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Lenet5Spec {}

impl ModelSettings for Lenet5Spec {
    const INPUTS: Inputs = Inputs::Images { min_side: 16 };

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let InputShape::Image([c, h, w]) = input else {
            panic!("LeNet-5 needs image inputs (checked by the scenario)");
        };
        let conv = |inputs, outputs| Layer::Conv {
            inputs,
            outputs,
            kernel: 5,
            stride: 1,
            padding: 0,
            groups: 1,
            bias: true,
        };
        let dense = |inputs, outputs| Layer::Dense { inputs, outputs };
        let (h, w) = (((h - 4) / 2 - 4) / 2, ((w - 4) / 2 - 4) / 2);
        Network::of(vec![
            conv(c, 6),
            Layer::Relu,
            Layer::MaxPool,
            conv(6, 16),
            Layer::Relu,
            Layer::MaxPool,
            dense(16 * h * w, 120),
            Layer::Relu,
            dense(120, 84),
            Layer::Relu,
            dense(84, outputs),
        ])
    }
}

#[cfg(test)]
mod tests {
    use crate::models::{Architecture, InputShape, Lenet5Spec, ModelSpec};

    #[test]
    fn parameters_as_torch_counts_them() {
        // LeNet-5 on 28×28 MNIST, 10 classes: 156 + 2 416 + 30 840 + 10 164 + 850.
        let spec = ModelSpec::of(Lenet5Spec {});
        let arch = Architecture::for_input(&spec, InputShape::Image([1, 28, 28]), 10);
        assert_eq!(arch.num_params(), 156 + 2_416 + 30_840 + 10_164 + 850);
    }
}
