//! Tables over many runs (`fedsim report`): the runs' `summary.csv` rows, grouped by
//! configuration (a sweep's axis values, or the run folder), with mean ± std over seeds.
//!
//! A sweep folder holds `cells.csv` (one row per cell: `cell`, `seed`, one column per axis)
//! and one `cell=<id>/` folder per finished cell; a plain run folder holds `summary.csv`.

use super::runs::{Runs, Unreadable};
use super::summaries::{ReportMetric, RunRow, REPORT_METRICS};
use crate::io::{OutputFolder, OutputRules, Staging};
use crate::results::column;
use crate::results::{stage_csv, ReportError};
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One configuration × model × client group, over seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportRow {
    pub config: Vec<(String, String)>,
    pub model: String,
    pub unseen: bool,
    pub seeds: usize,
    /// How many of the seeds diverged; their figures are left out of `stats`.
    pub diverged: usize,
    /// How many of the seeds ended before their last round (their figures are in `stats`,
    /// from the last round they completed).
    pub ended_early: usize,
    /// `(mean, sample std)` per metric over the seeds that did not diverge, NaN values left
    /// out (std 0 with one value).
    pub stats: BTreeMap<String, (f64, f64)>,
    /// Per metric, how many of the seeds that did not diverge gave it a finite value, and how
    /// many gave it any (a run that never reaches the target gives `rounds_to_target` ∞).
    pub counts: BTreeMap<String, (usize, usize)>,
}

/// What a report adds to the summaries' figures, on request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReportOptions {
    /// The first evaluated round at which a run's weighted mean test accuracy (its most
    /// client-specific model, training clients) reaches this (`rounds_to_target`).
    pub target_accuracy: Option<f64>,
    /// Each run's wall-clock seconds (`wall_seconds`). They differ from machine to machine and
    /// rerun to rerun, so a report leaves them out unless asked and stays reproducible.
    pub wall_time: bool,
}

/// Every summary row of `runs` (sweep cells first, then plain runs, each in path order), with
/// what `options` asks for; and every run that could not be read (its summary, or its learning
/// curve where a target asks for it), with why: never left out silently.
pub fn report_rows(runs: &Runs, options: &ReportOptions) -> (Vec<RunRow>, Vec<Unreadable>) {
    let mut rows = Vec::new();
    let mut unreadable = Vec::new();
    for run in runs.dirs.iter().filter(|r| !runs.skipped.contains(&r.path)) {
        let with_options = |mut summary: Vec<RunRow>| -> Result<Vec<RunRow>, ReportError> {
            for row in &mut summary {
                if !options.wall_time {
                    row.metrics.insert("wall_seconds".into(), f64::NAN);
                }
                // ∞ for a run that never reaches it (see `markdown`).
                let rounds = match options.target_accuracy {
                    Some(target) if !row.unseen => {
                        let curve = read_curve(&run.path, &run.config, &row.model)?;
                        rounds_to(&curve, target).map_or(f64::INFINITY, f64::from)
                    }
                    _ => f64::NAN,
                };
                row.metrics.insert("rounds_to_target".into(), rounds);
            }
            Ok(summary)
        };
        match run.summary().and_then(with_options) {
            Ok(r) => rows.extend(r),
            Err(error) => unreadable.push(Unreadable {
                path: run.path.clone(),
                error,
            }),
        }
    }
    (rows, unreadable)
}

/// The first evaluated round of `curve` at which its accuracy reaches `target`.
pub fn rounds_to(curve: &RunCurve, target: f64) -> Option<u32> {
    curve
        .points
        .iter()
        .find(|p| p.accuracy >= target)
        .map(|p| p.round)
}

/// Whether `name` is a file `fedsim report` writes (its tables and charts).
fn is_report_file(name: &str) -> bool {
    name == "report.csv" || name == "report.md" || name.ends_with(".png") || name.ends_with(".svg")
}

