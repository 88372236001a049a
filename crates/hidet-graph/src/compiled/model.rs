//! A model compiled lazily per input shapes: graph inputs with symbolic dimensions are
//! compiled for the concrete shapes seen, once per distinct set of shapes. Shapes are bound
//! before the backend's graph passes run ([`Graph::with_input_shapes`]), so a model exported
//! with symbolic dimensions compiles into the same kernels as its static export at the same
//! shapes. The graphs for different shapes share their large constants ([`ConstantPool`]),
//! and at most [`CompileOptions::kept_shapes`] of them are kept: a model fed ever new shapes
//! keeps the ones used most recently.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::backend::{Backend, BackendError, CompileOptions};
use super::constant_pool::ConstantPool;
use super::graph::{CompiledError, CompiledGraph};
use crate::executor::check_input_data;
use crate::graph::Graph;
use crate::passes::run_passes;
use crate::registry::Registry;
use crate::tensor::Tensor;
use crate::value::Datum;

/// How many sets of input shapes a [`CompiledModel`] keeps compiled graphs for, unless
/// [`CompileOptions::kept_shapes`] says otherwise; compiling for one more drops the least
/// recently used.
pub const MAX_SHAPE_SIGNATURES: usize = 64;

/// Compiled graphs by input shapes, each with the tick of its last use.
type ShapeCache<B> = HashMap<Vec<Vec<usize>>, (u64, Arc<CompiledGraph<B>>)>;

/// A graph with a backend and a cache of [`CompiledGraph`]s keyed by input shapes.
/// `Send + Sync`: any number of threads may call [`CompiledModel::run`] at once.
///
/// The graph is kept as given (a model as imported); each compilation binds it to the input
/// shapes (when any dimension is symbolic), applies the backend's graph passes
/// ([`Backend::graph_passes`]) and compiles the result.
pub struct CompiledModel<B: Backend> {
    /// The source graph; its rebuildable weights are replaced by deferred tensors once a
    /// compilation has derived what the backend rebuilds them from
    /// ([`Backend::defer_rebuildable_initializers`]).
    graph: RwLock<Arc<Graph>>,
    backend: Arc<B>,
    opts: CompileOptions,
    cache: Mutex<ShapeCache<B>>,
    /// Counts uses of the cache (the recency of each entry).
    ticks: std::sync::atomic::AtomicU64,
    pool: ConstantPool<B>,
}

