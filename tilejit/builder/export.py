"""Kernels that leave the Python process: ``kernel.export(path)`` writes a directory that
``tilejit.load(path)`` (Python) and ``tj_kernel_open`` (C) open without a compiler.

An export holds the compiled image, ``signature.tj`` (everything the core builds the
kernel from, one builder call per line), ``kernel.h`` (the prototype and the signature
for C readers) and ``MANIFEST`` (versions, target, architecture, each file's size and
SHA-256). The core reads and checks both text files (``core/src/open.c``), and is their
only reader; this module writes them, and turns what the core read (the kernel's declared
signature and what ``signature.tj`` says beyond it) into the Python objects a kernel
carries (its parameters, symbols and prototypes). docs/export.md describes the format.

>>> kernel.export("out/vec_add")
>>> k = tilejit.load("out/vec_add")
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from ..language import dtypes as _dtypes
from ..language.lang import (
    _BINARY,
    OP_CONST,
    OP_SYM,
    BinaryExpr,
    Buffer,
    PointerParam,
    Scalar,
    Symbol,
    Workspace,
    shape_text,
)
from ..language.program import Program
from ..native import abi
from ..native._build import build_tools
from ..version import VERSION
from .artifact import Artifact
from .signature import (
    AbiSpec,
    CoreSpec,
    KernelArg,
    KernelFunction,
    LaunchSpec,
    ParamSpec,
    Signature,
    TensorMapSpec,
)

EXPORT_FORMAT = 1  # MANIFEST; the core (open.c) reads this version only
SIGNATURE_FORMAT = 1  # signature.tj
SIGNATURE_FILE = "signature.tj"
TARGET_NAMES = {abi.TJ_TARGET_CPU: "cpu", abi.TJ_TARGET_CUDA: "cuda"}
_BY_DLPACK = {d.dlpack: name for name, d in _dtypes.DTYPES.items()}
_OPS = {code: op for op, (code, _) in _BINARY.items()}


# ---- Writing ---------------------------------------------------------------------------


def _dtype(triple) -> str:
    return "{}:{}:{}".format(*triple)


def _abi_fields(entries) -> list:
    fields = [len(entries)]
    for a in entries:
        fields += [a.source, a.index, _dtype(a.dtype)]
    return fields


def _line(*fields) -> str:
    return " ".join(str(f) for f in fields)


def signature_text(artifact: Artifact, image_files: dict) -> str:
    """``signature.tj`` for a kernel's ``artifact``: the builder calls of its core kernel in
    order, the Python-side lines (``out_idx``, ``function``, ``arg``) and the ``load``
    line naming the image files (``image_files``: role -> file name in the export)."""
    sig = artifact.signature
    spec = sig.spec
    lines = [f"tilejit-signature {SIGNATURE_FORMAT}",
             f"# {artifact.name}, exported by tilejit {VERSION}",
             _line("kernel", spec.name, TARGET_NAMES[spec.target], len(spec.params))]
    lines += [_line("symbol", name, divisibility, _dtype(dtype))
              for name, divisibility, dtype in spec.symbols]
    for code, text in spec.exprs:
        lines.append(_line("expr", len(code) // 2, *code, *([text] if text else [])))
    for index, p in enumerate(spec.params):
        if p.kind == abi.TJ_PARAM_SCALAR:
            lines.append(_line("scalar", index, p.name, _dtype(p.dtype),
                               *([p.binds] if p.binds >= 0 else [])))
        elif p.kind == abi.TJ_PARAM_POINTER:
            lines.append(_line("pointer", index, p.name, _dtype(p.dtype), p.align, p.flags))
        else:
            strides = ["-"] if p.strides is None else list(p.strides)
            lines.append(_line("buffer", index, p.name, _dtype(p.dtype), p.align, p.flags,
                               len(p.shape), *p.shape, *strides))
    for m in spec.tensormaps:
        if m.im2col is None:
            lines.append(_line("tensormap", m.name, m.param, m.data_type, len(m.dims), *m.dims,
                               *m.strides, *m.box, *m.element_strides, m.interleave,
                               m.swizzle, m.l2_promotion, m.oob_fill))
        else:
            lower, upper, channels, pixels = m.im2col
            lines.append(_line("tensormap_im2col", m.name, m.param, m.data_type, len(m.dims),
                               *m.dims, *m.strides, *m.element_strides, *lower, *upper,
                               channels, pixels, m.interleave, m.swizzle, m.l2_promotion,
                               m.oob_fill))
    if spec.abi is not None:
        lines.append(_line("abi", *_abi_fields(spec.abi)))
    for index, launch in enumerate(spec.launches):
        lines.append(_line("launch", launch.symbol, *launch.grid, *launch.block,
                           launch.shared_memory, *_abi_fields(launch.abi)))
        if launch.cluster is not None or launch.flags:
            cluster = ["-"] if launch.cluster is None else list(launch.cluster)
            lines.append(_line("launch_attrs", index, *cluster, launch.flags))
    lines.append(_line("out_idx", len(sig.out_idx), *sig.out_idx))
    for function in sig.functions:
        lines.append(_line("function", function.name, function.c_prototype))
        for a in function.kernel_args:
            lines.append(_line("arg", a.name, a.source, a.index, a.dtype, int(a.pointer),
                               int(a.const), -1 if a.param is None else a.param))
    if "glue" in image_files:
        lines.append(_line("load_prebuilt", image_files["glue"], sig.entry,
                           image_files["library"], spec.name))
    else:
        lines.append(_line("load", image_files["image"], sig.entry))
    return "\n".join(lines) + "\n"


def header_text(artifact: Artifact) -> str:
    """``kernel.h``: the kernel's prototype and its signature, for C and C++ readers,
    with the argument and output positions ``tj_call_bind`` and ``tj_call_set_output``
    take as macros."""
    sig = artifact.signature
    upper = sig.name.upper()
    outputs = sorted(sig.out_idx)
    args = sig.inputs

    def describe(i: int) -> str:
        p = artifact.params[i]
        if isinstance(p, Buffer):
            extra = "".join([f", strides {tuple(map(str, p.strides))}" if p.strides else "",
                             ", const" if p.const else "", ", optional (NULL: none)"
                             if p.optional else "", f", align {p.align}" if p.align else ""])
            return f"{p.dtype} tensor, shape {shape_text(p.shape)}{extra}"
        if isinstance(p, Scalar):
            return f"{p.dtype} scalar"
        return f"{p.dtype} pointer" + (", const" if p.const else "")

    lines = [f"/* {sig.name}: a {sig.target} kernel exported by tilejit {VERSION}.",
             " *",
             " * Open the export directory with tj_kernel_open (#include <tilejit/tilejit.h>)",
             " * and call it with tj_call_bind, tj_call_set_output and tj_call_launch, which",
             " * check every argument. tj_call_bind's arguments, in order:"]
    lines += [f" *   {j}  {sig.names[i]}: {describe(i)}" for j, i in enumerate(args)]
    if outputs:
        lines.append(" * Outputs (tj_call_set_output, declaration order; shapes in the frame):")
        lines += [f" *   {j}  {sig.names[i]}: {describe(i)}" for j, i in enumerate(outputs)]
    workspaces = artifact.program.workspaces
    if workspaces:
        lines.append(" * Workspaces, allocated per call by whoever launches (tj_call_set_output")
        lines.append(f" * from index {len(outputs)}; shapes in the frame after the outputs'):")
        named = sig.spec.params[len(sig.names):]  # the workspaces, as the core names them
        lines += [f" *   {len(outputs) + j}  {spec.name}: {w.dtype}, shape {shape_text(w.shape)}"
                  f"{', zero-filled by the launch' if w.zero else ''}"
                  for j, (w, spec) in enumerate(zip(workspaces, named))]
    if sig.symbols:
        lines.append(" * Symbols, bound from the arguments: " + ", ".join(
            f"{s.name} ({s.dtype}" + (f", multiple of {s.divisibility})" if s.divisibility > 1
                                      else ")") for s in sig.symbols))
    lines += [" *", " * The kernel function(s) in the image, as tilejit declared them:"]
    lines += [f" *   {f.c_prototype}" for f in sig.functions]
    lines += [" */", f"#ifndef TILEJIT_EXPORT_{upper}_H_", f"#define TILEJIT_EXPORT_{upper}_H_",
              "", f"#define {upper}_NUM_ARGS {len(args)}",
              f"#define {upper}_NUM_OUTPUTS {len(outputs)}",
              f"#define {upper}_NUM_WORKSPACES {len(workspaces)}",
              "/* The XLA FFI target a JAX program calls it by (tilejit/xla.h): register the",
              " * opened kernel under it with tj_xla_register, and tj_xla_handler with XLA. */",
              f"#define {upper}_JAX_TARGET \"{artifact.jax_target}\""]
    lines += [f"#define {upper}_ARG_{sig.names[i].upper()} {j}" for j, i in enumerate(args)]
    lines += [f"#define {upper}_OUTPUT_{sig.names[i].upper()} {j}"
              for j, i in enumerate(outputs)]
    lines += ["", f"#endif /* TILEJIT_EXPORT_{upper}_H_ */", ""]
    return "\n".join(lines)


def _arch(artifact: Artifact) -> str:
    if artifact.target == "cpu":
        return platform.machine()
    return artifact.cuda_arch or "unknown"


def export(artifact: Artifact, path, *, overwrite: bool = False) -> Path:
    """Writes the kernel of ``artifact`` to the directory ``path`` (see the module
    docstring); returns it.
    A non-empty existing directory is refused unless ``overwrite``, which replaces it
    whole: the new export is written beside it and moved in place."""
    target = Path(path).absolute()
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{artifact.name}: cannot export to {target}: it is a file")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise FileExistsError(f"{artifact.name}: cannot export to {target}: the directory is not "
                              "empty (pass overwrite=True to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        if artifact.prebuilt is not None:
            files = {"glue": "glue.so", "library": "kernel.so"}
        else:
            files = {"image": f"kernel{Path(artifact.library).suffix or '.so'}"}
        # Every listed file's bytes, written and hashed from memory: the MANIFEST vouches
        # for exactly what was written, with no second read of the files.
        contents = {files[role]: data for role, data in _vouched_images(artifact).items()}
        contents[SIGNATURE_FILE] = signature_text(artifact, files).encode()
        contents["kernel.h"] = header_text(artifact).encode()
        contents.update(_torch_op_files(artifact))
        manifest = [f"tilejit-export {EXPORT_FORMAT}", f"tilejit {VERSION}",
                    f"target {artifact.target}", f"arch {_arch(artifact)}"]
        for name, data in sorted(contents.items()):
            (staging / name).write_bytes(data)
            os.chmod(staging / name, 0o644)
            manifest.append(f"file {name} {len(data)} {hashlib.sha256(data).hexdigest()}")
        (staging / "MANIFEST").write_text("\n".join(manifest) + "\n")
        os.chmod(staging, 0o755)
        _move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _torch_op_files(artifact: Artifact) -> dict:
    """``torch_op.txt``, ``torch_op.so`` and the core library it links, for a kernel that
    can be a torch op: torch then loads the export's kernel as its op by itself
    (``torch.ops.load_library(path + "/torch_op.so")``, core/torch_op/torch_op.c), and a C
    program links the core beside it. Without a C compiler to build torch_op.so (once per
    core, cached), the export goes without it, saying so on stderr."""
    from .torch_schema import export_text

    text = export_text(artifact)
    if text is None:
        return {}
    try:
        core = build_tools.build_core_library()
        torch_op = build_tools.build_torch_op_library()
    except RuntimeError as exc:
        print(f"tilejit: {artifact.name}: exported without torch_op.so: {exc}",
              file=sys.stderr)
        return {}
    return {"torch_op.txt": text.encode(), "torch_op.so": torch_op.read_bytes(),
            core.name: core.read_bytes()}


def adopt_core(directory: Path) -> None:
    """Before an export is opened: the copy of the core it carries (beside torch_op.so)
    becomes this process's core when this tilejit's is neither cached nor prebuilt and
    the process has loaded none yet, so that ``tilejit.load`` works where nothing can
    build the core. The copy must be this source tree's core and match the SHA-256 its
    MANIFEST lists (the core then checks the whole export as ever)."""
    from ..native import library

    if library.core_loaded():
        return
    try:
        lines = (directory / "MANIFEST").read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return  # the core's open says what is wrong
    for line in lines:
        fields = line.split()
        if len(fields) == 4 and fields[0] == "file" and fields[1].startswith("libtilejit_core-"):
            build_tools.adopt_core_library(directory / fields[1], fields[3])


def _vouched_images(artifact: Artifact) -> dict:
    """The bytes of the kernel's images ({"image"} or {"glue", "library"}) that an export
    may vouch for: those it was built and loaded from. Kept ones were verified when the
    kernel loaded them (a loaded kernel's are the bytes the core checked when it opened
    the export, whose directory may hold another export by now); otherwise the files are
    read again and must still have the SHA-256 they had when the kernel loaded them
    (``Artifact.digests``): a file changed or replaced since is refused, naming it."""
    if artifact.images is not None:
        return dict(zip(artifact.roles, artifact.images))
    paths = [artifact.library] + ([artifact.prebuilt] if artifact.prebuilt is not None else [])
    images = {}
    for role, path, want in zip(artifact.roles, paths, artifact.digests):
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"{artifact.name}: cannot export: its library {path} cannot be "
                             f"read ({exc.strerror}); compile the kernel again") from None
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise ValueError(f"{artifact.name}: cannot export: {path} is not the library the "
                             f"kernel was built and loaded from (SHA-256 {want}); it was "
                             f"changed or replaced since (now {got}). Compile the kernel again")
        images[role] = data
    return images


def _exchange(staging: Path, target: Path) -> bool:
    """Swaps ``staging`` and ``target`` in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``); False where the system or file system cannot."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(staging), at_fdcwd, os.fsencode(target),
                     rename_exchange) == 0


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _move_into_place(staging: Path, target: Path) -> None:
    """Moves ``staging`` to ``target``. An existing ``target`` is swapped with it in one
    step where the system can (a reader finds the old export whole or the new one whole),
    else renamed aside first (for an instant, between the two renames, there is none);
    the old export is removed after."""
    if target.exists() and _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)
        return
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / "export")
    try:
        os.rename(staging, target)
    except BaseException:
        if old is not None:
            os.rename(old / "export", target)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# ---- Reading -----------------------------------------------------------------------------


