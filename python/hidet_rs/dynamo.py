"""The `torch.compile` backend `hidet_rs`.

    import torch, hidet_rs.dynamo  # the import is optional: the entry point registers it
    compiled = torch.compile(model, backend="hidet_rs")
    with torch.no_grad():
        y = compiled(x)

The backend is registered through the ``torch_dynamo_backends`` entry point, so
``backend="hidet_rs"`` works once the package is installed. ``hidet_rs.dynamo.backend(threads=N)``
makes one with options.

How a graph is lowered: every FX graph that dynamo hands over is exported to ONNX in memory
with torch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``) and compiled
by hidet like any ONNX file. We chose this over translating ATen operators one by one because
the exporter already lowers the whole of ATen that torchvision and transformers use onto ONNX's
~190 operators, which hidet implements completely (the ONNX conformance suite), so coverage
comes from code that exists and is tested on both sides; a direct ATen translation would need
a Python-visible graph builder and a mapping for hundreds of ATen overloads. The cost is the
export time (about as long as a trace) on each compile.

What happens on a call:

- Parameters and buffers that dynamo lifts into graph inputs are baked into the exported model
  as constants (captured when the graph is first compiled for a shape: the backend is for
  inference, and a model whose weights are then changed in place must be compiled again).
- Each distinct set of input shapes, dtypes and integer arguments (dynamo passes symbolic sizes
  as integers after a shape changed) is exported and compiled once, then reused; a new batch
  size compiles anew.
- A graph that cannot be exported or compiled (an operator the exporter or hidet lacks, an
  output that is not a tensor, inputs on another device), or a call with autograd recording
  (inputs or weights requiring grad with grad mode on), runs eagerly, with one log line
  (logger ``hidet_rs``) naming the reason. Graph breaks are dynamo's: each piece between them
  is a graph of its own, compiled or run eagerly on its own.
- Inputs reach hidet as numpy views of the torch tensors (no copy on the torch side; hidet
  copies each input once into its own tensor), and outputs come back as torch tensors that
  share the numpy arrays hidet filled (no copy).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.utils._pytree as pytree

import hidet_rs

log = logging.getLogger("hidet_rs")

__all__ = ["backend", "hidet_rs_backend"]

# The ONNX opset of the export (the TorchScript exporter's best-covered one).
OPSET = 17


def _is_weight(node: torch.fx.Node, value: Any) -> bool:
    """Whether a graph input is a parameter or buffer that dynamo lifted into the inputs."""
    if isinstance(value, torch.nn.Parameter):
        return True
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    if source is None:
        return False
    try:
        guard = source.guard_source()
    except Exception:  # a source kind without a guard source: not a module attribute
        return False
    return "NN_MODULE" in getattr(guard, "name", "")


@contextlib.contextmanager
def _quiet_exporter():
    """Keeps the exporter from printing its whole TorchScript graph to stdout when it fails
    (``torch.onnx.utils`` logs it through ``torch._C._jit_onnx_log``, with the log always on):
    the fallback's one log line names the failure instead. The hook is private to torch, so
    it is replaced only where it exists, and restored afterwards."""
    original = getattr(torch._C, "_jit_onnx_log", None)
    if original is None:
        yield
        return
    torch._C._jit_onnx_log = lambda *args: None
    try:
        yield
    finally:
        torch._C._jit_onnx_log = original


class _Eager:
    """A shape whose graph runs eagerly, with the reason (logged once)."""

    def __init__(self, reason: str):
        self.reason = reason


class _Exported(torch.nn.Module):
    """`gm` with its weights and integer arguments fixed, taking only the runtime tensors and
    returning its outputs flattened: what is exported to ONNX."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], runtime: List[int]):
        super().__init__()
        self.gm = gm
        self.runtime = runtime
        self.template: List[Any] = []
        for i, a in enumerate(args):
            if i in runtime:
                self.template.append(None)
            elif isinstance(a, torch.Tensor):
                name = f"_weight{i}"
                self.register_buffer(name, a.detach(), persistent=False)
                self.template.append(name)
            else:
                self.template.append(("value", a))

    def forward(self, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        full: List[Any] = []
        it = iter(tensors)
        for slot in self.template:
            if slot is None:
                full.append(next(it))
            elif isinstance(slot, str):
                full.append(getattr(self, slot))
            else:
                full.append(slot[1])
        return tuple(pytree.tree_leaves(self.gm(*full)))


class _CompiledGraph:
    """The callable the backend returns for one FX graph (see the module docs)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], threads: Optional[int]):
        self.gm = gm
        self.threads = threads
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.weights = {
            i for i, (n, x) in enumerate(zip(placeholders, example_inputs)) if _is_weight(n, x)
        }
        self.cache: Dict[Tuple[Any, ...], Any] = {}
        self.logged: set = set()

    def _eager(self, reason: str, args: Sequence[Any]):
        if reason not in self.logged:
            self.logged.add(reason)
            log.warning("hidet_rs: running graph `%s` eagerly: %s", self.gm.__class__.__name__, reason)
        return self.gm(*args)

    def _key(self, args: Sequence[Any]) -> Tuple[Any, ...]:
        key: List[Any] = []
        for i, a in enumerate(args):
            if i in self.weights:
                continue
            if isinstance(a, torch.Tensor):
                key.append((tuple(a.shape), a.dtype, a.device.type))
            else:
                key.append(("value", a))
        return tuple(key)

    def _compile(self, args: Sequence[Any]):
        runtime = [i for i, a in enumerate(args) if i not in self.weights and isinstance(a, torch.Tensor)]
        tensors = [args[i] for i in runtime]
        if any(t.device.type != "cpu" for t in list(tensors) + [args[i] for i in self.weights if isinstance(args[i], torch.Tensor)]):
            return _Eager("hidet_rs runs on the CPU; an input is on another device")
        with torch.no_grad():
            outputs = self.gm(*args)
        leaves, spec = pytree.tree_flatten(outputs)
        if not all(isinstance(x, torch.Tensor) for x in leaves):
            kinds = sorted({type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)})
            return _Eager(f"outputs that are not tensors ({', '.join(kinds)})")
        module = _Exported(self.gm, args, runtime).eval()
        buffer = io.BytesIO()
        try:
            with torch.no_grad(), warnings.catch_warnings(), _quiet_exporter():
                # The TorchScript-based exporter is chosen on purpose (see the module docs).
                warnings.simplefilter("ignore", DeprecationWarning)
                torch.onnx.export(
                    module,
                    tuple(tensors),
                    buffer,
                    dynamo=False,
                    opset_version=OPSET,
                    input_names=[f"input{i}" for i in range(len(tensors))],
                    output_names=[f"output{i}" for i in range(len(leaves))],
                    do_constant_folding=True,
                )
        except Exception as e:  # the exporter lacks an operator, or cannot trace the graph
            return _Eager(f"ONNX export failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        try:
            compiled = hidet_rs.compile(buffer.getvalue(), threads=self.threads)
        except hidet_rs.HidetError as e:
            return _Eager(f"hidet: {e}")
        if len(compiled.outputs) != len(leaves):
            # The exporter dropped an output (an input returned as is): keep eager semantics.
            return _Eager("the exported model has another number of outputs than the graph")
        return (compiled, runtime, spec)

    def __call__(self, *args: Any):
        if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        ):
            return self._eager(
                "autograd is recording (run under torch.no_grad() or torch.inference_mode())",
                args,
            )
        key = self._key(args)
        entry = self.cache.get(key)
        if entry is None:
            entry = self._compile(args)
            self.cache[key] = entry
        if isinstance(entry, _Eager):
            return self._eager(entry.reason, args)
        compiled, runtime, spec = entry
        feeds = [np.asarray(args[i].detach().numpy()) for i in runtime]
        outputs = compiled.run(feeds)
        return pytree.tree_unflatten([torch.from_numpy(o) for o in outputs], spec)


def backend(threads: Optional[int] = None) -> Callable[..., Any]:
    """A torch.compile backend whose kernels run on `threads` threads (default:
    `hidet_rs.set_threads`, else every core)."""

    def compile_fx(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any):
        return _CompiledGraph(gm, example_inputs, threads)

    return compile_fx


def hidet_rs_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """The backend registered as ``hidet_rs`` (``torch_dynamo_backends`` entry point)."""
    return backend()(gm, example_inputs, **kwargs)
