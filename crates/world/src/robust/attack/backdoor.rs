//! `backdoor`: malicious clients stamp a trigger on some of their training images, label them
//! with a target, and boost their change; every client's stamped test images measure the
//! attack's success.

use super::catalogue::AttackSettings;
use crate::data::{FederatedData, Layout};
use crate::records::Split;
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The settings of `backdoor` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackdoorSpec {
    /// The label a triggered image gets: a class of the data set.
    pub target: i64,
    /// The side of the trigger's square, in pixels (at most the image's height and width).
    #[serde(default = "default_trigger")]
    pub trigger: usize,
    /// The trigger's pixel value; default: the largest feature value of the data set (white).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f32>,
    /// The share of a malicious client's training images it triggers, in (0, 1].
    #[serde(default = "default_poison")]
    pub poison: f64,
    /// The factor on the malicious change, ≥ 1.
    #[serde(default = "super::one")]
    pub boost: f64,
}

fn default_trigger() -> usize {
    4
}
fn default_poison() -> f64 {
    0.5
}

impl BackdoorSpec {
    /// The trigger's value on `images` of `shape` (row-major, one after another): `value`, or
    /// by default the smallest or largest value of `images`, whichever is farther from the
    /// mean of the trigger's pixels over them (the larger on a tie).
    pub fn value_on(&self, images: &[f32], shape: [usize; 3]) -> f32 {
        if let Some(value) = self.value {
            return value;
        }
        let dim: usize = shape.iter().product();
        let mut mask = vec![0.0f32; dim];
        self.stamp(&mut mask, shape, 1.0);
        let lit: Vec<usize> = (0..dim).filter(|&i| mask[i] == 1.0).collect();
        let (mut low, mut high, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f64);
        for image in images.chunks_exact(dim) {
            for &v in image {
                (low, high) = (low.min(v), high.max(v));
            }
            sum += lit.iter().map(|&i| image[i] as f64).sum::<f64>();
        }
        let mean = sum / (lit.len() * (images.len() / dim)).max(1) as f64;
        if high as f64 - mean >= mean - low as f64 {
            high
        } else {
            low
        }
    }

    /// Stamps the trigger on one image of `shape` (`[channels, height, width]`, row-major).
    pub fn stamp(&self, image: &mut [f32], shape: [usize; 3], value: f32) {
        let [channels, height, width] = shape;
        for c in 0..channels {
            for y in height - self.trigger..height {
                let row = (c * height + y) * width;
                image[row + width - self.trigger..row + width].fill(value);
            }
        }
    }
}

