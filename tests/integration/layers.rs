//! Models written as layer lists (`model: {kind: layers, ...}`): the run of a built-in family
//! spelled as a list is the built-in's, bit for bit; a residual network on a user's colour
//! images trains in cohorts as each client alone and identically on 1, 2 and 4 threads; a
//! bad list is refused at its layer and field.

use crate::cohorts::{assert_close, simulate};
use crate::common::{assert_identical_on_1_2_4_threads, error, scenario};
use fedsim::records::Record;
use fedsim::results::simulate_scenario;
use polars::prelude::*;
use rand::{Rng, SeedableRng};
use std::path::Path;

/// `clients` clients of 16 images `channels`×`side`×`side` (a list column `x`) of 4 classes:
/// each class a stripe pattern of its own, plus noise; the clients' label mixes differ.
pub(crate) fn write_images(path: &Path, channels: usize, side: usize, clients: usize) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let (mut client, mut label, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..clients {
        for i in 0..16 {
            let y = ((c + i / 3) % 4) as i64;
            let pixels: Vec<f32> = (0..channels * side * side)
                .map(|p| {
                    let (row, col) = ((p / side) % side, p % side);
                    let stripe = ((row * (y as usize + 1) + col) / 3) % 2;
                    stripe as f32 * 0.6 + rng.gen_range(0.0..0.4)
                })
                .collect();
            client.push(c as i64);
            label.push(y);
            rows.push(Series::new("".into(), pixels));
        }
    }
    let mut df = DataFrame::new_infer_height(vec![
        Column::new("cid".into(), client),
        Column::new("y".into(), label),
        Column::new("x".into(), rows),
    ])
    .unwrap();
    crate::common::write_parquet(path, &mut df).unwrap();
}

/// A scenario on the images of `path` (`[channels, side, side]`) with `model`.
pub(crate) fn images_scenario(path: &Path, shape: [usize; 3], model: &str) -> String {
    format!(
        "\
name: images
seed: 1
rounds: 2
eval_every: 1
data: {{kind: parquet, path: '{}', client_column: cid, features_column: x, label_column: y, \
shape: {shape:?}, classes: 4}}
split: {{kind: fractions, train: 0.75, val: 0, test: 0.25}}
model: {model}
algorithm: {{name: fedavg}}
training: {{local_steps: 2, batch_size: 8, lr: 0.05, momentum: 0.9}}
sampling: {{fraction: 0.5}}
",
        path.display()
    )
}

/// A ResNet-style network for 32×32 colour images: a stem, two residual basic blocks (the
/// second after a strided convolution that doubles the channels), group norm, pooled features.
/// (Group norm of a channel that is nearly constant divides by almost √ε and so magnifies the
/// rounding by which a cohort's grouped convolutions differ from one client's: with other
/// seeds than this file's, runs alone and in cohorts drift apart by up to 1e-4 in two rounds.)
const RESNET: &str = "{kind: layers, layers: [\
    {kind: conv, channels: 8, kernel: 3, padding: 1}, group_norm, relu, \
    {kind: residual, layers: [\
        {kind: conv, channels: 8, kernel: 3, padding: 1}, group_norm, relu, \
        {kind: conv, channels: 8, kernel: 3, padding: 1}, group_norm]}, relu, \
    {kind: conv, channels: 16, kernel: 3, stride: 2, padding: 1}, group_norm, \
    relu, \
    {kind: residual, layers: [\
        {kind: conv, channels: 16, kernel: 3, padding: 1}, group_norm, relu, \
        {kind: conv, channels: 16, kernel: 3, padding: 1}, group_norm]}, relu, \
    global_avg_pool, dense]}";

/// The algorithms the residual network is tested with.
const RESNET_ALGORITHMS: [&str; 2] = [
    "algorithm={name: fedavg}",
    "algorithm={name: fedem, components: 2}",
];

/// [`RESNET`] on 6 clients' colour images, written into `dir`.
fn resnet_on_colour_images(dir: &Path) -> String {
    let data = dir.join("colour.parquet");
    write_images(&data, 3, 32, 6);
    images_scenario(&data, [3, 32, 32], RESNET)
}

