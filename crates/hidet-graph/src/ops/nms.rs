//! NonMaxSuppression (opset 10+): greedy per-(batch, class) box selection.
//!
//! `boxes [B, n, 4]` as corners `[y1, x1, y2, x2]` (either diagonal; `center_point_box = 0`) or
//! `[x_center, y_center, width, height]` (`1`); `scores [B, C, n]`. Optional scalar inputs:
//! `max_output_boxes_per_class` (default 0: select nothing), `iou_threshold` (default 0),
//! `score_threshold` (only boxes scoring strictly above it are candidates; absent: all).
//! Candidates are visited by descending score (ties: lower box index first); one is selected
//! unless its IoU with an already selected box of the same class exceeds `iou_threshold`,
//! until `max_output_boxes_per_class` are selected. Output `[k, 3]` int64 rows
//! `(batch, class, box)` by batch, class, then selection order. Boxes of zero area never
//! suppress.

use crate::dtype::DType;
use crate::operator::{arg, infer_arg, opt_arg, InferInput, OpError, Operator};
use crate::ops::common::{check_dtype, float};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct NonMaxSuppression {
    center_point_box: bool,
}

/// Registers NonMaxSuppression.
pub fn register(r: &mut Registry) {
    r.register("", "NonMaxSuppression", 10..=LATEST_OPSET, |c| {
        let center_point_box = match c.attrs.int_or("center_point_box", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attr(
                    "center_point_box",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        Ok(Box::new(NonMaxSuppression { center_point_box }))
    });
}

/// `[x_min, y_min, x_max, y_max]` of a box.
fn corners(b: &[f64], center: bool) -> [f64; 4] {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh]
    } else {
        [b[1].min(b[3]), b[0].min(b[2]), b[1].max(b[3]), b[0].max(b[2])]
    }
}

/// Intersection over union; 0 when either box or the intersection is empty.
fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let w = a[2].min(b[2]) - a[0].max(b[0]);
    let h = a[3].min(b[3]) - a[1].max(b[1]);
    if w <= 0.0 || h <= 0.0 {
        return 0.0;
    }
    let inter = w * h;
    let area = |c: [f64; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let union = area(a) + area(b) - inter;
    if area(a) <= 0.0 || area(b) <= 0.0 || union <= 0.0 {
        return 0.0;
    }
    inter / union
}

/// A candidate covering more grid cells than this is compared with every selected box.
const MAX_CELLS: i64 = 16;

/// The greedy selection: `candidates` (box indices in visiting order) each selected unless
/// its IoU with an already selected box exceeds `threshold`, until `max_out` are selected.
///
/// Only boxes that intersect can have a positive IoU, so each selected box is filed under the
/// cells of a grid it covers (cells about as wide as the candidates) and a candidate is
/// compared with the boxes filed under its own cells — and with the few selected boxes too
/// large to file. A batched NMS (classes offset so they never overlap, thousands selected)
/// is then linear rather than quadratic. The selection is exactly [`select_each`]'s; it runs
/// instead for a negative or NaN threshold (every box would suppress) and non-finite boxes.
fn select(boxes: &[[f64; 4]], candidates: &[usize], max_out: usize, threshold: f64) -> Vec<usize> {
    let finite = candidates
        .iter()
        .all(|&i| boxes[i].iter().all(|v| v.is_finite()));
    let solid = |b: [f64; 4]| b[2] > b[0] && b[3] > b[1];
    let sizes: Vec<f64> = candidates
        .iter()
        .map(|&i| boxes[i])
        .filter(|&b| solid(b))
        .map(|b| (b[2] - b[0]).max(b[3] - b[1]))
        .collect();
    let cell = sizes.iter().sum::<f64>() / sizes.len().max(1) as f64;
    if !finite || threshold.is_nan() || threshold < 0.0 || !(cell > 0.0 && cell.is_finite()) {
        return select_each(boxes, candidates, max_out, threshold);
    }
    // Monotonic, so boxes whose intervals overlap share a cell index on each axis.
    let index = |v: f64| (v / cell).floor() as i64;
    let mut grid: std::collections::HashMap<(i64, i64), Vec<usize>> = Default::default();
    let mut wide: Vec<usize> = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    for &i in candidates {
        if kept.len() >= max_out {
            break;
        }
        let b = boxes[i];
        let overlaps = |k: &usize| iou(b, boxes[*k]) > threshold;
        if !solid(b) {
            // An empty box has IoU 0 with everything: never suppressed, never suppresses.
            kept.push(i);
            continue;
        }
        let (c0, c1, r0, r1) = (index(b[0]), index(b[2]), index(b[1]), index(b[3]));
        let cells = (c1 - c0 + 1).saturating_mul(r1 - r0 + 1);
        let suppressed = wide.iter().any(overlaps)
            || if cells <= MAX_CELLS {
                (c0..=c1).any(|c| {
                    (r0..=r1).any(|r| grid.get(&(c, r)).is_some_and(|ks| ks.iter().any(overlaps)))
                })
            } else {
                kept.iter().any(overlaps)
            };
        if suppressed {
            continue;
        }
        kept.push(i);
        if cells <= MAX_CELLS {
            for c in c0..=c1 {
                for r in r0..=r1 {
                    grid.entry((c, r)).or_default().push(i);
                }
            }
        } else {
            wide.push(i);
        }
    }
    kept
}

