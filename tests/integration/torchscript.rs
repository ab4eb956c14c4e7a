//! TorchScript modules as models (`model: {kind: torchscript, path: m.pt, flops: N}`): a
//! module traced by PyTorch gives PyTorch's outputs, trains as the same network written as a
//! layer list from the same weights, identically on every thread count; a bad module is
//! refused naming the file and what is wrong.

use crate::cohorts::{assert_close, simulate};
use crate::common::{assert_identical_on_1_2_4_threads, error, scenario};
use crate::layers::{images_scenario, write_images};
use crate::weights::{assert_gives_pytorchs_outputs, fixture};
use fedsim::models::{Architecture, InputShape, ModelSpec};
use fedsim::results::simulate_scenario;
use rand::SeedableRng;

/// The FedEM authors' FemnistCNN on 1×16×16 images, 10 classes, traced by
/// scripts/dev/make_weight_fixtures.py: the `model:` section it wrote (with the FLOPs PyTorch's
/// counter gave), the file's path made absolute, in flow style.
fn femnist_cnn16() -> String {
    let section: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(fixture("femnist_cnn16_script.yaml")).unwrap(),
    )
    .unwrap();
    let mut model = section["model"].clone();
    model["path"] = fixture("femnist_cnn16.pt").display().to_string().into();
    serde_json::to_string(&model).unwrap()
}

/// The same network as a layer list, started from the same weights (`model.init`).
fn femnist_cnn16_as_layers() -> String {
    let section: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(fixture("femnist_cnn16_model.yaml")).unwrap(),
    )
    .unwrap();
    let mut model = section["model"].clone();
    model["init"] = serde_yaml::from_str(&format!(
        "{{from: '{}'}}",
        fixture("femnist_cnn16.safetensors").display()
    ))
    .unwrap();
    serde_json::to_string(&model).unwrap()
}

#[test]
fn a_torchscript_module_gives_pytorchs_outputs_and_counts() {
    let spec = ModelSpec::from_yaml(&femnist_cnn16()).unwrap();
    let arch = Architecture::for_input(&spec, InputShape::Image([1, 16, 16]), 10);
    let list = ModelSpec::from_yaml(&femnist_cnn16_as_layers()).unwrap();
    let list = Architecture::for_input(&list, InputShape::Image([1, 16, 16]), 10);
    assert_eq!(arch.num_params(), list.num_params());
    // PyTorch's FLOP counter (the section's `flops`) counts what fedsim counts for the list.
    assert_eq!(arch.flops_per_sample(), list.flops_per_sample());
    assert_eq!(
        arch.parameter_names()[..2],
        ["conv1.weight".to_string(), "conv1.bias".to_string()]
    );
    assert!(!arch.stacks(), "a module trains per client");
    // The initial model is the module's saved weights, whatever the stream.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let saved = arch.init(&mut rng);
    assert_gives_pytorchs_outputs(&arch, &[saved], [1, 16, 16], "femnist_cnn16");
}

/// 4 clients of 1×16×16 striped images, 10 classes declared (the fixture module's outputs).
fn ten_class_images(dir: &std::path::Path) -> String {
    let data = dir.join("images.parquet");
    write_images(&data, 1, 16, 4);
    images_scenario(&data, [1, 16, 16], "{kind: linear}").replace("classes: 4", "classes: 10")
}

#[test]
fn a_torchscript_module_trains_as_its_layer_list() {
    // FedAvg, and FedProx (whose proximal term reads a second parameter vector beside the
    // trained one), with momentum: the module and the layer list from the same weights reach
    // the same models and losses to 1e-5 (relative).
    let tmp = tempfile::tempdir().unwrap();
    let text = ten_class_images(tmp.path());
    let (script, list) = (
        format!("model={}", femnist_cnn16()),
        format!("model={}", femnist_cnn16_as_layers()),
    );
    for algorithm in [
        "algorithm={name: fedavg}",
        "algorithm={name: fedprox, mu: 0.1}",
    ] {
        let a = simulate(&text, &[&list, algorithm, "training.cohorts=off"], 2);
        let b = simulate(&text, &[&script, algorithm], 2);
        assert!(!a.models.is_empty());
        assert_close(algorithm, &a, &b, 1e-5);
    }
}