/// Writes `report.csv`, `report.md` and the charts into `out` through a staging folder, and
/// publishes them replacing only the report files fedsim wrote there before (see
/// [`crate::io::folder`]); returns the files and what `force` moved aside.
pub fn publish_report(
    out: &Path,
    rows: &[ReportRow],
    curves: &[RunCurve],
    force: bool,
) -> Result<(Vec<PathBuf>, Vec<String>), ReportError> {
    let (mut folder, _) = OutputFolder::claim(out, &[], &OutputRules::default())?;
    let staging = folder.staging(".partial-")?;
    let mut files = write_report(&staging, rows)?;
    files.extend(write_plots(&staging, rows, curves)?);
    let names: Vec<&str> = files
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .collect();
    let notes = folder.make_way(&names, force)?;
    let old: Vec<String> = folder
        .owned()
        .into_iter()
        .filter(|n| is_report_file(n))
        .collect();
    let retire: Vec<&str> = old.iter().map(String::as_str).collect();
    Ok((folder.publish(&files, &retire)?, notes))
}

/// Groups rows by (configuration, model, client group), in order of first appearance.
pub fn aggregate(rows: &[RunRow]) -> Vec<ReportRow> {
    let mut out: Vec<ReportRow> = Vec::new();
    let mut values: Vec<BTreeMap<String, Vec<f64>>> = Vec::new();
    for r in rows {
        let i = match out
            .iter()
            .position(|g| g.config == r.config && g.model == r.model && g.unseen == r.unseen)
        {
            Some(i) => i,
            None => {
                out.push(ReportRow {
                    config: r.config.clone(),
                    model: r.model.clone(),
                    unseen: r.unseen,
                    seeds: 0,
                    diverged: 0,
                    ended_early: 0,
                    stats: BTreeMap::new(),
                    counts: BTreeMap::new(),
                });
                values.push(BTreeMap::new());
                out.len() - 1
            }
        };
        out[i].seeds += 1;
        out[i].ended_early += r.ended_early as usize;
        if r.diverged {
            out[i].diverged += 1;
            continue;
        }
        for (m, v) in &r.metrics {
            values[i]
                .entry(m.clone())
                .or_default()
                .extend(v.is_finite().then_some(*v));
            let given = out[i].counts.entry(m.clone()).or_default();
            given.0 += v.is_finite() as usize;
            given.1 += !v.is_nan() as usize;
        }
    }
    for (row, vals) in out.iter_mut().zip(values) {
        row.stats = vals.into_iter().map(|(m, v)| (m, mean_std(&v))).collect();
    }
    out
}

/// Mean and sample standard deviation (0 for one value; NaN for none).
pub fn mean_std(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, std)
}

/// The axis names of `rows`, in first-appearance order.
fn axis_names(rows: &[ReportRow]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        for (a, _) in &r.config {
            if !names.contains(a) {
                names.push(a.clone());
            }
        }
    }
    names
}

fn config_value(r: &ReportRow, axis: &str) -> String {
    r.config
        .iter()
        .find(|(a, _)| a == axis)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The report as a Markdown table (accuracies and novelty scores in %, mean ± std over seeds).
/// Metrics with no value in any row (time to target without a target, gossip figures of
/// client-server runs) are left out.
pub fn markdown(rows: &[ReportRow]) -> String {
    let axes = axis_names(rows);
    let mut head: Vec<String> = axes.clone();
    head.extend(["model".into(), "clients".into(), "seeds".into()]);
    let any_diverged = rows.iter().any(|r| r.diverged > 0);
    if any_diverged {
        head.push("diverged".into());
    }
    let any_ended_early = rows.iter().any(|r| r.ended_early > 0);
    if any_ended_early {
        head.push("ended early".into());
    }
    let metrics: Vec<ReportMetric> = REPORT_METRICS
        .into_iter()
        .filter(|m| {
            rows.iter()
                .any(|r| r.counts.get(m.column).is_some_and(|&(_, given)| given > 0))
        })
        .collect();
    head.extend(metrics.iter().map(|m| m.title.to_string()));
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        let mut cells: Vec<String> = axes.iter().map(|a| config_value(r, a)).collect();
        cells.push(r.model.clone());
        cells.push(if r.unseen { "unseen" } else { "training" }.into());
        cells.push(r.seeds.to_string());
        if any_diverged {
            cells.push(r.diverged.to_string());
        }
        if any_ended_early {
            cells.push(r.ended_early.to_string());
        }
        for &ReportMetric { column: m, .. } in &metrics {
            if r.diverged == r.seeds {
                cells.push("diverged".into());
                continue;
            }
            let (mean, std) = r.stats.get(m).copied().unwrap_or((f64::NAN, f64::NAN));
            if m == "rounds_to_target" {
                // Runs that never reach the target give no round: say how many did.
                let (reached, of) = r.counts.get(m).copied().unwrap_or((0, 0));
                cells.push(match reached {
                    _ if of == 0 => "–".into(),
                    0 => "not reached".into(),
                    _ if reached == of => format!("{mean:.0} ± {std:.0}"),
                    _ => format!("{mean:.0} ± {std:.0} ({reached} of {of})"),
                });
                continue;
            }
            let percent = (m.starts_with("test_acc") && m != "test_acc_jain")
                || m.starts_with("novelty")
                || m == "backdoor_success";
            let k = match m {
                _ if percent => 100.0,
                "bytes_up" => 1e-6,
                _ => 1.0,
            };
            cells.push(if mean.is_nan() {
                "–".into()
            } else if m == "test_acc_jain" || m == "spectral_gap_mean" {
                format!("{mean:.4} ± {std:.4}")
            } else if m == "consensus_distance_final" {
                format!("{mean:.3e} ± {std:.1e}")
            } else {
                format!("{:.2} ± {:.2}", k * mean, k * std)
            });
        }
        s += &format!("| {} |\n", cells.join(" | "));
    }
    s
}

