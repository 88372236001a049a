//! `hidet_rs._native`: the Python bindings of the [`hidet`] embedding API (see
//! `python/hidet_rs/_native.pyi` for the Python-side contract).
//!
//! - Inputs: numpy arrays (or anything `numpy.asarray` accepts) of the input's exact dtype.
//!   A C-contiguous, aligned array is wrapped as a tensor without a copy
//!   (`Tensor::from_external`, holding a reference to the array), so the kernels read the
//!   array's memory in place; any other array is gathered once into a new tensor. An input
//!   array must not be modified by another thread while a run reads it.
//! - Outputs: numpy arrays that take over the tensor a run returns, without copying it (the
//!   kernels wrote it in place where the model allows, see `hidet::api`).
//! - The GIL is released while a model compiles and while it runs.
//! - Errors: `HidetError` and its subclasses, whose message is the one the `hidet`
//!   command-line tool prints after `error: ` for the same failure.

// mimalloc, configured at load (see `hidet::allocator`).
hidet::use_mimalloc!();

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hidet::graph::compiled::{BackendError, CompiledError};
use hidet::graph::ExecError;
use hidet::pipeline::{Device, PipelineError};
use hidet::{CompiledModel, DType, Dim, Error, Model, Options, Tensor, TensorInfo, TuneLevel};
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

create_exception!(
    hidet_rs,
    HidetError,
    PyException,
    "Every error hidet raises; the message is the one the `hidet` command-line tool prints."
);
create_exception!(
    hidet_rs,
    ModelError,
    HidetError,
    "A model that cannot be read or imported: a missing, malformed or truncated file, an \
     unsupported operator."
);
create_exception!(
    hidet_rs,
    InputError,
    HidetError,
    "Inputs that do not fit the model: a missing or unknown input, a wrong dtype, shape or \
     count."
);

/// The exception class of `e` (see the module docs).
fn py_error(e: Error) -> PyErr {
    let message = e.to_string();
    let input = |x: &ExecError| {
        matches!(
            x,
            ExecError::MissingInput(_)
                | ExecError::UnknownInput(_)
                | ExecError::WrongDType { .. }
                | ExecError::WrongShape { .. }
                | ExecError::SymbolConflict(_)
                | ExecError::WrongKind { .. }
        )
    };
    match &e {
        Error::Zoo(_)
        | Error::Pipeline(
            PipelineError::Onnx(_)
            | PipelineError::Graph(_)
            | PipelineError::Compiled(
                CompiledError::Artifact(_) | CompiledError::Backend(BackendError::Artifact(_)),
            ),
        ) => ModelError::new_err(message),
        Error::InputCount { .. } | Error::Tensor(_) => InputError::new_err(message),
        Error::Pipeline(PipelineError::Compiled(CompiledError::Bind(_))) => {
            InputError::new_err(message)
        }
        Error::Pipeline(
            PipelineError::Exec(x) | PipelineError::Compiled(CompiledError::Exec(x)),
        ) if input(x) => InputError::new_err(message),
        _ => HidetError::new_err(message),
    }
}

/// The thread count `compile` uses when given none (0: every core).
static DEFAULT_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The numpy name of `dtype` (hidet's own name for the types numpy lacks).
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
        other => other.name(),
    }
}

/// A graph input or output: `name`, `dtype` (a numpy dtype name), `shape` (a list of ints,
/// strs for symbolic dimensions and None for unknown ones; None when the rank is unknown) and
/// `kind`.
#[pyclass(module = "hidet_rs", name = "TensorInfo", frozen)]
struct PyTensorInfo {
    info: TensorInfo,
}

#[pymethods]
impl PyTensorInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.info.name
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.info.dtype)
    }

    #[getter]
    fn kind(&self) -> String {
        self.info.kind.to_string()
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(dims) = &self.info.shape else {
            return Ok(None);
        };
        let items: Vec<Bound<'py, PyAny>> = dims
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n
                    .into_pyobject(py)
                    .map_or_else(|e| match e {}, |o| o.into_any()),
                Dim::Symbol(s) => PyString::new(py, s).into_any(),
                Dim::Unknown => py.None().into_bound(py),
            })
            .collect();
        Ok(Some(PyList::new(py, items)?))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let shape = match self.shape(py)? {
            Some(list) => list.repr()?.to_string(),
            None => "None".to_string(),
        };
        Ok(format!(
            "TensorInfo(name={:?}, dtype={:?}, shape={shape}, kind={:?})",
            self.info.name,
            self.dtype(),
            self.kind()
        ))
    }
}