def _decode(code: tuple, symbols: list):
    """The expression an RPN program computes (``lang.lower_expr`` backwards)."""
    stack = []
    for op, operand in zip(code[::2], code[1::2]):
        if op == OP_CONST:
            stack.append(operand)
        elif op == OP_SYM:
            stack.append(symbols[operand])
        elif op == abi.TJ_OP_NEG:  # the core's unary minus, which tilejit never writes
            stack.append(BinaryExpr(_OPS[abi.TJ_OP_SUB], 0, stack.pop()))
        else:
            rhs, lhs = stack.pop(), stack.pop()
            stack.append(BinaryExpr(_OPS[op], lhs, rhs))
    (expr,) = stack
    return expr


def _spec(declared: dict, name: str) -> CoreSpec:
    """The core's reading of the builder calls (``CoreKernel.declared``) as a ``CoreSpec``."""
    def entries(raw):
        return tuple(AbiSpec(*a) for a in raw)

    return CoreSpec(
        name, declared["target"], tuple(declared["symbols"]), tuple(declared["exprs"]),
        tuple(ParamSpec(*p) for p in declared["params"]),
        None if declared["abi"] is None else entries(declared["abi"]),
        tuple(LaunchSpec(symbol, grid, block, shared, entries(args), cluster, flags)
              for symbol, grid, block, shared, args, cluster, flags in declared["launches"]),
        tuple(TensorMapSpec(*m) for m in declared["tensormaps"]))


