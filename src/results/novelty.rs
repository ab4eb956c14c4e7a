//! Novel-sample detection figures: AUROC, average precision and the best F1 of typicality
//! scores against which rows are in distribution, and the `novelty.parquet` table.
//!
//! As in the FedGMM authors' `ood.py`, the in-distribution rows are the positive class and a
//! higher score means "more typical", so a perfect detector has AUROC = AP = max-F1 = 1. Tied
//! scores are one threshold: AUROC counts a tie between a positive and a negative as ½, AP and
//! F1 move past all tied rows at once (scikit-learn's definitions).

use super::frames::{client_columns, column};
use super::RunMeta;
use crate::records::{NoveltyRecord, Record};
use polars::prelude::*;

/// The detection figures of one run's last evaluation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoveltyFigures {
    pub auroc: f64,
    pub average_precision: f64,
    pub max_f1: f64,
}

impl NoveltyFigures {
    /// Figures of `(score, positive)` pairs; `None` unless both classes occur and every score
    /// is a number.
    pub fn of(rows: &[(f64, bool)]) -> Option<NoveltyFigures> {
        let positives = rows.iter().filter(|r| r.1).count();
        let negatives = rows.len() - positives;
        if positives == 0 || negatives == 0 || rows.iter().any(|r| r.0.is_nan()) {
            return None;
        }
        let mut sorted = rows.to_vec();
        sorted.sort_by(|a, b| b.0.total_cmp(&a.0)); // highest score first
        let (p, n) = (positives as f64, negatives as f64);
        let (mut tp, mut fp) = (0.0, 0.0);
        let (mut auc, mut ap, mut best_f1) = (0.0, 0.0, 0.0f64);
        let mut i = 0;
        while i < sorted.len() {
            // One threshold per distinct score: take every tied row at once.
            let (mut dtp, mut dfp) = (0.0, 0.0);
            let score = sorted[i].0;
            while i < sorted.len() && sorted[i].0 == score {
                if sorted[i].1 {
                    dtp += 1.0;
                } else {
                    dfp += 1.0;
                }
                i += 1;
            }
            // Trapezoid on the ROC curve: a tied block counts its cross pairs as ½.
            auc += dfp * (tp + dtp / 2.0);
            tp += dtp;
            fp += dfp;
            ap += (dtp / p) * (tp / (tp + fp));
            best_f1 = best_f1.max(2.0 * tp / (tp + fp + p));
        }
        Some(NoveltyFigures {
            auroc: auc / (p * n),
            average_precision: ap,
            max_f1: best_f1,
        })
    }

    /// Figures of one round's novelty records (`rows`) of the clients with `unseen`.
    pub fn of_round(rows: &[NoveltyRecord], unseen: bool) -> Option<NoveltyFigures> {
        let pairs: Vec<(f64, bool)> = rows
            .iter()
            .filter(|r| r.unseen == unseen)
            .flat_map(|r| {
                let typical = r.scores.typical.iter().map(|&s| (s, true));
                typical.chain(r.scores.novel.iter().map(|&s| (s, false)))
            })
            .collect();
        NoveltyFigures::of(&pairs)
    }
}

/// One row per scored row of every evaluation: round, client, the row's index among the
/// client's scored rows (test rows first, then novel ones), its score and whether it is novel.
pub fn novelty_frame(meta: &RunMeta, records: &[Record]) -> PolarsResult<DataFrame> {
    let rows: Vec<(&NoveltyRecord, u32, f64, bool)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Novelty(n) => Some(n),
            _ => None,
        })
        .flat_map(|r| {
            let typical = r.scores.typical.iter().map(|&s| (s, false));
            let novel = r.scores.novel.iter().map(|&s| (s, true));
            typical
                .chain(novel)
                .enumerate()
                .map(move |(i, (s, is_novel))| (r, i as u32, s, is_novel))
        })
        .collect();
    let keys: Vec<_> = rows
        .iter()
        .map(|r| (r.0.round, r.0.client, r.0.unseen))
        .collect();
    let mut columns = client_columns(meta, &keys);
    columns.extend([
        column("sample", &rows, |r| r.1),
        column("score", &rows, |r| r.2),
        column("is_novel", &rows, |r| r.3),
    ]);
    DataFrame::new_infer_height(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn perfect_and_reversed_detectors() {
        let perfect = NoveltyFigures::of(&[(3.0, true), (2.0, true), (1.0, false)]).unwrap();
        assert_eq!(
            (perfect.auroc, perfect.average_precision, perfect.max_f1),
            (1.0, 1.0, 1.0)
        );
        let reversed = NoveltyFigures::of(&[(1.0, true), (2.0, true), (3.0, false)]).unwrap();
        assert_eq!(reversed.auroc, 0.0);
        // Thresholds 3 (no positive), 2 (R ½, P ½), 1 (R 1, P 2/3): ½·½ + ½·2/3 = 7/12.
        assert!(close(reversed.average_precision, 7.0 / 12.0));
        assert!(close(reversed.max_f1, 0.8));
    }

    #[test]
    fn by_hand_with_ties() {
        // Scores (positive?): 0.9 P, 0.8 N, 0.8 P, 0.3 N.
        // AUROC: pairs (P, N): (0.9, 0.8) 1, (0.9, 0.3) 1, (0.8, 0.8) ½, (0.8, 0.3) 1 → 3.5 / 4.
        // AP: thresholds 0.9 (R ½, P 1), 0.8 (R 1, P 2/3), 0.3 (no new positive):
        // ½·1 + ½·2/3 = 5/6. F1: at 0.9 2·1/(1 + 0 + 2) = 2/3; at 0.8 2·2/(2 + 1 + 2) = 0.8.
        let f =
            NoveltyFigures::of(&[(0.8, false), (0.9, true), (0.3, false), (0.8, true)]).unwrap();
        assert!(close(f.auroc, 0.875), "{f:?}");
        assert!(close(f.average_precision, 5.0 / 6.0), "{f:?}");
        assert!(close(f.max_f1, 0.8), "{f:?}");
        // All tied: chance.
        let tied = NoveltyFigures::of(&[(1.0, true), (1.0, false)]).unwrap();
        assert!(close(tied.auroc, 0.5) && close(tied.average_precision, 0.5));
    }

    #[test]
    fn one_class_or_nan_gives_nothing() {
        assert!(NoveltyFigures::of(&[(1.0, true)]).is_none());
        assert!(NoveltyFigures::of(&[(f64::NAN, true), (0.0, false)]).is_none());
    }
}