impl AttackSettings for BackdoorSpec {
    const EXAMPLE: &'static str = "{target: 0}";
    const POISONS_DATA: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, what: &str, v: f64| {
            Err(FieldError::new(
                path.into(),
                format!("must be {what}, got {v}"),
            ))
        };
        if self.target < 0 {
            return bad("target", "a class (≥ 0)", self.target as f64);
        }
        if self.trigger == 0 {
            return bad("trigger", "at least 1 pixel", 0.0);
        }
        if let Some(v) = self.value {
            super::finite("value", v as f64)?;
        }
        if !(self.poison > 0.0 && self.poison <= 1.0) {
            return bad("poison", "in (0, 1]", self.poison);
        }
        if !(self.boost >= 1.0 && self.boost.is_finite()) {
            return bad("boost", "a finite number ≥ 1", self.boost);
        }
        Ok(())
    }

    /// Only with a boost: without one, the malicious clients send honest updates of their
    /// poisoned data.
    fn is_own(&self) -> bool {
        self.boost != 1.0
    }

    fn own(&self, delta: &mut [f64], _rng: &mut ChaCha20Rng) {
        delta.iter_mut().for_each(|x| *x *= self.boost);
    }

    /// Stamps the trigger on a `poison` share of each `malicious` client's training images
    /// (drawn from its `backdoor` stream) and gives them the target label, then appends every
    /// client's [`Split::Backdoor`] rows: its test images of other labels, stamped and
    /// labelled with the target. Refused (with the reason) on data that is not images, a
    /// target that is not a class, or a trigger larger than the image.
    fn poison(&self, data: &mut FederatedData, malicious: &[u32], seed: u64) -> Result<(), String> {
        let Layout::Image(shape) = data.layout else {
            return Err(
                "`backdoor` stamps a trigger on images, and this data set's rows are not \
                        images; use an image data set or another attack"
                    .into(),
            );
        };
        if self.target as usize >= data.classes {
            return Err(format!(
                "`target: {}` is not a class of this data set, whose labels are 0 to {}",
                self.target,
                data.classes - 1
            ));
        }
        if self.trigger > shape[1].min(shape[2]) {
            return Err(format!(
                "`trigger: {}` is larger than this data set's {}×{} images",
                self.trigger, shape[1], shape[2]
            ));
        }
        let (dim, lead) = (data.dim, data.lead);
        let value = self.value_on(&data.features[lead..], shape);
        let seeds = SeedTree::new(seed);
        for &c in malicious {
            let rows = data.clients[c as usize].range(Split::Train);
            let count = (self.poison * rows.len() as f64).ceil() as usize;
            let mut rng = seeds.rng(Entity::Client(c), "backdoor", 0);
            for i in rand::seq::index::sample(&mut rng, rows.len(), count.min(rows.len())) {
                let row = rows.start + i;
                let at = lead + row * dim;
                self.stamp(&mut data.features[at..at + dim], shape, value);
                data.labels[row] = self.target;
            }
        }
        let triggered: usize = (data.clients.iter())
            .flat_map(|shard| shard.range(Split::Test))
            .filter(|&row| data.labels[row] != self.target)
            .count();
        data.features.reserve_exact(triggered * dim);
        data.labels.reserve_exact(triggered);
        let mut ranges = Vec::with_capacity(data.clients.len());
        for c in 0..data.clients.len() {
            let start = data.labels.len();
            for row in data.clients[c].range(Split::Test) {
                if data.labels[row] == self.target {
                    continue;
                }
                let at = lead + row * dim;
                let mut image = data.features[at..at + dim].to_vec();
                self.stamp(&mut image, shape, value);
                data.features.extend_from_slice(&image);
                data.labels.push(self.target);
            }
            ranges.push(start..data.labels.len());
        }
        data.backdoor = ranges;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ClientShard;

    /// Two clients of 1×3×3 images (features 0.5, the largest 0.9), labels 0–2: client 1 is
    /// malicious with a 2-pixel trigger, target 2, poison 0.5. Its ⌈0.5·3⌉ = 2 of 3 training
    /// images get the trigger (value 0.9, bottom-right 2×2) and label 2; every client's test
    /// images not labelled 2 are copied, stamped and labelled 2 into its backdoor rows.
    #[test]
    fn a_backdoor_stamps_poisoned_and_test_images_by_hand() {
        let labels = vec![0, 1, 2, 0, 1, 2, 0, 1, 0, 2, 1];
        let mut features = vec![0.5f32; labels.len() * 9];
        features[4] = 0.9;
        let mut data = FederatedData {
            layout: Layout::Image([1, 3, 3]),
            dim: 9,
            classes: 3,
            features,
            labels,
            clients: vec![
                ClientShard {
                    train: 0..3,
                    val: 3..3,
                    test: 3..6,
                },
                ClientShard {
                    train: 6..9,
                    val: 9..9,
                    test: 9..11,
                },
            ],
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        let backdoor = BackdoorSpec {
            target: 2,
            trigger: 2,
            value: None,
            poison: 0.5,
            boost: 1.0,
        };
        let clean = data.clone();
        backdoor.poison(&mut data, &[1], 7).unwrap();
        let stamped = |image: &[f32]| {
            let mut want = image.to_vec();
            for at in [4, 5, 7, 8] {
                want[at] = 0.9;
            }
            want
        };
        let image = |d: &FederatedData, row: usize| d.features[row * 9..row * 9 + 9].to_vec();
        let poisoned: Vec<usize> = (6..9)
            .filter(|&r| image(&data, r) != image(&clean, r))
            .collect();
        assert_eq!(poisoned.len(), 2, "⌈0.5·3⌉ of client 1's training images");
        for r in 6..9 {
            let hit = poisoned.contains(&r);
            assert_eq!(
                data.labels[r],
                if hit { 2 } else { clean.labels[r] },
                "row {r}"
            );
            if hit {
                assert_eq!(image(&data, r), stamped(&image(&clean, r)));
            }
        }
        assert_eq!(
            &data.features[..54],
            &clean.features[..54],
            "client 0 untouched"
        );
        assert_eq!(
            &data.features[81..99],
            &clean.features[81..99],
            "tests untouched"
        );
        // Backdoor rows: client 0's tests 3 (label 0) and 4 (label 1), client 1's 10 (label 1).
        assert_eq!(data.backdoor, vec![11..13, 13..14]);
        assert_eq!(data.split_len(0, Split::Backdoor), 2);
        for (row, from) in [(11, 3), (12, 4), (13, 10)] {
            assert_eq!(
                image(&data, row),
                stamped(&image(&clean, from)),
                "row {row}"
            );
            assert_eq!(data.labels[row], 2);
        }
        // The same draw for the same seed; a trigger larger than the image, or a target that
        // is no class, is refused.
        let mut again = clean.clone();
        backdoor.poison(&mut again, &[1], 7).unwrap();
        assert_eq!((again.features, again.labels), (data.features, data.labels));
        let big = BackdoorSpec {
            trigger: 4,
            ..backdoor
        };
        let e = big.poison(&mut clean.clone(), &[1], 7).unwrap_err();
        assert!(
            e.contains("`trigger: 4` is larger than this data set's 3×3 images"),
            "{e}"
        );
        let far = BackdoorSpec {
            target: 3,
            ..backdoor
        };
        let e = far.poison(&mut clean.clone(), &[1], 7).unwrap_err();
        assert!(e.contains("labels are 0 to 2"), "{e}");
    }
}
