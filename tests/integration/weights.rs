//! Model weights in files: `model.init` (a run's initial models from a safetensors file) and
//! `--save-models` (`models.safetensors`), against PyTorch's own files and numbers.

use crate::common::{run_saving, scenario, SMALL};
use fedsim::data::SplitView;
use fedsim::models::{read_models, sample_losses, Architecture, InputShape, ModelSpec};
use fedsim::records::Record;
use fedsim::results::{differing_files, simulate_scenario};
use std::path::{Path, PathBuf};

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/weights")
        .join(name)
}

/// PyTorch's LeNet-5 (scripts/dev/make_weight_fixtures.py), loaded into fedsim's `lenet5`,
/// gives PyTorch's outputs (see [`assert_pytorchs_outputs`]).
#[test]
fn pytorch_weights_give_pytorchs_outputs() {
    assert_pytorchs_outputs("{kind: lenet5}", [1, 28, 28], "lenet5");
}

/// The FedEM authors' FemnistCNN as the layer list `scripts/torch_weights.py layers` writes for
/// their PyTorch class has as many parameters as the class (28×28 images, 62 classes), and
/// with PyTorch's weights gives PyTorch's outputs (on 16×16 images, a smaller file).
#[test]
fn the_femnist_cnn_as_a_layer_list_gives_pytorchs_outputs() {
    let section: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(fixture("femnist_cnn16_model.yaml")).unwrap(),
    )
    .unwrap();
    let list = serde_yaml::to_string(&section["model"]).unwrap();
    let spec = ModelSpec::from_yaml(&list).unwrap();
    assert_eq!(spec.kind(), "layers");
    let io = std::fs::read(fixture("femnist_cnn16_io.safetensors")).unwrap();
    let io = safetensors::SafeTensors::deserialize(&io).unwrap();
    let theirs = i64::from_le_bytes(io.tensor("parameters").unwrap().data().try_into().unwrap());
    let arch = Architecture::for_input(&spec, InputShape::Image([1, 28, 28]), 62);
    assert_eq!(arch.num_params() as i64, theirs);
    assert_pytorchs_outputs(&list, [1, 16, 16], "femnist_cnn16");
}

/// PyTorch's model `name` (`NAME.safetensors`, and `NAME_io.safetensors`: five images `x` and
/// PyTorch's `logits` of them for ten classes), loaded into the model `spec` for images of
/// `image`: for each image and each label, fedsim's cross-entropy equals
/// logsumexp(PyTorch's logits) − PyTorch's logit of the label, to 1e-5.
fn assert_pytorchs_outputs(spec: &str, image: [usize; 3], name: &str) {
    let arch = Architecture::for_input(
        &ModelSpec::from_yaml(spec).unwrap(),
        InputShape::Image(image),
        10,
    );
    let models =
        read_models(&fixture(&format!("{name}.safetensors")), &arch).expect("PyTorch's file reads");
    assert_gives_pytorchs_outputs(&arch, &models, image, name);
}

