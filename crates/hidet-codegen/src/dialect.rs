//! The [`Dialect`] trait: everything that differs between C-family targets.
//!
//! The shared emitter ([`crate::emit_module`]) walks a lowered module and asks
//! the dialect how to spell types, literals, math functions, intrinsics,
//! declarations, loop pragmas, function heads and the file's prelude and
//! epilogue. Methods return [`Unsupported`] for constructs the dialect cannot
//! express; the emitter turns that into a [`crate::CodegenError`] naming the
//! function and statement.
//!
//! Expression strings handed to and returned by dialect methods are complete
//! C expressions; the emitter parenthesizes compound expressions, so a dialect
//! may paste arguments without adding parentheses of its own.

use crate::error::Unsupported;
use hidet_ir::dtype::DataType;
use hidet_ir::expr::Builtin;
use hidet_ir::function::{Function, IRModule};
use hidet_ir::intrinsic::{Intrinsic, MathFunc};
use hidet_ir::stmt::{Barrier, LoopKind, Scope};
use hidet_ir::ty::Type;
use std::collections::BTreeSet;

/// What the emitted function bodies need from the prelude: vector types to
/// declare and helper functions to define. Filled while emitting, read when
/// the prelude is written (the prelude is written last and placed first).
#[derive(Debug, Default, Clone)]
pub struct Uses {
    /// Every vector data type a body or signature names.
    pub vector_types: BTreeSet<DataType>,
    /// Helper definitions by name, in the order they were first required.
    helpers: Vec<(String, String)>,
}

impl Uses {
    /// Records that `name` is needed; `definition` is called only the first
    /// time. A helper that calls other helpers must require them *before*
    /// requiring itself, so that definitions come out in dependency order.
    pub fn require_helper(&mut self, name: &str, definition: impl FnOnce() -> String) {
        if !self.has_helper(name) {
            let def = definition();
            self.helpers.push((name.to_string(), def));
        }
    }

    pub fn has_helper(&self, name: &str) -> bool {
        self.helpers.iter().any(|(n, _)| n == name)
    }

    /// The helper definitions in dependency order: `(name, definition)`.
    pub fn helpers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.helpers.iter().map(|(n, d)| (n.as_str(), d.as_str()))
    }
}

/// One local declaration, as the emitter prepared it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub scope: Scope,
    /// The C type of the value, or of one element for arrays (`float`, `float*`).
    pub ty: String,
    /// The C identifier.
    pub name: String,
    /// `Some(n)` for an array of `n` elements (register/shared tensors).
    pub array_len: Option<i64>,
    /// Required alignment in bytes of an array's storage (at least the
    /// element size; 16 for arrays of 2+ elements so vector access is legal).
    pub align: usize,
    /// The initializer expression, if any.
    pub init: Option<String>,
}

/// How a parameter is passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamClass {
    /// A tensor or pointer parameter: a pointer to elements of `elem`
    /// (a data type, or `None` for pointers to non-data types).
    Pointer { elem: Option<DataType> },
    /// A scalar or vector value of `dtype`.
    Value { dtype: DataType },
}

/// A parameter of an emitted function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmittedParam {
    /// The C identifier.
    pub name: String,
    /// The full C type (`float* __restrict__`, `int32_t`).
    pub c_type: String,
    pub class: ParamClass,
}

/// A function as emitted, for dialects that add wrappers in the epilogue.
#[derive(Debug, Clone)]
pub struct EmittedFunction<'a> {
    pub function: &'a Function,
    pub params: Vec<EmittedParam>,
    /// The C return type.
    pub ret: String,
}

/// How one C-family target spells things. Implementations must be
/// deterministic: the same module always yields the same text.
pub trait Dialect {
    /// A short name for error messages (`"C"`, `"CUDA C"`).
    fn name(&self) -> &'static str;

    /// The type of a value of `dtype` held in a variable or expression.
    /// Vector types should be recorded in `uses.vector_types` if the prelude
    /// declares them.
    fn value_type(&self, dtype: DataType, uses: &mut Uses) -> Result<String, Unsupported>;

