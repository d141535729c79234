"""What torch's claim reads in place, found and checked once per process.

Every call of a kernel on torch tensors asks whether torch must run it (autograd must
record it, ``tilejit.frameworks.torch.adapter``). Asked the public way that costs a
Python call per tensor; the fast way reads what torch's own C++ reads:

- ``grad_probe``: libc10's exported ``TensorImpl::requires_grad() const`` and
  ``GradMode::is_enabled()``, and where a ``TensorImpl`` keeps its autograd record
  (``autograd_meta_``, NULL on a tensor autograd does not know), so most tensors cost one
  memory read;
- ``forward_ad_scope``: ``torch.autograd.forward_ad``'s record of its current level, -1
  outside any, so forward-mode tangents are asked for only inside a level.

Each is checked against torch's public answers on tensors of every kind, on a thread of
its own; when anything does not match, None, and the public way is asked.
"""

from __future__ import annotations

import sys

from ...language import dtypes as _dtypes
from ...runtime.fast_paths import decided as _decided
from ...runtime.fast_paths import in_fresh_thread
from .views import _Memory

_REQUIRES_GRAD = "_ZNK3c1010TensorImpl13requires_gradEv"  # c10::TensorImpl::requires_grad() const
_GRAD_ENABLED = "_ZN3c108GradMode10is_enabledEv"  # c10::GradMode::is_enabled()


def grad_probe(torch):
    """``(offset, requires_grad, grad_enabled, meta_offset)`` for torch's claim: a tensor's
    Python object keeps its ``TensorImpl *`` in one word (``THPVariable::cdata``, found as
    the word equal to ``Tensor._cdata``: ``views.impl_offset``), which libc10's exported
    ``TensorImpl::requires_grad() const`` takes; ``GradMode::is_enabled()`` takes
    nothing. All three are checked against torch's own answers on tensors of every kind
    (leaf, result, view, detached, Parameter, made under no_grad), on a thread of their
    own; when anything does not match (another torch, another platform's C++ ABI), None:
    the public way is asked instead (``TorchAdapter.claims``)."""
    import ctypes
    from pathlib import Path

    from .views import _samples, impl_offset

    def probe():
        memory = _Memory()
        try:
            offset = impl_offset(torch, memory, _samples(torch))
        finally:
            memory.close()
        if offset is None:
            raise LookupError("no word of torch.Tensor's object holds its TensorImpl's address")
        libraries = sorted((Path(torch.__file__).parent / "lib").glob("libc10.*"))
        if not libraries:
            raise LookupError("libc10 not found")
        c10 = ctypes.CDLL(str(libraries[0]))
        requires_grad, grad_enabled = c10[_REQUIRES_GRAD], c10[_GRAD_ENABLED]
        requires_grad.restype, requires_grad.argtypes = ctypes.c_bool, [ctypes.c_void_p]
        grad_enabled.restype, grad_enabled.argtypes = ctypes.c_bool, []

        def asks(tensor) -> bool:
            return requires_grad(ctypes.c_void_p.from_address(id(tensor) + offset).value)

        leaf = torch.ones(2, requires_grad=True)
        cases = [torch.ones(2), leaf, leaf * 2, leaf[:1], leaf.detach(),
                 torch.nn.Parameter(torch.ones(1)), torch.ones(1).requires_grad_()]
        with torch.no_grad():
            cases.append(leaf * 2)
            off = grad_enabled()
        with torch.enable_grad():
            on = grad_enabled()
        if off or not on or any(asks(t) != t.requires_grad for t in cases):
            raise LookupError("libc10's answers differ from torch's")
        return (offset, ctypes.cast(requires_grad, ctypes.c_void_p).value,
                ctypes.cast(grad_enabled, ctypes.c_void_p).value, _autograd_meta_offset(torch))

    try:
        found = in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001 - any mismatch means: ask the public way
        _decided("autograd claim (libc10)", False, f"{type(exc).__name__}: {exc}")
        return None
    record = (f"TensorImpl's autograd record at byte {found[3]}" if found[3] >= 0 else
              "TensorImpl's autograd record not found: libc10 asked for every tensor")
    _decided("autograd claim (libc10)", True, f"libc10's answers match torch's; TensorImpl "
             f"pointer at byte {found[0]} of the tensor object; {record}")
    return found