/// `models` (one) of `arch` give the logits of `NAME_io.safetensors`, as
/// [`assert_pytorchs_outputs`] checks them.
pub(crate) fn assert_gives_pytorchs_outputs(
    arch: &Architecture,
    models: &[Vec<f32>],
    image: [usize; 3],
    name: &str,
) {
    assert_eq!(models.len(), 1);
    let io = std::fs::read(fixture(&format!("{name}_io.safetensors"))).unwrap();
    let io = safetensors::SafeTensors::deserialize(&io).unwrap();
    let floats = |name: &str| -> Vec<f32> {
        io.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let dim = image.iter().product();
    let (x, logits) = (floats("x"), floats("logits"));
    assert_eq!(x.len(), 5 * dim);
    let (mut features, mut labels, mut expected) = (Vec::new(), Vec::new(), Vec::new());
    for (image, row) in x.chunks(dim).zip(logits.chunks(10)) {
        let most = row.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
        let lse = most
            + row
                .iter()
                .map(|&v| (v as f64 - most).exp())
                .sum::<f64>()
                .ln();
        for (label, &logit) in row.iter().enumerate() {
            features.extend_from_slice(image);
            labels.push(label as i64);
            expected.push(lse - logit as f64);
        }
    }
    let view = SplitView {
        features: &features,
        labels: &labels,
        dim,
    };
    let losses = &sample_losses(arch, models, view)[0];
    assert_eq!(losses.len(), 50);
    for (i, (&got, want)) in losses.iter().zip(&expected).enumerate() {
        assert!(
            (got as f64 - want).abs() <= 1e-5,
            "{name}: image {} label {}: fedsim {got}, PyTorch {want}",
            i / 10,
            i % 10
        );
    }
}

/// `--save-models` writes the final models as `models.safetensors` (what the run recorded,
/// bit for bit); a run started from that file (`model.init`) starts from those models, gives
/// identical result files (its own models included) with 1 and 2 threads, and differs from
/// the run that draws its models; a file of the wrong number of models is refused at the start.
#[test]
fn runs_save_their_models_and_start_from_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let fedem = ["algorithm={name: fedem, components: 3}", "rounds=2"];
    run_saving(SMALL, &fedem, 2, &tmp.path().join("first"));
    let saved = tmp.path().join("first/models.safetensors");
    let out = simulate_scenario(&scenario(SMALL, &fedem), 2, |_| {}).unwrap();
    let recorded = out
        .records
        .iter()
        .find_map(|r| match r {
            Record::FinalModels(m) => Some(m.clone()),
            _ => None,
        })
        .expect("final models recorded");
    let arch = Architecture::for_input(
        &ModelSpec::from_yaml("{kind: linear}").unwrap(),
        InputShape::Flat(20),
        2,
    );
    assert_eq!(read_models(&saved, &arch).unwrap(), recorded);

    let init = format!(
        "model={{kind: linear, init: {{from: {}}}}}",
        saved.display()
    );
    let started: Vec<&str> = fedem.iter().copied().chain([init.as_str()]).collect();
    run_saving(SMALL, &started, 1, &tmp.path().join("one"));
    run_saving(SMALL, &started, 2, &tmp.path().join("two"));
    let differ = differing_files(&tmp.path().join("one"), &tmp.path().join("two"));
    assert!(differ.is_empty(), "1 and 2 threads: {differ:?} differ");
    let differ = differing_files(&tmp.path().join("first"), &tmp.path().join("one"));
    assert!(
        differ.contains(&"models.safetensors".to_string()),
        "{differ:?}"
    );
    let yaml = std::fs::read_to_string(tmp.path().join("one/scenario.yaml")).unwrap();
    assert!(
        yaml.contains("init:") && yaml.contains("models.safetensors"),
        "{yaml}"
    );

    // FedAvg starts one model; the file holds three.
    let fedavg = ["rounds=1", init.as_str()];
    let Err(e) = simulate_scenario(&scenario(SMALL, &fedavg), 1, |_| {}) else {
        panic!("a file of three models is refused for FedAvg");
    };
    let e = fedsim::error_chain(&e);
    assert!(
        e.contains("model.init.from")
            && e.contains("holds 3 model(s), and this algorithm starts 1"),
        "{e}"
    );
}

/// `fedsim check` reads the file against the model for the scenario's data and names the
/// tensor, the shape expected and the line of the model section.
#[test]
fn check_refuses_a_file_of_another_model() {
    let text = format!(
        "{SMALL}model: {{kind: mlp, hidden: [8], init: {{from: {}}}}}\n",
        fixture("lenet5.safetensors").display()
    );
    let s = scenario(&text, &[]);
    let e = fedsim::plan::preflight(&s).unwrap_err().to_string();
    for part in [
        "test.yaml:",
        "model.init.from",
        "lenet5.safetensors",
        "unexpected tensor `2.bias`",
        "0.weight [8, 20]",
    ] {
        assert!(e.contains(part), "{part} missing in: {e}");
    }
}

/// `fedsim export-weights` of a run that did not save its models re-runs it and writes the
/// models `--save-models` writes, byte for byte; a run whose result files the re-run does not
/// reproduce is refused, and nothing is written.
#[test]
fn export_weights_writes_the_models_a_run_would_have_saved() {
    let tmp = tempfile::tempdir().unwrap();
    let fedem = ["algorithm={name: fedem, components: 3}", "rounds=2"];
    run_saving(SMALL, &fedem, 2, &tmp.path().join("saved"));
    let plain = tmp.path().join("plain");
    run_without_saving(&fedem, &plain);
    assert!(!plain.join("models.safetensors").exists());
    let out = tmp.path().join("exported.safetensors");
    let done = export_weights(&[], &plain, &out);
    assert_wrote(&done, &out, &tmp.path().join("saved/models.safetensors"));
    // A run whose metrics were changed is not the run its scenario makes.
    std::fs::remove_file(&out).unwrap();
    std::fs::write(plain.join("metrics.csv"), "changed\n").unwrap();
    let refused = export_weights(&[], &plain, &out);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("metrics.csv differ"), "{stderr}");
    assert!(!out.exists());
}

/// Runs `SMALL` with `overrides` into `dir`, saving no models.
fn run_without_saving(overrides: &[&str], dir: &Path) {
    let opts = fedsim::results::RunOptions {
        out_dir: dir.to_path_buf(),
        threads: 2,
        progress: false,
        force: false,
        save_models: false,
        save_client_models: false,
        keep_unfinished: false,
        checkpoint: Default::default(),
    };
    fedsim::results::run_scenario(&scenario(SMALL, overrides), &opts).unwrap();
}

/// `fedsim export-weights ARGS --threads 1 --out OUT RUN_DIR`; one that succeeds leaves no
/// re-run behind.
fn export_weights(args: &[&str], run_dir: &Path, out: &Path) -> std::process::Output {
    let done = crate::common::bin()
        .arg("export-weights")
        .args(args)
        .args(["--threads", "1", "--out"])
        .arg(out)
        .arg(run_dir)
        .output()
        .unwrap();
    if done.status.success() {
        assert!(!run_dir.join(".export-weights").exists());
    }
    done
}

