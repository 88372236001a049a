//! Anchored tasks whose anchor is an f32 matmul (2-D) or batch matmul (3-D): the matmul
//! template, with the task's prologues and epilogue fused into it by
//! [`hidet_ir::fusion::fuse`].

use hidet_graph::fusion::{
    fuse_into_template, matmul_sizes, AnchorInfo, AnchorOperand, FusedTask, OperandLayout,
    TemplateParams,
};
use hidet_ir::compute::{tensor_dtype, tensor_shape, ComputeDef, ComputeNode};
use hidet_ir::dtype::DataType;
use hidet_ir::expr::{BinaryOp, Expr, ExprKind, Var};
use hidet_ir::function::Function;

use crate::graph_ops::int4_linear::OP_TYPE as INT4_LINEAR;
use crate::graph_ops::integer_linear::OP_TYPE as INTEGER_LINEAR;
use crate::graph_ops::integer_matmul::OP_TYPE as INTEGER_MATMUL;
use crate::templates::int4_linear::{
    int4_linear, Int4LinearSchedule, Int4LinearShape, WORD_DEPTHS,
};
use crate::templates::integer_linear::{integer_linear, IntegerLinearSchedule, IntegerLinearShape};
use crate::templates::integer_matmul::{integer_matmul, IntegerMatmulSchedule, IntegerMatmulShape};
use crate::templates::matmul::{
    batch_matmul_f32_with_layouts, matmul_f32_with_layouts, ALayout, BLayout, CLayout, Layouts,
    MatmulSchedule, MatmulShape, B_PANEL_WIDTH, COLUMN_STORE_ROWS,
};

/// The sizes of `def` when it is exactly a (batched) f32 matrix product
/// ([`hidet_graph::fusion::matmul_sizes`]); a rank-2 product has batch sizes 1.
pub fn matmul_shape(def: &ComputeDef) -> Option<MatmulShape> {
    let sizes = matmul_sizes(def)?;
    let (batch, a_batch, b_batch) = sizes
        .batch
        .map_or((1, 1, 1), |b| (b.batch, b.a_batch, b.b_batch));
    Some(MatmulShape {
        batch,
        a_batch,
        b_batch,
        m: sizes.m,
        n: sizes.n,
        k: sizes.k,
    })
}

/// Whether `shape` needs the rank-3 (batched) form of the template.
pub fn is_batched(shape: &MatmulShape) -> bool {
    shape.batch != 1 || shape.a_batch != 1 || shape.b_batch != 1
}

/// The layout of the operand a prologue `value` over `axes = [(batch,) row, column]`
/// computes: column-major when it reads a tensor whose innermost index is the row axis
/// itself (a transposed matrix, such as a convolution weight stored `[K, M]`), else
/// row-major.
fn prologue_layout(axes: &[Var], value: &Expr) -> ALayout {
    let row = axes.len().checked_sub(2).and_then(|at| axes.get(at));
    let mut innermost_is_row = false;
    value.visit(&mut |e| {
        if let ExprKind::TensorElement { indices, .. } = e.kind() {
            innermost_is_row |= row.is_some() && indices.last().and_then(Expr::as_var) == row;
        }
    });
    if innermost_is_row {
        ALayout::ColumnMajor
    } else {
        ALayout::RowMajor
    }
}

/// How the matmul template reads `task`'s left operand ([`ALayout`]), or `None` when the
/// task has no anchor.
pub fn a_layout(task: &FusedTask) -> Option<ALayout> {
    let anchor = task.anchor.as_ref()?;
    let batched = matmul_shape(&anchor.def).is_some_and(|s| is_batched(&s));
    Some(operand_a_layout(anchor, batched, true))
}

/// Products at most this deep whose left operand is gathered in place may be stored column
/// by column (see [`stores_by_column`]).
const SHORT_GATHERED_DEPTH: i64 = 160;

