//! The CPU backend's internal graph operators (domain [`HIDET_DOMAIN`]): the forms its graph
//! passes ([`crate::graph_passes`]) rewrite convolutions and constant weights into, so that the
//! matrix-product template reads them where they are stored. Each has a reference `eval` and a
//! compute definition like any operator; none is ever imported from a model.
//!
//! - [`im2col`]: a convolution's column matrix, inlined into the product's loads;
//! - [`offset_gather`]: a matrix gathered at separable flat offsets (a direct convolution's
//!   pixels as rows), read in place;
//! - [`depthwise_nhwc`]: a channels-last depthwise convolution;
//! - [`column_panels`]: a constant matrix stored as panels of a few columns;
//! - [`integer_matmul`]: an 8-bit product accumulated in 32 bits (quantized convolutions);
//! - [`integer_linear`]: the same for activations by a weight stored in panels (quantized
//!   matrix products);
//! - [`int4_linear`]: `float32` activations by a weight quantized to 4 bits in blocks
//!   (ONNX Runtime's `MatMulNBits`), read as stored.

use std::sync::OnceLock;

use hidet_graph::Registry;

pub mod column_panels;
pub mod depthwise_nhwc;
pub mod im2col;
pub mod int4_linear;
pub mod integer_linear;
pub mod integer_matmul;
pub mod offset_gather;

/// The domain of the CPU backend's internal operators (hidet's own domain).
pub use hidet_graph::ops::HIDET_DOMAIN;

/// The integer attribute `name` of a node being built: a count of at least 1 (an error when it
/// is absent or smaller).
pub(crate) fn count_attr(
    c: &hidet_graph::OpContext<'_>,
    name: &str,
) -> Result<usize, hidet_graph::OpError> {
    let v = c.attrs.req_int(name)?;
    usize::try_from(v)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| hidet_graph::OpError::attr(name, format!("must be >= 1, got {v}")))
}

/// Every built-in operator ([`Registry::global`]) and the CPU backend's internal ones: the
/// registry the CPU graph passes build nodes from. Built once.
pub fn registry() -> &'static Registry {
    static CPU: OnceLock<Registry> = OnceLock::new();
    CPU.get_or_init(|| {
        let mut r = Registry::new();
        hidet_graph::ops::register_all(&mut r);
        register_internal(&mut r);
        r
    })
}

/// Registers the internal operators (and nothing else) into `r`.
pub fn register_internal(r: &mut Registry) {
    im2col::register(r);
    offset_gather::register(r);
    depthwise_nhwc::register(r);
    column_panels::register(r);
    integer_matmul::register(r);
    integer_linear::register(r);
    int4_linear::register(r);
}

/// Test helper: builds the internal operator `domain::op` as the graph builder would.
#[cfg(test)]
pub(crate) fn build_op(
    domain: &str,
    op: &str,
    opset: i64,
    attrs: &[(&str, hidet_graph::Attribute)],
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Box<dyn hidet_graph::Operator>, hidet_graph::OpError> {
    hidet_graph::ops::common::build_registered(
        registry(),
        domain,
        op,
        opset,
        attrs,
        num_inputs,
        num_outputs,
    )
}
