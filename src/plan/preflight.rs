//! The pre-flight of `fedsim run`, `check` and `sweep`: what only the machine that runs a
//! scenario can answer, asked before anything is built ([`preflight`]). A scenario validates
//! the same on every machine; whether this one has the memory and the devices it asks for is
//! checked here.
//!
//! What a scenario needs in memory is estimated before anything is built, and checked against
//! the machine: a run that cannot fit is refused by `fedsim check` with the estimate, instead
//! of exhausting memory an hour later. The estimate is a lower bound (every client at its
//! minimum size, a small fixed cost per client), so a run that could fit is never refused.

use crate::data::{DatasetSpec, InputShape};
use crate::scenario::{Scenario, ScenarioError};
use crate::settings::FieldError;

/// Checks `s` against this machine: the files its algorithm names read (a FedGMM
/// projection), its training devices exist here, and where the data's
/// size is known without reading it, the run fits this machine's memory (after the data is
/// built, [`check_run_fits`] checks again with the real sizes). Errors point into the file.
pub fn preflight(s: &Scenario) -> Result<(), ScenarioError> {
    s.run
        .algorithm
        .check_files(s.data.num_clients())
        .map_err(|e| s.locate(e.within("algorithm")))?;
    s.run
        .training
        .device
        .resolve_here()
        .map_err(|m| s.locate(FieldError::new("training.device".into(), m)))?;
    if let Some(input) = s.data.input_shape() {
        s.run
            .algorithm
            .check_input(input)
            .map_err(|e| s.locate(e.within("algorithm")))?;
    }
    // The model, where the data's shape and classes are known before it is built: the layers
    // a split names exist (when they are not, the run checks it as it starts).
    let arch = match (s.data.input_shape(), s.data.classes()) {
        (Some(input), Some(classes)) => {
            let arch = crate::models::Architecture::for_input(&s.run.model, input, classes);
            s.run
                .algorithm
                .check_model(&arch)
                .map_err(|e| s.locate(e.within("algorithm")))?;
            Some(arch)
        }
        _ => None,
    };
    let memory = machine_memory();
    // Where a small file gives the clients' sizes, what they hold, read now.
    let planned = s.data.planned_rows(&s.split).map_err(|e| {
        let message = match e {
            crate::data::DataError::Content { path, message } => format!(
                "{}: {}",
                path.display(),
                message.trim_start_matches("data.sizes_from: ")
            ),
            e => crate::error_chain(&e),
        };
        s.locate(FieldError::new("data.sizes_from".into(), message))
    })?;
    let data_bytes = match planned {
        Some((rows, dim)) => Some(rows * (dim as f64 * 4.0 + 8.0)),
        None => least_bytes(&s.data).map(|(_, data)| data),
    };
    if planned.is_none() {
        check_fits(&s.data, memory).map_err(|e| s.locate(e))?;
    }
    if let (Some(input), Some(classes), Some(clients), Some(data_bytes)) = (
        s.data.input_shape(),
        s.data.classes(),
        s.data.num_clients(),
        data_bytes,
    ) {
        let shape = DataShape {
            input,
            classes,
            clients,
            least_train_rows: 1,
            data_bytes,
        };
        let mut terms = run_terms(&s.run, &shape);
        if planned.is_some() {
            // The data's size is the sizes file's.
            terms[0].field = "data.sizes_from";
        }
        check_terms(&terms, memory).map_err(|e| s.locate(e))?;
        if let (Some(init), Some(arch)) = (&s.run.model.init, &arch) {
            // The file against the model for these data (how many models the algorithm
            // starts is checked when the run starts).
            crate::models::read_models(&init.from, arch)
                .map_err(|m| s.locate(FieldError::new("model.init.from".into(), m)))?;
        }
    }
    Ok(())
}

/// Bytes per client that any run spends at least beside the data (its drawn device, its id,
/// its size), whatever the model: measured at about 39 bytes with rows made on demand and
/// clients asleep (`cargo bench --bench scale`, 10⁶ → 10⁷ clients); 32 are counted.
const LEAST_BYTES_PER_CLIENT: f64 = 32.0;

/// The bytes the result files keep of each evaluated client until the end of a run: its row of
/// `clients.parquet` and its last test evaluation (every other record is streamed). `results`
/// holds those rows; a unit test there checks this number against their size.
pub const RESULT_BYTES_PER_EVALUATED_CLIENT: usize = 156;

