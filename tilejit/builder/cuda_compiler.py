"""The CUDA compiler driver: a CUDA C kernel becomes a module image the driver loads.

`compile_program` takes a lowered CUDA `Program` to an image on disk, through the artifact
cache: a cubin for one real architecture (``sm_80``), PTX for one virtual architecture
(``compute_80``, JIT-compiled by the driver for whatever GPU runs it), or a fatbin holding
several. Two compilers:

- ``"nvcc"``: the CUDA toolkit's compiler, run as a process (`TILEJIT_NVCC`, else ``nvcc``
  on PATH, else ``$CUDA_HOME/bin/nvcc``, else ``/usr/local/cuda/bin/nvcc``);
- ``"nvrtc"``: NVRTC, in this process through ctypes, loaded at the first use
  (`TILEJIT_LIBNVRTC`, else ``libnvrtc.so`` as the loader finds it, in the toolkit, or in
  the ``nvidia-cuda-nvrtc`` wheel that CUDA builds of torch install). One architecture only.

The default compiler is `TILEJIT_CUDA_COMPILER`, else nvcc when it is found, else NVRTC.
The architecture is ``compile(..., arch=...)``, else `TILEJIT_CUDA_ARCH`, else the compute
capability of the GPU when a CUDA driver is present, else `DEFAULT_ARCH`. Either spelling
works: ``"sm_90"``, ``"90"``, ``"9.0"``, ``"sm_90a"``, ``"compute_90"``; several
(a list, or comma-separated) make a fatbin.

The source compiled is a prelude (fixed-width integers, the ``tj_*`` element types), the
``extern "C" __global__`` declaration of the kernel, then the user's source under
``#line 1 "<name>.cu"``, so messages point at the user's lines and a definition written
without ``extern "C"`` still gets C linkage. After compiling, the image must define the
kernel: a definition with other parameter types would be a C++ overload, not the kernel,
and is reported here rather than at launch.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

from ..language import dtypes as _dtypes
from ..native._build import env as _env
from ..native._build import scratch, toolchain
from ..native.library import cuda_device_capability as _capability
from ..version import VERSION
from . import cache as _cache
from .compiler import CompileError, _safe_file_stem
from .glue import cuda_source_body

__all__ = ["DEFAULT_ARCH", "compile_program", "cuda_source", "resolve_arch", "resolve_compiler"]

#: The architecture used when none is given and no GPU can be asked: Ampere (A100), the
#: oldest generation current toolkits fully support, and a cubin that also runs on the
#: other sm_8x GPUs. Pass ``arch=`` (or set TILEJIT_CUDA_ARCH) to compile for a GPU this
#: machine does not have.
DEFAULT_ARCH = "sm_80"

_COMPILE_TIMEOUT_S = 300.0
# Before the user's flags, which may override them; part of the cache key.
_DEFAULT_FLAGS = ("-std=c++17",)
_ARCH_RE = re.compile(r"^(?:(sm|compute)_?)?(\d+)(?:\.(\d))?([af]?)$")

# The element types CUDA spells with a header of its own (dtypes.DType.cuda); the prelude
# includes one only when a parameter needs it, so a kernel without them compiles with NVRTC
# and no headers. Those CUDA spells without a header are typedef'd always.
_TYPE_HEADERS = {d.name: (d.cuda[0], f"typedef {d.cuda[1]} {d.c_type};")
                 for d in _dtypes.DTYPES.values() if d.cuda and d.cuda[0]}
_TYPEDEFS = tuple(f"typedef {d.cuda[1]} {d.c_type};"
                  for d in _dtypes.DTYPES.values() if d.cuda and not d.cuda[0])

_INT_PRELUDE = """\
#if defined(__CUDACC_RTC__)
/* NVRTC has no C library headers: the fixed-width integers of the kernel ABI. */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
"""


def cuda_source(program, signature) -> str:
    """The complete CUDA file compiled for `program`: prelude and the user's source, its
    kernel's definition checked against the signature and given C linkage (tilejit's
    declaration goes first only when no definition reads as one).

    >>> print(cuda_source(prog, sig))  # doctest: +SKIP
    #if defined(__CUDACC_RTC__) ...
    extern "C" __global__ void vec_add(const float *A, const float *B, float *C, int64_t n);
    #line 1 "vec_add.cu"
    ...
    """
    used = {p.dtype for p in program.params}
    includes, typedefs = [], []
    for dtype, (header, typedef) in _TYPE_HEADERS.items():
        if dtype in used:
            if f"#include <{header}>" not in includes:
                includes.append(f"#include <{header}>")
            typedefs.append(typedef)
    if signature.spec.tensormaps:  # CUtensorMap (NVRTC: the source brings its own)
        includes.append("#if !defined(__CUDACC_RTC__)\n#include <cuda.h>\n#endif")
    prelude = "\n".join([_INT_PRELUDE.rstrip("\n"), *includes, *typedefs, *_TYPEDEFS])
    declaration, source = cuda_source_body(program, signature)
    return f"{prelude}\n{declaration}#line 1 \"{program.name}.cu\"\n{source}\n"


# ---- Architectures --------------------------------------------------------------------------


def _normalize_arch(item) -> str:
    match = _ARCH_RE.match(str(item).strip().lower())
    if match is None or (match.group(3) is None and len(match.group(2)) < 2):
        raise ValueError(f"unknown CUDA architecture {item!r}; expected e.g. 'sm_90', '90', "
                         "'9.0', 'sm_90a' or 'compute_90'")
    kind, number, minor, suffix = match.groups()
    return f"{kind or 'sm'}_{number}{minor or ''}{suffix}"


def _device_capability() -> tuple[int, int] | None:
    """The current GPU's compute capability through the core's driver loader, or None when
    there is no driver or no device."""
    try:
        return _capability(-1)
    except RuntimeError:
        return None


def resolve_arch(arch=None) -> tuple[str, ...]:
    """The architectures to compile for: `arch`, else TILEJIT_CUDA_ARCH, else the GPU's
    compute capability when a driver is present, else `DEFAULT_ARCH`.

    >>> resolve_arch("9.0"), resolve_arch(["sm_80", "compute_90"]), resolve_arch("80,90")
    (('sm_90',), ('sm_80', 'compute_90'), ('sm_80', 'sm_90'))
    """
    if arch is None:
        arch = _env.text("TILEJIT_CUDA_ARCH") or None
        if arch is not None:
            try:
                return resolve_arch(arch)
            except ValueError as exc:
                raise _env.BadValue("TILEJIT_CUDA_ARCH", arch, f"CUDA architectures such as "
                                    f"sm_90, 90, 9.0 or 80,90 ({exc})") from None
    if arch is None:
        capability = _device_capability()
        arch = f"sm_{capability[0]}{capability[1]}" if capability else DEFAULT_ARCH
    items = arch.split(",") if isinstance(arch, str) else list(arch)
    archs = []
    for item in items:
        if str(item).strip():
            normalized = _normalize_arch(item)
            if normalized not in archs:
                archs.append(normalized)
    if not archs:
        raise ValueError(f"no CUDA architecture in arch={arch!r}")
    return tuple(archs)


def _image_kind(archs: tuple[str, ...]) -> str:
    if len(archs) > 1:
        return "fatbin"
    return "ptx" if archs[0].startswith("compute_") else "cubin"


# ---- Compilers -------------------------------------------------------------------------------


def _cuda_homes() -> list[Path]:
    homes = [_env.text(name) for name in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(h) for h in homes if h] + [Path("/usr/local/cuda")]


def find_nvcc() -> str | None:
    """TILEJIT_NVCC, else nvcc on PATH, else the toolkit's; None when there is none."""
    configured = _env.text("TILEJIT_NVCC")
    if configured:
        if toolchain.find_executable(configured) is None:
            raise CompileError(reason=f"TILEJIT_NVCC={configured!r} is not an executable file; "
                               "expected the path (or the name on PATH) of nvcc")
        return configured
    found = toolchain.find_executable("nvcc")
    if found is not None:
        return found
    for home in _cuda_homes():
        candidate = toolchain.find_executable(str(home / "bin" / "nvcc"))
        if candidate is not None:
            return candidate
    return None