/// Whether `task` is a direct convolution ([`a_is_gathered`]) with a short window (`K` at most
/// [`SHORT_GATHERED_DEPTH`]) whose epilogue stores it transposed (channels-first): a tile's
/// stores then cost about as much as its multiply-adds, and a register tile whose rows fill
/// whole vector stores down a column ([`CLayout::ColumnMajor`], see [`matmul_kernel`]) stores
/// faster. Measured on AVX-512, 2 threads, with an `8 × 48` tile
/// ([`crate::templates::matmul::heuristic_for_gathered_rows_stored_by_column`]): SqueezeNet
/// 1.1's stem (`K` = 27, 64 channels) 8.1 → 4.4 ms at batch 8; the 7×7 stems (`K` = 147) of
/// ResNet-18 at batch 8 11.7 → 7.9 ms, of ResNet-50 at batch 1 1.50 → 0.91 ms; SqueezeNet's
/// 3×3 convolutions of 16 channels (`K` = 144) within ±10%. Products of stored rows
/// (MobileNet-V2's last pointwise convolution, 2.6× slower) and AVX2's tiles (6 or 8 rows of
/// one or two vectors: SqueezeNet's stem 1.4× slower) lose.
pub fn stores_by_column(task: &FusedTask) -> bool {
    let Some(anchor) = &task.anchor else {
        return false;
    };
    let short = matmul_shape(&anchor.def).is_some_and(|s| s.k <= SHORT_GATHERED_DEPTH);
    short && a_is_gathered(task) && epilogue_transposes(anchor)
}

/// Whether `task`'s fused operators evaluate a transcendental function (`exp`, `tanh`,
/// `erf`, `sigmoid`, `log`, `pow`, trigonometry) per element. A tile stored by column
/// evaluates its epilogue down the tile's columns, eight rows at a time read across the
/// register tile; such an epilogue then costs more than the strided stores that a row-wise
/// tile store, evaluating it over whole contiguous vectors of the tile, pays. Measured on
/// AVX-512, 2 threads, with `scripts/ab_binaries.py` (the 8 × 48 tile of
/// [`stores_by_column`] either way): ESPCN's first convolution (`K` = 25, tanh) model
/// 0.79×, a Conv1d audio front end (`K` = 10, GELU) 0.55×; SqueezeNet 1.1's stem (ReLU),
/// stored by row, 1.10× slower, so cheap epilogues keep the column store.
fn computes_transcendentals(task: &FusedTask) -> bool {
    use hidet_ir::intrinsic::MathFunc as F;
    let mut found = false;
    for (_, node) in &task.def.nodes {
        let value = match node {
            ComputeNode::Grid { value, .. } | ComputeNode::Reduce { value, .. } => value,
        };
        value.visit(&mut |e| {
            if let ExprKind::Math(f, _) = e.kind() {
                found |= !matches!(
                    f,
                    F::Abs
                        | F::Floor
                        | F::Ceil
                        | F::Round
                        | F::Trunc
                        | F::IsNan
                        | F::IsInf
                        | F::Min
                        | F::Max
                        | F::Fma
                        | F::Sqrt
                        | F::Rsqrt
                );
            }
        });
    }
    found
}

/// Whether [`a_layout`] reads `task`'s left operand in place as a guard-free gather (a
/// direct convolution) rather than as stored rows: by a register tile as wide as the
/// product, each gathered element is computed once, so the level-0 schedule picks such a
/// tile.
pub fn a_is_gathered(task: &FusedTask) -> bool {
    let Some(anchor) = &task.anchor else {
        return false;
    };
    a_layout(task) == Some(ALayout::InPlace)
        && matches!(
            anchor.operands.first(),
            Some(Some(AnchorOperand::Prologue { axes, value })) if !reads_rows(axes, value)
        )
}

/// The layout of `anchor`'s left operand: panels where a graph pass stored it so
/// ([`OperandLayout::Panels`], transposed: panels of rows), a stored matrix of a rank-2 product
/// as it is (no prologue, or one that reads whole rows, see [`reads_rows`]: packing it would
/// copy every element once more than the micro-kernel's broadcasts read it), a guard-free
/// gather read in place (only when `gather_in_place` allows it), or the order its prologue
/// reads memory in.
fn operand_a_layout(anchor: &AnchorInfo, batched: bool, gather_in_place: bool) -> ALayout {
    if let Some((_, rows)) = left_panels(anchor) {
        return ALayout::Panels { rows };
    }
    match anchor.operands.first() {
        Some(Some(AnchorOperand::Input(_))) if !batched => ALayout::InPlace,
        Some(Some(AnchorOperand::Prologue { axes, value })) if axes.len() == 2 => {
            let gathered = reads_offset_tables(anchor) || is_unguarded_gather(value);
            if reads_rows(axes, value) || (gather_in_place && gathered) {
                ALayout::InPlace
            } else {
                prologue_layout(axes, value)
            }
        }
        Some(Some(AnchorOperand::Prologue { .. }))
            if batched && gather_in_place && reads_offset_tables(anchor) =>
        {
            ALayout::InPlace
        }
        Some(Some(AnchorOperand::Prologue { axes, value })) => prologue_layout(axes, value),
        _ => ALayout::RowMajor,
    }
}

