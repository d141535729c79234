"""Framework integrations: what tilejit knows of each tensor framework, one adapter per
framework (``tilejit.runtime.frameworks.Adapter``), registered here with the runtime.

Each adapter is loaded when a tensor of its framework is first seen, so importing
tilejit imports no framework. A new framework is a module (or a subpackage, as torch's)
beside these, and one ``register`` line below.
"""

from __future__ import annotations

import sys

from ..runtime import frameworks as _registry


def _torch():
    # torch is optional: imported with its first tensor. Its adapter is the tracer, and
    # Dynamo inlines the wing's entries (dynamo.ENTRIES) for calls it traces.
    from .torch import adapter, dynamo

    _registry.install_tracer(adapter.ADAPTER, dynamo.ENTRIES, adapter.ADAPTER.is_compiling)
    return adapter.ADAPTER


def _jax():
    from . import jax  # JAX is optional: imported with its first array

    return jax.ADAPTER


def _cupy():
    from . import cupy  # CuPy is optional: imported with its first array

    return cupy.ADAPTER


def _numpy():
    from . import numpy

    return numpy.ADAPTER


# What Dynamo inlines for a call while torch's wing is not loaded yet (a kernel made
# before torch was imported): the wing loads through an import statement (Dynamo runs
# imports, it does not trace them), and its entry for the kind of call runs.


def _traced_kernel_call(kernel, /, *args, **keywords):
    from .torch import dynamo

    return dynamo.traced_call(kernel, *args, **keywords)


def _traced_jit_call(function, /, *args, **kwargs):
    from .torch import dynamo

    return dynamo.traced_jit_call(function, *args, **kwargs)


def _traced_layout_call(function, /, *args, **kwargs):
    from .torch import dynamo

    return dynamo.traced_layout_call(function, *args, **kwargs)


def _torch_compiling() -> bool:
    return sys.modules["torch"].compiler.is_compiling()


_registry.register("torch", _torch,
                   traces={"kernel": _traced_kernel_call, "jit": _traced_jit_call,
                           "layout": _traced_layout_call},
                   compiling=_torch_compiling)
_registry.register("numpy", _numpy, default=True)
_registry.register("cupy", _cupy)
# A kernel made before JAX is imported has its XLA target registered once it is.
_registry.register("jax", _jax, publishes=True)
_registry.register("jaxlib", _jax)  # jax.Array's concrete type lives in jaxlib