/// The report as a frame: axis columns, `model`, `unseen`, `seeds`, and `<metric>_mean`,
/// `<metric>_std` per metric.
pub fn report_frame(rows: &[ReportRow]) -> PolarsResult<DataFrame> {
    let axes = axis_names(rows);
    let mut columns: Vec<Column> = axes
        .iter()
        .map(|a| column(a, rows, |r| config_value(r, a)))
        .collect();
    columns.push(column("model", rows, |r| r.model.clone()));
    columns.push(column("unseen", rows, |r| r.unseen));
    columns.push(column("seeds", rows, |r| r.seeds as u32));
    columns.push(column("diverged", rows, |r| r.diverged as u32));
    columns.push(column("ended_early", rows, |r| r.ended_early as u32));
    for ReportMetric { column: m, .. } in REPORT_METRICS {
        let get = |r: &ReportRow| r.stats.get(m).copied().unwrap_or((f64::NAN, f64::NAN));
        columns.push(column(&format!("{m}_mean"), rows, |r| get(r).0));
        columns.push(column(&format!("{m}_std"), rows, |r| get(r).1));
    }
    DataFrame::new_infer_height(columns)
}

/// Writes `report.csv` and `report.md` into a staging folder; returns their paths.
pub fn write_report(staging: &Staging, rows: &[ReportRow]) -> Result<Vec<PathBuf>, ReportError> {
    let mut df = report_frame(rows).map_err(|source| ReportError::Polars {
        path: staging.path("report.csv"),
        source,
    })?;
    let csv = stage_csv(staging, "report.csv", &mut df)?;
    let md = staging.write("report.md", markdown(rows).as_bytes())?;
    Ok(vec![csv, md])
}

/// A table of text columns as CSV text (a sweep's `cells.csv`, to be written as `path`).
pub fn text_table_csv(
    path: &Path,
    columns: &[(String, Vec<String>)],
) -> Result<Vec<u8>, ReportError> {
    let failed = |source| ReportError::Polars {
        path: path.to_path_buf(),
        source,
    };
    let mut df = DataFrame::new_infer_height(
        columns
            .iter()
            .map(|(n, v)| Column::new(n.as_str().into(), v.clone()))
            .collect(),
    )
    .map_err(failed)?;
    crate::results::csv_bytes(&mut df).map_err(failed)
}

/// One evaluation of a learning curve: test accuracy and loss weighted by test samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    pub round: u32,
    pub sim_seconds: f64,
    pub accuracy: f64,
    pub loss: f64,
}

/// One run's learning curve (weighted mean test accuracy per evaluated round, training
/// clients, its most client-specific model) and final per-client test accuracies.
#[derive(Clone, Debug, PartialEq)]
pub struct RunCurve {
    pub config: Vec<(String, String)>,
    pub model: String,
    pub points: Vec<CurvePoint>,
    pub client_accuracy: Vec<f64>,
}