#[test]
fn a_torchscript_module_is_identical_on_every_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let text = ten_class_images(tmp.path());
    let model = format!("model={}", femnist_cnn16());
    let set = [
        model.as_str(),
        "algorithm={name: fedem, components: 2}",
        "sampling.fraction=1",
    ];
    assert_identical_on_1_2_4_threads("torchscript", &text, &set, tmp.path());
}

/// That `s` is refused when its run starts, with every one of `parts` in the error.
fn refused_at_start(s: &fedsim::scenario::Scenario, parts: &[&str]) {
    let err = simulate_scenario(s, 1, |_| {}).err().expect("refused");
    let err = fedsim::error_chain(&err);
    for part in parts {
        assert!(err.contains(part), "{part} missing in: {err}");
    }
}

#[test]
fn bad_torchscript_modules_are_refused_with_the_file_and_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let text = ten_class_images(tmp.path()).replace(
        "model: {kind: linear}",
        &format!("model: {}", femnist_cnn16()),
    );
    let path = |name: &str| format!("model.path='{}'", fixture(name).display());
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            path("missing.pt"),
            vec!["field `model.path`", "missing.pt: cannot read it"],
        ),
        (
            path("femnist_cnn16.safetensors"),
            vec!["field `model.path`", "not a TorchScript module"],
        ),
        (
            path("noisy.pt"),
            vec!["noisy.pt", "outputs change with libtorch's global seed"],
        ),
        (
            "model.flops=0".into(),
            vec!["field `model.flops`: must be at least 1"],
        ),
        (
            "data.classes=4".into(),
            vec![
                "femnist_cnn16.pt",
                "returns [2, 10] for a batch of 2 images of 1×16×16; the data need [2, 4]",
            ],
        ),
    ];
    for (setting, parts) in &cases {
        let err = error(&text, &[setting]);
        for part in parts {
            assert!(err.contains(part), "{setting}: {part} missing in: {err}");
        }
    }
    let no_flops = serde_json::to_string(&{
        let mut model: serde_yaml::Value = serde_yaml::from_str(&femnist_cnn16()).unwrap();
        model.as_mapping_mut().unwrap().remove("flops");
        model
    })
    .unwrap();
    let err = error(&text.replace(&femnist_cnn16(), &no_flops), &[]);
    assert!(err.contains("missing field `flops`"), "{err}");
    // A Parquet file without declared classes: the module is checked against the classes
    // read (4), before anything builds the model for them.
    let undeclared = scenario(&text.replace(", classes: 10", ""), &[]);
    refused_at_start(&undeclared, &["model.path", "the data need [2, 4]"]);
    // DP-SGD stacks the model to get every record's gradient: refused at the start.
    let dp_sgd = scenario(
        &text,
        &["privacy={mechanism: dp_sgd, clip: 1.0, noise_multiplier: 0.5}"],
    );
    refused_at_start(&dp_sgd, &["privacy.mechanism", "TorchScript module"]);
    // Any value of the new fields gives a scenario or an error, never a panic.
    for value in [
        "null",
        "-1",
        "1.5",
        "[]",
        "{}",
        "''",
        "x",
        "18446744073709551616",
        ".nan",
    ] {
        for field in ["model.path", "model.flops"] {
            let setting = format!("{field}={value}");
            let o = vec![setting.clone()];
            let outcome = std::panic::catch_unwind(|| {
                fedsim::scenario::Scenario::from_yaml(&text, std::path::Path::new("f.yaml"), &o)
                    .map(|_| ())
            });
            assert!(outcome.is_ok(), "{setting} panicked");
        }
    }
}