class Loaded:
    """What an export says, as the Python objects of a kernel: ``program``, ``signature``,
    and the image files (``library``, ``prebuilt``: paths in the export; ``files``: role
    -> name). The core is the one reader of the export: it read and checked every file,
    built the kernel (``tj_kernel_open``) and kept what ``signature.tj`` says, which this
    reads back from it (``CoreKernel.declared``, ``CoreKernel.export_said``) and turns
    into Python objects. Without an ``out_idx`` line the outputs are returned in
    declaration order, as the core returns them; it refuses only what the core accepts
    but Python cannot use (an export without ``function`` lines, a dtype name it does not
    know)."""

    def __init__(self, directory: Path, core_kernel):
        self.directory = directory
        said = core_kernel.export_said()
        checked = core_kernel.export_files
        load = said["load"]
        self.entry = load["entry"]
        self.files = {"library": load["image"]}
        if load["library"] is not None:
            self.files["prebuilt"] = load["library"]
        spec = _spec(core_kernel.declared(), core_kernel.name)
        self.name, self.target = spec.name, TARGET_NAMES[spec.target]
        out_idx = said["out_idx"]
        if out_idx is None:  # as the core returns them: in declaration order
            out_idx = core_kernel.output_params
        if not said["functions"]:
            raise self._refuse("no 'function' line: the Python binding shows each kernel "
                               "function's prototype")
        functions = tuple(KernelFunction(name, self._args(name, args), prototype)
                          for name, prototype, args in said["functions"])
        self.library = str(directory / self.files["library"])
        self.prebuilt = (str(directory / self.files["prebuilt"]) if "prebuilt" in self.files
                         else None)
        binary = checked[self.files["prebuilt" if self.prebuilt else "library"]][0]
        try:  # what the core accepts but tilejit's language cannot state (a vector dtype)
            symbols = [Symbol(s, d, dtype=_BY_DLPACK[dt]) for s, d, dt in spec.symbols]
            decoded = [_decode(code, symbols) for code, _ in spec.exprs]
            objects = [self._lang_param(p, decoded, symbols) for p in spec.params]
            self.program = Program(
                self.name, [o for o in objects if not isinstance(o, Workspace)], binary=binary,
                workspaces=[o for o in objects if isinstance(o, Workspace)])
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            raise self._refuse(f"the parameters do not make a kernel tilejit's Python "
                               f"binding can show ({exc!r})") from None
        self.signature = Signature(
            self.name, self.target, tuple(p.name for p in self.program.params),
            out_idx, tuple(symbols), spec, functions, self.entry)
        roles = [role for role in ("library", "prebuilt") if role in self.files]
        # The images' SHA-256 and bytes, as the core checked them: what an export of the
        # kernel writes.
        self.digests = tuple(checked[self.files[role]][1] for role in roles)
        self.images = tuple(checked[self.files[role]][0] for role in roles)
        # What a CUDA kernel was built for, kept for a later export of the loaded kernel.
        arch = core_kernel.export_arch
        self.cuda_arch = arch if arch and self.target == "cuda" and arch != "unknown" else None

    def artifact(self) -> Artifact:
        """The kernel's artifact, its images the bytes the core checked."""
        return Artifact(self.program, self.signature, self.library, "", self.prebuilt,
                        self.digests, self.images, True, self.cuda_arch)

    def _refuse(self, what: str) -> ValueError:
        return ValueError(f"tilejit export {self.directory}: {SIGNATURE_FILE}: {what}")

    def _args(self, function: str, args: list) -> tuple:
        result = []
        for name, source, index, dtype, pointer, const, param in args:
            try:
                dtype = _dtypes.canonical(dtype)
            except (ValueError, TypeError, KeyError):
                raise self._refuse(f"function '{function}': argument '{name}': unknown dtype "
                                   f"'{dtype}'") from None
            result.append(KernelArg(name, source, index, dtype, pointer, const,
                                    None if param < 0 else param))
        return tuple(result)

    @staticmethod
    def _lang_param(p: ParamSpec, decoded: list, symbols: list):
        dtype = _BY_DLPACK[p.dtype]
        if p.kind == abi.TJ_PARAM_SCALAR:
            scalar = Scalar(dtype, name=p.name)
            if p.binds >= 0:  # the decoded expressions use this symbol: it is the scalar's
                scalar._symbol = symbols[p.binds]
                symbols[p.binds].scalar = scalar
            return scalar
        if p.kind == abi.TJ_PARAM_POINTER:
            return PointerParam(dtype, align=p.align or None, name=p.name,
                                const=bool(p.flags & abi.TJ_BUF_CONST))
        if p.flags & abi.TJ_BUF_WORKSPACE:
            return Workspace([decoded[i] for i in p.shape], dtype, name=p.name,
                             align=p.align or None, zero=bool(p.flags & abi.TJ_BUF_ZERO))
        strides = None if p.strides is None else [decoded[i] for i in p.strides]
        return Buffer([decoded[i] for i in p.shape], dtype, strides=strides, name=p.name,
                      align=p.align or None, optional=bool(p.flags & abi.TJ_BUF_OPTIONAL),
                      const=bool(p.flags & abi.TJ_BUF_CONST))