fn infos(list: &[TensorInfo]) -> Vec<PyTensorInfo> {
    list.iter()
        .map(|info| PyTensorInfo { info: info.clone() })
        .collect()
}

/// One numpy array (or anything `numpy.asarray` takes) as a tensor of the same dtype and
/// shape. A C-contiguous, aligned array is wrapped without a copy (the tensor keeps a
/// reference to it); any other is gathered in C order into a new buffer.
fn to_tensor(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Tensor> {
    let py = value.py();
    let owned;
    let array: &Bound<'_, PyUntypedArray> = match value.downcast::<PyUntypedArray>() {
        Ok(a) => a,
        Err(_) => {
            owned = py
                .import("numpy")?
                .call_method1("asarray", (value,))?
                .downcast_into::<PyUntypedArray>()?;
            &owned
        }
    };
    let shape = array.shape().to_vec();
    let dtype = array.dtype();
    macro_rules! convert {
        ($($t:ty),*) => {
            $(
                if dtype.is_equiv_to(&numpy::dtype::<$t>(py)) {
                    let typed = array.downcast::<PyArrayDyn<$t>>()?;
                    let view: PyReadonlyArrayDyn<'_, $t> = typed.try_readonly().map_err(|e| {
                        InputError::new_err(format!("input `{name}`: {e}"))
                    })?;
                    let ptr = typed.data().cast_const();
                    if typed.is_c_contiguous() && ptr.align_offset(std::mem::align_of::<$t>()) == 0 {
                        let len = typed.len();
                        let owner: Py<PyArrayDyn<$t>> = typed.clone().unbind();
                        // SAFETY: a C-contiguous, aligned array of native `$t` holds `len`
                        // initialized elements at `ptr`, kept alive by `owner` (a reference
                        // to the array) for as long as the tensor lives. The elements must
                        // not be written meanwhile: nothing in hidet writes inputs, and the
                        // documented contract of `run` is that the caller does not modify
                        // an input array while a run reads it.
                        return unsafe { Tensor::from_external(shape, ptr, len, Box::new(owner)) }
                            .map_err(|e| py_error(e.into()));
                    }
                    let data: Vec<$t> = match view.as_slice() {
                        Ok(slice) => slice.to_vec(),
                        Err(_) => view.as_array().iter().copied().collect(),
                    };
                    return Tensor::new(shape, data).map_err(|e| py_error(e.into()));
                }
            )*
        };
    }
    convert!(
        f32,
        f64,
        hidet::graph::half::f16,
        i64,
        i32,
        i16,
        i8,
        u8,
        u16,
        u32,
        u64,
        bool
    );
    Err(InputError::new_err(format!(
        "input `{name}`: numpy dtype {} has no hidet dtype",
        dtype.str()?
    )))
}

/// The memory of an output array that views hidet's storage (a large output kept in the CPU
/// backend's pool): the array's base object, which holds the storage until numpy drops it.
#[pyclass(module = "hidet_rs", name = "OutputMemory", frozen)]
struct OutputMemory {
    _storage: Box<dyn std::any::Any + Send + Sync>,
}

