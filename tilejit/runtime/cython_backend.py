"""The compiled Cython wrapper (``wrapper/_tilejit.pyx``) behind ``cython`` and ``dlpack``."""

from __future__ import annotations

from ..native._build import build_tools
from . import binding, host

_module = None


def wrapper_module():
    """The wrapper extension for this interpreter, built and cached on first use, and
    handed the Python functions it calls back (``tilejit.runtime.host``)."""
    global _module
    if _module is None:
        module = build_tools.load_wrapper()
        module.configure(host_address=binding.host_address(),
                         dlpack_capsule=host.dlpack_capsule, producer_error=host.producer_error)
        binding.use_type_offset(module.type_offset(), module.float_value_offset())
        for exchange in (False, True):
            binding.register(module.TensorView, exchange, module.view_producer_address(exchange))
        host.use_array(module.Array, module.empty)
        _module = module
    return _module