    /// The type of an element of `dtype` in memory (tensors, pointers).
    /// Defaults to [`Dialect::value_type`].
    fn storage_type(&self, dtype: DataType, uses: &mut Uses) -> Result<String, Unsupported> {
        self.value_type(dtype, uses)
    }

    /// Turns the memory lvalue `lvalue` (of storage type) into a value of
    /// `dtype`. Defaults to the lvalue itself.
    fn load(
        &self,
        dtype: DataType,
        lvalue: String,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let _ = (dtype, uses);
        Ok(lvalue)
    }

    /// Turns a value of `dtype` into what memory stores. Defaults to identity.
    fn store(
        &self,
        dtype: DataType,
        value: String,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let _ = (dtype, uses);
        Ok(value)
    }

    /// A literal of the integer type `dtype` with value `v`. The default
    /// spells every width exactly (see [`crate::literal::int_literal`]).
    fn int_literal(&self, v: i64, dtype: DataType) -> Result<String, Unsupported> {
        crate::literal::int_literal(v, dtype)
    }

    /// A literal of the float type `dtype` that reads back exactly as `v`
    /// rounded to `dtype`.
    fn float_literal(
        &self,
        v: f64,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// The type tensor element offsets are summed in, when it is wider than the index type:
    /// each top-level term of an offset is converted to it before the sum, so that the C
    /// compiler sees addresses that are affine in the loop variables (and vectorizes guarded
    /// loads). `None` (the default) sums in the index type.
    fn offset_type(&self) -> Option<&'static str> {
        None
    }

    /// `cond ? ptr[offset] : other` for a scalar `dtype` element whose offset is not affine
    /// in the innermost loop (a gather), written so that the load is unconditional at a
    /// safe offset (`offset` masked to 0 where `cond` fails, so `ptr[0]` must be readable): C compilers
    /// vectorize such gathers, not masked ones. `None` (the default) keeps the plain
    /// conditional expression.
    fn unconditional_gather(
        &self,
        _ptr: &str,
        _offset: &str,
        _cond: &str,
        _other: &str,
        _dtype: DataType,
        _uses: &mut Uses,
    ) -> Option<String> {
        None
    }

    /// `cond ? a : b` for a scalar `dtype` select on index guards (comparisons of integers
    /// only) between values that are already computed, written so that C compilers
    /// vectorize it without if-converting the guard (GCC 12 fails to if-convert a sum of
    /// several such selects on AVX2, and then leaves the whole loop scalar). Both `a` and
    /// `b` may be evaluated: the emitter passes only operands that read nothing and cannot
    /// fault. `None` (the default) keeps [`Dialect::select`].
    fn guard_select(
        &self,
        _cond: &str,
        _a: &str,
        _b: &str,
        _dtype: DataType,
        _uses: &mut Uses,
    ) -> Option<String> {
        None
    }

    /// `true` / `false`.
    fn bool_literal(&self, v: bool) -> String {
        if v { "true" } else { "false" }.to_string()
    }

    /// Qualifiers that start every helper function definition in the prelude
    /// (`static inline`, `__device__ __forceinline__`).
    fn helper_qualifier(&self) -> &'static str;

    /// Includes, typedefs (for `uses.vector_types`) and fixed definitions that
    /// open the file. Helpers in `uses` are written right after it by the
    /// emitter.
    fn prelude(&self, module: &IRModule, uses: &Uses) -> String;

    /// The head of a function definition: qualifiers, return type, name and
    /// parameter list, e.g. `static void k(float* __restrict__ a, int32_t n)`.
    /// Used both for the forward declaration (followed by `;`) and for the
    /// definition (followed by the body).
    fn function_head(
        &self,
        function: &Function,
        ret: &str,
        params: &[EmittedParam],
    ) -> Result<String, Unsupported>;

