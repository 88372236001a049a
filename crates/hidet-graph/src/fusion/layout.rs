//! Stored layouts as typed data: how a backend's internal operator lays out a matrix
//! ([`StoredLayout`], declared by the operator through
//! [`crate::Operator::stored_layout`]), and what that makes of an anchor's operand in a fused
//! task ([`OperandLayout`], on [`super::AnchorInfo::layouts`]). A template reads an operand
//! with a layout where it is stored, from this data alone, never by recognizing the shape of
//! its index expressions.

/// How an operator's output is its first input, re-laid out, when a kernel can read that
/// input in place instead of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredLayout {
    /// The output `[.., K, N]` is its input `P` of shape `[.., ⌈N / width⌉, K, width]` read as
    /// panels of `width` columns: `out[.., k, j] = P[.., j / width, k, j % width]` (the
    /// columns past `N` of the last panel are padding).
    ColumnPanels { width: usize },
    /// The output `[R, C]` gathers its first input `X` at separable flat offsets held by its
    /// second and third inputs, a 1-D table `rows` and a table `cols`: `out[r, c] =
    /// X.flat[rows[r] + cols[c]]` (a direct convolution's pixels as rows); with `cols` 2-D,
    /// `[G, C]`, the output is `[G, R, C]`, `out[g, r, c] = X.flat[rows[r] + cols[g, c]]` (a
    /// grouped one's, batched over the groups).
    OffsetGather,
}

/// The stored layout of an anchor operand, when a backend's rewrite chose one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperandLayout {
    /// The operand is read from task input `input` (`def.inputs[input]`), stored as
    /// [`StoredLayout::ColumnPanels`] of `width` columns with as many leading (batch) axes as
    /// the operand; `transposed`: the operand is the transpose of those panels' matrix, so
    /// `operand[.., i, k] = P[.., i / width, k, i % width]` (a left operand stored as panels
    /// of `width` rows).
    Panels {
        input: usize,
        width: usize,
        transposed: bool,
    },
    /// The operand is gathered from task input `source` at the offsets of task inputs `rows`
    /// and `cols` ([`StoredLayout::OffsetGather`]).
    Gathered {
        source: usize,
        rows: usize,
        cols: usize,
    },
}
