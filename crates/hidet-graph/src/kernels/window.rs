//! Sliding-window geometry shared by convolution and pooling: `auto_pad`, output sizes and
//! the map from (window position, output position) to input offsets.

use crate::attribute::{Attribute, Attributes};
use crate::operator::OpError;
use crate::shape::Dim;
use crate::tensor::checked_numel;

/// The ONNX `auto_pad` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Output size `ceil(in / stride)`, odd padding at the end.
    SameUpper,
    /// Output size `ceil(in / stride)`, odd padding at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    /// Parses the attribute value (`NOTSET`, `SAME_UPPER`, `SAME_LOWER`, `VALID`).
    pub fn parse(s: &str) -> Result<AutoPad, OpError> {
        match s {
            "NOTSET" | "" => Ok(AutoPad::NotSet),
            "SAME_UPPER" => Ok(AutoPad::SameUpper),
            "SAME_LOWER" => Ok(AutoPad::SameLower),
            "VALID" => Ok(AutoPad::Valid),
            other => Err(OpError::attr(
                "auto_pad",
                format!("unknown value `{other}`"),
            )),
        }
    }
}

/// Window attributes of a convolution or pooling node, one entry per spatial dimension.
///
/// Invariant (checked by [`WindowAttrs::new`]): `kernel`, `strides`, `dilations` have the
/// same length `n`, `pads` has length `2n` (begins then ends), strides and dilations are
/// `>= 1`, kernel sizes `>= 1`, pads `>= 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowAttrs {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads: Vec<usize>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

/// Window attributes as written on a node, before the kernel shape is known (Conv may take
/// it from the weights).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    pub kernel: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
    pub dilations: Option<Vec<i64>>,
    pub pads: Option<Vec<i64>>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

impl WindowSpec {
    /// Reads `kernel_shape`, `strides`, `dilations`, `pads`, `auto_pad` and `ceil_mode`.
    pub fn from_attrs(a: &Attributes) -> Result<WindowSpec, OpError> {
        let ceil = a.int_or("ceil_mode", 0)?;
        if ceil != 0 && ceil != 1 {
            return Err(OpError::attr(
                "ceil_mode",
                format!("must be 0 or 1, got {ceil}"),
            ));
        }
        Ok(WindowSpec {
            kernel: a.ints("kernel_shape")?.cloned(),
            strides: a.ints("strides")?.cloned(),
            dilations: a.ints("dilations")?.cloned(),
            pads: a.ints("pads")?.cloned(),
            auto_pad: AutoPad::parse(&a.string_or("auto_pad", "NOTSET")?)?,
            ceil_mode: ceil == 1,
        })
    }

    /// The validated window of one of hidet's internal operators (`op`), which take a
    /// required `kernel_shape` and explicit pads only (no `auto_pad`, no `ceil_mode`), as
    /// [`Geometry::explicit_attrs`] writes them.
    pub fn explicit(a: &Attributes, op: &str) -> Result<WindowAttrs, OpError> {
        let spec = WindowSpec::from_attrs(a)?;
        let kernel = spec
            .kernel
            .clone()
            .ok_or_else(|| OpError::attr("kernel_shape", "required attribute is missing"))?;
        if spec.auto_pad != AutoPad::NotSet || spec.ceil_mode {
            return Err(OpError::attr(
                "auto_pad",
                format!("{op} takes explicit pads only (no auto_pad, no ceil_mode)"),
            ));
        }
        let fallback: Vec<usize> = kernel.iter().map(|&k| k.max(0) as usize).collect();
        spec.attrs(&fallback)
    }

    /// Validated attributes; the kernel is `kernel_shape` if given, else `fallback`
    /// (the weights' spatial shape), and must have `fallback.len()` dimensions.
    pub fn attrs(&self, fallback: &[usize]) -> Result<WindowAttrs, OpError> {
        let kernel: Vec<i64> = match &self.kernel {
            Some(k) => k.clone(),
            None => fallback.iter().map(|&d| d as i64).collect(),
        };
        if kernel.len() != fallback.len() {
            return Err(OpError::attr(
                "kernel_shape",
                format!(
                    "has {} dimensions, the input has {} spatial dimensions",
                    kernel.len(),
                    fallback.len()
                ),
            ));
        }
        WindowAttrs::new(
            &kernel,
            self.strides.as_ref(),
            self.dilations.as_ref(),
            self.pads.as_ref(),
            self.auto_pad,
            self.ceil_mode,
        )
    }
}

