//! Sweep files: a base scenario and axes, expanded into cells (one checked scenario each).
//!
//! ```yaml
//! name: sampling_rate
//! base: ../paper/fedem_synthetic_fedem.yaml   # relative to the sweep file
//! set: {rounds: 100}                          # fixed overrides for every cell (optional)
//! grid:                                       # every combination, first axis outermost
//!   algorithm: [{name: fedavg}, {name: fedem, components: 3}]
//!   sampling.fraction: [0.05, 0.1, 0.2, 0.5, 1.0]
//! zip:                                        # optional: axes varied together (equal lengths)
//!   training.lr: [0.1, 0.05]
//!   training.batch_size: [128, 64]
//! seeds: [1, 2, 3]
//! ```
//!
//! Axes are dotted paths, as `--set` takes them; a value may be a whole map. Every cell is
//! validated like a scenario file; its id is its run id (the hash of its resolved scenario), so
//! it does not depend on the order of the axes or on the other cells.

use crate::scenario::{check_name, Scenario, ScenarioError};
use crate::settings::compact;
use serde::Deserialize;
use serde_yaml::{Mapping, Value};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("cannot read sweep file {}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    #[error("{}: cell {cell}", file.display())]
    Cell {
        file: PathBuf,
        cell: String,
        source: Box<ScenarioError>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    #[serde(default)]
    name: Option<String>,
    base: PathBuf,
    #[serde(default)]
    set: Mapping,
    #[serde(default)]
    grid: Mapping,
    #[serde(default)]
    zip: Mapping,
    #[serde(default)]
    seeds: Option<Vec<u64>>,
}

/// One cell of a sweep.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The cell's axis values (grid, then zip), as `(path, value)`; the seed is apart.
    pub axes: Vec<(String, Value)>,
    pub seed: u64,
    pub scenario: Scenario,
}

impl Cell {
    /// The stable id: the run id of the cell's resolved scenario.
    pub fn id(&self) -> &str {
        self.scenario.run_id()
    }

    /// `path=value, ..., seed=N`, for messages and progress bars.
    pub fn label(&self) -> String {
        label(&self.axes, self.seed)
    }
}

/// A sweep, expanded.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub name: String,
    pub file: PathBuf,
    /// The axis paths, in order (grid, then zip).
    pub axis_paths: Vec<String>,
    /// Cells in expansion order.
    pub cells: Vec<Cell>,
}