_identity_lock = threading.Lock()
_identities: dict[str, str] = {}


def nvcc_identity(nvcc: str) -> str:
    """The release and build lines of ``nvcc --version`` (memoised): part of the cache key."""
    with _identity_lock:
        if nvcc in _identities:
            return _identities[nvcc]
    import subprocess

    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False,
                              timeout=60, env=toolchain.compiler_env(), errors="replace")
        lines = [ln.strip() for ln in done.stdout.splitlines()
                 if ln.startswith(("Cuda compilation tools", "Build "))]
        identity = "nvcc " + "; ".join(lines) if done.returncode == 0 and lines else None
    except (OSError, subprocess.SubprocessError):
        identity = None
    if identity is None:
        info = os.stat(nvcc)
        identity = f"nvcc {os.path.realpath(nvcc)} {info.st_size} {info.st_mtime_ns}"
    with _identity_lock:
        return _identities.setdefault(nvcc, identity)


class _Nvrtc:
    """libnvrtc through ctypes, loaded once per process."""

    _lock = threading.Lock()
    _instance: _Nvrtc | None = None

    def __init__(self, lib, path: str):
        import ctypes

        self.lib = lib
        self.path = path
        c_void_pp = ctypes.POINTER(ctypes.c_void_p)
        c_size_p = ctypes.POINTER(ctypes.c_size_t)
        for name, argtypes in {
            "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
            "nvrtcCreateProgram": [c_void_pp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                   ctypes.c_void_p, ctypes.c_void_p],
            "nvrtcCompileProgram": [ctypes.c_void_p, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_char_p)],
            "nvrtcGetProgramLogSize": [ctypes.c_void_p, c_size_p],
            "nvrtcGetProgramLog": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcGetCUBINSize": [ctypes.c_void_p, c_size_p],
            "nvrtcGetCUBIN": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcGetPTXSize": [ctypes.c_void_p, c_size_p],
            "nvrtcGetPTX": [ctypes.c_void_p, ctypes.c_char_p],
            "nvrtcDestroyProgram": [c_void_pp],
        }.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        info = os.stat(path) if os.path.exists(path) else None
        self.identity = (f"nvrtc {major.value}.{minor.value} {os.path.realpath(path)}"
                         + (f" {info.st_size}" if info else ""))

    @classmethod
    def get(cls) -> _Nvrtc:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls._load()
            return cls._instance

    @staticmethod
    def _candidates() -> list[str]:
        configured = _env.text("TILEJIT_LIBNVRTC")
        if configured:
            return [configured]
        found = []
        for home in _cuda_homes():
            found += sorted(map(str, (home / "lib64").glob("libnvrtc.so*")), reverse=True)
        import site
        import sys

        roots = [*getattr(site, "getsitepackages", list)(), site.getusersitepackages(),
                 *sys.path]
        for root in dict.fromkeys(r for r in roots if r):
            nvidia = Path(root) / "nvidia"
            if nvidia.is_dir():
                found += sorted(map(str, nvidia.glob("*/lib/libnvrtc.so*")), reverse=True)
        return [p for p in found if "alt" not in os.path.basename(p) and
                "builtins" not in os.path.basename(p)] + ["libnvrtc.so", "libnvrtc.so.13",
                                                           "libnvrtc.so.12"]

    @classmethod
    def identity_without_loading(cls) -> str:
        """The library's path, size and mtime: a cache key that costs no load (loading
        libnvrtc takes milliseconds a warm compile does not have)."""
        for candidate in cls._candidates():
            if os.path.isfile(candidate):
                info = os.stat(candidate)
                return f"nvrtc {os.path.realpath(candidate)} {info.st_size} {info.st_mtime_ns}"
        return cls.get().identity

    @classmethod
    def _load(cls) -> _Nvrtc:
        import ctypes

        errors = []
        for candidate in cls._candidates():
            try:
                directory = os.path.dirname(candidate)
                if directory:
                    # libnvrtc opens libnvrtc-builtins by name; the wheel's directory is not
                    # on the loader's path, so load it first from beside libnvrtc.
                    for builtins in sorted(Path(directory).glob("libnvrtc-builtins.so*")):
                        if ".alt." not in builtins.name:
                            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                return cls(ctypes.CDLL(candidate), candidate)
            except OSError as exc:
                errors.append(f"{candidate}: {exc}")
        raise CompileError(reason="NVRTC is not available (tried "
                           + "; ".join(errors[-4:]) + "); install the CUDA toolkit or "
                           "`pip install nvidia-cuda-nvrtc`, or set TILEJIT_LIBNVRTC")

    def compile(self, source: str, name: str, arch: str, options: list[str]) -> bytes:
        import ctypes

        lib = self.lib
        prog = ctypes.c_void_p()
        rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                    f"{name}.cu".encode(), 0, None, None)
        if rc:
            raise CompileError(name, "", ["nvrtc"], source, rc,
                               reason=f"nvrtcCreateProgram failed: {self._error(rc)}")
        try:
            opts = [f"--gpu-architecture={arch}", *options]
            argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            log_text = log.value.decode("utf-8", "replace")
            if rc:
                raise CompileError(name, log_text, ["nvrtc", *opts], source, rc,
                                   reason=f"compilation failed ({self._error(rc)})")
            ptx = arch.startswith("compute_")
            get_size = lib.nvrtcGetPTXSize if ptx else lib.nvrtcGetCUBINSize
            get = lib.nvrtcGetPTX if ptx else lib.nvrtcGetCUBIN
            get_size(prog, ctypes.byref(size))
            image = ctypes.create_string_buffer(size.value)
            get(prog, image)
            return image.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _error(self, rc: int) -> str:
        text = self.lib.nvrtcGetErrorString(rc)
        return text.decode() if text else f"NVRTC error {rc}"


