"""Framework adapters: what the runtime asks of a tensor framework, and the registry that
finds the framework of a Python type.

The binding (``tilejit.runtime.binding``, ``tilejit.runtime.host``) names no framework.
For a type of tensor it asks the type's adapter (``adapter_for``):

- ``allocator(dtype, device)``: how outputs are made for calls with such arguments;
- ``stream(device_type, device_id)``: the framework's current stream, for producers
  without the DLPack exchange API;
- ``view_check(cls)`` / ``lazy_view(obj)``: lazy views DLPack cannot describe (torch's
  conjugate and negative bits);
- ``claim(cls)`` / ``claims(obj, failed)`` / ``claimed_call(kernel, args, stream)``: calls
  the framework must run itself (autograd, tracers), handed back by the core
  (``tj_claim``);
- ``tensor_from(values, dtype, device)``, ``device_timer(device)``, ``device_name(device)``:
  inputs an autotuner makes up, and how it times and names the device
  (``tilejit.runtime.autotune``);
- ``import_refusal(obj)``: why an object cannot be imported, said plainly;
  ``exportable(obj)``: an alias ``__dlpack__`` exports when the object is refused;
  ``exported(obj, capsule)``: ``__dlpack__``'s capsule, corrected where the framework
  exports something other than what the tensor says.

An adapter is a subclass of ``Adapter`` (whose methods are the answers of a framework
with none of these features) registered under the top-level module its types come from
(``register("torch", loader)``); the loader runs when a type of that module is first
seen, so an optional framework is imported only by a process that uses it. Built-in
adapters are registered by ``tilejit.frameworks``; a new framework is one module there.

A framework may also trace calls (``torch.compile``): ``register(..., traces=...)``. The
runtime's callables (kernels, ``@jit`` functions) register their ``__call__`` with
``traceable``; when a tracing adapter loads, it installs what its tracer inlines for each
kind of call (``install_tracer``).
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections.abc import Callable

from ..native import abi

CLAIM_NONE, CLAIM_VALIDATED, CLAIM_NOW = (abi.TJ_CLAIM_NONE, abi.TJ_CLAIM_VALIDATED,
                                          abi.TJ_CLAIM_NOW)


class Adapter:
    """A framework as the runtime sees it. The defaults are a framework with no streams,
    no lazy views and no claims; an adapter overrides what its framework has."""

    name = ""  # the top-level module of the framework's types

    def allocator(self, dtype: str, device: tuple[int, int]) -> Callable[[tuple], object]:
        """A function ``shape -> new tensor`` of element type ``dtype`` (tilejit's name)
        on DLPack ``device`` ``(type, id)``."""
        raise NotImplementedError

    def stream(self, device_type: int, device_id: int) -> int:
        """The framework's current stream on a device (0: none)."""
        return 0

    def view_check(self, cls: type):
        """None when objects of ``cls`` are never lazy views; else a ``tj_view_bits``
        tuple to read the bits in place, or a function that asks the framework per object
        (the binding then calls ``lazy_view``)."""
        return

    def lazy_view(self, obj) -> int:
        """The ``TJ_VIEW_*`` bits of ``obj``."""
        return 0

    def reader(self, cls: type):
        """For a type read through ``__dlpack__`` (no DLPack exchange API), a fast path
        that reads its objects in place, with no capsule: ``(read, context, make)``, the
        addresses of a ``tj_producer.read`` function, its context, and a
        ``tj_producer.make`` function (None: outputs come from ``allocator``) over the same
        context, which a call tries before ``__dlpack__`` and the allocator (None: every
        object is read through ``__dlpack__``). The adapter vouches that they give what
        ``__dlpack__`` and ``allocator`` would for every object they read or make, and
        that ``read`` reads no object ``__dlpack__`` would refuse."""
        return

    def tensor_from(self, values, dtype: str, device: str):
        """A tensor of this framework holding NumPy ``values`` as ``dtype`` (tilejit's
        name) on ``device`` (``"cpu"`` or ``"cuda"``): inputs tilejit makes up (an
        autotuner's)."""
        raise NotImplementedError(f"tilejit cannot make {self.name or 'these'} tensors")

    def device_timer(self, device: str):
        """``(start, stop)`` timing what runs between them on the framework's current
        stream of ``device`` (``stop()`` returns seconds, waiting for the stream), or None
        when the framework has no clock of its own there (the host's is used)."""
        return

    def device_name(self, device: str) -> str | None:
        """What the framework calls the current ``device`` (a GPU's name and compute
        capability), or None."""
        return

    def claim(self, cls: type):
        """How the core learns that the framework must run a call with objects of ``cls``
        (``tj_claim``): None (never), ``("always",)``, or ``("ask", probe, scope, key,
        idle)`` (see ``tilejit.runtime.binding``)."""
        return

    def claims(self, obj, failed: int) -> int:
        """The public answer to ``claim`` for one object (``tj_claim_kind``)."""
        return CLAIM_NONE

    def claimed_call(self, kernel, args: tuple, stream):
        """Runs a call the core handed back because this framework claimed it."""
        raise RuntimeError(f"{kernel.name}: the {self.name} adapter claims no calls")

    def publish(self, kernel) -> None:
        """Makes ``kernel`` callable by programs the framework compiled without calling it
        here (JAX: a ``jax.export``-ed program naming the kernel's XLA target)."""
        return

    def import_refusal(self, obj) -> str | None:
        """Why ``obj`` cannot be imported, when the adapter can say it plainly."""
        return None

    def exportable(self, obj) -> object | None:
        """An alias of ``obj`` over the same memory that ``__dlpack__`` exports, when
        ``obj`` itself is refused (BufferError); None: there is none."""
        return None

    def exported(self, obj, capsule):
        """``capsule``, what ``obj.__dlpack__()`` returned, as the core is to read it: the
        framework may correct what its own export gets wrong (torch's strides of size-1
        dimensions, ``tilejit.frameworks.torch.dlpack``)."""
        return capsule


_lock = threading.RLock()
_loaders: dict[str, Callable[[], Adapter]] = {}  # module root -> its adapter's loader
_adapters: dict[str, Adapter] = {}  # module root -> its adapter, once loaded
_default: list[str] = []  # the root of types no adapter claims (NumPy)
_tracing: list[str] = []  # the roots of frameworks that trace calls
_own: dict = {}  # "own" -> tilejit's own adapter (tilejit.Array, calls without tensors)
_by_type: dict = {}  # type -> its adapter, decided once


def register(root: str, loader: Callable[[], Adapter], *, default: bool = False,
             traces: dict | None = None, compiling: Callable[[], bool] | None = None) -> None:
    """Makes ``loader()`` the adapter of types defined under module ``root``; ``default``:
    also of types of no registered framework.

    A framework that traces calls gives ``traces``: for each kind of call, the entry its
    tracer inlines before the adapter is loaded (it loads the adapter with an import
    statement, which Dynamo runs rather than traces), and ``compiling``, whether it is
    tracing, asked without loading the adapter."""
    with _lock:
        _loaders[root] = loader
        if default:
            _default[:] = [root]
        if traces is not None:
            _tracing[:] = [root]
            _deferred.update(traces)
            _compiling_before[:] = [compiling]
            for call, kind in _traceable:
                if kind not in _inlined:
                    call._torchdynamo_inline = traces[kind]
        _by_type.clear()


def register_own(adapter: Adapter) -> None:
    """tilejit's own adapter: for ``NoneType`` (a call with no tensor argument) and the
    types tilejit defines (``tilejit.Array``)."""
    _own["own"] = adapter
    _by_type.clear()


def adapter_named(root: str) -> Adapter:
    """The adapter registered for ``root``, loaded on first use. No lock: a loader returns
    its module's one adapter (the import system serialises the import), and the first
    load may happen while Dynamo traces a call, which cannot trace a lock."""
    adapter = _adapters.get(root)
    if adapter is None:
        adapter = _adapters.setdefault(root, _loaders[root]())
    return adapter


def _root_of(cls: type) -> str | None:
    if cls is type(None):
        return "own"
    for base in getattr(cls, "__mro__", (cls,)):
        root = (getattr(base, "__module__", "") or "").split(".")[0]
        if root in _loaders:
            return root
        if root == "tilejit":
            return "own"
    return _default[0] if _default else None


def adapter_for(cls: type) -> Adapter:
    """The adapter of objects of type ``cls``: a subclass follows its base (a
    ``torch.Tensor`` subclass is torch's), a type of no registered framework gets the
    default's, ``NoneType`` and tilejit's own types tilejit's."""
    adapter = _by_type.get(cls)
    if adapter is None:
        root = _root_of(cls)
        adapter = _own["own"] if root == "own" else adapter_named(root)
        adapter = _by_type.setdefault(cls, adapter)
    return adapter


_claimers: dict = {}  # type -> the adapter of its framework if that framework claims, else None


def claimer(args: tuple) -> Adapter:
    """The adapter that claimed a call with ``args``: that of the first argument whose
    framework claims calls (answered once per type)."""
    for value in args:
        cls = type(value)
        try:
            adapter = _claimers[cls]
        except KeyError:
            found = adapter_for(cls)
            adapter = _claimers.setdefault(
                cls, found if type(found).claimed_call is not Adapter.claimed_call else None)
        if adapter is not None:
            return adapter
    raise RuntimeError("a call was claimed, but no argument is of a framework that claims")


def framework_of(cls: type) -> str:
    """The name of the framework of ``cls`` (``"torch"``, ``"numpy"``, ``"tilejit"``)."""
    return adapter_for(cls).name


# ---- Tracing ---------------------------------------------------------------------------

_traced_objects: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_trace_numbers = itertools.count()


def register_traced(obj) -> None:
    """Gives ``obj`` (a kernel, a jit function) ``obj._trace_key``, a string naming it
    while it lives (``traced_object``). Traced code hands Dynamo's constant functions
    that string, not the object: every torch version reads a string attribute as a
    constant (with a guard on it), while passing a Python object to
    ``torch.compiler.assume_constant_result`` only works from torch 2.13."""
    key = f"{type(obj).__name__}-{next(_trace_numbers)}"
    obj._trace_key = key
    _traced_objects[key] = obj


def traced_object(key: str):
    """The object ``register_traced`` gave ``key``."""
    return _traced_objects[key]


_traceable: list = []  # (function, kind): the __call__ functions a tracer inlines around
_inlined: dict = {}  # kind -> what the loaded tracer inlines for it
_deferred: dict = {}  # kind -> what it inlines before its adapter is loaded
_compiling_before: list = []  # [whether it traces, asked before its adapter is loaded]
_tracer: list = []  # the tracing adapter, once loaded


def load_present() -> None:
    """Loads the adapters of tracing frameworks already imported by the process, so that
    their tracer is installed before they trace a call (a framework imported later is
    loaded when a kernel is made after it, or when it traces a call)."""
    if not _tracer:
        for root in _tracing:
            if root in sys.modules:
                adapter_named(root)


def _compiling_before_tracer() -> bool:
    """Whether a tracer runs the call, asked before a tracing adapter is loaded: only a
    framework already imported can be tracing."""
    return bool(_tracing) and _tracing[0] in sys.modules and _compiling_before[0]()


compiling = _compiling_before_tracer
"""Whether a tracer (torch.compile) is tracing the call: the tracing adapter's own
``is_compiling`` once it is loaded (``install_tracer``)."""


def traceable(call, kind: str, fast_paths: bool) -> None:
    """Registers ``call`` (a class's ``__call__``) as a call of ``kind`` ("kernel", "jit",
    "layout") that a tracer inlines around: with the fast paths, ``call.
    _torchdynamo_inline`` names the entry Dynamo traces in its place (the loaded
    tracer's, else the one the tracing framework registered to load it)."""
    if not fast_paths:
        return
    with _lock:
        _traceable.append((call, kind))
        entry = _inlined.get(kind) or _deferred.get(kind)
        if entry is not None:
            call._torchdynamo_inline = entry


def deferred_entry(kind: str):
    """The entry a tracer runs for a call of ``kind`` when the call's ``__call__`` takes
    the traced branch itself (``compiling()``, without the fast paths)."""
    return _inlined.get(kind) or _deferred[kind]


def install_tracer(adapter, inlined: dict, is_compiling: Callable[[], bool]) -> None:
    """Makes ``adapter`` the tracer: ``inlined[kind]`` is what it traces for each kind of
    call (on every call registered, and to be registered), ``is_compiling`` how a call
    knows it is traced."""
    global compiling
    with _lock:
        _tracer[:] = [adapter]
        _inlined.update(inlined)
        compiling = is_compiling
        for call, kind in _traceable:
            call._torchdynamo_inline = inlined[kind]
