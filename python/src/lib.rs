//! `fedsim._native`: the simulator's library as a Python extension module. The Python package
//! `fedsim` (`python/fedsim/`) wraps it; researchers import that.
//!
//! It adds no behaviour of its own: a scenario is read and checked by `fedsim::scenario` with
//! the command line's rules (`--set` overrides included), a run is `fedsim::results::run_scenario`
//! with the command line's defaults, and errors carry the command line's text. The GIL is
//! released while a run goes, so other Python threads go on.

use fedsim::results::{
    default_out_dir, default_threads, run_scenario, run_scenario_reporting, CheckpointOptions,
    Evaluation, RunOptions,
};
use fedsim::studies::{cell_dir, run_sweep, Sweep, SweepOptions};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

create_exception!(fedsim, FedsimError, PyException, "An error fedsim reports.");
create_exception!(
    fedsim,
    ScenarioError,
    FedsimError,
    "A scenario that fedsim refuses: its text names the file, the field path, the line and \
     what is allowed, as the command line says it."
);
create_exception!(
    fedsim,
    RunError,
    FedsimError,
    "A run that could not be done or written."
);

/// A checked scenario: the file or text it was read from, and the overrides applied, in order.
#[pyclass(module = "fedsim._native", frozen)]
#[derive(Clone)]
struct Scenario {
    inner: fedsim::scenario::Scenario,
    /// The YAML text it was read from, and the file it is named after in messages.
    text: String,
    file: PathBuf,
    overrides: Vec<String>,
}

fn scenario_error(e: impl std::error::Error) -> PyErr {
    ScenarioError::new_err(fedsim::error_chain(&e))
}

impl Scenario {
    fn read(text: String, file: PathBuf, overrides: Vec<String>) -> PyResult<Scenario> {
        let inner = fedsim::scenario::Scenario::from_yaml(&text, &file, &overrides)
            .map_err(scenario_error)?;
        Ok(Scenario {
            inner,
            text,
            file,
            overrides,
        })
    }
}

#[pymethods]
impl Scenario {
    /// Reads the scenario file `path`, then the overrides `set` (`"path=value"`, as `--set`).
    #[staticmethod]
    #[pyo3(signature = (path, set = Vec::new()))]
    fn from_file(path: PathBuf, set: Vec<String>) -> PyResult<Scenario> {
        let s = fedsim::scenario::Scenario::load(&path, &set).map_err(scenario_error)?;
        Ok(Scenario {
            text: s.text.clone(),
            file: path,
            inner: s,
            overrides: set,
        })
    }

    /// Reads a scenario from YAML text (`name` stands for its file in messages).
    #[staticmethod]
    #[pyo3(signature = (text, set = Vec::new(), name = "scenario.yaml".to_string()))]
    fn from_yaml(text: String, set: Vec<String>, name: String) -> PyResult<Scenario> {
        Scenario::read(text, PathBuf::from(name), set)
    }

    /// This scenario with one more override, `path=value` (the value read as YAML), checked.
    fn set(&self, path: &str, value: &str) -> PyResult<Scenario> {
        let mut overrides = self.overrides.clone();
        overrides.push(format!("{path}={value}"));
        Scenario::read(self.text.clone(), self.file.clone(), overrides)
    }

    /// The scenario with every default filled in, as YAML (what `scenario.yaml` holds).
    #[getter]
    fn resolved_yaml(&self) -> String {
        self.inner.resolved_yaml.clone()
    }

    /// The run id: the first 12 hex digits of the resolved scenario's SHA-256.
    #[getter]
    fn run_id(&self) -> String {
        self.inner.run_id().to_string()
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.run.seed
    }

    /// Where `fedsim run` writes this scenario's results by default.
    #[getter]
    fn default_out(&self) -> PathBuf {
        default_out_dir(&self.inner)
    }

    /// The notes reading it produced (what an override did beyond setting a value).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.inner.notes.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "Scenario(name={:?}, seed={}, run_id={:?})",
            self.inner.name,
            self.inner.run.seed,
            self.inner.run_id()
        )
    }
}

/// Runs `scenario` into `out` (default: `results/<name>/seed-<seed>`) with `threads` trainer
/// threads (default: the cores), as `fedsim run` does, and returns the output folder. The GIL
/// is released meanwhile. `on_evaluation`, if given, is called with each evaluation as the run
/// makes it: a dict of its round, simulated time and figures. An exception it raises ends its
/// calls and is raised once the run has ended.
#[pyfunction]
#[pyo3(signature = (scenario, out = None, threads = None, progress = false, force = false, on_evaluation = None))]
fn run(
    py: Python<'_>,
    scenario: &Scenario,
    out: Option<PathBuf>,
    threads: Option<usize>,
    progress: bool,
    force: bool,
    on_evaluation: Option<Py<PyAny>>,
) -> PyResult<PathBuf> {
    let s = &scenario.inner;
    let opts = RunOptions {
        out_dir: out.unwrap_or_else(|| default_out_dir(s)),
        threads: threads.unwrap_or_else(default_threads).max(1),
        progress,
        force,
        save_models: false,
        save_client_models: false,
        keep_unfinished: true,
        checkpoint: CheckpointOptions {
            every: None,
            restart: false,
        },
    };
    let (report, raised) = interruptible(py, || match on_evaluation {
        None => (run_scenario(s, &opts), None),
        Some(callback) => {
            let raised = Rc::new(RefCell::new(None::<PyErr>));
            let keep = raised.clone();
            let call = move |e: &Evaluation<'_>| {
                if keep.borrow().is_some() {
                    return;
                }
                let called = Python::attach(|py| {
                    let row = PyDict::new(py);
                    row.set_item("round", e.round)?;
                    row.set_item("time_s", e.time_s)?;
                    for (name, value) in e.values {
                        row.set_item(name, value)?;
                    }
                    callback.call1(py, (row,)).map(|_| ())
                });
                if let Err(err) = called {
                    *keep.borrow_mut() = Some(err);
                }
            };
            let report = run_scenario_reporting(s, &opts, Box::new(call));
            let raised = raised.borrow_mut().take();
            (report, raised)
        }
    })?;
    let report = report.map_err(|e| {
        RunError::new_err(format!(
            "running {}: {}",
            scenario.file.display(),
            fedsim::error_chain(&e)
        ))
    })?;
    if let Some(err) = raised {
        return Err(err);
    }
    Ok(report.out_dir)
}

