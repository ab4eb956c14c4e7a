//! MobileNet-v2 (Sandler et al. 2018) as torchvision's `mobilenet_v2` builds it, as a list of
//! [`Layer`]s: the same channels for a width multiplier, the same parameter order and
//! initialisation, so a flat parameter vector means what torchvision's `parameters()` would.
//! The FedEM authors train it on CIFAR (from ImageNet weights, which cannot be had here: fedsim
//! trains it from its initialisation). This room only lists layers; the forward pass is the
//! model module's.

use super::catalogue::{Inputs, ModelSettings, Network};
use super::{InitScheme, InputShape, Layer, Normalization};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// MobileNet-v2 as torchvision builds it (inverted residual blocks, ReLU6, global average
/// pooling, dropout, dense classifier), with its width multiplier and initialisation; for
/// colour images such as CIFAR. Normalisation layers hold no running statistics (see
/// [`Normalization`]), so every parameter is a trained one and every algorithm works on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MobilenetV2Spec {
    /// The width multiplier of torchvision's MobileNet-v2 (channels scaled by it).
    #[serde(default = "default_width")]
    pub width: f64,
    /// The normalisation layers (group norm stacks in cohorts, batch norm does not).
    #[serde(default)]
    pub norm: Normalization,
    /// Dropout before the classifier.
    #[serde(default = "default_dropout")]
    pub dropout: f64,
}

fn default_width() -> f64 {
    1.0
}
fn default_dropout() -> f64 {
    0.2
}

impl ModelSettings for MobilenetV2Spec {
    const INPUTS: Inputs = Inputs::Images { min_side: 1 };

    fn validate(&self) -> Result<(), FieldError> {
        let (width, dropout) = (self.width, self.dropout);
        if !(width > 0.0 && width <= 4.0) {
            return Err(FieldError::new(
                "width".into(),
                format!("must be in (0, 4] (torchvision's width multiplier), got {width}"),
            ));
        }
        if !(0.0..1.0).contains(&dropout) {
            return Err(FieldError::new(
                "dropout".into(),
                format!("must be in [0, 1), got {dropout}"),
            ));
        }
        Ok(())
    }

    fn network(&self, input: InputShape, outputs: usize) -> Network {
        let InputShape::Image([c, ..]) = input else {
            panic!("a convolutional model needs image inputs (checked by the scenario)");
        };
        let layers = layers(c, self.width, self.norm, self.dropout, outputs);
        Network {
            name: Some(summary(self.width, self.norm, self.dropout, &layers)),
            init: InitScheme::Torchvision,
            ..Network::of(layers)
        }
    }
}

/// torchvision's inverted-residual settings: expansion t, channels c, repeats n, first stride s.
const BLOCKS: [(usize, usize, usize, usize); 7] = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
];

/// torchvision's `_make_divisible(v, 8)`: the nearest multiple of 8, at least 8, and not below
/// 90 % of `v`.
fn make_divisible(v: f64) -> usize {
    let mut rounded = (((v + 4.0) as usize) / 8 * 8).max(8);
    if (rounded as f64) < 0.9 * v {
        rounded += 8;
    }
    rounded
}

