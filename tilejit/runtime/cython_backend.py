"""The compiled Cython wrapper (``wrapper/_tilejit.pyx``) behind ``cython`` and ``dlpack``."""

from __future__ import annotations

from ..native._build import build_tools
from . import binding, fast_paths, host

_module = None


def _int_layout(module) -> tuple:
    """Where exact ints keep a one-digit value, for the core to read in place: a fast
    path (CPython's PyLongObject layout, as the wrapper's headers state it and checked
    by the wrapper on this interpreter); ``(-1, -1, -1)`` when it is off."""
    name = "exact ints read in place (PyLongObject)"
    if not fast_paths.FAST_PATHS:
        fast_paths.decided(name, False, "TILEJIT_FAST_PATHS=0")
        return (-1, -1, -1)
    layout = module.int_layout()
    if layout[0] < 0:
        fast_paths.decided(name, False, "the interpreter's int layout is not one the core "
                                        "reads, or it failed the wrapper's check")
        return layout
    fast_paths.decided(name, True, f"{'ob_size' if layout[0] == 1 else 'lv_tag'} at byte "
                                   f"{layout[1]}, first digit at byte {layout[2]}, checked")
    return layout


def wrapper_module():
    """The wrapper extension for this interpreter, built and cached on first use, and
    handed the Python functions it calls back (``tilejit.runtime.host``)."""
    global _module
    if _module is None:
        module = build_tools.load_wrapper()
        module.configure(host_address=binding.host_address(),
                         dlpack_capsule=host.dlpack_capsule, producer_error=host.producer_error)
        binding.use_type_offset(module.type_offset(), module.float_value_offset(),
                                _int_layout(module))
        for exchange in (False, True):
            binding.register(module.TensorView, exchange, module.view_producer_address(exchange))
        host.use_array(module.Array, module.empty)
        _module = module
    return _module
