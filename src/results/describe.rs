//! A data set at a glance, before anything trains: rows and per-client sizes of each split,
//! label shares, and, where the generator's truth is known, the Bayes-optimal accuracy (the
//! ceiling of any method on that data, with the same fairness figures as a run's summary).

use super::Fairness;
use crate::data::FederatedData;
use crate::records::Split;
use std::fmt;

/// Sizes of one split over the clients.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitStats {
    pub split: Split,
    pub rows: usize,
    pub min: usize,
    pub median: usize,
    pub max: usize,
    /// Share of the rows of each class, `classes` entries.
    pub label_shares: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DataDescription {
    pub clients: usize,
    pub dim: usize,
    /// What a row is: flat features, an image, tokens.
    pub layout: crate::data::Layout,
    pub classes: usize,
    /// Splits that hold at least one row.
    pub splits: Vec<SplitStats>,
    /// The Bayes-optimal classifier's accuracy on every client's test rows (true components
    /// and mixture weights); `None` unless the data's truth is known and its labels follow it.
    pub bayes_test: Option<Fairness>,
    /// Novel-sample detection by the true densities, log p(x) then log p(x, y), pooled over
    /// the clients' test and novel rows: the ceiling of a density score. `None` without novel
    /// rows or known input laws.
    pub oracle_novelty: Option<(super::NoveltyFigures, super::NoveltyFigures)>,
    /// The rows are made when a job needs them (`data.on_demand`); synthetic data then keeps
    /// no truth, so there are no Bayes-optimal or oracle figures.
    pub made_on_demand: bool,
}