# forward_ad's record of its current level, and its value outside any level: the one
# int object -1 is in CPython, which the core compares by identity (tj_host_claim_mode).
FORWARD_LEVEL, IDLE_LEVEL = sys.intern("_current_level"), -1


def _autograd_meta_offset(torch) -> int:
    """Where a ``TensorImpl`` keeps its autograd record (``autograd_meta_``), NULL for a
    tensor that neither requires grad nor carries a forward-mode tangent (nor is a view
    autograd tracks): the one word of the TensorImpl that is NULL on fresh tensors and
    set on every tensor requiring grad or carrying a tangent, read as
    ``tilejit.frameworks.torch.views`` reads the lazy-view bits. -1 when it cannot be told apart:
    every tensor is then asked libc10.

    Making a tensor with a tangent costs a fresh process a third of a second (torch loads
    its forward-AD decompositions), so the search runs once per torch build and is kept
    on disk (``fast_paths.kept``); a kept offset is used only when it still tells the
    tensors without a record from those with one (all but the tangents) in this process."""

    def find() -> int:
        candidates = _meta_candidates(torch, tangents=True)
        return 8 * candidates[0] if candidates is not None and len(candidates) == 1 else -1

    def holds(offset) -> bool:
        if offset == -1:  # kept "not found": every tensor is asked libc10, which is right
            return True
        candidates = _meta_candidates(torch, tangents=False)
        return (isinstance(offset, int) and offset % 8 == 0 and candidates is not None
                and offset // 8 in candidates)

    return kept("autograd record (TensorImpl)", _torch_build(torch), find, holds)


def _torch_build(torch) -> str:
    """What tells one torch build from another: its version, commit, and its libc10 file."""
    import os
    import platform
    from pathlib import Path

    libraries = sorted((Path(torch.__file__).parent / "lib").glob("libc10.*"))
    stats = [(path, os.stat(path)) for path in libraries]
    files = [f"{path} {info.st_size} {info.st_mtime_ns}" for path, info in stats]
    return " ".join([torch.__version__, str(getattr(torch.version, "git_version", "")),
                     sys.implementation.cache_tag, platform.machine(), *files])


def _meta_candidates(torch, tangents: bool) -> list[int] | None:
    """The TensorImpl words (by index) NULL on tensors autograd does not know and set on
    those it does (with ``tangents``, forward-mode duals among them); None when a
    TensorImpl cannot be read."""
    from torch.autograd import forward_ad

    leaf = torch.ones(3, requires_grad=True)
    without = [torch.ones(3), torch.zeros(2, 2), torch.empty(0), leaf.detach(),
               torch.ones(3, dtype=torch.int32),
               torch.ones(1, 3, 2, 2).to(memory_format=torch.channels_last)]
    with torch.no_grad():
        without.append(leaf * 2)
    with_record = [leaf, leaf * 2, leaf[1:], torch.nn.Parameter(torch.ones(2)),
                   torch.ones(2).requires_grad_()]
    memory = _Memory()
    try:
        if tangents:
            with forward_ad.dual_level():
                dual = forward_ad.make_dual(torch.ones(3), torch.ones(3))
                # A result with a tangent (dual + dual: dual * 2 would load torch._dynamo).
                with_record += [dual, dual + dual]
                tables = [memory.words(t._cdata, 512) for t in (*without, *with_record)]
        else:
            tables = [memory.words(t._cdata, 512) for t in (*without, *with_record)]
    finally:
        memory.close()
    if any(words is None for words in tables):
        return None
    return [i for i in range(min(map(len, tables)))
            if all(w[i] == 0 for w in tables[:len(without)])
            and all(w[i] != 0 for w in tables[len(without):])]


def forward_ad_scope(torch):
    """The namespace of ``torch.autograd.forward_ad`` when its ``_current_level`` reads
    -1 outside a dual level and a level inside one (checked on a thread of its own);
    else None (every tensor is asked ``TorchAdapter.claims``)."""
    from torch.autograd import forward_ad

    def probe():
        space = vars(forward_ad)
        if space.get(FORWARD_LEVEL) is not IDLE_LEVEL:  # the very object the core compares
            raise LookupError("forward_ad._current_level is not the int -1 outside a level")
        with forward_ad.dual_level():
            inside = space.get(FORWARD_LEVEL)
        if (not isinstance(inside, int) or inside < 0
                or space.get(FORWARD_LEVEL) is not IDLE_LEVEL):
            raise LookupError("forward_ad._current_level does not follow dual_level()")
        return space

    try:
        found = in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001
        _decided("forward-AD level", False, f"{type(exc).__name__}: {exc}")
        return None
    _decided("forward-AD level", True, "forward_ad._current_level follows dual_level()")
    return found


PLAIN_CALL = "torch op autograd kernel in C (plain calls)"
TLS_INCLUDED = "_ZN3c104impl26raw_local_dispatch_key_setE"  # c10::impl::raw_local_...


def plain_call(torch, handle_is_impl, tls_word, handles):
    """``(meta_offset, keyset_offset, plain keysets, tls symbol, fw_grad, undefined)`` for
    the C autograd kernel of an op (``tj_torch_plain``, tilejit/torch.h), or None:

    - where a ``TensorImpl`` keeps its autograd record (``_autograd_meta_offset``);
    - where it keeps its dispatch key set (``views.locate``), and the key sets of plain
      dense tensors (CPU; CUDA when torch has a GPU), equal on tensors of several dtypes
      and on views, different on a conjugate view and a FakeTensor;
    - libc10's exported thread-local ``c10::impl::raw_local_dispatch_key_set``, whose
      first word (the included keys XOR the default ones, read by ``tls_word``) is 0 on
      a fresh thread, as torch's default include set says, and not inside a
      ``TorchDispatchMode``, under ``torch.func.vmap`` or ``grad`` (whose wrapped
      tensors' key sets are not plain either), nor in inference mode;
    - ``handle_is_impl()``: an AtenTensorHandle's first word is its TensorImpl's address;
    - libtorch's exported ``torch::autograd::AutogradMeta::fw_grad(level, self) const``
      and libc10's ``c10::UndefinedTensorImpl`` singleton (``_tangent_probe``; both None
      when they do not check out: a tensor with an autograd record is then never plain).

    Checked on a thread of its own; None (and the reason recorded) when anything does not
    match."""
    from .views import locate

    def probe():
        located = locate()
        meta = _autograd_meta_offset(torch)
        if located is None or meta < 0:
            raise LookupError("the TensorImpl's key set or autograd record was not found")
        keyset_offset = located[1]
        if not handle_is_impl():
            raise LookupError("an AtenTensorHandle does not start with its TensorImpl")
        plain = _plain_keysets(torch, keyset_offset)
        _check_thread_word(torch, tls_word)
        return (meta, keyset_offset, plain, TLS_INCLUDED,
                *_tangent_probe(torch, meta, handles))

    try:
        found = in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001 - any mismatch means: ask Python's autograd
        _decided(PLAIN_CALL, False, f"{type(exc).__name__}: {exc}")
        return None
    tangents = ("libtorch's AutogradMeta::fw_grad for tangents" if found[4] is not None else
                "tangents not readable: a tensor with an autograd record is never plain")
    _decided(PLAIN_CALL, True, f"autograd record at byte {found[0]}, key set at byte "
             f"{found[1]} of the TensorImpl; libc10's thread-local included keys; {tangents}")
    return found


def _plain_keysets(torch, keyset_offset: int) -> list:
    """The key set words of plain dense tensors (CPU; CUDA when torch has a GPU), read at
    ``keyset_offset`` of their TensorImpl: one per device, the same for tensors of several
    dtypes and for views; LookupError unless a conjugate view, a FakeTensor and
    functorch's wrappers (as grad and vmap hand them over) all have another.

    A tracer's tensors (FakeTensor, FunctionalTensor) are wrapper subclasses with their
    own ``__torch_dispatch__``, which puts torch's Python key in their key set: a wrapper
    subclass of that kind stands for them here, and a meta tensor for their device. (Making
    a real FakeTensorMode imports torch._dynamo and sympy, seconds on a first call.)"""
    from .views import _Memory

    class Dispatching(torch.Tensor):  # a tracer's tensor, as far as its key set goes
        @staticmethod
        def __new__(cls, shape):
            return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError(f"{func} is not run by the probe")

    memory = _Memory()
    try:
        def keyset(tensor) -> int:
            words = memory.words(tensor._cdata + keyset_offset, 8)
            if words is None:
                raise LookupError("a TensorImpl could not be read")
            return words[0]

        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        plain = []
        for device in devices:
            samples = [torch.ones(3, device=device),
                       torch.ones(2, 2, dtype=torch.int64, device=device)[:, 1],
                       torch.zeros(1, dtype=torch.bool, device=device),
                       torch.empty(0, dtype=torch.float16, device=device)]
            words = {keyset(t) for t in samples}
            if len(words) != 1:
                raise LookupError(f"plain {device} tensors differ in their key sets")
            plain.extend(words)
        others = [keyset(torch.zeros(2, dtype=torch.complex64).conj()),
                  keyset(Dispatching((3,))), keyset(torch.empty(3, device="meta"))]
        _inside_grad(torch, lambda x: others.append(keyset(x)))
        torch.func.vmap(lambda x: others.append(keyset(x)) or x)(torch.ones(2, 2))
        if any(word in plain for word in others):
            raise LookupError("a conjugate view, a FakeTensor or a functorch wrapper "
                              "has a plain key set")
        return plain
    finally:
        memory.close()


class _Seen(Exception):
    """Ends a ``torch.func.grad`` transform once the probe has seen what it looks at."""


def _inside_grad(torch, look) -> None:
    """``look(x)`` on the tensor ``torch.func.grad`` hands its function, inside the
    transform; the transform is left before its backward, which would import
    torch._dynamo (seconds, on a first call) for nothing the probe needs."""
    def function(x):
        look(x)
        raise _Seen

    try:
        torch.func.grad(function)(torch.ones(2))
    except _Seen:
        pass


def _check_thread_word(torch, tls_word) -> None:
    """LookupError unless libc10's thread-local included keys (``tls_word``) are 0 outside
    everything and not 0 inside a TorchDispatchMode, torch.func.vmap and grad, and
    inference mode, leaving the thread's include set as it was."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watching(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    default = torch._C._dispatch_tls_local_include_set()
    outside = tls_word(TLS_INCLUDED)
    seen = []
    with Watching():
        seen.append(tls_word(TLS_INCLUDED))
    torch.func.vmap(lambda x: seen.append(tls_word(TLS_INCLUDED)) or x)(torch.ones(2, 2))
    _inside_grad(torch, lambda x: seen.append(tls_word(TLS_INCLUDED)))
    with torch.inference_mode():
        seen.append(tls_word(TLS_INCLUDED))
    if outside != 0 or 0 in seen or torch._C._dispatch_tls_local_include_set() != default:
        raise LookupError("libc10's thread-local key set does not follow dispatch modes, "
                          "functorch's transforms and inference mode")


_FW_GRAD = "_ZNK5torch8autograd12AutogradMeta7fw_gradEmRKN2at10TensorBaseE"
_UNDEFINED = "_ZN3c1019UndefinedTensorImpl10_singletonE"  # c10::UndefinedTensorImpl::_singleton


def _tangent_probe(torch, meta_offset: int, handles) -> tuple:
    """``(fw_grad, undefined)`` addresses, checked against ``forward_ad.unpack_dual`` on
    tensors with and without a tangent (inside a dual level, and outside), or
    ``(None, None)``: what tells the C autograd kernel that a tensor with an autograd
    record carries no tangent (``tj_torch_plain.fw_grad``)."""
    import ctypes
    from pathlib import Path

    from torch.autograd import forward_ad

    from .views import _Memory

    try:
        lib = Path(torch.__file__).parent / "lib"
        cpu, c10 = sorted(lib.glob("libtorch_cpu.*")), sorted(lib.glob("libc10.*"))
        if not cpu or not c10:
            return None, None
        fw_grad_address = ctypes.cast(ctypes.CDLL(str(cpu[0]))[_FW_GRAD], ctypes.c_void_p).value
        undefined = ctypes.addressof(ctypes.c_char.in_dll(ctypes.CDLL(str(c10[0])), _UNDEFINED))
        fw_grad = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                                   ctypes.c_void_p)(fw_grad_address)
        tensor_of, handle_of = handles
        memory = _Memory()
        try:
            def untangled(tensor) -> bool:
                words = memory.words(tensor._cdata + meta_offset, 8)
                if words is None or words[0] == 0:
                    raise LookupError("no autograd record where one was expected")
                handle = handle_of(tensor)
                try:
                    answer = fw_grad(words[0], 0, handle)
                    return ctypes.c_void_p.from_address(answer).value == undefined
                finally:
                    tensor_of(handle)  # frees the handle

            leaf = torch.ones(3, requires_grad=True)
            cases = [leaf, leaf * 2, leaf[1:]]
            with forward_ad.dual_level():
                dual = forward_ad.make_dual(torch.ones(3), torch.ones(3))
                cases += [dual, dual + dual, leaf]
                answers = [untangled(t) for t in cases]
                truth = [forward_ad.unpack_dual(t).tangent is None for t in cases]
            answers += [untangled(leaf), untangled(dual)]  # the level closed: no tangents
            truth += [True, True]
        finally:
            memory.close()
        if answers != truth:
            return None, None
        return fw_grad_address, undefined
    except (LookupError, OSError, AttributeError, ValueError):
        return None, None


APPLY = "autograd.Function C apply (_FunctionBase.apply)"


def apply_probe(torch, conventions) -> bool:
    """Whether the C apply of an ``autograd.Function`` of the metaclass ``conventions``
    (``autograd._Conventions``: outside functorch's transforms its forward takes ``ctx``)
    records a call with no Python frame of torch's in between, only its forward and the
    metaclass's own: no signature binding (``inspect``), no ``Function.apply`` logic.
    Measured on a thread of its own with a profile hook, once per process; recorded for
    ``doctor``."""
    import sys
    import threading

    def probe():
        def forward(ctx, x):
            return x * 2

        def backward(ctx, grad):
            return grad * 2

        Probe = conventions("Probe", (torch.autograd.Function,), {
            "forward": staticmethod(forward), "backward": staticmethod(backward),
            "_setup": staticmethod(lambda ctx, inputs, output: None)})
        apply = super(torch.autograd.Function, Probe).apply
        x = torch.ones(2, requires_grad=True)
        seen: list = []

        def profile(frame, event, arg):
            if event == "call":
                seen.append(frame.f_code.co_filename)

        sys.setprofile(profile)
        try:
            y = apply(x)
        finally:
            sys.setprofile(None)
        if y.grad_fn is None or type(y.grad_fn).__name__ != "ProbeBackward":
            raise LookupError("the C apply did not record the call")
        y.sum().backward()
        if x.grad is None or x.grad.tolist() != [2.0, 2.0]:
            raise LookupError("the recorded call's gradient is wrong")
        ours = (__file__, threading.__file__, sys.modules[conventions.__module__].__file__)
        torch_frames = [f for f in seen if f not in ours]
        if torch_frames:
            raise LookupError(f"the C apply runs Python besides forward: {torch_frames[0]}")

    try:
        in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001 - any mismatch: autograd.Function.apply
        _decided(APPLY, False, f"{type(exc).__name__}: {exc}; autograd.Function.apply")
        return False
    _decided(APPLY, True, "the C apply autograd.Function.apply ends in, checked to record a "
             "call running no Python but the op's Function's forward")
    return True


def kept(name: str, build: str, find, holds):
    """What ``find()`` finds for fast path ``name`` on ``build`` (the other project's build it
    reads, say a torch wheel), found once per build and kept in the disk cache
    (``probes/``), so that a fresh process skips a search that costs more than its first
    call should. A kept finding is used only when ``holds(value)``, a cheap check of it in
    this process, is true; else it is found again and kept anew. ``find`` returns a JSON
    value, and its exceptions reach the caller. Without a usable cache (disabled,
    unwritable, damaged), ``find()``."""
    import hashlib
    import json

    from ...builder.cache import cache_dir, cache_disabled
    from ...native._build import disk_cache
    from ...version import VERSION

    if cache_disabled():
        return find()
    found: list = []

    def write(path) -> None:
        try:
            found.append(find())
        except BaseException as exc:  # the finding's own failure, not the cache's
            raise _NotFound from exc
        path.write_text(json.dumps(found[-1]), encoding="utf-8")

    digest = hashlib.sha256(f"{name}\0{build}\0{VERSION}".encode()).hexdigest()[:32]
    info = {"kind": "probe", "name": name}

    def entry(force: bool = False):
        return disk_cache.with_fallback(lambda: disk_cache.get_or_build(
            cache_dir() / "probes" / digest, "probe.json", write, force=force, info=info))

    try:
        value = json.loads(entry().read_text(encoding="utf-8"))
        if found or holds(value):
            return value
        value = json.loads(entry(force=True).read_text(encoding="utf-8"))
    except _NotFound as failed:
        raise failed.__cause__ from None
    except (OSError, ValueError):  # no usable cache: found here, every process
        return found[-1] if found else find()
    return value


class _NotFound(Exception):
    """``kept``'s ``find`` failed (its exception is the cause)."""


READER = "tensors read in place (TensorImpl, torch without the exchange API)"
# torch's dtypes a tensor may have, each checked (those this torch lacks are left out):
# the element-type table's torch column, the packed (two-lane) ones aside.
_DTYPES = tuple(d.torch for d in _dtypes.ALL.values() if d.torch and d.lanes == 1)
_EVERY_DTYPE = (1 << 64) - 1


def reader_probe(torch, read_as, impl_offset: int):
    """``(impl_vtable, dtypes)`` for the core's in-place read of a tensor
    (``tj_torch_reader``), or None (the reason recorded). ``read_as(tensor, vtable,
    dtypes)`` is what the core reads of a tensor under those settings (a ``DLTensor``, or
    None where it does not read it). The ``TensorImpl``'s virtual table is the first word
    of every plain tensor's; a dtype is read where the core's reading of a tensor of it
    is ``__dlpack__``'s (``tilejit.runtime.host.dlpack_capsule``: the detached alias of a
    tensor that requires grad, the strides of size-1 dimensions written back). Then, on
    tensors of every kind (views, lazy views, size 0 and 1, expanded, offset, requires
    grad, subclasses, every dtype; sparse, nested, meta, inference and functorch's
    wrappers, which it must leave to ``__dlpack__``), whatever the core reads must be
    what ``__dlpack__`` says, and a tensor ``__dlpack__`` refuses must not be read.
    Checked on a thread of its own."""
    import ctypes
    import warnings

    def probe():
        with warnings.catch_warnings():  # torch's on its beta kinds (ComplexHalf, CSR, nested)
            warnings.simplefilter("ignore")
            return checked()

    def checked():
        plain = _plain_tensors(torch)
        vtables = {ctypes.c_void_p.from_address(t._cdata).value for t in plain}
        if len(vtables) != 1:
            raise LookupError("plain tensors' TensorImpls differ in their first word")
        vtable = vtables.pop()
        if any(ctypes.c_void_p.from_address(id(t) + impl_offset).value != t._cdata
               for t in plain):
            raise LookupError(f"a tensor object holds no TensorImpl * at byte {impl_offset}")
        dtypes = 0
        for tensor in _dtype_tensors(torch):
            got = read_as(tensor, vtable, _EVERY_DTYPE)
            if got is not None and _public(tensor) == _read(got):
                code = next(c for c in range(64) if read_as(tensor, vtable, 1 << c) is not None)
                dtypes |= 1 << code
        if read_as(torch.ones(2, 3), vtable, dtypes) is None:
            raise LookupError("a plain float32 tensor is not read in place")
        for tensor in _reader_samples(torch) + _dtype_tensors(torch):
            _check_read(tensor, read_as(tensor, vtable, dtypes))
        wrapped: list = []  # functorch's wrappers, read where they exist
        torch.func.grad(lambda x: wrapped.append(read_as(x, vtable, dtypes)) or x.sum())(
            torch.ones(2))
        torch.func.vmap(lambda x: wrapped.append(read_as(x, vtable, dtypes)) or x)(
            torch.ones(2, 2))
        if any(got is not None for got in wrapped):
            raise LookupError("a functorch wrapper is read in place")
        return vtable, dtypes

    try:
        found = in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001 - any mismatch: every tensor through __dlpack__
        _decided(READER, False, f"{type(exc).__name__}: {exc}; every tensor through __dlpack__")
        return None
    count = bin(found[1]).count("1")
    _decided(READER, True, f"plain dense tensors of {count} dtypes read through torch's "
             f"stable C ABI (TensorImpl * at byte {impl_offset} of the tensor object), "
             "checked against __dlpack__ on tensors of every kind; the rest through __dlpack__")
    return found


def _plain_tensors(torch) -> list:
    """Plain dense tensors, on the CPU and (where torch has one) the GPU."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    return [t for device in devices for t in (
        torch.ones(3, device=device), torch.ones(2, 2, dtype=torch.int64, device=device)[:, 1],
        torch.zeros(1, dtype=torch.bool, device=device),
        torch.empty(0, dtype=torch.float16, device=device))]


def _dtype_tensors(torch) -> list:
    """A ``(2, 3)`` tensor of every dtype this torch has and can make."""
    tensors = []
    for name in _DTYPES:
        dtype = getattr(torch, name, None)
        try:
            tensors.append(torch.empty(2, 3, dtype=dtype))
        except (TypeError, RuntimeError):  # no such dtype here, or none to make
            continue
    return tensors


def _reader_samples(torch) -> list:
    """Tensors of every kind the in-place read must agree with ``__dlpack__`` on."""
    from .views import _samples

    grid = torch.zeros(3, 100)
    samples = [*_samples(torch), *_plain_tensors(torch), grid[:1, :4], grid[:, :1],
               grid[1:, 3:], grid[::2, ::7], torch.zeros(3).expand(4, 3), torch.zeros(1, 0),
               grid[:, :0], torch.zeros(2, 1, 3)[:, :, 1:], torch.zeros(5, dtype=torch.int8)[1:],
               torch.zeros(3, requires_grad=True)[1:]]
    with torch.no_grad():
        samples.append(torch.zeros(3, requires_grad=True) * 2)
    with torch.inference_mode():
        samples.append(torch.zeros(3))
    others = [lambda: torch.zeros(2, 2).to_sparse(), lambda: torch.zeros(2, 2).to_sparse_csr(),
              lambda: torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)]),
              lambda: torch.empty(2, device="meta"), lambda: torch.zeros(2, 2).to_mkldnn()]
    if torch.cuda.is_available():
        others += [lambda: torch.zeros(4, 3, device="cuda")[1:, ::2],
                   lambda: torch.zeros(1, 5, device="cuda")[:, 1:]]
    for make in others:
        try:
            samples.append(make())
        except (RuntimeError, ValueError, TypeError):  # a kind this build lacks
            continue
    return samples


def _public(tensor):
    """What ``__dlpack__`` (tilejit's fallback, as a call asks it) says of ``tensor``:
    ``dlpack.described``'s tuple, or the exception it raises."""
    from ...runtime import host
    from .dlpack import described

    try:
        capsule = host.dlpack_capsule(tensor)
    except Exception as exc:  # noqa: BLE001 - a refusal, compared as such
        return exc
    return described(capsule)


def _read(dl) -> tuple:
    """The core's reading as ``dlpack.described`` states a capsule's (flags 0: it sets
    none)."""
    from .dlpack import fields

    return (*fields(dl), 0)


def _check_read(tensor, got) -> None:
    """LookupError unless the core's reading ``got`` (None: left to ``__dlpack__``) is what
    ``__dlpack__`` says of ``tensor``, which it must not read where ``__dlpack__`` refuses."""
    if got is None:
        return
    public = _public(tensor)
    said = f"{type(public).__name__}: {public}" if isinstance(public, Exception) else public
    if public != _read(got):
        raise LookupError(f"the in-place read of a {tuple(tensor.shape)} {tensor.dtype} "
                          f"tensor says {_read(got)}, __dlpack__ {said}")


MAKER = "outputs made in C (THPVariable_Wrap, torch without the exchange API)"


def maker_probe(torch, make_as) -> bool:
    """Whether the core's outputs made in C (``make_as(prototype)``: torch's stable C ABI's
    ``empty_strided``, wrapped by libtorch_python's ``THPVariable_Wrap``) are what the
    public allocator's ``torch.empty`` makes: a ``torch.Tensor`` of the shape, strides,
    dtype and device asked, not requiring grad, its storage and its Python object held
    by nothing else (freed with its last reference: nothing leaked), on every dtype it
    makes (float32 at least; it leaves the others to ``torch.empty``) and every device.
    Checked on a thread of its own; recorded for ``doctor``."""
    import ctypes
    import sys
    import warnings
    import weakref

    from ...native.ctypes_abi import DLDataType, DLDevice, DLTensor

    def made_like(shape, dtype, device) -> bool:
        expected = torch.empty(shape, dtype=dtype, device=device)
        kind = _dtypes.DTYPES.get(str(dtype).removeprefix("torch."))
        if kind is None:  # no kernel takes it: never made
            return False
        sizes = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        where = (2, expected.device.index) if expected.is_cuda else (1, 0)
        prototype = DLTensor(None, DLDevice(*where), len(shape), DLDataType(*kind.dlpack),
                             sizes)
        made = make_as(prototype)
        if made is None:
            return False
        same = (type(made) is torch.Tensor and made.shape == expected.shape
                and made.stride() == expected.stride() and made.dtype == dtype
                and made.device == expected.device and not made.requires_grad
                and made.grad_fn is None and made.layout == torch.strided
                and sys.getrefcount(made) == sys.getrefcount(expected))
        if not same:
            raise LookupError(f"the {dtype} {shape} tensor made in C differs from torch.empty's")
        alive = weakref.ref(made)
        del made
        if alive() is not None:
            raise LookupError("a tensor made in C outlives its last reference")
        return True

    def probe():
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        with warnings.catch_warnings():  # torch's on ComplexHalf
            warnings.simplefilter("ignore")
            kinds = [t.dtype for t in _dtype_tensors(torch)]
        for device in devices:
            for shape in ((2, 3), (1, 4), (4, 1), (0,), (2, 0, 3), ()):
                if not made_like(shape, torch.float32, device):
                    raise LookupError(f"no float32 tensor made on {device}")
            for dtype in kinds:
                made_like((3,), dtype, device)

    try:
        in_fresh_thread(probe)
    except Exception as exc:  # noqa: BLE001 - any mismatch: torch.empty, from Python
        _decided(MAKER, False, f"{type(exc).__name__}: {exc}; outputs from torch.empty")
        return False
    _decided(MAKER, True, "torch's stable C ABI's empty_strided, wrapped by libtorch_python's "
             "THPVariable_Wrap, checked against torch.empty on every dtype read in place")
    return True
