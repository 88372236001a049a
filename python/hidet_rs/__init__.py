"""hidet_rs: hidet, the Rust deep-learning compiler, from Python.

Compile an ONNX model for this CPU and run it on numpy arrays::

    import hidet_rs, numpy as np
    model = hidet_rs.compile("model.onnx", threads=2)
    outputs = model.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

`torch.compile(module, backend="hidet_rs")` uses it as a torch.compile backend (see
`hidet_rs.dynamo`).

The import name is ``hidet_rs`` (distribution ``hidet-rs``) so that it never clashes with the
original Hidet's ``hidet`` package on PyPI.
"""

from ._native import (
    CompiledModel,
    HidetError,
    InputError,
    Model,
    ModelError,
    TensorInfo,
    __version__,
    compile,
    get_threads,
    load,
    load_compiled,
    set_threads,
    zoo,
    zoo_models,
)

__all__ = [
    "CompiledModel",
    "HidetError",
    "InputError",
    "Model",
    "ModelError",
    "TensorInfo",
    "__version__",
    "compile",
    "get_threads",
    "load",
    "load_compiled",
    "set_threads",
    "zoo",
    "zoo_models",
]