/// The least memory a run of `data` needs: `(total, data)` in bytes.
pub fn least_bytes(data: &DatasetSpec) -> Option<(f64, f64)> {
    let (rows, dim) = data.least_rows()?;
    // f32 features and an i64 label per row.
    let data_bytes = rows * (dim as f64 * 4.0 + 8.0);
    let clients = data.num_clients().unwrap_or(0) as f64;
    Some((data_bytes + clients * LEAST_BYTES_PER_CLIENT, data_bytes))
}

use crate::io::input::human_bytes;
use crate::io::machine_memory;

/// What a memory estimate of a run needs to know of its data.
#[derive(Clone, Copy, Debug)]
pub struct DataShape {
    pub input: InputShape,
    pub classes: usize,
    pub clients: usize,
    /// The fewest training rows a client holds (1 where not known: still a lower bound).
    pub least_train_rows: usize,
    /// Bytes of data held (0 for rows made on demand), and whether rows are made on demand.
    pub data_bytes: f64,
}

/// One part of a run's least memory: the field that sets it, what it is, and its bytes.
#[derive(Clone, Debug)]
pub struct MemoryTerm {
    pub field: &'static str,
    pub what: String,
    pub bytes: f64,
}

/// The least memory a run of `run` on data of `shape` takes, part by part (each a lower
/// bound, so a run that could fit is never refused):
/// - the data held, and `LEAST_BYTES_PER_CLIENT` (32 bytes) for each client;
/// - the model, twice (the global parameters and a trainer's copy, 4 bytes a value);
/// - one batch's activations, twice (forward values kept for backpropagation, and their
///   gradients);
/// - the models the clients of the first round keep ([`Capabilities::client_models`]);
/// - one job's batch plan: its shuffled passes over the smallest client's rows (8 bytes a row,
///   16 a batch);
/// - the results kept of each evaluated client until the end (its row of `clients.parquet`
///   and its last test evaluation; every other record is streamed to the files);
/// - under compression with error feedback, the residuals of the first round's clients (a
///   model's floats each);
/// - under secure aggregation, a round's graph of neighbours (n·(n − 1) indices for SecAgg).
///
/// [`Capabilities::client_models`]: crate::algorithms::Capabilities::client_models
pub fn run_terms(run: &crate::scenario::RunSpec, shape: &DataShape) -> Vec<MemoryTerm> {
    use crate::models::LocalWork;
    let arch = crate::models::Architecture::for_input(&run.model, shape.input, shape.classes);
    let params = arch.num_params_f64();
    let plan = run.training.plan;
    let batch = plan.batch_size.max(1) as f64;
    let keeping = run.algorithm.capabilities().client_models as f64;
    let first_round = if !run.policy.declared().rounds_in_step
        || run.sampling.replacement
        || run.sampling.available_only
    {
        1.0
    } else {
        run.sampling.per_round(shape.clients.max(1)) as f64
    };
    let n = shape.least_train_rows.max(1) as f64;
    let batches_per_pass = (n / batch).ceil();
    let (passes, work_field) = match plan.work {
        LocalWork::Epochs(e) => (e as f64, "training.local_epochs"),
        LocalWork::Steps(s) => ((s as f64 / batches_per_pass).ceil(), "training.local_steps"),
    };
    let mut terms = vec![
        MemoryTerm {
            field: "data.clients",
            what: format!(
                "{} clients: {} of data and {} bytes each",
                shape.clients,
                human_bytes(shape.data_bytes),
                LEAST_BYTES_PER_CLIENT
            ),
            bytes: shape.data_bytes + shape.clients as f64 * LEAST_BYTES_PER_CLIENT,
        },
        MemoryTerm {
            field: "model",
            what: format!(
                "the model ({params:.3e} parameters for {} classes and inputs of {} values), \
                 held twice",
                shape.classes,
                shape.input.len()
            ),
            bytes: 2.0 * 4.0 * params,
        },
        MemoryTerm {
            field: "training.batch_size",
            what: format!(
                "one batch of {} rows through the model ({:.3e} values a row), forward and \
                 back",
                plan.batch_size,
                arch.activations_per_sample()
            ),
            bytes: 2.0 * 4.0 * batch * arch.activations_per_sample(),
        },
        MemoryTerm {
            field: work_field,
            what: format!(
                "one client's local work: {passes:.3e} shuffled passes over its rows (batches \
                 of {}), planned before it trains",
                plan.batch_size
            ),
            bytes: passes * (8.0 * n + 16.0 * batches_per_pass),
        },
    ];
    // What the result files keep of each evaluated client until the end: its row of
    // `clients.parquet` and its last test evaluation (every other record is streamed).
    let evaluated = run.evaluation.clients.count(shape.clients) as f64;
    let per_client = RESULT_BYTES_PER_EVALUATED_CLIENT;
    terms.push(MemoryTerm {
        field: "evaluation.clients",
        what: format!(
            "the results kept of {evaluated} evaluated clients ({per_client} bytes each)"
        ),
        bytes: evaluated * per_client as f64,
    });
    // Kept models of spilled size count up to what the spill file's budget keeps in memory.
    let kept = keeping * first_round * 4.0 * params;
    let kept = match run
        .training
        .spill
        .store_settings(crate::io::machine_memory().unwrap_or(0.0))
    {
        Some((least, budget)) if keeping * params >= least as f64 => kept.min(budget as f64),
        _ => kept,
    };
    if kept > 0.0 {
        terms.push(MemoryTerm {
            field: "algorithm",
            what: format!(
                "`{}` keeps {keeping} model(s) per client that trains: {first_round} of them \
                 in the first round",
                run.algorithm.name()
            ),
            bytes: kept,
        });
    }
    // Error feedback keeps, for each client that has compressed an update, what it has not
    // sent yet: a float for each value it sends (one model here; FedEM's M components take M).
    let feedback = (run.compression.as_ref())
        .and_then(|c| c.uplink.as_ref())
        .is_some_and(|u| u.error_feedback());
    let residuals = match run
        .training
        .spill
        .store_settings(crate::io::machine_memory().unwrap_or(0.0))
    {
        _ if !feedback => 0.0,
        Some((least, budget)) if params >= least as f64 => {
            (first_round * 4.0 * params).min(budget as f64)
        }
        _ => first_round * 4.0 * params,
    };
    if run
        .compression
        .as_ref()
        .is_some_and(|c| c.downlink.is_some())
    {
        terms.push(MemoryTerm {
            field: "compression.downlink",
            what: "the clients' public copy of the model, and a second copy while it moves".into(),
            bytes: 2.0 * 4.0 * params,
        });
    }
    // Secure aggregation keeps a round's graph (each selected client's neighbours) and its
    // survivors' flags: n clients × (k neighbours' indices + a list's own bytes), SecAgg's
    // k = n − 1 making it grow with the square of the clients a round.
    if let Some(secagg) = &run.secure_aggregation {
        let n = run.sampling.per_round(shape.clients.max(1)) as f64;
        let k = secagg.neighbours_of(n as usize) as f64;
        terms.push(MemoryTerm {
            field: "secure_aggregation",
            what: format!(
                "a secure-aggregation round's graph: {n} clients × {k} neighbours (8 bytes each)"
            ),
            bytes: n * (8.0 * k + 32.0),
        });
    }
    if residuals > 0.0 {
        terms.push(MemoryTerm {
            field: "compression.uplink.error_feedback",
            what: format!(
                "error feedback's residuals: a model's floats for each client that has \
                 compressed, {first_round} of them in the first round"
            ),
            bytes: residuals,
        });
    }
    terms
}