/// Reads `dir/metrics.parquet` for the curve of `model` (training clients).
pub fn read_curve(
    dir: &Path,
    config: &[(String, String)],
    model: &str,
) -> Result<RunCurve, ReportError> {
    let path = dir.join("metrics.parquet");
    let err = |source| ReportError::ReadTable {
        path: path.clone(),
        source,
    };
    let df = crate::results::read_parquet(&path).map_err(err)?;
    let col = |name: &str| df.column(name).map_err(err);
    let u32s = |name: &str| col(name)?.u32().cloned().map_err(err);
    let f64s = |name: &str| col(name)?.f64().cloned().map_err(err);
    let strs = |name: &str| col(name)?.str().cloned().map_err(err);
    let (round, client, n) = (u32s("round")?, u32s("client")?, u32s("n_samples")?);
    let (time, acc, loss) = (f64s("sim_time_s")?, f64s("accuracy")?, f64s("loss")?);
    let (split, kind) = (strs("split")?, strs("model")?);
    let unseen = col("unseen")?.bool().cloned().map_err(err)?;
    // round → (Σ accuracy·n, Σ loss·n, Σ n, time)
    let mut by_round: BTreeMap<u32, (f64, f64, f64, f64)> = BTreeMap::new();
    let mut last: BTreeMap<u32, (u32, f64)> = BTreeMap::new();
    for i in 0..df.height() {
        if split.get(i) != Some("test")
            || kind.get(i) != Some(model)
            || unseen.get(i) != Some(false)
        {
            continue;
        }
        let (r, a, w) = (
            round.get(i).unwrap_or(0),
            acc.get(i).unwrap_or(f64::NAN),
            n.get(i).unwrap_or(0) as f64,
        );
        let e = by_round.entry(r).or_insert((0.0, 0.0, 0.0, 0.0));
        e.0 += a * w;
        e.1 += loss.get(i).unwrap_or(f64::NAN) * w;
        e.2 += w;
        e.3 = e.3.max(time.get(i).unwrap_or(0.0));
        let c = client.get(i).unwrap_or(0);
        if last.get(&c).is_none_or(|(lr, _)| r >= *lr) {
            last.insert(c, (r, a));
        }
    }
    Ok(RunCurve {
        config: config.to_vec(),
        model: model.to_string(),
        points: by_round
            .into_iter()
            .filter(|(_, e)| e.2 > 0.0)
            .map(|(round, (aw, lw, w, t))| CurvePoint {
                round,
                sim_seconds: t,
                accuracy: aw / w,
                loss: lw / w,
            })
            .collect(),
        client_accuracy: last.into_values().map(|(_, a)| a).collect(),
    })
}

/// The learning curves of `runs`, each of its most client-specific model.
pub fn read_curves(runs: &Runs) -> Result<Vec<RunCurve>, ReportError> {
    let mut out = Vec::new();
    for run in runs.dirs.iter().filter(|r| !runs.skipped.contains(&r.path)) {
        if !run.path.join("metrics.parquet").exists() {
            continue;
        }
        if let Some(headline) = run.summary()?.iter().rfind(|r| !r.unseen) {
            out.push(read_curve(&run.path, &run.config, &headline.model)?);
        }
    }
    Ok(out)
}

/// `values[i]` is determined by `keys[i]` (one value per key).
fn determined_by(keys: &[String], values: &[String]) -> bool {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    keys.iter()
        .zip(values)
        .all(|(k, v)| *seen.entry(k.as_str()).or_insert(v.as_str()) == v.as_str())
}

fn config_label(config: &[(String, String)], skip: &[String]) -> String {
    let parts: Vec<String> = config
        .iter()
        .filter(|(a, _)| !skip.contains(a))
        .map(|(a, v)| readable(a, v))
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(", ")
    }
}

/// Symbols that stand for an algorithm's settings in legends.
const SYMBOLS: [(&str, &str); 6] = [
    ("components", "M"),
    ("mu", "μ"),
    ("lambda", "λ"),
    ("alpha", "α"),
    ("beta", "β"),
    ("clusters", "K"),
];