/// `tensor` as a numpy array. The array takes over the tensor's elements without a copy
/// when nothing else shares them (a run's outputs: a vector becomes the array's, storage the
/// backend pools is viewed, the array's base holding it); an output that is a model constant
/// or one of `inputs` (storage addresses of the run's inputs, [`Tensor::storage_address`]) is
/// copied. Types numpy lacks are widened exactly (bf16 and the float8 types to float32, 4-bit
/// integers to int8 / uint8).
fn to_numpy<'py>(py: Python<'py>, tensor: Tensor, inputs: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    use hidet::graph::Element;
    let shape = tensor.shape().to_vec();
    let is_input = inputs.contains(&tensor.storage_address());
    fn take<T: Element + numpy::Element + Clone>(
        py: Python<'_>,
        tensor: Tensor,
        shape: Vec<usize>,
        is_input: bool,
    ) -> PyResult<Bound<'_, PyAny>> {
        let shared = T::unwrap(tensor.data())
            .cloned()
            .ok_or_else(|| HidetError::new_err("output dtype mismatch"))?;
        drop(tensor);
        // Unique once the tensor is gone, unless the run shares it (a constant output).
        let buffer = match Arc::try_unwrap(shared) {
            Ok(buffer) if !is_input => buffer,
            Ok(buffer) => return Ok(PyArray1::from_slice(py, &buffer).reshape(shape)?.into_any()),
            Err(shared) => return Ok(PyArray1::from_slice(py, &shared).reshape(shape)?.into_any()),
        };
        if !buffer.is_external() {
            return Ok(PyArray1::from_vec(py, buffer.into_vec())
                .reshape(shape)?
                .into_any());
        }
        let (ptr, len) = (buffer.as_ptr(), buffer.len());
        let memory = Bound::new(
            py,
            OutputMemory {
                _storage: Box::new(buffer),
            },
        )?;
        // SAFETY: `ptr` points to `len` elements of `T` owned by `buffer`, which `memory`
        // now holds: moving the buffer into it moved no element. Nothing else refers to them
        // (the buffer was the tensor's only clone and not an input's memory), and `memory`,
        // the array's base, keeps them alive as long as the array.
        let view = unsafe { numpy::ndarray::ArrayView1::from_shape_ptr(len, ptr) };
        // SAFETY: see above; the storage is never reallocated.
        let array = unsafe { PyArray1::borrow_from_array(&view, memory.into_any()) };
        Ok(array.reshape(shape)?.into_any())
    }
    match tensor.dtype() {
        DType::F32 => take::<f32>(py, tensor, shape, is_input),
        DType::F64 => take::<f64>(py, tensor, shape, is_input),
        DType::F16 => take::<hidet::graph::half::f16>(py, tensor, shape, is_input),
        DType::I8 => take::<i8>(py, tensor, shape, is_input),
        DType::I16 => take::<i16>(py, tensor, shape, is_input),
        DType::I32 => take::<i32>(py, tensor, shape, is_input),
        DType::I64 => take::<i64>(py, tensor, shape, is_input),
        DType::U8 => take::<u8>(py, tensor, shape, is_input),
        DType::U16 => take::<u16>(py, tensor, shape, is_input),
        DType::U32 => take::<u32>(py, tensor, shape, is_input),
        DType::U64 => take::<u64>(py, tensor, shape, is_input),
        DType::Bool => take::<bool>(py, tensor, shape, is_input),
        DType::BF16 | DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
            let data: Vec<f32> = tensor.to_f64_vec().into_iter().map(|x| x as f32).collect();
            Ok(PyArray1::from_vec(py, data).reshape(shape)?.into_any())
        }
        DType::I4 => {
            let data: Vec<i8> = tensor.to_i64_vec().into_iter().map(|x| x as i8).collect();
            Ok(PyArray1::from_vec(py, data).reshape(shape)?.into_any())
        }
        DType::U4 => {
            let data: Vec<u8> = tensor.to_i64_vec().into_iter().map(|x| x as u8).collect();
            Ok(PyArray1::from_vec(py, data).reshape(shape)?.into_any())
        }
        DType::String => Err(HidetError::new_err(
            "string outputs cannot be returned as numpy arrays yet",
        )),
    }
}

/// Inputs given as a mapping (by name) or a sequence (in input order).
enum Feeds {
    Named(Vec<(String, Tensor)>),
    Positional(Vec<Tensor>),
}

