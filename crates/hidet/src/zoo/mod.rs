//! The built-in model zoo: the paper's five models (and small ones for tests) built with the
//! graph API and deterministic random weights, so `hidet bench zoo:resnet50` needs no file.
//!
//! Each model has the operator structure `torch.onnx.export` (opset 17) writes for it — see
//! `docs/paper-models-ops.md`: convolutions carry a bias (BatchNorm folded), MobileNet's
//! ReLU6 is a `Clip`, BERT's GELU is the exact `Erf` form and GPT-2's the `Tanh` one, GPT-2's
//! causal mask is built from a `Trilu`. Weights are He-scaled so activations stay O(1).
//!
//! Names are given without the `zoo:` prefix; [`strip_prefix`] recognizes it.

pub mod bert;
pub mod gpt2;
pub mod inception_v3;
pub mod inputs;
pub mod mobilenet_v2;
pub mod net;
pub mod resnet50;
pub mod rng;
pub mod tiny_cnn;
pub mod tiny_mlp;

use hidet_graph::{Graph, GraphError, TensorError};

pub use rng::Rng;

/// The prefix that selects a zoo model where a model path is expected.
pub const PREFIX: &str = "zoo:";

/// The seed of every zoo model's weights.
pub const SEED: u64 = 0x4849_4445_5421;

/// Errors of building a zoo model.
#[derive(Debug, thiserror::Error)]
pub enum ZooError {
    /// No model of this name; `known` lists the zoo.
    #[error("unknown zoo model `{name}` (known: {known})")]
    UnknownModel { name: String, known: String },
    /// The graph could not be built: an operator is not registered (the error names it), or
    /// a node's construction or shape inference failed.
    #[error("building zoo:{model}: {source}")]
    Build { model: String, source: GraphError },
    /// A weight tensor could not be created.
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

/// One model of the zoo.
#[derive(Debug, Clone, Copy)]
pub struct ZooEntry {
    /// The name after `zoo:`.
    pub name: &'static str,
    /// One line: what the model is, its input, its size.
    pub description: &'static str,
    build: fn() -> Result<Graph, ZooError>,
}

impl ZooEntry {
    /// Builds the model (graph construction and shape inference; weights are generated).
    pub fn build(&self) -> Result<Graph, ZooError> {
        (self.build)()
    }
}

const ENTRIES: &[ZooEntry] = &[
    ZooEntry {
        name: "resnet50",
        description: "ResNet-50 (torchvision v1.5), input f32[1,3,224,224], 25.6M parameters",
        build: resnet50::build,
    },
    ZooEntry {
        name: "inception_v3",
        description: "Inception-V3 (torchvision), input f32[1,3,299,299], 23.8M parameters",
        build: inception_v3::build,
    },
    ZooEntry {
        name: "mobilenet_v2",
        description: "MobileNet-V2 (torchvision), input f32[1,3,224,224], 3.5M parameters",
        build: mobilenet_v2::build,
    },
    ZooEntry {
        name: "bert_base",
        description: "BERT-base (12 layers, hidden 768), inputs int64[1,128] x3, 109M parameters",
        build: bert::build_base,
    },
    ZooEntry {
        name: "gpt2",
        description: "GPT-2 small (12 layers, hidden 768), input int64[1,128], 124M parameters",
        build: gpt2::build_base,
    },
    ZooEntry {
        name: "tiny_cnn",
        description: "small CNN for tests: conv/relu/residual/depthwise/relu6/concat/pools/gemm, f32[1,3,30,30]",
        build: tiny_cnn::build,
    },
    ZooEntry {
        name: "tiny_mlp",
        description: "small MLP for tests: gemm/relu/matmul/layernorm/softmax, f32[3,37]",
        build: tiny_mlp::build,
    },
    ZooEntry {
        name: "tiny_bert",
        description: "2-layer BERT for tests (hidden 48, 4 heads, seq 19), inputs int64[1,19] x3",
        build: bert::build_tiny,
    },
    ZooEntry {
        name: "tiny_gpt2",
        description: "2-layer GPT-2 for tests (hidden 48, 4 heads, seq 19), input int64[1,19]",
        build: gpt2::build_tiny,
    },
];

/// Every model of the zoo, the paper's five first.
pub fn entries() -> &'static [ZooEntry] {
    ENTRIES
}

/// The model spec without its `zoo:` prefix, or `None` when `spec` does not name the zoo.
pub fn strip_prefix(spec: &str) -> Option<&str> {
    spec.strip_prefix(PREFIX)
}

/// The entry named `name` (without the prefix).
pub fn find(name: &str) -> Result<&'static ZooEntry, ZooError> {
    ENTRIES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| ZooError::UnknownModel {
            name: name.to_string(),
            known: ENTRIES
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Builds the model named `name` (without the prefix).
pub fn build(name: &str) -> Result<Graph, ZooError> {
    find(name)?.build()
}
