"""tilejit: run compiled kernels on torch, NumPy and DLPack tensors with minimal overhead.

>>> import tilejit
>>> from tilejit import T
>>> n = T.symbol("n")
>>> prog = tilejit.Program(name="vec_add", source=SRC, params=[
...     T.Buffer((n,), "float32", name="A"), T.Buffer((n,), "float32", name="B"),
...     T.Buffer((n,), "float32", name="C")])
>>> kernel = tilejit.compile(prog, out_idx=-1)
>>> c = kernel(a, b)
"""

from . import frameworks  # noqa: F401  (registers the framework adapters)
from .builder.compiler import CompileError
from .language.dtypes import canonical as _canonical
from .language.lang import T
from .language.pointer import Pointer, make_ptr
from .language.program import Launch, Program
from .runtime import cython_backend as _cython_backend
from .runtime.compilation import CompileErrors, compile, compile_many, load
from .runtime.jit import JITFunction, jit
from .runtime.kernel import JITKernel
from .runtime.views import from_dlpack
from .version import VERSION as __version__


def empty(shape, dtype="float32", device="cpu"):
    """An uninitialised host tensor of tilejit's own (``tilejit.Array``), readable zero-copy
    by ``torch.from_dlpack`` / ``numpy.from_dlpack`` and by kernels through the DLPack C
    exchange API. Needs the compiled wrapper.

    >>> a = tilejit.empty((2, 3), "float32")
    """
    return _cython_backend.wrapper_module().empty(shape, _canonical(dtype), device)


_AUTOTUNE = ("AutotuneError", "autotune", "autotune_inputs")


def __getattr__(name):
    """``tilejit.autotune`` (with ``AutotuneError`` and ``autotune_inputs``) is imported on
    first access. ``tilejit.Array``, the class of ``tilejit.empty``'s tensors, is defined by the compiled
    wrapper (``wrapper/_array.pxi``): it is loaded, and built if need be, on first access
    only, so that ``import tilejit`` compiles nothing. Without a wrapper (no Cython, no C
    compiler) the access raises ImportError saying why."""
    if name in _AUTOTUNE:  # imported on first use: a start that never tunes skips it
        from .runtime import autotune

        globals().update({n: getattr(autotune, n) for n in _AUTOTUNE})
        return globals()[name]
    if name != "Array":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        array = _cython_backend.wrapper_module().Array
    except Exception as exc:  # whatever stopped the build or the load
        raise ImportError(f"tilejit.Array is defined by the compiled Cython wrapper, which "
                          f"cannot be loaded: {exc}", name=__name__) from exc
    globals()["Array"] = array  # later accesses are plain attribute reads
    return array


def __dir__():
    return sorted({*globals(), "Array", *_AUTOTUNE})


__all__ = [
    "AutotuneError",
    "CompileError",
    "CompileErrors",
    "JITFunction",
    "JITKernel",
    "Launch",
    "Pointer",
    "Program",
    "T",
    "__version__",
    "autotune",
    "autotune_inputs",
    "compile",
    "compile_many",
    "empty",
    "from_dlpack",
    "jit",
    "load",
    "make_ptr",
]