fn feeds(inputs: &Bound<'_, PyAny>, declared: &[TensorInfo]) -> PyResult<Feeds> {
    if let Ok(dict) = inputs.downcast::<PyDict>() {
        let mut named = Vec::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let name: String = key.extract().map_err(|_| {
                InputError::new_err(format!(
                    "input names must be str, given {}",
                    key.get_type().name().map_or("?".into(), |n| n.to_string())
                ))
            })?;
            let tensor = to_tensor(&value, &name)?;
            named.push((name, tensor));
        }
        return Ok(Feeds::Named(named));
    }
    if inputs.downcast::<PyList>().is_ok() || inputs.downcast::<PyTuple>().is_ok() {
        let mut positional = Vec::new();
        for (i, value) in inputs.try_iter()?.enumerate() {
            let value = value?;
            let name = declared.get(i).map_or("?", |d| d.name.as_str());
            positional.push(to_tensor(&value, name)?);
        }
        return Ok(Feeds::Positional(positional));
    }
    Err(InputError::new_err(
        "inputs must be a dict of name -> array or a list/tuple of arrays in input order",
    ))
}

/// `source` (a path, `os.PathLike`, or the bytes of an `.onnx` file) imported.
fn load_source(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Model> {
    if let Ok(bytes) = source.downcast::<PyBytes>() {
        let data = bytes.as_bytes().to_vec();
        return py
            .allow_threads(move || Model::from_bytes(&data))
            .map_err(py_error);
    }
    let path: std::path::PathBuf = source.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(
            "a model is a path (str or os.PathLike) or the bytes of an .onnx file",
        )
    })?;
    py.allow_threads(move || Model::load(&path))
        .map_err(py_error)
}

fn options(threads: Option<usize>, tuning: u32, retune: bool, device: &str) -> PyResult<Options> {
    let level = TuneLevel::from_number(tuning).map_err(|e| HidetError::new_err(e.to_string()))?;
    let device: Device = device.parse().map_err(HidetError::new_err)?;
    let threads = threads.or(match DEFAULT_THREADS.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    });
    Ok(Options {
        device,
        threads,
        tuning: level,
        retune,
    })
}

/// A model as imported; nothing is compiled. Get one with `load` or `zoo`.
#[pyclass(module = "hidet_rs", name = "Model", frozen)]
struct PyModel {
    model: Model,
}

#[pymethods]
impl PyModel {
    /// The runtime inputs, in the order positional runs take them.
    #[getter]
    fn inputs(&self) -> Vec<PyTensorInfo> {
        infos(&self.model.inputs())
    }

    /// The outputs, in the order runs return them.
    #[getter]
    fn outputs(&self) -> Vec<PyTensorInfo> {
        infos(&self.model.outputs())
    }

    /// Compiles for `device` (see `hidet_rs.compile`).
    #[pyo3(signature = (*, threads=None, tuning=0, retune=false, device="cpu"))]
    fn compile(
        &self,
        py: Python<'_>,
        threads: Option<usize>,
        tuning: u32,
        retune: bool,
        device: &str,
    ) -> PyResult<PyCompiledModel> {
        compile_model(py, &self.model, options(threads, tuning, retune, device)?)
    }

    /// Runs the reference executor (every operator's own implementation, node by node,
    /// single-threaded): the oracle compiled runs are checked against.
    fn run_reference<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let named = match feeds(inputs, &self.model.inputs())? {
            Feeds::Named(named) => named,
            Feeds::Positional(list) => {
                let declared = self.model.inputs();
                if list.len() != declared.len() {
                    return Err(InputError::new_err(format!(
                        "the model takes {} inputs, given {}",
                        declared.len(),
                        list.len()
                    )));
                }
                declared.into_iter().map(|d| d.name).zip(list).collect()
            }
        };
        let model = &self.model;
        let outputs = py
            .allow_threads(|| model.run_reference(&named))
            .map_err(py_error)?;
        let inputs: Vec<usize> = named.iter().map(|(_, t)| t.storage_address()).collect();
        outputs
            .into_iter()
            .map(|(_, t)| to_numpy(py, t, &inputs))
            .collect()
    }

    /// Writes the model as an `.onnx` file at `path` (no graph pass applied; a zoo model
    /// for other runtimes); returns the number of bytes written.
    fn save_onnx(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<usize> {
        let model = &self.model;
        py.allow_threads(|| model.save_onnx(&path))
            .map_err(py_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "Model(name={:?}, inputs={}, outputs={})",
            self.model.graph().name,
            self.model.inputs().len(),
            self.model.outputs().len()
        )
    }
}