def _nvrtc_include_dirs() -> list[str]:
    """The toolkit's headers (cuda_fp16.h, <cuda/std/...>) for NVRTC, where there are any."""
    dirs = []
    for home in _cuda_homes():
        for sub in ("include", "include/cccl"):
            if (home / sub).is_dir():
                dirs.append(str(home / sub))
        if dirs:
            break
    return dirs


def resolve_compiler(compiler=None) -> str:
    """`compiler`, else TILEJIT_CUDA_COMPILER, else nvcc when found, else NVRTC."""
    if compiler is None:
        compiler = _env.choice("TILEJIT_CUDA_COMPILER", ("nvcc", "nvrtc"))
    if compiler is None:
        return "nvcc" if find_nvcc() is not None else "nvrtc"
    if compiler not in ("nvcc", "nvrtc"):
        raise ValueError(f"unknown CUDA compiler {compiler!r}; expected 'nvcc' or 'nvrtc'")
    return compiler


def _run_nvcc(nvcc: str, source: str, name: str, archs: tuple[str, ...], flags: list[str],
              out_path: Path) -> None:
    import subprocess

    kind = _image_kind(archs)
    if kind == "cubin":
        target = ["-cubin", f"-arch={archs[0]}"]
    elif kind == "ptx":
        target = ["-ptx", f"-arch={archs[0]}"]
    else:
        # Uncompressed, so the entry check below (and the fake driver of the tests) can
        # read the cubins; the driver loads either.
        target = ["-fatbin", "--no-compress"]
        for arch in archs:
            number = arch.split("_", 1)[1]
            target += ["-gencode", f"arch=compute_{number},code={arch}"]
    with scratch.workdir("nvcc") as workdir:
        src_path = os.path.join(workdir, _safe_file_stem(name) + ".cu")
        with open(src_path, "w", encoding="utf-8") as handle:
            handle.write(source)
        command = [nvcc, *target, *_DEFAULT_FLAGS, *flags, src_path, "-o", str(out_path)]
        try:
            done = subprocess.run(command, check=False, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  timeout=_COMPILE_TIMEOUT_S, env=toolchain.compiler_env(),
                                  stdin=subprocess.DEVNULL, cwd=workdir)
        except subprocess.TimeoutExpired:
            raise CompileError(name, "", command, source,
                               reason=f"nvcc timed out after {_COMPILE_TIMEOUT_S:g} s") from None
        except OSError as exc:
            raise CompileError(name, "", command, source,
                               reason=f"could not run nvcc {nvcc!r}: {exc}") from None
    if done.returncode != 0:
        raise CompileError(name, done.stdout, command, source, done.returncode)