# ---- Embedding: the flags of a C or C++ program that opens exports -----------------------


def embedding_dirs() -> tuple[Path, Path]:
    """``(include directory, library directory)`` for a C or C++ program using the core:
    ``#include <tilejit/tilejit.h>`` and ``-ltilejit``. The core is built into the cache
    first if the cache has none; its directory gets a ``libtilejit.so`` link to it."""
    library = build_tools.build_core_library()
    include = build_tools.source_dirs()[0] / "include"
    link = library.parent / "libtilejit.so"  # a prebuilt core ships it as a copy
    if not os.path.exists(link):
        staging = library.parent / f".libtilejit.so.{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(library.name)
        os.replace(staging, link)
    return include, library.parent


def config_flags(cflags: bool, libs: bool, includedir: bool, libdir: bool) -> str:
    """What ``python -m tilejit config`` prints for the options given, in that order, each
    quoted for a shell where it needs it (a directory with a space: ``shlex.split`` or a
    shell's ``eval`` reads it back as one word). One directory asked alone
    (``--includedir``, ``--libdir``) is printed as it is, for ``"$(...)"``."""
    include, lib = embedding_dirs()
    words = []
    if cflags:
        words.append(f"-I{include}")
    if libs:
        words += [f"-L{lib}", "-ltilejit", f"-Wl,-rpath,{lib}"]
    if includedir:
        words.append(str(include))
    if libdir:
        words.append(str(lib))
    if len(words) == 1 and (includedir or libdir):
        return words[0]
    return shlex.join(words)