/// The resolved geometry of one window application on concrete spatial sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Padding before each spatial dimension.
    pub pads_begin: Vec<usize>,
    /// Padding after each spatial dimension (explicit or automatic; excludes the extension
    /// that `ceil_mode` may add).
    pub pads_end: Vec<usize>,
}

fn positive(
    name: &str,
    v: Option<&Vec<i64>>,
    n: usize,
    default: usize,
) -> Result<Vec<usize>, OpError> {
    match v {
        None => Ok(vec![default; n]),
        Some(v) if v.len() != n => Err(OpError::attr(
            name,
            format!("expected {n} values, got {}", v.len()),
        )),
        Some(v) => v
            .iter()
            .map(|&x| {
                usize::try_from(x)
                    .ok()
                    .filter(|&x| x >= 1)
                    .ok_or_else(|| OpError::attr(name, format!("values must be >= 1, got {x}")))
            })
            .collect(),
    }
}

impl WindowAttrs {
    /// Validates window attributes for `n` spatial dimensions. Missing strides/dilations
    /// default to 1, missing pads to 0.
    pub fn new(
        kernel: &[i64],
        strides: Option<&Vec<i64>>,
        dilations: Option<&Vec<i64>>,
        pads: Option<&Vec<i64>>,
        auto_pad: AutoPad,
        ceil_mode: bool,
    ) -> Result<WindowAttrs, OpError> {
        let n = kernel.len();
        let kernel = positive("kernel_shape", Some(&kernel.to_vec()), n, 1)?;
        let strides = positive("strides", strides, n, 1)?;
        let dilations = positive("dilations", dilations, n, 1)?;
        let pads = match pads {
            None => vec![0; 2 * n],
            Some(p) if p.len() != 2 * n => {
                return Err(OpError::attr(
                    "pads",
                    format!("expected {} values, got {}", 2 * n, p.len()),
                ))
            }
            Some(p) => p
                .iter()
                .map(|&x| {
                    usize::try_from(x)
                        .map_err(|_| OpError::attr("pads", format!("values must be >= 0, got {x}")))
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(WindowAttrs {
            kernel,
            strides,
            dilations,
            pads,
            auto_pad,
            ceil_mode,
        })
    }

    /// Number of spatial dimensions.
    pub fn rank(&self) -> usize {
        self.kernel.len()
    }

    fn extent(&self, i: usize) -> usize {
        (self.kernel[i] - 1)
            .saturating_mul(self.dilations[i])
            .saturating_add(1)
    }

    /// Output size, padding before and padding after for spatial dimension `i` of size `input`.
    fn resolve_dim(&self, i: usize, input: usize) -> Result<(usize, usize, usize), OpError> {
        let (s, ext) = (self.strides[i], self.extent(i));
        match self.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = input.div_ceil(s);
                let total = ((out.max(1) - 1) * s + ext).saturating_sub(input);
                let small = total / 2;
                let (b, e) = if self.auto_pad == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                Ok((out, b, e))
            }
            AutoPad::Valid | AutoPad::NotSet => {
                let (b, e) = if self.auto_pad == AutoPad::Valid {
                    (0, 0)
                } else {
                    (self.pads[i], self.pads[i + self.rank()])
                };
                let padded = input + b + e;
                if padded < ext {
                    return Err(OpError::Shape(format!(
                        "spatial dimension {i}: padded size {padded} is smaller than the window extent {ext}"
                    )));
                }
                let span = padded - ext;
                let mut out = if self.ceil_mode {
                    span.div_ceil(s) + 1
                } else {
                    span / s + 1
                };
                if self.ceil_mode && (out - 1) * s >= input + b {
                    out -= 1;
                }
                Ok((out, b, e))
            }
        }
    }

    /// Resolves the geometry for concrete spatial input sizes.
    pub fn resolve(&self, input: &[usize]) -> Result<Geometry, OpError> {
        if input.len() != self.rank() {
            return Err(OpError::Shape(format!(
                "input has {} spatial dimensions, the window has {}",
                input.len(),
                self.rank()
            )));
        }
        let mut g = Geometry {
            input: input.to_vec(),
            output: vec![],
            kernel: self.kernel.clone(),
            strides: self.strides.clone(),
            dilations: self.dilations.clone(),
            pads_begin: vec![],
            pads_end: vec![],
        };
        for (i, &d) in input.iter().enumerate() {
            let (o, b, e) = self.resolve_dim(i, d)?;
            g.output.push(o);
            g.pads_begin.push(b);
            g.pads_end.push(e);
        }
        Ok(g)
    }

    /// Static output spatial dimensions: fixed where the input's are fixed, unknown otherwise.
    pub fn infer(&self, input: &[Dim]) -> Result<Vec<Dim>, OpError> {
        if input.len() != self.rank() {
            return Err(OpError::Shape(format!(
                "input has {} spatial dimensions, the window has {}",
                input.len(),
                self.rank()
            )));
        }
        input
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Dim::Fixed(n) => Ok(Dim::Fixed(self.resolve_dim(i, *n)?.0)),
                _ => Ok(Dim::Unknown),
            })
            .collect()
    }
}

