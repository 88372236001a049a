//! Post-scheduling fusion on the graph side (DESIGN §2): specialize a graph for concrete
//! input shapes, partition it into groups (anchor + prologues + epilogues, injective trees,
//! aliases, host nodes) and turn each kernel group into a [`FusedTask`].
//!
//! ```text
//! Graph ──Specialization::new──► Specialization ──partition──► Partition ──FusedTask::new──► tasks
//! ```

pub mod fingerprint;
pub mod index_map;
pub mod layout;
pub mod matmul;
pub mod partition;
pub mod specialize;
pub mod task;
pub mod template;

pub use fingerprint::fingerprint;
pub use layout::{OperandLayout, StoredLayout};
pub use matmul::{matmul_sizes, BatchSizes, MatmulSizes};
pub use partition::{partition, partition_with, Group, GroupKind, Partition, RESHAPE_LIKE};
pub use specialize::{HostReason, NodeMode, Specialization, SpecializeError, ValueInfo};
pub use task::{content_name, AnchorInfo, AnchorOperand, FusedTask, TaskEpilogue, TaskError};
pub use template::{
    fuse_epilogue_into_template, fuse_into_template, without_epilogue, TemplateParams,
};