/// [`select`] by comparing every candidate with every selected box.
fn select_each(
    boxes: &[[f64; 4]],
    candidates: &[usize],
    max_out: usize,
    threshold: f64,
) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for &i in candidates {
        if kept.len() >= max_out {
            break;
        }
        if kept.iter().all(|&k| iou(boxes[i], boxes[k]) <= threshold) {
            kept.push(i);
        }
    }
    kept
}

/// The single value of an optional scalar input, if it has one.
fn opt_scalar(t: Option<&Tensor>) -> Result<Option<f64>, OpError> {
    match t {
        None => Ok(None),
        Some(t) => match t.to_f64_vec().as_slice() {
            [] => Ok(None),
            [v] => Ok(Some(*v)),
            _ => Err(OpError::Shape(format!(
                "threshold inputs must be scalars, got shape {:?}",
                t.shape()
            ))),
        },
    }
}

impl Operator for NonMaxSuppression {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        check_dtype(0, infer_arg(inputs, 0)?.ty.dtype, float)?;
        check_dtype(1, infer_arg(inputs, 1)?.ty.dtype, float)?;
        Ok(vec![TensorType {
            dtype: DType::I64,
            shape: Some(vec![Dim::Unknown, Dim::Fixed(3)]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let boxes = arg(inputs, 0)?;
        let scores = arg(inputs, 1)?;
        let (&[nb, n, 4], &[sb, classes, sn]) = (boxes.shape(), scores.shape()) else {
            return Err(OpError::Shape(format!(
                "boxes must be [B, n, 4] and scores [B, C, n], got {:?} and {:?}",
                boxes.shape(),
                scores.shape()
            )));
        };
        if nb != sb || n != sn {
            return Err(OpError::Shape(format!(
                "boxes {:?} and scores {:?} disagree on batches or boxes",
                boxes.shape(),
                scores.shape()
            )));
        }
        let max_out = opt_scalar(opt_arg(inputs, 2))?.unwrap_or(0.0).max(0.0) as usize;
        let iou_threshold = opt_scalar(opt_arg(inputs, 3))?.unwrap_or(0.0);
        let score_threshold = opt_scalar(opt_arg(inputs, 4))?;
        let bv = boxes.to_f64_vec();
        let sv = scores.to_f64_vec();
        let mut out: Vec<i64> = Vec::new();
        for b in 0..nb {
            let bx: Vec<[f64; 4]> = (0..n)
                .map(|i| corners(&bv[(b * n + i) * 4..(b * n + i + 1) * 4], self.center_point_box))
                .collect();
            for c in 0..classes {
                let s = &sv[(b * classes + c) * n..(b * classes + c + 1) * n];
                let mut cand: Vec<usize> = (0..n)
                    .filter(|&i| score_threshold.is_none_or(|t| s[i] > t))
                    .collect();
                cand.sort_by(|&i, &j| s[j].total_cmp(&s[i]).then(i.cmp(&j)));
                for i in select(&bx, &cand, max_out, iou_threshold) {
                    out.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
        let rows = out.len() / 3;
        Ok(vec![Tensor::new(vec![rows, 3], out)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::attribute::Attribute;
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn suppresses_overlaps_in_score_order() {
        let op = build_op("", "NonMaxSuppression", 11, &[], 5, 1).unwrap();
        // Box 1 overlaps box 0 with IoU 0.81 / 1.19; box 2 is far away.
        let boxes = Tensor::new(
            vec![1, 3, 4],
            vec![0f32, 0., 1., 1., 0., 0.1, 1., 1.1, 5., 5., 6., 6.],
        )
        .unwrap();
        let scores = Tensor::new(vec![1, 1, 3], vec![0.8f32, 0.9, 0.3]).unwrap();
        let max = Tensor::new(vec![1], vec![3i64]).unwrap();
        let iou = Tensor::new(vec![1], vec![0.5f32]).unwrap();
        let y = op
            .eval(&[Some(&boxes), Some(&scores), Some(&max), Some(&iou)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 0, 1, 0, 0, 2]);
        // Score threshold 0.5 drops box 2; max 1 keeps only the best.
        let st = Tensor::new(vec![1], vec![0.5f32]).unwrap();
        let y = op
            .eval(&[Some(&boxes), Some(&scores), Some(&max), Some(&iou), Some(&st)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 0, 1]);
        let one = Tensor::new(vec![1], vec![1i64]).unwrap();
        let y = op
            .eval(&[Some(&boxes), Some(&scores), Some(&one), Some(&iou)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 0, 1]);
        // Center format: the same boxes as centers and sizes.
        let op = build_op(
            "",
            "NonMaxSuppression",
            11,
            &[("center_point_box", Attribute::Int(1))],
            5,
            1,
        )
        .unwrap();
        let centers = Tensor::new(
            vec![1, 3, 4],
            vec![0.5f32, 0.5, 1., 1., 0.6, 0.5, 1., 1., 5.5, 5.5, 1., 1.],
        )
        .unwrap();
        let y = op
            .eval(&[Some(&centers), Some(&scores), Some(&max), Some(&iou)])
            .unwrap()
            .remove(0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 0, 1, 0, 0, 2]);
        // Scores for 2 boxes while there are 3.
        let bad = Tensor::new(vec![1, 1, 2], vec![0.1f32; 2]).unwrap();
        assert!(op.eval(&[Some(&boxes), Some(&bad)]).is_err());
    }

    /// The grid selection equals the exhaustive one: clustered boxes (heavy overlap), classes
    /// offset apart as a batched NMS does, huge and empty boxes, several thresholds.
    #[test]
    fn grid_selection_equals_the_exhaustive_one() {
        use super::{select, select_each};
        let mut state = 7u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut boxes: Vec<[f64; 4]> = Vec::new();
        for class in 0..7 {
            let offset = class as f64 * 1000.0;
            for _ in 0..300 {
                let (cx, cy) = (offset + 100.0 * next(), offset + 100.0 * next());
                let (w, h) = (1.0 + 40.0 * next(), 1.0 + 40.0 * next());
                boxes.push([cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]);
            }
        }
        boxes.push([0.0, 0.0, 7000.0, 7000.0]);
        boxes.push([5.0, 5.0, 5.0, 9.0]);
        boxes.push([50.0, 50.0, 40.0, 60.0]);
        let mut order: Vec<usize> = (0..boxes.len()).collect();
        let scores: Vec<f64> = (0..boxes.len()).map(|_| next()).collect();
        order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
        for threshold in [0.0, 0.3, 0.55, 0.9, -0.1, f64::NAN] {
            for max_out in [5, 400, usize::MAX] {
                assert_eq!(
                    select(&boxes, &order, max_out, threshold),
                    select_each(&boxes, &order, max_out, threshold),
                    "threshold {threshold}, max {max_out}"
                );
            }
        }
    }
}