fn label(axes: &[(String, Value)], seed: u64) -> String {
    axes.iter()
        .map(|(p, v)| format!("{p}={}", compact(v)))
        .chain(std::iter::once(format!("seed={seed}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `path=VALUE` for `--set`; `Err` names the field whose value cannot be written as YAML
/// (serde_yaml refuses some tagged keys, e.g. `{!tag: x}`).
fn override_arg(path: &str, v: &Value) -> Result<String, String> {
    let text = serde_yaml::to_string(v).map_err(|e| {
        format!(
            "`{path}`: {} cannot be used as a value here ({e})",
            compact(v)
        )
    })?;
    Ok(format!("{path}={}", text.trim_end()))
}

impl Sweep {
    pub fn load(file: &Path) -> Result<Sweep, SweepError> {
        let text =
            crate::io::read_text(file, crate::io::SizeLimit::SCENARIO).map_err(|source| {
                SweepError::Read {
                    file: file.to_path_buf(),
                    source,
                }
            })?;
        Sweep::from_yaml(&text, file)
    }

    pub fn from_yaml(text: &str, file: &Path) -> Result<Sweep, SweepError> {
        let invalid = |message: String| SweepError::Invalid {
            file: file.to_path_buf(),
            message,
        };
        let is_scenario = serde_yaml::from_str::<Value>(text)
            .is_ok_and(|v| v.get("base").is_none() && v.get("rounds").is_some());
        if is_scenario {
            return Err(invalid(
                "this file is a scenario, not a sweep: run it with `fedsim run FILE`, or \
                 sweep it from a file that names it in `base` and varies it with `grid`, `zip` \
                 or `seeds` (see scenarios/studies/)"
                    .into(),
            ));
        }
        let raw: RawSweep = serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(
            text,
        ))
        .map_err(|e| {
            let path = e.path().to_string();
            let line = e
                .inner()
                .location()
                .map(|l| format!(" (line {})", l.line()))
                .unwrap_or_default();
            invalid(format!("field `{path}`{line}: {}", e.into_inner()))
        })?;
        let base_file = file.parent().unwrap_or(Path::new(".")).join(&raw.base);
        let base_text =
            crate::io::read_text(&base_file, crate::io::SizeLimit::SCENARIO).map_err(|e| {
                invalid(format!(
                    "field `base`: cannot read {}: {e}",
                    base_file.display()
                ))
            })?;
        let axis =
            |kind: &str, (k, v): (&Value, &Value)| -> Result<(String, Vec<Value>), SweepError> {
                let path = k
                    .as_str()
                    .filter(|p| !p.is_empty() && !p.split('.').any(str::is_empty))
                    .ok_or_else(|| {
                        invalid(format!(
                            "`{kind}`: axis `{}` must be a dotted field path",
                            compact(k)
                        ))
                    })?;
                if path == "seed" {
                    return Err(invalid(format!(
                        "`{kind}.seed`: the seed is not an axis; give the seeds as `seeds: \
                         [1, 2, …]` (every cell runs with each, and cells.csv has a `seed` \
                         column already)"
                    )));
                }
                match v {
                    Value::Sequence(values) if !values.is_empty() => {
                        Ok((path.to_string(), values.clone()))
                    }
                    _ => Err(invalid(format!(
                        "`{kind}.{path}`: must be a non-empty list of values"
                    ))),
                }
            };
        let grid: Vec<(String, Vec<Value>)> = raw
            .grid
            .iter()
            .map(|kv| axis("grid", kv))
            .collect::<Result<_, _>>()?;
        let zip: Vec<(String, Vec<Value>)> = raw
            .zip
            .iter()
            .map(|kv| axis("zip", kv))
            .collect::<Result<_, _>>()?;
        if let Some((first, rest)) = zip.split_first() {
            if let Some((p, v)) = rest.iter().find(|(_, v)| v.len() != first.1.len()) {
                return Err(invalid(format!(
                    "`zip`: axes vary together and need equal lengths: `{}` has {}, `{p}` has {}",
                    first.0,
                    first.1.len(),
                    v.len()
                )));
            }
        }
        let axis_paths: Vec<String> = grid.iter().chain(&zip).map(|(p, _)| p.clone()).collect();
        if let Some(dup) = axis_paths
            .iter()
            .enumerate()
            .find(|(i, p)| axis_paths[..*i].contains(p))
        {
            return Err(invalid(format!("axis `{}` appears twice", dup.1)));
        }
        let name = raw
            .name
            .clone()
            .or_else(|| file.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "sweep".into());
        check_name(&name).map_err(|m| invalid(format!("field `name`: {m}")))?;
        // The grid's combinations (first axis outermost), each with every zip entry.
        let mut combos: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        for (path, values) in &grid {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((path.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        let zip_len = zip.first().map_or(1, |(_, v)| v.len());
        let combos: Vec<Vec<(String, Value)>> = combos
            .into_iter()
            .flat_map(|c| {
                let zip = &zip;
                (0..zip_len).map(move |i| {
                    let mut c = c.clone();
                    c.extend(zip.iter().map(|(p, v)| (p.clone(), v[i].clone())));
                    c
                })
            })
            .collect();
        let fixed: Vec<String> = std::iter::once(format!("name={name}"))
            .map(Ok)
            .chain(raw.set.iter().map(|(k, v)| override_arg(&compact(k), v)))
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
        // Without `seeds`, every cell keeps the base scenario's seed.
        let seeds: Vec<Option<u64>> = match &raw.seeds {
            Some(s) if s.is_empty() => {
                return Err(invalid(
                    "`seeds`: give at least one seed, or leave it out".into(),
                ))
            }
            Some(s) => s.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut cells = Vec::new();
        for axes in combos {
            for &seed in &seeds {
                let mut args = fixed.clone();
                for (p, v) in &axes {
                    args.push(override_arg(p, v).map_err(invalid)?);
                }
                args.extend(seed.map(|s| format!("seed={s}")));
                let scenario =
                    Scenario::from_yaml(&base_text, &base_file, &args).map_err(|source| {
                        SweepError::Cell {
                            file: file.to_path_buf(),
                            cell: label(&axes, seed.unwrap_or_default()),
                            source: Box::new(source),
                        }
                    })?;
                let seed = scenario.run.seed;
                cells.push(Cell {
                    axes: axes.clone(),
                    seed,
                    scenario,
                });
            }
        }
        let mut ids: Vec<(&str, usize)> =
            cells.iter().enumerate().map(|(i, c)| (c.id(), i)).collect();
        ids.sort();
        if let Some(w) = ids.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(invalid(format!(
                "cells {} and {} are the same scenario",
                cells[w[0].1].label(),
                cells[w[1].1].label()
            )));
        }
        Ok(Sweep {
            name,
            file: file.to_path_buf(),
            axis_paths,
            cells,
        })
    }

    /// What the cells' scenarios had to say ([`Scenario::notes`]), each note once, with the first
    /// cell that said it and how many others did.
    pub fn notes(&self) -> Vec<String> {
        let mut seen: Vec<(&str, String, usize)> = Vec::new();
        for cell in &self.cells {
            for note in &cell.scenario.notes {
                match seen.iter_mut().find(|(n, ..)| n == note) {
                    Some((.., others)) => *others += 1,
                    None => seen.push((note, cell.label(), 0)),
                }
            }
        }
        seen.into_iter()
            .map(|(note, first, others)| match others {
                0 => format!("cell {first}: {note}"),
                n => format!("cell {first} (and {n} more): {note}"),
            })
            .collect()
    }

    /// The cells of shard `index` of `count`: every `count`-th cell in id order, from the
    /// `index`-th. The shards partition the sweep, whatever the machine.
    pub fn shard(&self, index: usize, count: usize) -> Vec<&Cell> {
        let mut by_id: Vec<&Cell> = self.cells.iter().collect();
        by_id.sort_by(|a, b| a.id().cmp(b.id()));
        by_id
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % count == index)
            .map(|(_, c)| c)
            .collect()
    }
}

/// `I/N` (0 ≤ I < N), or `auto` / `auto/N`: the index from `SLURM_ARRAY_TASK_ID` (minus
/// `SLURM_ARRAY_TASK_MIN`) or `JOB_COMPLETION_INDEX` (Kubernetes indexed jobs), the count from
/// `/N` or `SLURM_ARRAY_TASK_COUNT`. `env` looks variables up.
pub fn parse_shard(
    arg: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(usize, usize), String> {
    let num = |s: &str, what: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("--shard {arg}: {what} `{s}` is not a number"))
    };
    let (index, count) = match arg.split_once('/') {
        Some(("auto", n)) => (None, Some(num(n, "the count")?)),
        Some((i, n)) => (Some(num(i, "the index")?), Some(num(n, "the count")?)),
        None if arg == "auto" => (None, None),
        None => {
            return Err(format!(
                "--shard {arg}: expected I/N (e.g. 0/4), auto or auto/N"
            ))
        }
    };
    let index = match index {
        Some(i) => i,
        None => match (env("SLURM_ARRAY_TASK_ID"), env("JOB_COMPLETION_INDEX")) {
            (Some(id), _) => {
                let min = env("SLURM_ARRAY_TASK_MIN")
                    .map_or(Ok(0), |m| num(&m, "SLURM_ARRAY_TASK_MIN"))?;
                num(&id, "SLURM_ARRAY_TASK_ID")?
                    .checked_sub(min)
                    .ok_or_else(|| {
                        format!("--shard {arg}: SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN")
                    })?
            }
            (None, Some(k)) => num(&k, "JOB_COMPLETION_INDEX")?,
            (None, None) => {
                return Err(format!(
                    "--shard {arg}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set"
                ))
            }
        },
    };
    let count = match count {
        Some(n) => n,
        None => num(
            &env("SLURM_ARRAY_TASK_COUNT").ok_or_else(|| {
                format!("--shard {arg}: give the number of shards as auto/N (SLURM_ARRAY_TASK_COUNT is not set)")
            })?,
            "SLURM_ARRAY_TASK_COUNT",
        )?,
    };
    if count == 0 || index >= count {
        return Err(format!(
            "--shard {arg}: need 0 ≤ index < count, got {index}/{count}"
        ));
    }
    Ok((index, count))
}
