//! `hidet::DequantizeBlocks`: a weight matrix stored quantized to a few bits in blocks along
//! its depth, each block with its own scale and zero point — the form of ONNX Runtime's
//! `MatMulNBits` weights, which its expansion (`contrib_matmul`) keeps instead of a dense copy
//! eight times their size.
//!
//! `DequantizeBlocks(Q, scales, zero_points; k, bits, block_size)` with `Q` of `uint8`
//! `[N, blocks, blob]` (`blocks = ⌈k / block_size⌉`, `blob = block_size · bits / 8`: value `j`
//! of block `b` of row `n` is bits `j·bits … j·bits + bits − 1` of `Q[n, b]`, low bits first)
//! and `scales`, `zero_points` of `float32` `[N, blocks]` gives `float32` `[k, N]`:
//! `Y[i, n] = (q(n, i) − zero_points[n, i / block_size]) · scales[n, i / block_size]`, in
//! `float32` (the difference of two small integers is exact, so each element is its one
//! correctly rounded product).
//!
//! Constant folding leaves it alone (it is not in the default domain): a backend either reads
//! the stored blocks in its kernels (the CPU's `hidet::Int4Linear`) or decodes them into a dense
//! constant with [`crate::passes::DecodeBlockWeights`].

use crate::ops::common::typed_input;
use crate::attribute::Attribute;
use crate::dtype::DType;
use crate::operator::{
    arg, infer_arg, ComputeDef, ComputeInput, InferInput, OpContext, OpError, Operator,
};
use crate::ops::common::check_dtype;
use crate::ops::compute_util::{grid_def, input, placeholders};
use crate::registry::{Registry, LATEST_OPSET};
use crate::shape::{Dim, TensorType};
use crate::tensor::Tensor;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Expr;

use super::HIDET_DOMAIN;

/// The operator's name in [`HIDET_DOMAIN`].
pub const OP_TYPE: &str = "DequantizeBlocks";

/// The layout of the stored blocks: what the attributes fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    /// The depth (rows of the result).
    pub k: usize,
    /// Bits per value: 2, 4 or 8.
    pub bits: usize,
    /// Values per block along the depth; `block_size · bits` is a multiple of 8.
    pub block_size: usize,
}

impl BlockLayout {
    /// The layout, or why it is not one: `bits` other than 2, 4 or 8, a block that does not
    /// fill whole bytes, a zero depth.
    pub fn new(k: usize, bits: usize, block_size: usize) -> Result<BlockLayout, OpError> {
        if ![2, 4, 8].contains(&bits) {
            return Err(OpError::attr("bits", format!("must be 2, 4 or 8, got {bits}")));
        }
        if block_size == 0 || !(block_size * bits).is_multiple_of(8) {
            return Err(OpError::attr(
                "block_size",
                format!("{block_size} values of {bits} bits do not fill whole bytes"),
            ));
        }
        if k == 0 {
            return Err(OpError::attr("k", "must be positive"));
        }
        Ok(BlockLayout {
            k,
            bits,
            block_size,
        })
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// Bytes per block.
    pub fn blob_bytes(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Value `index` of a run of `bits`-bit values packed low bits first into `bytes`.
    pub fn unpack(&self, bytes: &[u8], index: usize) -> u8 {
        let bit = index * self.bits;
        let mask = ((1u16 << self.bits) - 1) as u8;
        (bytes[bit / 8] >> (bit % 8)) & mask
    }

    /// The attributes of a node of this layout.
    pub fn attrs(&self) -> crate::attribute::Attributes {
        let mut a = crate::attribute::Attributes::new();
        a.insert("k", Attribute::Int(self.k as i64));
        a.insert("bits", Attribute::Int(self.bits as i64));
        a.insert("block_size", Attribute::Int(self.block_size as i64));
        a
    }

    /// `N`, after checking that `q`, `scales` and `zeros` have this layout's shapes.
    fn rows(&self, q: &[usize], scales: &[usize], zeros: &[usize]) -> Result<usize, OpError> {
        let n = q.first().copied().unwrap_or(0);
        if q != [n, self.blocks(), self.blob_bytes()] {
            return Err(OpError::Shape(format!(
                "DequantizeBlocks: Q of shape {q:?} is not [N, {}, {}] (k = {}, {} bits, blocks \
                 of {})",
                self.blocks(),
                self.blob_bytes(),
                self.k,
                self.bits,
                self.block_size
            )));
        }
        for (what, shape) in [("scales", scales), ("zero points", zeros)] {
            if shape != [n, self.blocks()] {
                return Err(OpError::Shape(format!(
                    "DequantizeBlocks: {what} of shape {shape:?} are not [{n}, {}]",
                    self.blocks()
                )));
            }
        }
        Ok(n)
    }

    /// The dense `[k, N]` weights of `N` rows of blocks `q` (row-major), as the operator
    /// defines them.
    pub fn decode(&self, q: &[u8], scales: &[f32], zeros: &[f32], n: usize) -> Vec<f32> {
        let (blocks, blob) = (self.blocks(), self.blob_bytes());
        let mut out = vec![0f32; self.k * n];
        for col in 0..n {
            for kk in 0..self.k {
                let (block, within) = (kk / self.block_size, kk % self.block_size);
                let at = (col * blocks + block) * blob;
                let value = f32::from(self.unpack(&q[at..at + blob], within));
                let b = col * blocks + block;
                out[kk * n + col] = (value - zeros[b]) * scales[b];
            }
        }
        out
    }
}

#[derive(Debug)]
struct DequantizeBlocks {
    layout: BlockLayout,
}

/// Registers `hidet::DequantizeBlocks` (every opset of the domain).
pub fn register(r: &mut Registry) {
    r.register(HIDET_DOMAIN, OP_TYPE, 1..=LATEST_OPSET, |c: &OpContext<'_>| {
        let int = |name: &str| -> Result<usize, OpError> {
            let v = c.attrs.req_int(name)?;
            usize::try_from(v).map_err(|_| OpError::attr(name, format!("must be >= 0, got {v}")))
        };
        let layout = BlockLayout::new(int("k")?, int("bits")?, int("block_size")?)?;
        Ok(Box::new(DequantizeBlocks { layout }))
    });
}

impl Operator for DequantizeBlocks {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<TensorType>, OpError> {
        let q = infer_arg(inputs, 0)?;
        check_dtype(0, q.ty.dtype, |d| d == DType::U8)?;
        for i in [1, 2] {
            check_dtype(i, infer_arg(inputs, i)?.ty.dtype, |d| d == DType::F32)?;
        }
        let n = match q.ty.fixed_shape() {
            Some(s) => Dim::Fixed(s.first().copied().unwrap_or(0)),
            None => Dim::Unknown,
        };
        Ok(vec![TensorType {
            dtype: DType::F32,
            shape: Some(vec![Dim::Fixed(self.layout.k), n]),
        }])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let (q, scales, zeros) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let n = self
            .layout
            .rows(q.shape(), scales.shape(), zeros.shape())?;
        let bytes = typed_input::<u8>(q, 0)?;
        let dense = self
            .layout
            .decode(bytes, typed_input::<f32>(scales, 1)?, typed_input::<f32>(zeros, 2)?, n);
        Ok(vec![Tensor::new(vec![self.layout.k, n], dense)?])
    }