/// An axis value as a legend shows it: an algorithm by its title and settings
/// (`{name: fedem, components: 3}` → `FedEM (M = 3)`), any other value as `field = value`
/// (the last part of the field's path).
fn readable(axis: &str, value: &str) -> String {
    let title = |name: &str| {
        crate::algorithms::Registration::find(name).map(|r| r.declared.title.to_string())
    };
    let parsed: Option<serde_yaml::Value> = serde_yaml::from_str(value).ok();
    if let Some(serde_yaml::Value::Mapping(m)) = &parsed {
        let name = m.get("name").and_then(|n| n.as_str());
        if let Some(t) = name.and_then(title) {
            let settings: Vec<String> = m
                .iter()
                .filter(|(k, _)| k.as_str() != Some("name"))
                .map(|(k, v)| {
                    let k = crate::settings::compact(k);
                    let symbol = SYMBOLS
                        .iter()
                        .find(|(f, _)| *f == k)
                        .map_or(k.as_str(), |s| s.1);
                    format!("{symbol} = {}", crate::settings::compact(v))
                })
                .collect();
            return match settings.is_empty() {
                true => t,
                false => format!("{t} ({})", settings.join(", ")),
            };
        }
    }
    if axis == "algorithm" || axis.ends_with("algorithm.name") || axis == "algorithm.name" {
        if let Some(t) = title(value) {
            return t;
        }
    }
    let field = axis.rsplit('.').next().unwrap_or(axis);
    match field {
        "run" | "name" => value.to_string(),
        _ => format!("{field} = {value}"),
    }
}