/// That `done` succeeded and wrote `out` byte for byte as `expected`.
fn assert_wrote(done: &std::process::Output, out: &Path, expected: &Path) {
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read(out).unwrap(),
        std::fs::read(expected).unwrap()
    );
}

/// The tensor names of `dir/client_models.safetensors`, sorted.
pub(crate) fn client_tensor_names(dir: &Path) -> Vec<String> {
    let bytes = std::fs::read(dir.join("client_models.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = file.names().into_iter().cloned().collect();
    names.sort();
    names
}

/// The tensors of `bytes` (a safetensors file) under `prefix`, prefix removed, as a file of
/// their own at `to`.
fn strip_prefix(bytes: &[u8], prefix: &str, to: &Path) {
    let file = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = file
        .tensors()
        .into_iter()
        .filter_map(|(name, t)| Some((name.strip_prefix(prefix)?.to_string(), t)))
        .collect();
    assert!(!tensors.is_empty(), "no tensor under {prefix}");
    std::fs::write(to, safetensors::serialize(tensors, &None).unwrap()).unwrap();
}

/// `--save-client-models` writes each client's own models at its last evaluation: Ditto's
/// personal models, one per client and different, identical with 1, 2 and 4 threads; each,
/// read back through `model.init`'s reader, gives the client's recorded test accuracy and
/// loss. FedEM's clients have their mixture weights there (the last recorded), and `fedsim
/// export-weights --clients` writes a run's file byte for byte or says why it has none.
#[test]
fn clients_save_their_own_models_which_give_their_recorded_results() {
    let tmp = tempfile::tempdir().unwrap();
    let ditto = ["algorithm={name: ditto, lambda: 0.1}", "rounds=3"];
    crate::common::assert_identical_on_1_2_4_threads("ditto", SMALL, &ditto, tmp.path());
    let dir = tmp.path().join("ditto-2");
    let bytes = std::fs::read(dir.join("client_models.safetensors")).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let rounds = header.metadata().as_ref().unwrap()["rounds"].clone();
    let every: Vec<String> = (0..24).map(|c| format!("\"{c}\": 3")).collect();
    assert_eq!(rounds, format!("{{{}}}", every.join(", ")));

    let s = scenario(SMALL, &ditto);
    let data = (s.data)
        .build(&s.split, &fedsim::sim::SeedTree::new(s.data_seed))
        .unwrap();
    let out = simulate_scenario(&s, 2, |_| {}).unwrap();
    let arch = Architecture::for_input(&s.run.model, data.input_shape(), data.classes);
    let mut models = Vec::new();
    for client in 0..24u32 {
        let file = tmp.path().join(format!("client{client}.safetensors"));
        strip_prefix(&bytes, &format!("{client}.personalized."), &file);
        let [model]: [Vec<f32>; 1] = read_models(&file, &arch).unwrap().try_into().unwrap();
        let recorded = (out.records.iter())
            .find_map(|r| match r {
                Record::Eval(e)
                    if e.round == 3
                        && e.client == client
                        && e.split == fedsim::records::Split::Test
                        && e.model == fedsim::records::ModelKind::Personalized =>
                {
                    Some(e.clone())
                }
                _ => None,
            })
            .expect("the client's test row");
        let view = data.view(client as usize, fedsim::records::Split::Test);
        let stats = fedsim::models::evaluate(&arch, &model, view);
        assert_eq!(stats.accuracy, recorded.accuracy, "client {client}");
        assert!((stats.loss - recorded.loss).abs() < 1e-6, "client {client}");
        models.push(model);
    }
    assert!(models.windows(2).all(|w| w[0] != w[1]), "one model each");

    // FedEM: the mixture weights of each client's last evaluation.
    let fedem = ["algorithm={name: fedem, components: 3}", "rounds=2"];
    run_saving(SMALL, &fedem, 2, &tmp.path().join("fedem"));
    let bytes = std::fs::read(tmp.path().join("fedem/client_models.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(file.names().len(), 24, "π only: {:?}", file.names());
    let out = simulate_scenario(&scenario(SMALL, &fedem), 2, |_| {}).unwrap();
    for r in &out.records {
        if let Record::Mixture(m) = r {
            if m.round == 2 {
                let t = file
                    .tensor(&format!("{}.mixture.weights", m.client))
                    .unwrap();
                let saved: Vec<f64> = (t.data().chunks(8))
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(saved, m.weights);
            }
        }
    }

    // `export-weights --clients` of runs that did not save them.
    let export = |overrides: &[&str], name: &str| {
        let plain = tmp.path().join(name);
        run_without_saving(overrides, &plain);
        let out = tmp.path().join(format!("{name}.safetensors"));
        (export_weights(&["--clients"], &plain, &out), out)
    };
    let (done, out) = export(&ditto, "plain");
    assert_wrote(&done, &out, &dir.join("client_models.safetensors"));
    let (refused, out) = export(&["rounds=1"], "fedavg");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("have no models of their own"), "{stderr}");
    assert!(!out.exists());
}