/// Marker in [`Geometry::offsets`] for a window position in the explicit/automatic padding.
pub const IN_PADDING: usize = usize::MAX;
/// Marker in [`Geometry::offsets`] for a window position beyond the padding (`ceil_mode`).
pub const BEYOND_PADDING: usize = usize::MAX - 1;

impl Geometry {
    /// `kernel_shape`, `strides`, `dilations` and explicit `pads` attributes of this
    /// geometry, as [`WindowSpec::explicit`] reads them.
    pub fn explicit_attrs(&self) -> Attributes {
        let ints = |v: &[usize]| Attribute::Ints(v.iter().map(|&d| d as i64).collect());
        let mut attrs = Attributes::new();
        attrs.insert("kernel_shape", ints(&self.kernel));
        attrs.insert("strides", ints(&self.strides));
        attrs.insert("dilations", ints(&self.dilations));
        let pads: Vec<usize> = self
            .pads_begin
            .iter()
            .chain(&self.pads_end)
            .copied()
            .collect();
        attrs.insert("pads", ints(&pads));
        attrs
    }

    /// Whether some window reads before the start of spatial dimension `d` (into the
    /// padding at its beginning).
    pub fn reads_before(&self, d: usize) -> bool {
        self.pads_begin[d] > 0
    }

    /// Whether some window reads past the end of spatial dimension `d` (into the padding
    /// at its end, or the extension `ceil_mode` adds).
    pub fn reads_past(&self, d: usize) -> bool {
        let reach = self.output[d].saturating_sub(1) * self.strides[d]
            + self.kernel[d].saturating_sub(1) * self.dilations[d];
        reach >= self.input[d] + self.pads_begin[d]
    }

    /// Number of kernel positions.
    pub fn kernel_size(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Number of output positions.
    pub fn output_size(&self) -> usize {
        self.output.iter().product()
    }

    /// Number of input positions.
    pub fn input_size(&self) -> usize {
        self.input.iter().product()
    }

    /// For every kernel position `k` (row-major) and output position `o` (row-major), the
    /// row-major offset in the spatial input of the element the window reads, at index
    /// `k * output_size() + o`; [`IN_PADDING`] / [`BEYOND_PADDING`] where it reads padding.
    pub fn offsets(&self) -> Result<Vec<usize>, OpError> {
        let (nk, no) = (self.kernel_size(), self.output_size());
        let total =
            checked_numel(&[nk, no]).ok_or_else(|| OpError::Shape("window too large".into()))?;
        let rank = self.input.len();
        // Per dimension: coordinate (or marker) for each (kernel index, output index).
        let mut per_dim: Vec<Vec<usize>> = Vec::with_capacity(rank);
        for i in 0..rank {
            let (k, o) = (self.kernel[i], self.output[i]);
            let mut t = Vec::with_capacity(k * o);
            for kk in 0..k {
                for oo in 0..o {
                    let pos = (oo * self.strides[i] + kk * self.dilations[i]) as i128
                        - self.pads_begin[i] as i128;
                    let v = if pos >= 0 && (pos as usize) < self.input[i] {
                        pos as usize
                    } else if pos < self.input[i] as i128 + self.pads_end[i] as i128 {
                        IN_PADDING
                    } else {
                        BEYOND_PADDING
                    };
                    t.push(v);
                }
            }
            per_dim.push(t);
        }
        let mut out = Vec::with_capacity(total);
        let mut kidx = vec![0usize; rank];
        for _ in 0..nk {
            let mut oidx = vec![0usize; rank];
            for _ in 0..no {
                let mut off = 0usize;
                let mut marker = None;
                for i in 0..rank {
                    let v = per_dim[i][kidx[i] * self.output[i] + oidx[i]];
                    if v >= BEYOND_PADDING {
                        marker = Some(marker.map_or(v, |m: usize| m.min(v)));
                    } else {
                        off = off * self.input[i] + v;
                    }
                }
                out.push(marker.unwrap_or(off));
                increment(&mut oidx, &self.output);
            }
            increment(&mut kidx, &self.kernel);
        }
        Ok(out)
    }
}

/// Row-major odometer increment of `idx` within `shape` (wraps to zero after the last).
pub fn increment(idx: &mut [usize], shape: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}