impl<B: Backend> std::fmt::Debug for CompiledModel<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledModel")
            .field("graph", &self.graph().name)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> CompiledModel<B> {
    /// A model of `graph` for `backend`; nothing is compiled yet. `graph` must not have been
    /// through the backend's graph passes: every compilation applies them.
    pub fn new(graph: Graph, backend: B, opts: CompileOptions) -> CompiledModel<B> {
        CompiledModel {
            graph: RwLock::new(Arc::new(graph)),
            backend: Arc::new(backend),
            opts,
            cache: Mutex::new(HashMap::new()),
            ticks: std::sync::atomic::AtomicU64::new(0),
            pool: ConstantPool::default(),
        }
    }

    /// The graph as given to [`CompiledModel::new`], except that weights the backend can
    /// rebuild may be deferred stand-ins holding the same elements
    /// ([`Backend::defer_rebuildable_initializers`]).
    pub fn graph(&self) -> Arc<Graph> {
        match self.graph.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The backend every graph is compiled for.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Every compiled graph the model keeps (see [`CompileOptions::kept_shapes`]), ordered by
    /// input shapes.
    pub fn compiled_graphs(&self) -> Result<Vec<Arc<CompiledGraph<B>>>, CompiledError> {
        let cache = self
            .cache
            .lock()
            .map_err(|_| BackendError::Memory("compile cache poisoned".into()))?;
        let mut graphs: Vec<_> = cache.iter().collect();
        graphs.sort_by(|a, b| a.0.cmp(b.0));
        Ok(graphs
            .into_iter()
            .map(|(_, (_, g))| Arc::clone(g))
            .collect())
    }

    /// The graph compiled for `shapes`: bound to them when any input dimension is symbolic,
    /// then rewritten by the backend's graph passes. An error names the input and the
    /// dimension when `shapes` contradict the graph.
    pub fn optimized_graph(&self, shapes: &[Vec<usize>]) -> Result<Graph, CompiledError> {
        let graph = self.graph();
        let bound = if graph.has_static_inputs() {
            graph.check_input_shapes(shapes)?;
            (*graph).clone()
        } else {
            graph.with_input_shapes(shapes, Registry::global())?
        };
        Ok(run_passes(bound, &self.backend.graph_passes())
            .map_err(|e| graph.bind_error(shapes, e))?)
    }

    /// The compiled graph for `shapes` (one per runtime input, in input order; see
    /// [`CompiledModel::optimized_graph`]), compiled now if not cached. Compilations are
    /// serialized; a graph with symbolic inputs shares its large constants with the model's
    /// other compiled graphs. Compiling for a new set of shapes when as many as
    /// [`CompileOptions::kept_shapes`] are kept drops the least recently used one (runs
    /// holding it finish).
    pub fn compiled(&self, shapes: &[Vec<usize>]) -> Result<Arc<CompiledGraph<B>>, CompiledError> {
        let tick = self
            .ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| BackendError::Memory("compile cache poisoned".into()))?;
        if let Some((used, c)) = cache.get_mut(shapes) {
            *used = tick;
            return Ok(Arc::clone(c));
        }
        let symbolic = !self.graph().has_static_inputs();
        let pool = symbolic.then_some(&self.pool);
        let compiled = Arc::new(CompiledGraph::compile_pooled(
            &self.optimized_graph(shapes)?,
            shapes,
            Arc::clone(&self.backend),
            &self.opts,
            pool,
        )?);
        if symbolic {
            self.defer_rebuildable_initializers();
        }
        let kept = self.opts.kept_shapes.unwrap_or(MAX_SHAPE_SIGNATURES).max(1);
        while cache.len() >= kept {
            let oldest = cache
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(oldest) => cache.remove(&oldest),
                None => break,
            };
        }
        cache.insert(shapes.to_vec(), (tick, Arc::clone(&compiled)));
        Ok(compiled)
    }

    /// Checks `inputs` against the graph's declared inputs (as the reference executor does),
    /// then runs the compiled graph for their shapes.
    pub fn run(&self, inputs: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, CompiledError> {
        Ok(crate::executor::into_tensors(
            self.run_data(&crate::executor::as_data(inputs))?,
        )?)
    }

    /// [`CompiledModel::run`] for inputs and outputs of any kind. Sequence and optional
    /// inputs do not take part in the choice of compiled graph (they run on the host).
    pub fn run_data(
        &self,
        inputs: &[(String, Datum)],
    ) -> Result<Vec<(String, Datum)>, CompiledError> {
        self.compiled_for(inputs)?.run_data(inputs)
    }

    /// Puts the backend's deferred stand-ins for the source graph's rebuildable weights
    /// ([`Backend::defer_rebuildable_initializers`]) in the source graph, so the originals
    /// are freed unless something else holds them. Called with the compile cache locked
    /// (compilations serialized); runs reading the graph meanwhile keep the one they read.
    fn defer_rebuildable_initializers(&self) {
        let Ok(mut graph) = self.graph.write() else {
            return;
        };
        let swaps = self.backend.defer_rebuildable_initializers(&graph);
        if swaps.is_empty() {
            return;
        }
        let mut deferred = (**graph).clone();
        for (id, tensor) in swaps {
            let replaced = deferred.replace_initializer(id, tensor);
            debug_assert!(replaced, "a stand-in has its initializer's dtype and shape");
        }
        *graph = Arc::new(deferred);
    }

    /// Checks `inputs` against the graph's declared inputs and returns the compiled graph
    /// that [`CompiledModel::run_data`] runs them with (compiled now if not cached), so a
    /// caller can read its [`CompiledGraph::report`] for the shapes of a run.
    pub fn compiled_for(
        &self,
        inputs: &[(String, Datum)],
    ) -> Result<Arc<CompiledGraph<B>>, CompiledError> {
        let graph = self.graph();
        check_input_data(&graph, inputs)?;
        let shapes: Vec<Vec<usize>> = graph
            .inputs()
            .iter()
            .map(|id| {
                let name = &graph.value(*id).name;
                inputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .and_then(|(_, d)| d.as_tensor())
                    .map(|t| t.shape().to_vec())
                    .unwrap_or_default()
            })
            .collect();
        self.compiled(&shapes)
    }
}