/// The FedEM authors' FemnistCNN as a layer list.
const FEMNIST_CNN_LAYERS: &str = "{kind: layers, layers: [\
    {kind: conv, channels: 32, kernel: 5}, relu, max_pool, \
    {kind: conv, channels: 64, kernel: 5}, relu, max_pool, flatten, \
    {kind: dense, units: 2048}, relu, dense]}";

#[test]
fn a_family_written_as_its_layers_runs_bit_for_bit_as_the_family() {
    // FedAvg and FedEM with the built-in `cnn` and with FemnistCNN as a layer list, on 1×16×16
    // images: every record (evaluations, rounds, jobs, clients, the final models) identical;
    // only the run id, a hash of the scenario's text, differs.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("images.parquet");
    write_images(&data, 1, 16, 4);
    for algorithm in [
        "algorithm={name: fedavg}",
        "algorithm={name: fedem, components: 2}",
    ] {
        let [builtin, list] = ["{kind: cnn}", FEMNIST_CNN_LAYERS].map(|model| {
            let s = scenario(&images_scenario(&data, [1, 16, 16], model), &[algorithm]);
            simulate_scenario(&s, 2, |_| {}).expect("runs").records
        });
        assert!(builtin.iter().any(|r| matches!(r, Record::FinalModels(_))));
        assert!(builtin == list, "{algorithm}: the records differ");
    }
}

#[test]
fn a_residual_network_on_colour_images_trains_in_cohorts_as_each_client_alone() {
    // FedAvg and FedEM (two components) stacked in cohorts on the CPU (`always`, as on a GPU)
    // against each client alone: parameters and losses within 1e-5 (relative). First, that the
    // fixture is well conditioned: inputs scaled by 1 + 1e-7 move no parameter by 1e-6.
    let tmp = tempfile::tempdir().unwrap();
    let text = resnet_on_colour_images(tmp.path());
    for algorithm in RESNET_ALGORITHMS {
        let alone = simulate(&text, &[algorithm, "training.cohorts=off"], 2);
        let nudged = simulate(
            &text,
            &[algorithm, "training.cohorts=off", "data.scale=1.0000001"],
            2,
        );
        for (a, b) in alone.models.iter().zip(&nudged.models) {
            let moved = a.iter().zip(b).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(
                moved <= 1e-6,
                "{algorithm}: the fixture is ill-conditioned ({moved:e})"
            );
        }
        let cohort = simulate(&text, &[algorithm, "training.cohorts=always"], 2);
        assert_close(algorithm, &alone, &cohort, 1e-5);
    }
}

#[test]
fn tanh_and_gelu_train_in_cohorts_as_each_client_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("colour.parquet");
    write_images(&data, 3, 8, 6);
    let model = "{kind: layers, layers: [{kind: conv, channels: 4, kernel: 3, padding: 1}, \
                 gelu, max_pool, flatten, {kind: dense, units: 16}, tanh, dense]}";
    let text = images_scenario(&data, [3, 8, 8], model);
    let alone = simulate(&text, &["training.cohorts=off"], 2);
    let cohort = simulate(&text, &["training.cohorts=always"], 2);
    assert!(!alone.models.is_empty());
    assert_close("tanh and gelu", &alone, &cohort, 1e-5);
}

#[test]
fn a_residual_network_is_identical_on_every_thread_count() {
    // Every client trains each round; stacked in cohorts, the cohort is cut into as many
    // shards as threads.
    let tmp = tempfile::tempdir().unwrap();
    let text = resnet_on_colour_images(tmp.path());
    for algorithm in RESNET_ALGORITHMS {
        let set = [algorithm, "sampling.fraction=1", "training.cohorts=always"];
        assert_identical_on_1_2_4_threads(algorithm, &text, &set, tmp.path());
    }
}