    /// A preprocessor condition under which `function`'s forward declaration
    /// and definition are compiled (`#if COND … #endif`), e.g. host-only code
    /// in CUDA C; `None` (the default) compiles it unconditionally.
    fn function_guard(&self, function: &Function) -> Option<String> {
        let _ = function;
        None
    }

    /// Definitions that close the file (exported wrappers, runtime hooks).
    fn epilogue(
        &self,
        module: &IRModule,
        functions: &[EmittedFunction<'_>],
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// `threadIdx.x` and friends.
    fn builtin(&self, builtin: Builtin) -> Result<String, Unsupported>;

    /// A barrier statement (without the trailing `;`).
    fn barrier(&self, barrier: Barrier) -> Result<String, Unsupported>;

    /// How a `LoopKind::Parallel` loop runs. `None` (the default): as a `for` loop under
    /// [`Dialect::loop_pragma`]. `Some(launch)`: the emitter outlines the loop body into a
    /// task function `static void TASK(void *env, int32_t task)`, whose `env` is a struct
    /// of the variables the body uses from outside (tensors by pointer, scalars by value),
    /// and the loop becomes the statement `launch(TASK, &env, extent);`, which must run
    /// `TASK(&env, t)` once for every `t` in `0..extent`, in any order and on any threads,
    /// and return when all have finished. The dialect makes `launch` available (a helper
    /// recorded in `uses`).
    fn parallel_launch(&self, _uses: &mut Uses) -> Result<Option<String>, Unsupported> {
        Ok(None)
    }

    /// The pragma line placed before a `for` loop of `kind`, if any.
    /// `extent` is the trip count when it is a constant.
    fn loop_pragma(
        &self,
        kind: LoopKind,
        extent: Option<i64>,
    ) -> Result<Option<String>, Unsupported>;

    /// A declaration statement (without the trailing `;`).
    fn declare(&self, decl: &Declaration) -> Result<String, Unsupported>;

    /// A math function of arguments of type `dtype` (scalar or vector;
    /// `IsNan`/`IsInf` return bool).
    fn math(
        &self,
        func: MathFunc,
        dtype: DataType,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// Float remainder `fmod(a, b)` (the IR's `Mod` on floats).
    fn float_mod(
        &self,
        dtype: DataType,
        a: &str,
        b: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// `value` (of type `from`) converted to `to`; lane counts are equal.
    fn cast(
        &self,
        value: &str,
        from: DataType,
        to: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// The scalar `value` repeated over the lanes of the vector type `to`.
    fn broadcast(&self, value: &str, to: DataType, uses: &mut Uses) -> Result<String, Unsupported>;

    /// `cond ? a : b` with result type `dtype`. The default is C's `?:`,
    /// valid for scalars.
    fn select(
        &self,
        cond: &str,
        a: &str,
        b: &str,
        dtype: DataType,
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        if dtype.is_vector() {
            return Err(Unsupported::new(format!("select of vector type {dtype}")));
        }
        let _ = uses;
        Ok(format!("({cond} ? {a} : {b})"))
    }

    /// A call of a hardware intrinsic (not [`Intrinsic::Function`], which the
    /// emitter spells as a plain call). `arg_types` are the IR types of `args`.
    fn intrinsic(
        &self,
        intrinsic: &Intrinsic,
        args: &[String],
        arg_types: &[Type],
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// The statement run when an `Assert` in `function` fails (without the
    /// trailing `;`).
    fn assert_fail(
        &self,
        function: &str,
        message: &str,
        uses: &mut Uses,
    ) -> Result<String, Unsupported>;

    /// A kernel launch statement of a host launcher (without trailing `;`).
    /// Unsupported unless a dialect overrides it.
    fn launch(
        &self,
        kernel: &str,
        grid: &[String; 3],
        block: &[String; 3],
        shared_bytes: &str,
        args: &[String],
        uses: &mut Uses,
    ) -> Result<String, Unsupported> {
        let _ = (grid, block, shared_bytes, args, uses);
        Err(Unsupported::new(format!("launch of kernel `{kernel}`")))
    }
}
