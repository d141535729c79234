"""Framework integrations: what tilejit knows of each tensor framework, one adapter per
framework (``tilejit.runtime.frameworks.Adapter``), registered here with the runtime.

Each adapter is loaded when a tensor of its framework is first seen, so importing
tilejit imports no framework. A new framework is a module (or a subpackage, as torch's)
beside these, and one ``register`` line below.
"""

from __future__ import annotations

from ..runtime import frameworks as _registry


def _torch():
    from .torch import adapter  # torch is optional: imported with its first tensor

    return adapter.ADAPTER


def _numpy():
    from . import numpy

    return numpy.ADAPTER


_registry.register("torch", _torch, traces=True)
_registry.register("numpy", _numpy, default=True)