/// Runs the sweep file `path` into `out` (default: `results/<sweep name>`) with `jobs` cells at
/// once, as `fedsim sweep` does (finished cells are kept, cut-short ones resume), and returns
/// the output folder and each cell's label and folder, in the sweep's order.
#[pyfunction]
#[pyo3(signature = (path, out = None, jobs = 1, progress = false, force = false))]
fn sweep(
    py: Python<'_>,
    path: PathBuf,
    out: Option<PathBuf>,
    jobs: usize,
    progress: bool,
    force: bool,
) -> PyResult<(PathBuf, Vec<(String, PathBuf)>)> {
    let plan = Sweep::load(&path).map_err(scenario_error)?;
    for cell in &plan.cells {
        fedsim::plan::preflight(&cell.scenario).map_err(scenario_error)?;
    }
    let out = out.unwrap_or_else(|| PathBuf::from("results").join(&plan.name));
    let opts = SweepOptions {
        out: out.clone(),
        jobs: jobs.max(1),
        shard: (0, 1),
        progress,
        force,
        checkpoint: CheckpointOptions {
            every: None,
            restart: false,
        },
    };
    let outcome = interruptible(py, || run_sweep(&plan, &opts))?.map_err(|e| {
        RunError::new_err(format!(
            "sweep {}: {}",
            path.display(),
            fedsim::error_chain(&e)
        ))
    })?;
    if !outcome.failed.is_empty() || !outcome.busy.is_empty() {
        let listed: Vec<String> = (outcome
            .failed
            .iter()
            .map(|n| format!("{}: {}", n.cell, n.what)))
        .chain(
            outcome
                .busy
                .iter()
                .map(|n| format!("{}: run by {}", n.cell, n.what)),
        )
        .collect();
        return Err(RunError::new_err(format!(
            "sweep {}: {} cells did not finish here:\n{}",
            path.display(),
            listed.len(),
            listed.join("\n")
        )));
    }
    let cells = (plan.cells.iter())
        .map(|cell| (cell.label(), cell_dir(&out, cell)))
        .collect();
    Ok((out, cells))
}

/// What `fedsim describe` says of `scenario` (its data built and its run decided, nothing
/// trained): a dict of its text, its notes, and the data's figures (clients, features, classes,
/// and each split's rows, sizes per client and label shares).
#[pyfunction]
fn describe(py: Python<'_>, scenario: &Scenario) -> PyResult<Py<PyDict>> {
    let (mut text, mut notes) = (String::new(), Vec::new());
    let described = py.detach(|| {
        fedsim::results::describe_scenario(&scenario.inner, &mut |said| match said {
            fedsim::results::Said::Text(t) => text.push_str(&t),
            fedsim::results::Said::Note(n) => notes.push(n),
        })
    });
    let data = match described {
        Ok(described) => described.data,
        Err(fedsim::results::DescribeError::Scenario(e)) => return Err(scenario_error(e)),
        Err(e) => return Err(RunError::new_err(fedsim::error_chain(&e))),
    };
    let out = PyDict::new(py);
    out.set_item("text", text)?;
    out.set_item("notes", notes)?;
    out.set_item("clients", data.clients)?;
    out.set_item("features", data.dim)?;
    out.set_item("classes", data.classes)?;
    let splits: Vec<Bound<'_, PyDict>> = (data.splits.iter())
        .map(|split| {
            let row = PyDict::new(py);
            row.set_item("split", split.split.as_str())?;
            row.set_item("rows", split.rows)?;
            row.set_item("min_per_client", split.min)?;
            row.set_item("median_per_client", split.median)?;
            row.set_item("max_per_client", split.max)?;
            row.set_item("label_shares", split.label_shares.clone())?;
            Ok(row)
        })
        .collect::<PyResult<_>>()?;
    out.set_item("splits", splits)?;
    Ok(out.unbind())
}

/// Runs `work` (runs of the simulator) on a thread of its own while Python's thread waits
/// without the GIL, looking at Python's signals every 20 ms. Where Python reports one as an
/// exception (Ctrl-C: `KeyboardInterrupt`), the runs are stopped at their next event (they
/// publish nothing, and the next run into their folder resumes from their last checkpoint)
/// and the exception is raised once `work` has returned.
fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
    fedsim::sim::clear_interrupt();
    std::thread::scope(|scope| {
        let running = scope.spawn(work);
        let mut raised = None;
        while !running.is_finished() {
            py.detach(|| std::thread::sleep(std::time::Duration::from_millis(20)));
            if raised.is_none() {
                if let Err(e) = py.check_signals() {
                    fedsim::sim::interrupt();
                    raised = Some(e);
                }
            }
        }
        let done = running
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match raised {
            Some(e) => Err(e),
            None => Ok(done),
        }
    })
}

/// The JSON Schema of scenario files (what `fedsim schema` prints).
#[pyfunction]
fn schema() -> String {
    fedsim::scenario::json_schema_text()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Scenario>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(schema, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add("FedsimError", m.py().get_type::<FedsimError>())?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
