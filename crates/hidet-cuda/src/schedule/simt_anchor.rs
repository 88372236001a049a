//! The anchors the SIMT matmul template implements, seen as one thing: an f32 (batched)
//! matmul ([`super::matmul_anchor`]) or an f32 2-D convolution as an implicit GEMM
//! ([`super::conv_anchor`]), each a product of a [`MatmulShape`] that any [`SimtChoice`]
//! (a tile schedule and parallel-k parts) can compute. The graph backend lowers through it
//! with the heuristic or a tuned choice, and tuning ([`crate::tuning`]) enumerates choices
//! for it.

use hidet_graph::fusion::FusedTask;

use super::conv_anchor::{conv_kernel_with, conv_shape};
use super::matmul_anchor::{
    heuristic_choice, matmul_kernel_with, matmul_shape, MatmulShape, SimtChoice, TemplateOutcome,
};
use crate::schedule::GpuTarget;

/// Which operator a SIMT anchor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimtAnchorKind {
    /// `MatMul` (rank 2, or batched with broadcasting).
    Matmul,
    /// A 2-D `Conv`: one batch entry per group.
    Conv,
}

impl SimtAnchorKind {
    /// A short name for keys and reports (`matmul`, `conv2d`).
    pub fn name(self) -> &'static str {
        match self {
            SimtAnchorKind::Matmul => "matmul",
            SimtAnchorKind::Conv => "conv2d",
        }
    }
}

/// An anchored task the SIMT template implements: its kind and the product it computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimtAnchor {
    pub kind: SimtAnchorKind,
    pub shape: MatmulShape,
}

impl SimtAnchor {
    /// The SIMT anchor of `task`, when its anchor is one (a matmul first, as lowering tries).
    pub fn of(task: &FusedTask) -> Option<SimtAnchor> {
        let anchor = task.anchor.as_ref()?;
        if let Some(shape) = matmul_shape(&anchor.def) {
            return Some(SimtAnchor {
                kind: SimtAnchorKind::Matmul,
                shape,
            });
        }
        conv_shape(task).map(|shape| SimtAnchor {
            kind: SimtAnchorKind::Conv,
            shape,
        })
    }

    /// The heuristic choice for this anchor on `target` (today's default schedule).
    pub fn heuristic(&self, target: &GpuTarget) -> Option<SimtChoice> {
        heuristic_choice(&self.shape, target)
    }

    /// The kernel(s) of `task` (whose anchor this is) with `choice`.
    pub fn kernel(&self, task: &FusedTask, choice: &SimtChoice) -> TemplateOutcome {
        match self.kind {
            SimtAnchorKind::Matmul => matmul_kernel_with(task, choice),
            SimtAnchorKind::Conv => conv_kernel_with(task, choice),
        }
    }
}