fn compile_model(py: Python<'_>, model: &Model, options: Options) -> PyResult<PyCompiledModel> {
    let threads = options.threads;
    let compiled = py
        .allow_threads(|| model.compile(&options))
        .map_err(py_error)?;
    Ok(PyCompiledModel { compiled, threads })
}

/// A compiled model. Safe to run from several Python threads at once (each
/// run releases the GIL and uses its own memory).
#[pyclass(module = "hidet_rs", name = "CompiledModel", frozen)]
struct PyCompiledModel {
    compiled: CompiledModel,
    threads: Option<usize>,
}

/// A run's named outputs, and the storage addresses of its inputs.
type RunOutputs = (Vec<(String, Tensor)>, Vec<usize>);

impl PyCompiledModel {
    /// The run's outputs, and the storage addresses of its inputs ([`to_numpy`]'s `inputs`).
    fn run_tensors(&self, py: Python<'_>, inputs: &Bound<'_, PyAny>) -> PyResult<RunOutputs> {
        let feeds = feeds(inputs, self.compiled.inputs())?;
        let compiled = &self.compiled;
        let outputs = py
            .allow_threads(|| match &feeds {
                Feeds::Named(named) => compiled.run(named),
                Feeds::Positional(list) => compiled.run_positional(list),
            })
            .map_err(py_error)?;
        let storage = match &feeds {
            Feeds::Named(named) => named.iter().map(|(_, t)| t.storage_address()).collect(),
            Feeds::Positional(list) => list.iter().map(Tensor::storage_address).collect(),
        };
        Ok((outputs, storage))
    }
}

#[pymethods]
impl PyCompiledModel {
    #[getter]
    fn inputs(&self) -> Vec<PyTensorInfo> {
        infos(self.compiled.inputs())
    }

    #[getter]
    fn outputs(&self) -> Vec<PyTensorInfo> {
        infos(self.compiled.outputs())
    }

    /// The thread count the kernels were compiled for (None: every core).
    #[getter]
    fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// Runs on `inputs` (a dict name -> array, or a list/tuple of arrays in input order);
    /// returns the outputs as numpy arrays, in output order.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let (outputs, inputs) = self.run_tensors(py, inputs)?;
        outputs
            .into_iter()
            .map(|(_, t)| to_numpy(py, t, &inputs))
            .collect()
    }

    /// `run`, returning a dict output name -> array.
    fn run_dict<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        let (outputs, inputs) = self.run_tensors(py, inputs)?;
        for (name, t) in outputs {
            dict.set_item(name, to_numpy(py, t, &inputs)?)?;
        }
        Ok(dict)
    }

    /// Compiles (and, at a tuning level above 0, tunes) for `shapes`, one per input in input
    /// order, so the first run with them does not; a no-op when already compiled.
    fn prepare(&self, py: Python<'_>, shapes: Vec<Vec<usize>>) -> PyResult<()> {
        let compiled = &self.compiled;
        py.allow_threads(|| compiled.prepare(&shapes))
            .map_err(py_error)
    }

    /// What compiling for `shapes` produced: a dict with `kernels`, `host_steps` (list of
    /// (node, op type)), `inputs_in_place`, `outputs_in_place`, `constant_bytes` (this
    /// shape's own constants), `shared_constant_bytes` (constants shared with the model's
    /// other input shapes), `held_constant_bytes` (constants kernels read where the model
    /// holds them, without a copy), `intermediate_bytes` and `compile_seconds`. Compiles first
    /// if needed.
    fn report<'py>(
        &self,
        py: Python<'py>,
        shapes: Vec<Vec<usize>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let compiled = &self.compiled;
        let report = py
            .allow_threads(|| compiled.report(&shapes))
            .map_err(py_error)?;
        let dict = PyDict::new(py);
        dict.set_item("kernels", report.kernels)?;
        let host: Vec<(String, String)> = report
            .host_steps
            .iter()
            .map(|s| (s.node.clone(), s.op_type.clone()))
            .collect();
        dict.set_item("host_steps", host)?;
        dict.set_item("inputs_in_place", report.inputs_in_place)?;
        dict.set_item("outputs_in_place", report.outputs_in_place)?;
        dict.set_item("constant_bytes", report.constant_bytes)?;
        dict.set_item("shared_constant_bytes", report.shared_constant_bytes)?;
        dict.set_item("held_constant_bytes", report.held_constant_bytes)?;
        dict.set_item("intermediate_bytes", report.intermediate_bytes)?;
        dict.set_item("compile_seconds", report.compile_time.as_secs_f64())?;
        Ok(dict)
    }

    /// Saves the model as compiled so far to one file at `path` (str or os.PathLike):
    /// every compiled set of input shapes with its kernels' machine code, weights and the CPU
    /// features it needs. `load_compiled` runs it on a machine with no C compiler. Returns
    /// how many sets of shapes were saved. CPU models only.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<usize> {
        let compiled = &self.compiled;
        py.allow_threads(|| compiled.save(&path)).map_err(py_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "CompiledModel(inputs=[{}], threads={})",
            self.compiled
                .inputs()
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            self.threads
                .map_or_else(|| "None".to_string(), |n| n.to_string())
        )
    }
}