/// Refuses `terms` whose sum exceeds `available`, at the field of the largest term, listing
/// every term.
pub fn check_terms(terms: &[MemoryTerm], available: Option<f64>) -> Result<(), FieldError> {
    let Some(available) = available else {
        return Ok(());
    };
    let total: f64 = terms.iter().map(|t| t.bytes).sum();
    if total <= available {
        return Ok(());
    }
    let largest = terms
        .iter()
        .max_by(|a, b| a.bytes.total_cmp(&b.bytes))
        .expect("at least one term");
    let parts: Vec<String> = terms
        .iter()
        .filter(|t| t.bytes > 0.0)
        .map(|t| format!("{} ({})", human_bytes(t.bytes), t.field))
        .collect();
    Err(FieldError::new(
        largest.field.into(),
        format!(
            "{}: at least {}; the run needs at least {} ({}), more than this machine's {}; \
             make it smaller here",
            largest.what,
            human_bytes(largest.bytes),
            human_bytes(total),
            parts.join(" + "),
            human_bytes(available)
        ),
    ))
}

/// [`run_terms`], with a backdoor's rows, and [`check_terms`] for a built data set (the
/// pre-flight of a run: a file's class count and shape, and its test labels, are known only
/// once it is read).
pub fn check_run_fits(
    run: &crate::scenario::RunSpec,
    data: &crate::data::FederatedData,
    available: Option<f64>,
) -> Result<(), FieldError> {
    // The model against the rows and classes of the data as read (a Parquet file's classes
    // are known only now), before anything builds it for them.
    run.model
        .check_shape(data.input_shape(), Some(data.classes))
        .map_err(|e| e.within("model"))?;
    let on_demand = data.on_demand.is_some();
    let least_train_rows = if on_demand {
        1
    } else {
        (0..data.num_clients())
            .map(|c| data.split_len(c, crate::records::Split::Train))
            .filter(|&n| n > 0)
            .min()
            .unwrap_or(1)
    };
    let shape = DataShape {
        input: data.input_shape(),
        classes: data.classes,
        clients: data.num_clients(),
        least_train_rows,
        data_bytes: (data.features.len() * 4 + data.labels.len() * 8) as f64,
    };
    let mut terms = run_terms(run, &shape);
    terms.extend(backdoor_term(run, data));
    check_terms(&terms, available)
}