    /// `Y[i, n] = (f32((Q[n, i / bs, j / per_byte] >> (j % per_byte) · bits) & mask) −
    /// zero_points[n, i / bs]) · scales[n, i / bs]` with `j = i % bs`.
    fn compute(&self, inputs: &[Option<ComputeInput<'_>>]) -> Result<Option<ComputeDef>, OpError> {
        let (q, scales, zeros) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
        check_dtype(0, q.dtype, |d| d == DType::U8)?;
        let n = self.layout.rows(q.shape, scales.shape, zeros.shape)?;
        let vars = placeholders(inputs);
        let l = self.layout;
        let (bs, per_byte) = (l.block_size as i64, 8 / l.bits as i64);
        let (f32, i32) = (DataType::F32, DataType::I32);
        grid_def(vars.clone(), f32, &[l.k, n], |i| {
            let (kk, col) = (&i[0], &i[1]);
            let (block, within) = (kk / bs, kk % bs);
            let byte = vars[0].at([col.clone(), block.clone(), &within / per_byte]);
            let shift = (&within % per_byte) * l.bits as i64;
            let mask = Expr::int((1 << l.bits) - 1).cast(i32);
            let value = ((byte.cast(i32) >> shift.cast(i32)) & mask).cast(f32);
            let at = [col.clone(), block];
            (value - vars[2].at(at.clone())) * vars[1].at(at)
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unpacked_low_bits_first_per_block() {
        let layout = BlockLayout::new(5, 4, 4).unwrap();
        // Row 0: block 0 holds 1, 2, 3, 4; block 1 holds 5 (and padding 15).
        // Row 1: block 0 holds 15, 0, 7, 8; block 1 holds 9.
        let q = [0x21u8, 0x43, 0xF5, 0x00, 0x0F, 0x87, 0x09, 0x00];
        let scales = [0.5f32, 2.0, 0.25, -1.0];
        let zeros = [8.0f32, 0.0, 1.0, 3.0];
        let dense = layout.decode(&q, &scales, &zeros, 2);
        let want_row0 = [-3.5f32, -3.0, -2.5, -2.0, 10.0];
        let want_row1 = [3.5f32, -0.25, 1.5, 1.75, -6.0];
        for kk in 0..5 {
            assert_eq!(dense[kk * 2], want_row0[kk], "row 0, k = {kk}");
            assert_eq!(dense[kk * 2 + 1], want_row1[kk], "row 1, k = {kk}");
        }
    }

    #[test]
    fn layouts_that_do_not_fill_bytes_are_refused() {
        assert!(BlockLayout::new(8, 3, 8).is_err());
        assert!(BlockLayout::new(8, 4, 3).is_err());
        assert!(BlockLayout::new(0, 4, 8).is_err());
        assert!(BlockLayout::new(7, 2, 4).is_ok());
    }
}