/// The task input holding `anchor`'s left operand as panels of rows, and their height.
fn left_panels(anchor: &AnchorInfo) -> Option<(usize, i64)> {
    match anchor.layouts.first() {
        Some(Some(OperandLayout::Panels {
            input,
            width,
            transposed: true,
        })) => Some((*input, i64::try_from(*width).ok()?)),
        _ => None,
    }
}

/// The task input holding `anchor`'s right operand as panels of [`B_PANEL_WIDTH`] columns.
fn right_panels(anchor: &AnchorInfo) -> Option<usize> {
    match anchor.layouts.get(1) {
        Some(Some(OperandLayout::Panels {
            input,
            width,
            transposed: false,
        })) if i64::try_from(*width) == Ok(B_PANEL_WIDTH) => Some(*input),
        _ => None,
    }
}

/// Whether a prologue `value` over `axes = [row, column]` is one tensor element whose
/// innermost index is the column itself and whose other indices depend on the row only, with
/// no guard (a reshape of a stored matrix): each row of the operand is then a contiguous run
/// of memory at an address computed once per row, which the micro-kernel can broadcast from
/// in place as cheaply as from a stored matrix.
fn reads_rows(axes: &[Var], value: &Expr) -> bool {
    let ([_, column], ExprKind::TensorElement { indices, .. }) = (axes, value.kind()) else {
        return false;
    };
    let Some((innermost, outer)) = indices.split_last() else {
        return false;
    };
    let mut row_only = true;
    for index in outer {
        index.visit(&mut |e| {
            row_only &= e.as_var() != Some(column)
                && !matches!(
                    e.kind(),
                    ExprKind::TensorElement { .. } | ExprKind::Select(..)
                );
        });
    }
    innermost.as_var() == Some(column) && row_only
}

/// Whether a prologue `value` is one tensor element at indices computed by division or
/// remainder (a convolution's im2col over an unpadded input, read pixels as rows), with no
/// guard: the micro-kernel can then broadcast it in place ([`ALayout::InPlace`]), a direct
/// convolution, rather than pack it.
fn is_unguarded_gather(value: &Expr) -> bool {
    let ExprKind::TensorElement { indices, .. } = value.kind() else {
        return false;
    };
    let mut divides = false;
    let mut guarded = false;
    value.visit(&mut |e| match e.kind() {
        ExprKind::Binary(BinaryOp::Div | BinaryOp::Mod, ..) => divides = true,
        ExprKind::Select(..) | ExprKind::TensorElement { .. } if e != value => guarded = true,
        _ => {}
    });
    divides && !guarded && !indices.is_empty()
}

/// Whether `anchor`'s left operand is gathered through offset tables
/// ([`OperandLayout::Gathered`], a direct convolution's form): then each column panel
/// re-reads an element at the cost of a table read, cheaper than packing it.
fn reads_offset_tables(anchor: &AnchorInfo) -> bool {
    matches!(
        anchor.layouts.first(),
        Some(Some(OperandLayout::Gathered { .. }))
    )
}

/// Whether `anchor`'s epilogue stores the product transposed: the innermost index of the task
/// output it writes follows the product's row and not its column (a pixels-as-rows
/// convolution stored channels-first).
fn epilogue_transposes(anchor: &AnchorInfo) -> bool {
    let Some(epilogue) = &anchor.epilogue else {
        return false;
    };
    let (Some(innermost), [.., row, column]) = (epilogue.indices.last(), epilogue.axes.as_slice())
    else {
        return false;
    };
    let (mut reads_row, mut reads_column) = (false, false);
    innermost.visit(&mut |e| {
        reads_row |= e.as_var() == Some(row);
        reads_column |= e.as_var() == Some(column);
    });
    reads_row && !reads_column
}

/// Why the template path does not apply or the fusion was refused.
#[derive(Debug)]
pub enum TemplateOutcome {
    /// The anchor is not an f32 matmul or batch matmul: use the scheduler.
    NotApplicable,
    /// The fused kernel, or the template alone when nothing is fused.
    Kernel(Box<Function>),
    /// The template cannot absorb the task's prologues/epilogue.
    Refused(String),
}