/// Imports a model: a path (str or os.PathLike) of an `.onnx` file, or its bytes.
#[pyfunction]
fn load(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<PyModel> {
    Ok(PyModel {
        model: load_source(py, source)?,
    })
}

/// Imports (when not already a Model) and compiles a model for `device`: "cpu" (the
/// default), "cuda-sim" (CUDA kernels in the GPU simulator: slow, small models) or "cuda".
#[pyfunction]
#[pyo3(signature = (source, *, threads=None, tuning=0, retune=false, device="cpu"))]
fn compile(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    threads: Option<usize>,
    tuning: u32,
    retune: bool,
    device: &str,
) -> PyResult<PyCompiledModel> {
    let options = options(threads, tuning, retune, device)?;
    if let Ok(model) = source.downcast::<PyModel>() {
        return compile_model(py, &model.get().model, options);
    }
    let model = load_source(py, source)?;
    let compiled = compile_model(py, &model, options);
    // The model as imported goes now: with it, the weights a fixed-shape model repacked.
    drop(model);
    hidet::return_freed_memory();
    compiled
}

/// Loads a compiled model saved by `CompiledModel.save` (or `hidet compile -o`) from `path`,
/// without compiling anything (no C compiler needed); its kernels run on `threads` threads
/// (None: every core). Raises ModelError for a file that is not a saved model, is damaged,
/// or needs CPU features this machine lacks. A saved model holds machine code: load only
/// files you trust.
#[pyfunction]
#[pyo3(signature = (path, *, threads=None))]
fn load_compiled(
    py: Python<'_>,
    path: std::path::PathBuf,
    threads: Option<usize>,
) -> PyResult<PyCompiledModel> {
    let options = options(threads, 0, false, "cpu")?;
    let threads = options.threads;
    let compiled = py
        .allow_threads(move || CompiledModel::load(&path, &options))
        .map_err(py_error)?;
    Ok(PyCompiledModel { compiled, threads })
}

/// The built-in zoo model `name` (see `zoo_models`), with seeded random weights.
#[pyfunction]
fn zoo(py: Python<'_>, name: String) -> PyResult<PyModel> {
    let model = py
        .allow_threads(move || Model::zoo(&name))
        .map_err(py_error)?;
    Ok(PyModel { model })
}

/// The names of the built-in zoo models.
#[pyfunction]
fn zoo_models() -> Vec<&'static str> {
    hidet::zoo::entries().iter().map(|e| e.name).collect()
}

/// Sets the thread count `compile` uses when given none; None (or 0) means every core.
#[pyfunction]
#[pyo3(signature = (threads))]
fn set_threads(threads: Option<usize>) {
    DEFAULT_THREADS.store(threads.unwrap_or(0), Ordering::Relaxed);
}

/// The thread count `compile` uses when given none (None: every core).
#[pyfunction]
fn get_threads() -> Option<usize> {
    match DEFAULT_THREADS.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("HidetError", py.get_type::<HidetError>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyCompiledModel>()?;
    m.add_class::<PyTensorInfo>()?;
    m.add_class::<OutputMemory>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(load_compiled, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(zoo, m)?)?;
    m.add_function(wrap_pyfunction!(zoo_models, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_threads, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