/// On a GPU machine only (CI has none):
/// `FEDSIM_CUDA=1 bash scripts/test.sh --features cuda --test integration -- --ignored gpu_`.
/// The residual network in cohorts on CUDA (one grouped convolution per layer, the shortcut's
/// sum on the device): every result file identical with 1, 2 and 4 threads, and parameters
/// and losses within 1e-4 (relative) of each client alone on the CPU.
#[test]
#[ignore = "needs a CUDA GPU and a `--features cuda` build"]
fn gpu_layer_lists_train_on_cuda_as_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let text = resnet_on_colour_images(tmp.path());
    for algorithm in RESNET_ALGORITHMS {
        let set = [algorithm, "sampling.fraction=1", "training.device=cuda"];
        let what = format!("{algorithm} on CUDA");
        assert_identical_on_1_2_4_threads(&what, &text, &set, tmp.path());
        let alone = simulate(&text, &[algorithm, "training.cohorts=off"], 2);
        let gpu = simulate(&text, &[algorithm, "training.device=cuda"], 2);
        assert_close(
            &format!("{algorithm}: CUDA against the CPU"),
            &alone,
            &gpu,
            1e-4,
        );
    }
}

#[test]
fn bad_layer_lists_name_the_layer_the_field_and_the_line() {
    let text = "\
name: bad
rounds: 1
data: {kind: fedem_synthetic, clients: 4}
algorithm: {name: fedavg}
model:
  kind: layers
  layers:
    - {kind: dense, units: 8}
    - relu
    - kind: residual
      layers:
        - {kind: dense, units: 8}
        - relu
    - dense
";
    scenario(text, &[]); // a dense layer in a residual block keeps the shape: valid
    let cases: &[(&str, &str)] = &[
        (
            "model.layers[1]=relu7",
            "bad.yaml:9: field `model.layers[1]`: unknown variant `relu7`, expected one of",
        ),
        (
            "model.layers[0].unitz=3",
            "bad.yaml:8: field `model.layers[0]`: unknown field `unitz`",
        ),
        (
            "model.layers[2].layers[0].units=x",
            "bad.yaml:12: field `model.layers[2].layers[0].units`: invalid type: string \"x\"",
        ),
        (
            "model.layers[2].layers[0].units=5",
            "bad.yaml:11: field `model.layers[2].layers`: the block turns rows of 8 into 5",
        ),
        (
            "model.layers[3]={kind: dense, units: 2}",
            "field `model.layers[3].units`: leave it out on the last layer",
        ),
        (
            "model.layers[1]={kind: conv, channels: 4, kernel: 3}",
            "bad.yaml:9: field `model.layers[1]`: a convolution takes images (channels × height \
             × width), but flat rows of 8 reach it",
        ),
        (
            "model.layers[3]=relu",
            "field `model.layers[3]`: the last layer is `relu`; it must be `dense` without \
             `units`",
        ),
        (
            "model.layers[1]={kind: dropout, rate: 1}",
            "field `model.layers[1].rate`: must be in [0, 1), got 1",
        ),
        (
            "model.layers[0]={kind: embedding, dim: 4}",
            "field `model.layers[0]`: an embedding takes token ids",
        ),
        (
            "model.layers[2].layers[1]={kind: residual, layers: [relu]}",
            "field `model.layers[2].layers[1]`: residual blocks do not nest",
        ),
        (
            "model.layers=[]",
            "field `model.layers`: must list at least one layer",
        ),
    ];
    for (set, want) in cases {
        let got = error(text, &[set]);
        assert!(got.contains(want), "{set}: {got}");
    }
}

#[test]
fn a_kernel_larger_than_its_input_is_refused_with_the_sizes() {
    // On images the scenario declares (a Parquet file with `shape`), at check time.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("images.parquet");
    write_images(&data, 1, 16, 2);
    let text = images_scenario(&data, [1, 16, 16], FEMNIST_CNN_LAYERS);
    let got = error(&text, &["model.layers[3].kernel=7"]);
    assert!(
        got.contains(
            "field `model.layers[3].kernel`: 7 is larger than the 6×6 input of this layer"
        ),
        "{got}"
    );
}