/// The matmul-template kernel of `task` (see [`TemplateOutcome`]). Its register tiles are
/// stored column by column when [`stores_by_column`] holds and the schedule's tile rows fill
/// whole 8-float vectors ([`COLUMN_STORE_ROWS`]). A guard-free gather
/// ([`ALayout::InPlace`]) is read in place when one register tile spans every column
/// (`schedule.nr >= n`) or when its addresses come from offset tables; otherwise each
/// element would be gathered again, with its address arithmetic, by every column panel,
/// and it is packed instead. The stored left matrix of a rank-2 product (no prologue, or a
/// reshape of one, see [`reads_rows`]) is always read in place.
pub fn matmul_kernel(task: &FusedTask, schedule: &MatmulSchedule) -> TemplateOutcome {
    let Some(anchor) = &task.anchor else {
        return TemplateOutcome::NotApplicable;
    };
    let Some(shape) = matmul_shape(&anchor.def) else {
        return TemplateOutcome::NotApplicable;
    };
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let batched = is_batched(&shape);
    let a_panels = left_panels(anchor).map(|(i, _)| i);
    let b_panels = right_panels(anchor);
    let gather_in_place = schedule.nr >= n || reads_offset_tables(anchor);
    let a_layout = operand_a_layout(anchor, batched, gather_in_place);
    let b_layout = match b_panels {
        Some(_) => BLayout::Panels,
        None => BLayout::RowMajor,
    };
    let column_stores = stores_by_column(task)
        && schedule.mr % COLUMN_STORE_ROWS == 0
        && !computes_transcendentals(task);
    let layouts = Layouts {
        a: a_layout,
        b: b_layout,
        c: if column_stores {
            CLayout::ColumnMajor
        } else {
            CLayout::RowMajor
        },
    };
    let template = if batched {
        batch_matmul_f32_with_layouts(&task.name, &shape, layouts, schedule)
    } else {
        matmul_f32_with_layouts(&task.name, m, n, k, layouts, schedule)
    };
    let template = match template {
        Ok(f) => f,
        Err(e) => return TemplateOutcome::Refused(format!("matmul template: {e}")),
    };
    let [ta, tb, tc] = template.params.as_slice() else {
        return TemplateOutcome::Refused("the matmul template does not take (A, B, C)".into());
    };
    let params = TemplateParams {
        operands: &[ta.clone(), tb.clone()],
        output: tc,
        operand_rank: if batched { 3 } else { 2 },
        stored: &[a_panels, b_panels],
    };
    match fuse_into_template(task, &template, &params) {
        Ok(f) => TemplateOutcome::Kernel(Box::new(f)),
        Err(reason) => TemplateOutcome::Refused(reason),
    }
}

/// The static shapes of `vars` (tensor variables), `None` when one is symbolic.
fn static_shapes(vars: &[Var]) -> Option<Vec<Vec<i64>>> {
    vars.iter()
        .map(|v| tensor_shape(v).iter().map(Expr::as_int).collect())
        .collect()
}

/// `task` fused into `template`, a kernel of `operands` operands (rank `operand_rank` where
/// two are one tensor) and an output, or the reason it is refused (with `what`, the template's
/// name, when the template itself failed).
fn fuse_operands(
    task: &FusedTask,
    template: Result<Function, crate::error::TemplateError>,
    operands: usize,
    operand_rank: usize,
    what: &str,
) -> TemplateOutcome {
    let template = match template {
        Ok(f) => f,
        Err(e) => return TemplateOutcome::Refused(format!("{what} template: {e}")),
    };
    let Some((output, inputs)) = template.params.split_last() else {
        return TemplateOutcome::Refused(format!("the {what} template takes no parameters"));
    };
    if inputs.len() != operands {
        return TemplateOutcome::Refused(format!(
            "the {what} template does not take {} parameters",
            operands + 1
        ));
    }
    let params = TemplateParams {
        operands: inputs,
        output,
        operand_rank,
        stored: &[],
    };
    match fuse_into_template(task, &template, &params) {
        Ok(f) => TemplateOutcome::Kernel(Box::new(f)),
        Err(reason) => TemplateOutcome::Refused(reason),
    }
}