/// Under a backdoor adversary, the rows it appends ([`Split::Backdoor`]): a triggered copy of
/// every client's test images of labels other than its target, kept for the whole run.
/// (Poisoning may also copy the data set, where another holder shares it; not counted, as
/// that is not certain.)
///
/// [`Split::Backdoor`]: crate::records::Split::Backdoor
fn backdoor_term(
    run: &crate::scenario::RunSpec,
    data: &crate::data::FederatedData,
) -> Option<MemoryTerm> {
    let backdoor = (run.adversary.as_ref()?.attack).settings::<crate::robust::BackdoorSpec>()?;
    if !data.is_resident() {
        return None;
    }
    let rows = (data.clients.iter())
        .flat_map(|shard| shard.range(crate::records::Split::Test))
        .filter(|&row| data.labels[row] != backdoor.target)
        .count();
    Some(MemoryTerm {
        field: "adversary.attack",
        what: format!(
            "the backdoor's triggered copies of the clients' {rows} test images of labels other \
             than {}",
            backdoor.target
        ),
        bytes: rows as f64 * (4.0 * data.dim as f64 + 8.0),
    })
}

/// Refuses a data set whose least memory exceeds `available`.
pub fn check_fits(data: &DatasetSpec, available: Option<f64>) -> Result<(), FieldError> {
    let (Some((total, data_bytes)), Some(available)) = (least_bytes(data), available) else {
        return Ok(());
    };
    if total <= available {
        return Ok(());
    }
    let clients = data.num_clients().unwrap_or(0);
    let data_part = if data_bytes > 0.0 {
        format!(
            "{} of data, every client at its minimum size",
            human_bytes(data_bytes)
        )
    } else {
        "no rows held: they are made on demand".into()
    };
    // A data set that can make rows on demand and is not asked to.
    let can_make_on_demand = data.on_demand() == Some(false);
    let hint = if can_make_on_demand {
        ", or `data.on_demand: true` to make each client's rows only when a job needs them"
    } else {
        ""
    };
    Err(FieldError::new(
        "data.clients".into(),
        format!(
            "{clients} clients need at least {} of memory ({data_part}, and {} of per-client \
             state), more than this machine's {}; use fewer clients or smaller ones{hint}",
            human_bytes(total),
            human_bytes(total - data_bytes),
            human_bytes(available),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fedem(clients: usize) -> DatasetSpec {
        serde_yaml::from_str(&format!(
            "{{kind: fedem_synthetic, clients: {clients}, dim: 10}}"
        ))
        .unwrap()
    }

    #[test]
    fn least_bytes_by_hand() {
        // min_samples defaults to 50 (FedEM's generator): 50 rows of 10 f32 and an i64 label.
        let (total, data) = least_bytes(&fedem(1000)).unwrap();
        assert_eq!(data, 1000.0 * 50.0 * 48.0);
        assert_eq!(total, data + 1000.0 * 32.0);
        let on_demand =
            serde_yaml::from_str("{kind: fedem_synthetic, clients: 1000, on_demand: true}");
        assert_eq!(least_bytes(&on_demand.unwrap()), Some((1000.0 * 32.0, 0.0)));
    }

    #[test]
    fn refuses_what_cannot_fit_and_says_how_much() {
        let crate::settings::FieldError { path, message } =
            check_fits(&fedem(100_000_000_000), Some(24.0 * 1024f64.powi(3))).unwrap_err();
        assert_eq!(path, "data.clients");
        assert!(
            message.starts_with("100000000000 clients need at least 221.2 TiB of memory"),
            "{message}"
        );
        assert!(
            message.contains("more than this machine's 24.0 GiB"),
            "{message}"
        );
        assert!(check_fits(&fedem(1000), Some(1e9)).is_ok());
        assert!(
            check_fits(&fedem(100_000_000_000), None).is_ok(),
            "unknown: not refused"
        );
    }

    fn run_of(extra: &str) -> crate::scenario::RunSpec {
        let text = format!(
            "rounds: 1\ndata: {{kind: fedem_synthetic, clients: 10, dim: 20}}\n\
             algorithm: {{name: ditto, lambda: 0.1}}\nsampling: {{count: 3}}\n{extra}"
        );
        crate::scenario::Scenario::from_yaml(&text, std::path::Path::new("t.yaml"), &[])
            .unwrap()
            .run
    }

    /// Two clients of 1×3×3 images; test labels (0, 1, 2) and (2, 1): with target 2, three
    /// test images are copied, each 9 floats and a label: 3 · (36 + 8) = 132 bytes.
    #[test]
    fn a_backdoor_counts_its_copies_by_hand() {
        use crate::data::{ClientShard, FederatedData, Layout};
        let labels = vec![0, 1, 2, 0, 1, 2, 0, 1, 0, 2, 1];
        let shard = |train: std::ops::Range<usize>, test: std::ops::Range<usize>| ClientShard {
            val: train.end..train.end,
            train,
            test,
        };
        let data = FederatedData {
            layout: Layout::Image([1, 3, 3]),
            dim: 9,
            classes: 3,
            features: vec![0.5; labels.len() * 9],
            labels,
            clients: vec![shard(0..3, 3..6), shard(6..9, 9..11)],
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        let run = run_of("adversary: {fraction: 0.2, attack: {kind: backdoor, target: 2}}");
        let term = backdoor_term(&run, &data).expect("a backdoor term");
        assert_eq!((term.field, term.bytes), ("adversary.attack", 132.0));
        assert!(term.what.contains("3 test images"), "{}", term.what);
        let flips = run_of("adversary: {fraction: 0.2, attack: {kind: label_flip}}");
        assert!(backdoor_term(&flips, &data).is_none());
        assert!(backdoor_term(&run_of(""), &data).is_none());
    }

    #[test]
    fn run_terms_by_hand() {
        let shape = DataShape {
            input: InputShape::Flat(20),
            classes: 2,
            clients: 10,
            least_train_rows: 7,
            data_bytes: 100_000.0,
        };
        let run = run_of("training: {local_steps: 10, batch_size: 3}\n");
        let per_client = RESULT_BYTES_PER_EVALUATED_CLIENT as f64;
        let bytes: Vec<(&str, f64)> = run_terms(&run, &shape)
            .iter()
            .map(|t| (t.field, t.bytes))
            .collect();
        // A linear model of 20 inputs and one output (two classes): 21 parameters.
        // Steps: 7 rows in batches of 3 is 3 batches a pass, so 10 steps take 4 passes of
        // 7 row indices (8 bytes) and 3 batches (16 bytes).
        // Ditto keeps one personal model for each of the 3 clients of the first round.
        assert_eq!(
            bytes,
            [
                ("data.clients", 100_000.0 + 10.0 * 32.0),
                ("model", 2.0 * 4.0 * 21.0),
                ("training.batch_size", 2.0 * 4.0 * 3.0 * 1.0),
                ("training.local_steps", 4.0 * (7.0 * 8.0 + 3.0 * 16.0)),
                ("evaluation.clients", 10.0 * per_client),
                ("algorithm", 3.0 * 4.0 * 21.0),
            ]
        );
        // Error feedback keeps a model's floats for each of the first round's 3 clients.
        let compressed = run_of(
            "training: {local_steps: 10, batch_size: 3}\n\
             compression: {uplink: {kind: sign, error_feedback: true}}\n",
        );
        let last = run_terms(&compressed, &shape).pop().unwrap();
        assert_eq!(
            (last.field, last.bytes),
            ("compression.uplink.error_feedback", 3.0 * 4.0 * 21.0)
        );
        // Spilled, the kept models are not in memory.
        let spilled = run_of("training: {local_steps: 10, batch_size: 3, spill: always}\n");
        assert!(run_terms(&spilled, &shape)
            .iter()
            .all(|t| t.field != "algorithm"));
        let terms = run_terms(&run, &shape);
        let total: f64 = bytes.iter().map(|b| b.1).sum();
        assert!(check_terms(&terms, Some(total)).is_ok());
        let e = check_terms(&terms, Some(total - 1.0)).unwrap_err();
        assert_eq!(e.path, "data.clients", "the largest term names the field");
        assert!(
            e.message.contains("+ 168 B (model) +"),
            "every term is listed: {}",
            e.message
        );
    }

    #[test]
    fn the_machine_has_some_memory() {
        assert!(machine_memory().is_some_and(|m| m > 1e8));
    }
}