impl DataDescription {
    pub fn of(data: &FederatedData) -> DataDescription {
        let mut label_counts = vec![vec![0usize; data.classes]; Split::ALL.len()];
        each_client(data, |rows, at| {
            for (split, counts) in Split::ALL.into_iter().zip(&mut label_counts) {
                for &y in rows.view(at, split).labels {
                    if let Some(n) = usize::try_from(y).ok().and_then(|y| counts.get_mut(y)) {
                        *n += 1;
                    }
                }
            }
        });
        let splits = Split::ALL
            .into_iter()
            .zip(label_counts)
            .map(|(split, counts)| {
                let mut sizes: Vec<usize> = (0..data.num_clients())
                    .map(|c| data.split_len(c, split))
                    .collect();
                sizes.sort_unstable();
                let rows: usize = sizes.iter().sum();
                SplitStats {
                    split,
                    rows,
                    min: sizes.first().copied().unwrap_or(0),
                    median: sizes.get(sizes.len() / 2).copied().unwrap_or(0),
                    max: sizes.last().copied().unwrap_or(0),
                    label_shares: counts
                        .iter()
                        .map(|&n| n as f64 / rows.max(1) as f64)
                        .collect(),
                }
            })
            .filter(|s| s.rows > 0)
            .collect();
        let bayes_test = data.truth.as_ref().and_then(|truth| {
            let per_client = (0..data.num_clients())
                .filter(|&c| data.split_len(c, Split::Test) > 0)
                .map(|c| {
                    let view = data.view(c, Split::Test);
                    Some((truth.bayes_accuracy(c, view)?, view.len() as f64))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(Fairness::of(&per_client))
        });
        DataDescription {
            clients: data.num_clients(),
            dim: data.dim,
            layout: data.layout,
            classes: data.classes,
            splits,
            bayes_test,
            oracle_novelty: oracle_novelty(data),
            made_on_demand: !data.is_resident(),
        }
    }
}

/// Each client's share of each label over all its rows (`[client][label]`), for the
/// `clients × labels` heat map.
pub fn client_label_shares(data: &FederatedData) -> Vec<Vec<f64>> {
    let mut shares = Vec::with_capacity(data.num_clients());
    each_client(data, |rows, at| {
        let mut counts = vec![0f64; data.classes];
        let mut n = 0.0;
        for split in Split::ALL {
            for &y in rows.view(at, split).labels {
                if let Some(k) = usize::try_from(y).ok().and_then(|y| counts.get_mut(y)) {
                    *k += 1.0;
                    n += 1.0;
                }
            }
        }
        shares.push(counts.iter().map(|k| k / f64::max(n, 1.0)).collect());
    });
    shares
}

/// Calls `f(rows, index of the client in rows)` for every client in order; rows made on demand
/// are made a few thousand clients at a time.
fn each_client(data: &FederatedData, mut f: impl FnMut(&FederatedData, usize)) {
    let clients: Vec<u32> = (0..data.num_clients() as u32).collect();
    for chunk in clients.chunks(4096) {
        let rows = data.rows_for(chunk);
        for k in 0..chunk.len() {
            f(rows.data(), rows.index(k));
        }
    }
}

/// Detection figures of the true log p(x) and log p(x, y) on every client's test rows
/// (typical) against its novel rows.
fn oracle_novelty(data: &FederatedData) -> Option<(super::NoveltyFigures, super::NoveltyFigures)> {
    let truth = data.truth.as_ref()?;
    if data.novel.is_empty() {
        return None;
    }
    let figures = |with_label: bool| {
        let mut rows = Vec::new();
        for c in 0..data.num_clients() {
            for (view, typical) in [
                (data.view(c, Split::Test), true),
                (data.novel_view(c), false),
            ] {
                for i in 0..view.len() {
                    let x = &view.features[i * view.dim..(i + 1) * view.dim];
                    let y = with_label.then_some(view.labels[i]);
                    rows.push((truth.log_density(c, x, y)?, typical));
                }
            }
        }
        super::NoveltyFigures::of(&rows)
    };
    Some((figures(false)?, figures(true)?))
}

impl fmt::Display for DataDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let image = match self.layout {
            crate::data::Layout::Image([c, h, w]) => format!(" (images {c}×{h}×{w})"),
            crate::data::Layout::Tokens { vocab } => format!(" (token ids, vocabulary {vocab})"),
            crate::data::Layout::Flat => String::new(),
        };
        writeln!(
            f,
            "{} clients, {} features{image}, {} classes",
            self.clients, self.dim, self.classes
        )?;
        writeln!(
            f,
            "  split   rows       per client (min / median / max)   label shares"
        )?;
        for s in &self.splits {
            let shares: Vec<String> = s.label_shares.iter().map(|v| format!("{:.3}", v)).collect();
            writeln!(
                f,
                "  {:<7} {:<10} {:<33} {}",
                s.split.as_str(),
                s.rows,
                format!("{} / {} / {}", s.min, s.median, s.max),
                shares.join(" ")
            )?;
        }
        if self.made_on_demand {
            writeln!(
                f,
                "  rows made on demand (data.on_demand): only their sizes are held, and no true \
                 mixture, so no Bayes-optimal or oracle figures"
            )?;
        }
        if let Some(b) = &self.bayes_test {
            let pct = |v: f64| format!("{:.2} %", 100.0 * v);
            writeln!(
                f,
                "  Bayes-optimal test accuracy (true components and mixture weights): weighted \
                 mean {}, bottom decile {}, 10th percentile {}, worst-10% mean {}",
                pct(b.weighted_mean),
                pct(b.bottom_decile),
                pct(b.p10),
                pct(b.worst10_mean)
            )?;
        }
        if let Some((input, joint)) = &self.oracle_novelty {
            writeln!(
                f,
                "  Novel-sample detection by the true densities (the ceiling of a density score): \
                 log p(x) AUROC {:.2} %, AP {:.2} %, max-F1 {:.2} %; log p(x, y) AUROC {:.2} %, \
                 AP {:.2} %, max-F1 {:.2} %",
                100.0 * input.auroc,
                100.0 * input.average_precision,
                100.0 * input.max_f1,
                100.0 * joint.auroc,
                100.0 * joint.average_precision,
                100.0 * joint.max_f1
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{ClientShard, LabelLaw, LabelRule, MixtureTruth};

    /// Two clients on one feature, θ = 1: client 0 draws from θ only, client 1 half from θ and
    /// half from −θ, so its Bayes classifier is a coin it breaks towards 0.
    fn tiny(noise: f64) -> FederatedData {
        FederatedData {
            layout: crate::data::Layout::Flat,
            dim: 1,
            classes: 2,
            // client 0: train 2 rows, test 2 rows; client 1: test 2 rows.
            features: vec![0.5, -0.5, 0.3, -0.2, 0.4, -0.4],
            labels: vec![1, 0, 1, 1, 1, 0],
            clients: vec![
                ClientShard {
                    train: 0..2,
                    val: 2..2,
                    test: 2..4,
                },
                ClientShard {
                    train: 4..4,
                    val: 4..4,
                    test: 4..6,
                },
            ],
            truth: Some(MixtureTruth {
                components: vec![vec![1.0], vec![-1.0]],
                weights: vec![vec![1.0, 0.0], vec![0.5, 0.5]],
                labels: Some(LabelLaw {
                    rule: LabelRule::RoundedSigmoid,
                    noise,
                }),
                inputs: None,
            }),
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        }
    }

    #[test]
    fn describes_sizes_labels_and_the_bayes_ceiling() {
        let d = DataDescription::of(&tiny(0.0));
        assert_eq!((d.clients, d.dim, d.classes), (2, 1, 2));
        // No validation rows: that split is left out.
        assert_eq!(d.splits.len(), 2);
        assert_eq!(
            d.splits[1],
            SplitStats {
                split: Split::Test,
                rows: 4,
                min: 2,
                median: 2,
                max: 2,
                label_shares: vec![0.25, 0.75],
            }
        );
        // Client 0: x = 0.3 → 1 (right), x = −0.2 → 0 (label 1: wrong). Client 1:
        // P(y = 1) = 1/2 everywhere, predicts 0: right once. Both 1/2.
        let b = d.bayes_test.unwrap();
        assert_eq!((b.weighted_mean, b.p10), (0.5, 0.5));
        let text = d.to_string();
        assert!(text.contains("Bayes-optimal"), "{text}");
    }

    #[test]
    fn label_noise_is_integrated_out() {
        let law = |rule, noise| LabelLaw { rule, noise };
        let rounded = law(LabelRule::RoundedSigmoid, 0.1);
        // Φ(1) for a mean logit one noise scale above 0.
        assert!((rounded.positive_probability(0.1) - 0.841_344_746).abs() < 1e-8);
        assert_eq!(rounded.positive_probability(0.0), 0.5);
        // E[sigmoid(v)] of a symmetric v around 0 is 1/2; without noise it is sigmoid itself.
        let bernoulli = law(LabelRule::Bernoulli, 1.0);
        assert!((bernoulli.positive_probability(0.0) - 0.5).abs() < 1e-12);
        // Noise pulls it towards 1/2: E[sigmoid(1 + u)] = 0.696 734 67 (numerical integration
        // on 200 000 points), below sigmoid(1) = 0.731.
        let p = bernoulli.positive_probability(1.0);
        assert!((p - 0.696_734_670).abs() < 1e-8, "{p}");
        assert_eq!(
            law(LabelRule::Bernoulli, 0.0).positive_probability(2.0),
            1.0 / (1.0 + (-2.0f64).exp())
        );
    }

    #[test]
    fn no_ceiling_when_labels_do_not_follow_the_model() {
        let mut data = tiny(0.1);
        data.truth.as_mut().unwrap().labels = None;
        assert_eq!(DataDescription::of(&data).bayes_test, None);
    }
}