/// The integer-product template's kernel of `task` when its anchor is `hidet::IntegerMatMul`
/// ([`crate::graph_ops::integer_matmul`]), with its prologues (the column matrix of quantized
/// activations) and its epilogue (the requantizing arithmetic) fused; see [`TemplateOutcome`].
pub fn integer_matmul_kernel(
    task: &FusedTask,
    schedule: &IntegerMatmulSchedule,
) -> TemplateOutcome {
    let Some(anchor) = task.anchor.as_ref().filter(|a| a.op_type == INTEGER_MATMUL) else {
        return TemplateOutcome::NotApplicable;
    };
    let inputs = static_shapes(&anchor.def.inputs);
    let Some([a, x]) = inputs.as_deref() else {
        return TemplateOutcome::Refused("IntegerMatMul takes (A, X) of static shapes".into());
    };
    let ([m, _], [batch, k, n]) = (a.as_slice(), x.as_slice()) else {
        return TemplateOutcome::Refused(format!("IntegerMatMul of shapes {a:?} and {x:?}"));
    };
    let widened = tensor_dtype(&anchor.def.inputs[0]) == Some(DataType::I16);
    let template = IntegerMatmulShape::new(*batch, *m, *n, *k)
        .map(|shape| if widened { shape.widened() } else { shape })
        .and_then(|shape| integer_matmul(&task.name, &shape, schedule));
    fuse_operands(task, template, 2, 3, "integer product")
}

/// The integer linear template's kernel of `task` when its anchor is `hidet::IntegerLinear`
/// ([`crate::graph_ops::integer_linear`]), with its prologues (the quantization of the
/// activations) and its epilogue fused; see [`TemplateOutcome`].
pub fn integer_linear_kernel(
    task: &FusedTask,
    schedule: &IntegerLinearSchedule,
) -> TemplateOutcome {
    let Some(anchor) = task.anchor.as_ref().filter(|a| a.op_type == INTEGER_LINEAR) else {
        return TemplateOutcome::NotApplicable;
    };
    let inputs = static_shapes(&anchor.def.inputs);
    let outputs = static_shapes(&anchor.def.outputs);
    let (Some([x, w]), Some([out])) = (inputs.as_deref(), outputs.as_deref()) else {
        return TemplateOutcome::Refused("IntegerLinear takes (X, W) of static shapes".into());
    };
    let ([rows, k], [_, n], [_, _, _, depth_group]) = (x.as_slice(), out.as_slice(), w.as_slice())
    else {
        return TemplateOutcome::Refused(format!("IntegerLinear of shapes {x:?} and {w:?}"));
    };
    let shape = IntegerLinearShape {
        rows: *rows,
        n: *n,
        k: *k,
        depth_group: *depth_group,
    };
    let template = integer_linear(&task.name, &shape, schedule);
    fuse_operands(task, template, 2, 2, "integer linear")
}

/// The 4-bit linear template's kernel of `task` when its anchor is `hidet::Int4Linear`
/// ([`crate::graph_ops::int4_linear`]), with its prologue (the activations as rows) and its
/// epilogue (a bias, an activation function) fused; see [`TemplateOutcome`].
pub fn int4_linear_kernel(task: &FusedTask, schedule: &Int4LinearSchedule) -> TemplateOutcome {
    let Some(anchor) = task.anchor.as_ref().filter(|a| a.op_type == INT4_LINEAR) else {
        return TemplateOutcome::NotApplicable;
    };
    let inputs = static_shapes(&anchor.def.inputs);
    let outputs = static_shapes(&anchor.def.outputs);
    let (Some([x, w, _, _]), Some([out])) = (inputs.as_deref(), outputs.as_deref()) else {
        return TemplateOutcome::Refused("Int4Linear takes (X, W, S, Z) of static shapes".into());
    };
    let ([rows, k], [_, n], [_, _, groups, _, _]) = (x.as_slice(), out.as_slice(), w.as_slice())
    else {
        return TemplateOutcome::Refused(format!("Int4Linear of shapes {x:?} and {w:?}"));
    };
    let shape = Int4LinearShape {
        rows: *rows,
        n: *n,
        k: *k,
        block_size: groups * WORD_DEPTHS,
    };
    let template = int4_linear(&task.name, &shape, schedule);
    fuse_operands(task, template, 4, 2, "4-bit linear")
}
