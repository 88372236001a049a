"""Type stubs of the compiled extension (python/src/lib.rs)."""

import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

ArrayLike = npt.ArrayLike
Inputs = Union[Mapping[str, ArrayLike], Sequence[ArrayLike]]
Source = Union[str, "os.PathLike[str]", bytes]

class HidetError(Exception):
    """Every error hidet raises; the message is the one the `hidet` CLI prints."""

class ModelError(HidetError):
    """A model that cannot be read or imported (missing, malformed, truncated, unsupported)."""

class InputError(HidetError):
    """Inputs that do not fit the model (missing, unknown, wrong dtype, shape or count)."""

class TensorInfo:
    """A graph input or output."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str:
        """A numpy dtype name (`float32`, `int64`, ...), or hidet's name for a type numpy
        lacks (`bf16`, `f8e4m3fn`, ...)."""
    @property
    def shape(self) -> Optional[List[Union[int, str, None]]]:
        """Sizes: an int when fixed, the symbol's name when symbolic, None when unknown;
        None altogether when the rank is unknown."""
    @property
    def kind(self) -> str:
        """`tensor`, `sequence`, `optional tensor` or `optional sequence`."""

class OutputMemory:
    """The base object of a large output array: holds the memory the array views."""

class Model:
    """A model as imported; nothing compiled."""

    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...
    def compile(
        self,
        *,
        threads: Optional[int] = None,
        tuning: int = 0,
        retune: bool = False,
        device: str = "cpu",
    ) -> CompiledModel: ...
    def run_reference(self, inputs: Inputs) -> List[np.ndarray]:
        """The reference executor (every operator's own implementation, node by node)."""
    def save_onnx(self, path: Union[str, "os.PathLike[str]"]) -> int:
        """Writes the model as an .onnx file (no graph pass applied); returns its size."""

class CompiledModel:
    """A compiled model; safe to run from several threads at once."""

    @property
    def inputs(self) -> List[TensorInfo]: ...
    @property
    def outputs(self) -> List[TensorInfo]: ...
    @property
    def threads(self) -> Optional[int]: ...
    def run(self, inputs: Inputs) -> List[np.ndarray]:
        """Runs on a dict name -> array or a list of arrays in input order (exact dtypes);
        returns the outputs in output order. The GIL is released while the kernels run.
        C-contiguous inputs are read where they are, without a copy: do not modify an input
        array from another thread while a run reads it. Every output is an array of its own;
        one of 8 MiB or more views memory hidet keeps (its `base` is an `OutputMemory`) and
        reuses for a later run's output once the array and every view of it are gone."""
    def run_dict(self, inputs: Inputs) -> Dict[str, np.ndarray]: ...
    def prepare(self, shapes: Sequence[Sequence[int]]) -> None:
        """Compiles (and tunes) for these input shapes now."""
    def report(self, shapes: Sequence[Sequence[int]]) -> Dict[str, object]:
        """kernels, host_steps, inputs_in_place, outputs_in_place, constant_bytes, shared_constant_bytes,
        held_constant_bytes, intermediate_bytes, compile_seconds."""
    def save(self, path: Union[str, "os.PathLike[str]"]) -> int:
        """Saves every compiled set of input shapes (kernels' machine code, weights, the CPU
        features needed) to one file that `load_compiled` runs without a C compiler; returns
        how many sets of shapes were saved. CPU models only."""

def load(source: Source) -> Model:
    """Imports an .onnx file (path) or its bytes."""

def load_compiled(
    path: Union[str, "os.PathLike[str]"], *, threads: Optional[int] = None
) -> CompiledModel:
    """Loads a model saved by `CompiledModel.save` (or `hidet compile -o`) without compiling
    anything; runs the input shapes it was saved with. Raises ModelError for a damaged file
    or one that needs CPU features this machine lacks. Load only files you trust (they hold
    machine code)."""

def compile(
    source: Union[Source, Model],
    *,
    threads: Optional[int] = None,
    tuning: int = 0,
    retune: bool = False,
    device: str = "cpu",
) -> CompiledModel:
    """Imports (unless given a Model) and compiles for `device`: "cpu", "cuda-sim" (CUDA
    kernels in the GPU simulator: slow, small models) or "cuda" (NVIDIA GPU 0). `threads`:
    kernel threads (default: `set_threads`, else every core); `tuning`: 0 (recorded winners
    or heuristics), 1 or 2 (measure matmul schedules, recorded in the tuning cache; on
    "cuda" the SIMT matmul and convolution schedules, measured on the GPU; not on
    "cuda-sim", which has no timing); `retune`: ignore recorded winners."""

def zoo(name: str) -> Model:
    """A built-in model with seeded random weights (`zoo_models()` lists them)."""

def zoo_models() -> List[str]: ...
def set_threads(threads: Optional[int]) -> None:
    """The thread count `compile` uses when given none (None: every core)."""

def get_threads() -> Optional[int]: ...