/// Draws the report's figures into `out`: accuracy against every numeric axis (one line per
/// value of the other axes, ±std over seeds; FedEM Fig. 1 left for a sampling-rate sweep),
/// convergence of test accuracy and loss against rounds and simulated time
/// (`convergence_{accuracy,loss}_{round,time}`), and the distribution (CDF) of per-client
/// accuracy, per configuration. Returns the files written.
pub fn write_plots(
    staging: &Staging,
    rows: &[ReportRow],
    curves: &[RunCurve],
) -> Result<Vec<PathBuf>, ReportError> {
    use super::{write_chart, Chart, Series};
    let mut files = Vec::new();
    let training: Vec<&ReportRow> = rows.iter().filter(|r| !r.unseen).collect();
    let axes = axis_names(rows);
    let values = |a: &str| {
        training
            .iter()
            .map(|r| config_value(r, a))
            .collect::<Vec<_>>()
    };
    // Axes that vary together with an earlier one (zip partners) get no chart of their own.
    let mut charted: Vec<String> = Vec::new();
    for a in &axes {
        let va = values(a);
        let numeric = va.iter().all(|v| v.parse::<f64>().is_ok());
        let distinct: std::collections::BTreeSet<&String> = va.iter().collect();
        if !numeric || distinct.len() < 2 || charted.iter().any(|c| determined_by(&values(c), &va))
        {
            continue;
        }
        charted.push(a.clone());
        let partners: Vec<String> = axes
            .iter()
            .filter(|b| *b == a || determined_by(&va, &values(b)))
            .cloned()
            .collect();
        let mut series: Vec<Series> = Vec::new();
        for r in &training {
            let label = format!("{} · {}", config_label(&r.config, &partners), r.model);
            let (m, s) = r
                .stats
                .get("test_acc_mean")
                .copied()
                .unwrap_or((f64::NAN, f64::NAN));
            let x: f64 = config_value(r, a).parse().unwrap_or(f64::NAN);
            match series.iter_mut().find(|s| s.label == label) {
                Some(found) => found.points.push((x, 100.0 * m, 100.0 * s)),
                None => series.push(Series {
                    label,
                    points: vec![(x, 100.0 * m, 100.0 * s)],
                }),
            }
        }
        for s in &mut series {
            s.points.sort_by(|p, q| p.0.total_cmp(&q.0));
        }
        let positive = va.iter().all(|v| v.parse::<f64>().is_ok_and(|x| x > 0.0));
        let stem = format!("accuracy_vs_{}", a.replace(['.', '/'], "_"));
        files.extend(write_chart(
            staging,
            &stem,
            &Chart {
                title: format!("test accuracy vs {a} (mean ± std over seeds)"),
                x_label: a.clone(),
                y_label: "weighted mean test accuracy (%)".into(),
                log_x: positive && distinct.len() > 2,
                x_ticks: Some(distinct.iter().filter_map(|v| v.parse().ok()).collect()),
                y_from_zero: false,
                series,
            },
        )?);
    }
    // Convergence: mean ± std over seeds at each evaluated round. An axis whose values an
    // earlier axis determines (a zip partner: the topology that goes with each algorithm)
    // tells no configurations apart, and is left out of the labels.
    let implied: Vec<String> = axes
        .iter()
        .enumerate()
        .filter(|(i, b)| {
            axes[..*i]
                .iter()
                .any(|a| determined_by(&values(a), &values(b)))
        })
        .map(|(_, b)| b.clone())
        .collect();
    let mut groups: Vec<(String, Vec<&RunCurve>)> = Vec::new();
    for c in curves {
        let label = format!("{} · {}", config_label(&c.config, &implied), c.model);
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, g)) => g.push(c),
            None => groups.push((label, vec![c])),
        }
    }
    if curves.is_empty() {
        return Ok(files);
    }
    let charts = [
        ("accuracy", "weighted mean test accuracy (%)", 100.0),
        ("loss", "weighted mean test loss", 1.0),
    ];
    for (metric, y_label, scale) in charts {
        for (x_name, by_time) in [("round", false), ("simulated time (s)", true)] {
            let series = groups
                .iter()
                .map(|(label, runs)| {
                    let mut at: BTreeMap<u32, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
                    for run in runs {
                        for p in &run.points {
                            let e = at.entry(p.round).or_default();
                            e.0.push(p.sim_seconds);
                            e.1.push(scale * if metric == "loss" { p.loss } else { p.accuracy });
                        }
                    }
                    let points = at
                        .into_iter()
                        .map(|(r, (t, v))| {
                            let (m, s) = mean_std(&v);
                            (if by_time { mean_std(&t).0 } else { r as f64 }, m, s)
                        })
                        .collect();
                    Series {
                        label: label.clone(),
                        points,
                    }
                })
                .collect();
            let x = if by_time { "time" } else { "round" };
            files.extend(write_chart(
                staging,
                &format!("convergence_{metric}_{x}"),
                &Chart {
                    title: format!("test {metric} vs {x_name} (mean ± std over seeds)"),
                    x_label: x_name.into(),
                    y_label: y_label.into(),
                    log_x: false,
                    x_ticks: None,
                    y_from_zero: false,
                    series,
                },
            )?);
        }
    }
    // Per-client accuracy: empirical CDF, seeds pooled.
    let series = groups
        .iter()
        .map(|(label, runs)| {
            let mut acc: Vec<f64> = runs
                .iter()
                .flat_map(|r| r.client_accuracy.iter().map(|a| 100.0 * a))
                .collect();
            acc.sort_by(f64::total_cmp);
            let n = acc.len() as f64;
            Series {
                label: label.clone(),
                points: acc
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| (a, (i + 1) as f64 / n, 0.0))
                    .collect(),
            }
        })
        .collect();
    files.extend(write_chart(
        staging,
        "client_accuracy_cdf",
        &Chart {
            title: "per-client test accuracy (CDF, seeds pooled)".into(),
            x_label: "test accuracy (%)".into(),
            y_label: "fraction of clients".into(),
            log_x: false,
            x_ticks: None,
            y_from_zero: false,
            series,
        },
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(config: &str, seed: &str, acc: f64, p10: f64) -> RunRow {
        RunRow {
            config: vec![("sampling.fraction".into(), config.into())],
            seed: seed.into(),
            model: "global".into(),
            unseen: false,
            diverged: false,
            ended_early: false,
            metrics: [
                ("test_acc_mean".to_string(), acc),
                ("test_acc_p10".to_string(), p10),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn groups_by_configuration_with_mean_and_sample_std() {
        let rows = [
            row("0.1", "1", 0.70, 0.5),
            row("0.5", "1", 0.80, f64::NAN),
            row("0.1", "2", 0.74, 0.7),
            row("0.1", "3", 0.72, 0.6),
        ];
        let report = aggregate(&rows);
        assert_eq!(report.len(), 2);
        assert_eq!(report[0].config[0].1, "0.1");
        assert_eq!(report[0].seeds, 3);
        let (m, s) = report[0].stats["test_acc_mean"];
        assert!(
            (m - 0.72).abs() < 1e-12 && (s - 0.02).abs() < 1e-12,
            "{m} {s}"
        );
        assert_eq!(report[1].stats["test_acc_mean"], (0.80, 0.0));
        // A missing value is left out, not averaged as NaN.
        assert!(report[1].stats["test_acc_p10"].0.is_nan());
        let md = markdown(&report);
        assert!(
            md.contains("| 0.1 | global | training | 3 | 72.00 ± 2.00 |"),
            "{md}"
        );
        // Novelty scores have a column only where some run has them, in %.
        assert!(!md.contains("novelty"), "{md}");
        let mut scored = rows.clone();
        scored[0].metrics.insert("novelty_auroc".into(), 0.9);
        scored[2].metrics.insert("novelty_auroc".into(), 0.92);
        let md = markdown(&aggregate(&scored));
        assert!(md.contains("| novelty AUROC |"), "{md}");
        assert!(md.contains("| 91.00 ± 1.41 |"), "{md}");
    }

    #[test]
    fn diverged_runs_are_counted_not_averaged() {
        let diverged = |config: &str, seed: &str| RunRow {
            diverged: true,
            ..row(config, seed, f64::NAN, 0.5)
        };
        let rows = [
            row("0.1", "1", 0.70, 0.5),
            diverged("0.1", "2"),
            diverged("1e9", "1"),
            diverged("1e9", "2"),
        ];
        let report = aggregate(&rows);
        assert_eq!((report[0].seeds, report[0].diverged), (2, 1));
        // The diverged seed's p10 (a number) is left out too.
        assert_eq!(report[0].stats["test_acc_p10"], (0.5, 0.0));
        assert_eq!((report[1].seeds, report[1].diverged), (2, 2));
        let md = markdown(&report);
        assert!(md.contains("| seeds | diverged |"), "{md}");
        assert!(
            md.contains("| 0.1 | global | training | 2 | 1 | 70.00 ± 0.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1e9 | global | training | 2 | 2 | diverged |"),
            "{md}"
        );
    }

    #[test]
    fn runs_that_ended_early_are_counted_and_averaged() {
        let ended = RunRow {
            ended_early: true,
            ..row("0.1", "2", 0.60, 0.4)
        };
        let rows = [
            row("0.1", "1", 0.70, 0.5),
            ended,
            row("0.5", "1", 0.80, 0.6),
        ];
        let report = aggregate(&rows);
        assert_eq!((report[0].seeds, report[0].ended_early), (2, 1));
        assert_eq!(report[1].ended_early, 0);
        // Their figures (of the last round they completed) are in the mean.
        assert!((report[0].stats["test_acc_mean"].0 - 0.65).abs() < 1e-12);
        let md = markdown(&report);
        assert!(md.contains("| seeds | ended early |"), "{md}");
        assert!(
            md.contains("| 0.1 | global | training | 2 | 1 | 65.00 ± 7.07 |"),
            "{md}"
        );
        assert!(
            md.contains("| 0.5 | global | training | 1 | 0 | 80.00"),
            "{md}"
        );
    }

    #[test]
    fn rounds_to_target_say_how_many_seeds_reached_it() {
        let point = |round: u32, accuracy: f64| CurvePoint {
            round,
            sim_seconds: 0.0,
            accuracy,
            loss: 0.0,
        };
        let curve = RunCurve {
            config: Vec::new(),
            model: "global".into(),
            points: vec![
                point(10, 0.5),
                point(20, 0.8),
                point(30, 0.79),
                point(40, 0.9),
            ],
            client_accuracy: Vec::new(),
        };
        assert_eq!(rounds_to(&curve, 0.8), Some(20));
        assert_eq!(rounds_to(&curve, 0.85), Some(40));
        assert_eq!(rounds_to(&curve, 0.95), None);
        // Seeds at rounds 20 and 40, and one that never reached it (∞): 30 ± 14 over two of
        // three; a configuration where none did; and a report that asked for no target.
        let rounds = |config: &str, seed: &str, r: f64| {
            let mut run = row(config, seed, 0.8, 0.5);
            run.metrics.insert("rounds_to_target".into(), r);
            run
        };
        let rows = [
            rounds("0.1", "1", 20.0),
            rounds("0.1", "2", 40.0),
            rounds("0.1", "3", f64::INFINITY),
            rounds("0.5", "1", f64::INFINITY),
        ];
        let md = markdown(&aggregate(&rows));
        assert!(md.contains("| rounds to target |"), "{md}");
        assert!(md.contains("| 30 ± 14 (2 of 3) |"), "{md}");
        assert!(md.contains("| not reached |"), "{md}");
        let unasked = [rounds("0.1", "1", f64::NAN)];
        let md = markdown(&aggregate(&unasked));
        assert!(!md.contains("rounds to target"), "{md}");
    }
}
