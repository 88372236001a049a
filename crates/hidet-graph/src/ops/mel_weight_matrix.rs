//! MelWeightMatrix (opset 17): triangular mel filter banks, `[dft_length / 2 + 1,
//! num_mel_bins]`.
//!
//! The spec fixes the mel scale (`mel(f) = 2595·log10(1 + f/700)`) and the peak value 1 but not
//! the band edges; they are placed as the ONNX reference implementation (which produced the
//! node tests) places them: `num_mel_bins + 2` points `mel_low + i·step` with
//! `step = (mel(upper) - mel(lower)) / (num_mel_bins + 2)`, each converted back to hertz and
//! to the spectrogram bin `floor((dft_length + 1)·f / sample_rate)`. Band `i` rises linearly
//! from 0 at edge `i` to 1 at edge `i + 1` and falls to 0 at edge `i + 2` (a band whose
//! rising part is empty is 1 at its center bin).

use crate::dtype::DType;
use crate::kernels::movement::scalar_i64;
use crate::kernels::quant::scalar_f64;
use crate::operator::{arg, infer_arg, InferInput, OpError, Operator};
use crate::ops::signal_windows::output_datatype;
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;

#[derive(Debug)]
struct MelWeightMatrix {
    dtype: DType,
}

/// Registers MelWeightMatrix.
pub fn register(r: &mut Registry) {
    r.register("", "MelWeightMatrix", 17..=LATEST_OPSET, |c| {
        Ok(Box::new(MelWeightMatrix {
            dtype: output_datatype(c, 1)?,
        }))
    });
}

fn count(t: &Tensor, what: &str) -> Result<usize, OpError> {
    let v = scalar_i64(t, what, false)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| OpError::Invalid(format!("{what} must be positive, got {v}")))
}

fn mel(f: f64) -> f64 {
    2595.0 * (1.0 + f / 700.0).log10()
}

fn hertz(m: f64) -> f64 {
    700.0 * (10f64.powf(m / 2595.0) - 1.0)
}

impl Operator for MelWeightMatrix {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let dim = |i: usize, f: fn(usize) -> usize, what: &str| -> Result<Dim, OpError> {
            Ok(match infer_arg(inputs, i)?.value {
                Some(v) => Dim::Fixed(f(count(v, what)?)),
                None => Dim::Unknown,
            })
        };
        let bins = dim(1, |d| d / 2 + 1, "dft_length")?;
        let mels = dim(0, |n| n, "num_mel_bins")?;
        for i in 2..5 {
            infer_arg(inputs, i)?;
        }
        Ok(vec![TensorType {
            dtype: self.dtype,
            shape: Some(vec![bins, mels]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let mels = count(arg(inputs, 0)?, "num_mel_bins")?;
        let dft = count(arg(inputs, 1)?, "dft_length")?;
        let rate = count(arg(inputs, 2)?, "sample_rate")? as f64;
        let lower = scalar_f64(arg(inputs, 3)?, "lower_edge_hertz")?;
        let upper = scalar_f64(arg(inputs, 4)?, "upper_edge_hertz")?;
        if !(0.0..=upper).contains(&lower) {
            return Err(OpError::Invalid(format!(
                "need 0 <= lower_edge_hertz ({lower}) <= upper_edge_hertz ({upper})"
            )));
        }
        let bins = dft / 2 + 1;
        let (lo, hi) = (mel(lower), mel(upper));
        let step = (hi - lo) / (mels + 2) as f64;
        let edges: Vec<usize> = (0..mels + 2)
            .map(|i| {
                let f = hertz(i as f64 * step + lo);
                ((dft + 1) as f64 * f / rate).floor().max(0.0) as usize
            })
            .collect();
        let mut w = vec![0.0f64; bins * mels];
        let mut set = |bin: usize, band: usize, v: f64| -> Result<(), OpError> {
            let slot = w.get_mut(bin * mels + band).ok_or_else(|| {
                OpError::Invalid(format!("band {band} reaches bin {bin} of {bins}"))
            })?;
            *slot = v;
            Ok(())
        };
        for band in 0..mels {
            let (l, c, r) = (edges[band], edges[band + 1], edges[band + 2]);
            if c == l {
                set(c, band, 1.0)?;
            } else {
                for j in l..=c {
                    set(j, band, (j - l) as f64 / (c - l) as f64)?;
                }
            }
            for j in c..r {
                set(j, band, (r - j) as f64 / (r - c) as f64)?;
            }
        }
        let t = Tensor::new(vec![bins, mels], w)?;
        Ok(vec![t.cast(self.dtype)])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::common::build_op;
    use crate::tensor::Tensor;

    #[test]
    fn triangles_peak_at_one() {
        let op = build_op("", "MelWeightMatrix", 17, &[], 5, 1).unwrap();
        let ins = [
            Tensor::scalar(8i64),
            Tensor::scalar(64i64),
            Tensor::scalar(8000i64),
            Tensor::scalar(0.0f32),
            Tensor::scalar(4000.0f32),
        ];
        let args: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
        let w = op.eval(&args).unwrap().remove(0);
        assert_eq!(w.shape(), &[33, 8]);
        let v = w.to_f64_vec();
        for band in 0..8 {
            let col: Vec<f64> = (0..33).map(|b| v[b * 8 + band]).collect();
            let peak = col.iter().cloned().fold(0.0, f64::max);
            assert_eq!(peak, 1.0, "band {band}: {col:?}");
            assert!(col.iter().all(|&x| (0.0..=1.0).contains(&x)));
        }
        let mut bad = ins.clone();
        bad[3] = Tensor::scalar(5000.0f32);
        let args: Vec<Option<&Tensor>> = bad.iter().map(Some).collect();
        assert!(op.eval(&args).is_err());
    }
}