_FATBIN_MAGIC = bytes.fromhex("50ed55ba")  # 0xBA55ED50, little-endian


def _defines_kernel(image: bytes, name: str, kind: str) -> bool:
    if kind == "ptx":
        return re.search(rb"\.entry\s+" + re.escape(name.encode()) + rb"\s*\(", image) is not None
    # A cubin (or each cubin of a fatbin) has a .text.<name> section per defined kernel.
    return b".text." + name.encode() + b"\x00" in image


def compile_program(program, signature, flags: list[str], arch=None, compiler=None,
                    verbose: bool = False) -> tuple[Path, str]:
    """Compiles a lowered CUDA program, through the artifact cache; returns the image's
    path and the source compiled. Raises CompileError with the compiler's log.

    >>> path, source = compile_program(prog, lower(prog, -1, "cuda"), [], arch="sm_90")
    >>> path.name
    'kernel.cubin'
    """
    start = time.perf_counter()
    archs = resolve_arch(arch)
    compiler = resolve_compiler(compiler)
    kind = _image_kind(archs)
    source = cuda_source(program, signature)
    name = program.name
    # The key without the compiler's identity and paths: how a machine without the CUDA
    # compiler finds the images one with it cached (see tilejit.builder.cache.find_portable).
    portable = _cache.artifact_key(kind="portable", source=source, target="cuda",
                                   arch=list(archs), compiler=compiler, flags=flags,
                                   tilejit=VERSION)
    try:
        if compiler == "nvcc":
            nvcc = find_nvcc()
            if nvcc is None:
                raise CompileError(name, reason="nvcc not found: install the CUDA toolkit, "
                                   "set TILEJIT_NVCC or CUDA_HOME, or use compiler='nvrtc'")
            identity = nvcc_identity(nvcc)
            defaults = list(_DEFAULT_FLAGS)
        else:
            if len(archs) > 1:
                raise CompileError(name, reason=f"NVRTC compiles for one architecture, got "
                                   f"{', '.join(archs)}: use compiler='nvcc' for a fatbin")
            identity = _Nvrtc.identity_without_loading()
            defaults = [*_DEFAULT_FLAGS, *(f"-I{d}" for d in _nvrtc_include_dirs())]
    except (CompileError, OSError, RuntimeError) as exc:
        found = _cache.find_portable(portable)
        if found is None:
            raise
        if verbose:
            print(f"tilejit: {name}: {exc}; using the cached {found}", file=sys.stderr)
        return found, source
    key = _cache.artifact_key(source=source, target="cuda", arch=list(archs), compiler=compiler,
                              compiler_identity=identity, default_flags=defaults, flags=flags,
                              tilejit=VERSION)

    def build(out_path: Path) -> None:
        if compiler == "nvcc":
            _run_nvcc(nvcc, source, name, archs, flags, out_path)
        else:
            out_path.write_bytes(_Nvrtc.get().compile(source, name, archs[0],
                                                      [*defaults, *flags]))
        problem = missing_kernel(out_path)
        if problem is not None:
            raise CompileError(name, "", [compiler], source, reason=problem)

    def missing_kernel(path) -> str | None:
        # Also the cache's check of an image it did not build here (a remote cache's).
        image = Path(path).read_bytes()
        for function in signature.functions:
            if not _defines_kernel(image, function.name, kind):
                return (f"the compiled module defines no kernel '{function.name}': the source "
                        f"must define a __global__ function {function.name} compatible with "
                        f"{function.c_prototype}")
        return None

    path = _cache.get_or_build(key, build, suffix=f".{kind}", check=missing_kernel,
                               info={"name": name, "target": "cuda", "arch": ",".join(archs),
                                     "portable_key": portable},
                               shared=True, verbose=verbose)
    if verbose:
        print(f"tilejit: {name}: {signature.c_prototype} -> {path} ({compiler}, "
              f"{', '.join(archs)}, {(time.perf_counter() - start) * 1e3:.1f} ms)",
              file=sys.stderr)
    return path, source


def load_binary(program, signature) -> Path:
    """A prebuilt CUDA kernel (``Program.binary``: cubin, fatbin or PTX) stored in the
    artifact cache under its content hash; the core loads it like a compiled one."""
    data = program.binary_bytes()
    name = program.name
    if data.startswith(b"\x7fELF"):
        kind = "cubin"
    elif data[:4] == _FATBIN_MAGIC:
        kind = "fatbin"
    elif b".entry" in data or b".version" in data:
        kind = "ptx"
    else:
        raise ValueError(f"{name}: binary= for target='cuda' must be a cubin, fatbin or PTX, "
                         f"got {len(data)} bytes starting {data[:8]!r}")
    for function in signature.functions:
        if kind != "fatbin" and not _defines_kernel(data, function.name, kind):
            raise ValueError(f"{name}: the {kind} given as binary= defines no kernel "
                             f"'{function.name}' (an extern \"C\" __global__ function of "
                             "that name)")
    return _cache.store_bytes(data, suffix=f".{kind}", target="cuda", tilejit=VERSION,
                              info={"name": name, "target": "cuda", "arch": "unknown"})