/// Groups of a group norm over `channels` channels: gcd(channels, 32) (32 groups, Wu and He's
/// default, whenever the channels allow it).
pub(super) fn norm_groups(channels: usize) -> usize {
    let (mut a, mut b) = (channels, 32);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Conv (no bias) → norm → ReLU6, padded to keep the size at stride 1.
fn conv_norm_relu6(
    layers: &mut Vec<Layer>,
    (inputs, outputs): (usize, usize),
    kernel: usize,
    stride: usize,
    groups: usize,
    norm: Normalization,
) {
    layers.extend([
        Layer::Conv {
            inputs,
            outputs,
            kernel,
            stride,
            padding: (kernel - 1) / 2,
            groups,
            bias: false,
        },
        Layer::Norm {
            channels: outputs,
            kind: norm,
        },
        Layer::Relu6,
    ]);
}

/// The layers for images of `channels` channels and `outputs` logits.
pub(super) fn layers(
    channels: usize,
    width: f64,
    norm: Normalization,
    dropout: f64,
    outputs: usize,
) -> Vec<Layer> {
    let mut layers = Vec::new();
    let mut inputs = make_divisible(32.0 * width);
    conv_norm_relu6(&mut layers, (channels, inputs), 3, 2, 1, norm);
    for (t, c, n, s) in BLOCKS {
        let out = make_divisible(c as f64 * width);
        for repeat in 0..n {
            let stride = if repeat == 0 { s } else { 1 };
            let hidden = inputs * t;
            let residual = stride == 1 && inputs == out;
            if residual {
                layers.push(Layer::Save);
            }
            if t != 1 {
                conv_norm_relu6(&mut layers, (inputs, hidden), 1, 1, 1, norm);
            }
            conv_norm_relu6(&mut layers, (hidden, hidden), 3, stride, hidden, norm);
            layers.extend([
                Layer::Conv {
                    inputs: hidden,
                    outputs: out,
                    kernel: 1,
                    stride: 1,
                    padding: 0,
                    groups: 1,
                    bias: false,
                },
                Layer::Norm {
                    channels: out,
                    kind: norm,
                },
            ]);
            if residual {
                layers.push(Layer::AddSaved);
            }
            inputs = out;
        }
    }
    let last = make_divisible(1280.0 * width.max(1.0));
    conv_norm_relu6(&mut layers, (inputs, last), 1, 1, 1, norm);
    layers.extend([
        Layer::GlobalAvgPool,
        Layer::Dropout { p: dropout },
        Layer::Dense {
            inputs: last,
            outputs,
        },
    ]);
    layers
}

/// What `describe` says of the model instead of its 150-odd layers.
pub(super) fn summary(width: f64, norm: Normalization, dropout: f64, layers: &[Layer]) -> String {
    let blocks: usize = BLOCKS.iter().map(|b| b.2).sum();
    let classifier = match layers.last() {
        Some(Layer::Dense { inputs, outputs }) => format!("dense {inputs}→{outputs}"),
        _ => unreachable!("MobileNet-v2 ends with its classifier"),
    };
    let norm = match norm {
        Normalization::Batch => "batch norm of batch statistics",
        Normalization::Group => "group norm",
    };
    format!(
        "mobilenet_v2 width {width}: conv 3×3 stride 2, {blocks} inverted residual blocks, \
         conv 1×1, {norm}, relu6, global average pool, dropout {dropout}, {classifier}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{sgd, Architecture, Init, InputShape, ModelSpec};
    use rand::{Rng, SeedableRng};
    use tch::Tensor;

    fn spec(width: f64, norm: Normalization) -> ModelSpec {
        ModelSpec::of(MobilenetV2Spec {
            width,
            norm,
            dropout: 0.2,
        })
    }

    #[test]
    fn parameter_counts_match_torchvision() {
        // `sum(p.numel() for p in torchvision.models.mobilenet_v2(width_mult=w,
        // num_classes=k).parameters())` with torchvision 0.28.
        let image = InputShape::Image([3, 32, 32]);
        for (width, classes, count) in [
            (1.0, 1000, 3_504_872),
            (1.0, 10, 2_236_682),
            (0.5, 10, 700_490),
            (0.25, 10, 250_922),
        ] {
            let arch = Architecture::for_input(&spec(width, Normalization::Batch), image, classes);
            assert_eq!(arch.num_params(), count, "width {width}, {classes} classes");
        }
        assert_eq!(make_divisible(32.0 * 0.25), 8);
        assert_eq!(make_divisible(1280.0), 1280);
        assert_eq!(
            (norm_groups(16), norm_groups(96), norm_groups(1280)),
            (16, 32, 32)
        );
    }

    #[test]
    fn flops_follow_the_strides() {
        // 32×32 → 16 (first conv) → 8, 4, 2 (the strided blocks) → 1 → 1; torchvision's
        // 300 M multiply-adds at 224×224 shrink with the pixel count: about 6.1 M at 32×32.
        let arch = Architecture::for_input(
            &spec(1.0, Normalization::Batch),
            InputShape::Image([3, 32, 32]),
            10,
        );
        let mult_adds = arch.flops_per_sample() as f64 / 2.0;
        assert!((5.5e6..7.0e6).contains(&mult_adds), "{mult_adds}");
        assert!(arch.summary().contains("17 inverted residual blocks"));
        assert!(arch.summary().ends_with("dense 1280→10"));
    }

    /// A value in [−1, 1) that looks random, from the index `i` alone (the shader hash
    /// fract(43758.5453·sin(12.9898·i)), computed the same way in the Python that made the
    /// expected values).
    fn hashed(i: usize) -> f64 {
        let v = (12.9898 * i as f64).sin() * 43758.5453;
        2.0 * (v - v.floor()) - 1.0
    }

    /// Parameters at the scale of torchvision's initialisation, from [`hashed`]: weights
    /// σ·√3·u (σ as the f32 of [`Init::Normal`]), scales 1 + 0.1·u, shifts and biases 0.1·u (u =
    /// hashed(parameter index)); eight 3×32×32 images of pixels hashed(j). Expected: the logits
    /// of the first two images (one thread; two threads differ by 2·10⁻⁶) from
    /// torchvision 0.28's `mobilenet_v2(width_mult=0.25, num_classes=4, dropout=0.0,
    /// norm_layer=...)` with `BatchNorm2d(track_running_stats=False)` or `GroupNorm(gcd(c, 32),
    /// c)`, given the same values.
    #[test]
    fn logits_match_torchvision() {
        let cases = [
            (
                Normalization::Batch,
                [
                    [
                        0.093_751_177_2,
                        0.188_086_092,
                        -0.159_714_46,
                        -0.244_995_832,
                    ],
                    [
                        -0.414_415_926,
                        0.137_818_426,
                        0.164_101_049,
                        -0.046_233_180_9,
                    ],
                ],
            ),
            (
                Normalization::Group,
                [
                    [
                        -0.208_580_092,
                        -0.344_301_432,
                        0.147_896_364,
                        -0.080_712_705_9,
                    ],
                    [
                        -0.130_279_064,
                        -0.360_840_499,
                        -0.080_014_318_2,
                        -0.048_162_035_6,
                    ],
                ],
            ),
        ];
        for (norm, expected) in cases {
            let model = ModelSpec::of(MobilenetV2Spec {
                width: 0.25,
                norm,
                dropout: 0.0,
            });
            let arch = Architecture::for_input(&model, InputShape::Image([3, 32, 32]), 4);
            let mut flat = Vec::with_capacity(arch.num_params());
            for (shape, init) in arch.parameter_shapes() {
                let n = shape.iter().product::<i64>() as usize;
                let at = flat.len();
                flat.extend((at..at + n).map(|i| match init {
                    Init::Normal(sigma) => (sigma as f64 * 3f64.sqrt() * hashed(i)) as f32,
                    Init::Constant(c) => (c as f64 + 0.1 * hashed(i)) as f32,
                    Init::Uniform(_) | Init::Saved => unreachable!("torchvision's initialisation"),
                }));
            }
            let pixels: Vec<f32> = (0..8 * 3072).map(|j| hashed(j) as f32).collect();
            let x = Tensor::from_slice(&pixels).view([8, 3072]);
            let ps = arch.params(&flat);
            let logits = tch::no_grad(|| arch.forward(&arch.layers(&ps), &x, &[]));
            for (row, want) in expected.iter().enumerate() {
                for (k, &w) in want.iter().enumerate() {
                    let got = logits.double_value(&[row as i64, k as i64]);
                    assert!(
                        (got - w).abs() < 2e-5,
                        "{norm:?} row {row} logit {k}: {got} vs torchvision {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn init_follows_torchvision() {
        let arch = Architecture::for_input(
            &spec(0.5, Normalization::Group),
            InputShape::Image([3, 32, 32]),
            10,
        );
        let flat = arch.init(&mut rand_chacha::ChaCha20Rng::seed_from_u64(1));
        // The first conv (16 outputs, 3×3): N(0, 2/144); then the norm's scale 1 and shift 0.
        let first = &flat[..16 * 27];
        let var = first.iter().map(|&v| (v * v) as f64).sum::<f64>() / first.len() as f64;
        assert!((var - 2.0 / 144.0).abs() < 0.3 * 2.0 / 144.0, "{var}");
        assert!(flat[16 * 27..16 * 28].iter().all(|&v| v == 1.0));
        assert!(flat[16 * 28..16 * 29].iter().all(|&v| v == 0.0));
        // The classifier: N(0, 0.01²) weights, zero biases.
        assert!(flat[flat.len() - 10..].iter().all(|&v| v == 0.0));
        let weights = &flat[flat.len() - 10 - 12_800..flat.len() - 10];
        assert!(weights.iter().all(|v| v.abs() < 0.06));
    }

    #[test]
    fn training_lowers_the_loss() {
        // 12 noisy grey 32×32 images (group norm of one-channel groups
        // passes nothing on at 1×1 pixel, which smaller images reach with this width) of two classes (bright or dark left half): a few SGD steps
        // fit them, with both normalisations (plain SGD, lr 0.01: batch norm over 6 rows is
        // unsteady at higher rates). 240 steps leave a margin (loss 0.72 → 0.02 with batch norm
        // on an AMD EPYC): at 120 the batch-norm model's last image went either way with the
        // CPU's kernels.
        // One intra-op thread, as the trainer pool sets it (a global of libtorch that another
        // test may already have set): the losses then do not depend on the order tests run in.
        tch::set_num_threads(1);
        for norm in [Normalization::Batch, Normalization::Group] {
            let arch = Architecture::for_input(
                &ModelSpec::of(MobilenetV2Spec {
                    width: 0.25,
                    norm,
                    dropout: 0.2,
                }),
                InputShape::Image([1, 32, 32]),
                2,
            );
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
            let labels: Vec<i64> = (0..12).map(|i| i % 2).collect();
            let features: Vec<f32> = labels
                .iter()
                .flat_map(|&y| (0..1024).map(move |p| ((p % 32 < 16) == (y == 1)) as u8 as f32))
                .map(|v| v + rng.gen_range(-0.3..0.3))
                .collect();
            let view = crate::data::SplitView {
                features: &features,
                labels: &labels,
                dim: 1024,
            };
            let mut params = arch.init(&mut rng);
            let before = sgd::evaluate(&arch, &params, view).loss;
            let plan = sgd::LocalPlan {
                work: sgd::LocalWork::Steps(240),
                batch_size: 6,
                momentum: 0.0,
                weight_decay: 0.0,
                dp_sgd: None,
            };
            let objective = sgd::Objective::default();
            sgd::train_sgd(
                &arch,
                &mut params,
                &mut Vec::new(),
                view,
                &plan,
                0.01,
                &mut rng,
                &objective,
            );
            let after = sgd::evaluate(&arch, &params, view);
            assert!(
                after.loss < 0.5 * before && after.accuracy == 1.0,
                "{norm:?}: loss {before} → {}, accuracy {}",
                after.loss,
                after.accuracy
            );
        }
    }
}
