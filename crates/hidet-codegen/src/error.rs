//! Errors of code generation.

/// Why a module could not be turned into source code. Every variant names the
/// function and, where one is involved, the offending statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The function still contains a `for … in mapping.on(worker)` loop; run
    /// the lowering passes first.
    #[error("function `{function}` is not lowered: task-mapping loop left at `{stmt}`")]
    NotLowered { function: String, stmt: String },
    /// The dialect cannot express a construct (e.g. shared memory in C).
    #[error("{dialect} cannot emit `{what}` in function `{function}` at `{stmt}`")]
    Unsupported {
        dialect: &'static str,
        function: String,
        stmt: String,
        what: String,
    },
    /// The program is malformed in a way code generation detects (an
    /// expression without a value type where one is required, a wrong number
    /// of indices, …).
    #[error("invalid program in function `{function}` at `{stmt}`: {what}")]
    Invalid {
        function: String,
        stmt: String,
        what: String,
    },
    /// A function name is not a valid C identifier, or two functions share it.
    #[error("bad function name `{name}`: {why}")]
    BadFunctionName { name: String, why: String },
}

/// A construct a [`crate::Dialect`] cannot express; the emitter adds the
/// function and statement and turns it into [`CodegenError::Unsupported`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl Unsupported {
    pub fn new(what: impl Into<String>) -> Unsupported {
        Unsupported(what.into())
    }
}
