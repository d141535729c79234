"""``python -m tilejit doctor``: what this installation has and uses, on one screen.

Python and the packages tilejit works with (torch, NumPy, TileLang, tvm-ffi), the
compilers it would call (C, C++, nvcc, NVRTC), where the core and the wrapper are built
for this interpreter, the CUDA driver and its devices, and each fast path: whether it is
active and, when not, why. Nothing here fails: what cannot be found is reported so.

>>> python -m tilejit doctor --json | python -c "import json,sys; print(json.load(sys.stdin)['python'])"
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys

from .. import __version__
from ..builder import cache as _cache
from ..builder.cuda_compiler import _Nvrtc, find_nvcc
from ..native._build import build_tools, env
from ..native.library import cuda_device_capability
from ..runtime import backends, binding, fast_paths
from ..runtime.kernel import JITKernel

# The module each distribution is imported as, where the names differ.
_MODULES = {"apache-tvm-ffi": "tvm_ffi", "Cython": "Cython"}


def _version(distribution: str) -> str | None:
    """The installed distribution's version; None when it is not installed, or when this
    process cannot import it (its files are left without its module)."""
    module = _MODULES.get(distribution, distribution)
    try:
        if importlib.util.find_spec(module) is None:
            return None
        return importlib.metadata.version(distribution)
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        return None


def _first_line(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[-1].strip() if "nvcc" in command[0] and lines else (
        lines[0].strip() if lines else None)


def _compiler(name: str | None) -> dict:
    path = shutil.which(name) if name else None
    return {"path": path, "version": _first_line([path, "--version"]) if path else None}


def _compilers() -> dict:
    import importlib

    try:
        toolchain = importlib.import_module(build_tools.__name__ + ".toolchain")
        cc = toolchain.c_compiler()[0]
    except Exception:  # noqa: BLE001 - reported as missing
        cc = None
    cxx = env.text("CXX") or "c++"
    nvcc = find_nvcc()
    return {"cc": _compiler(cc), "c++": _compiler(cxx),
            "nvcc": {"path": nvcc, "version": _first_line([nvcc, "--version"]) if nvcc else None},
            "nvrtc": _nvrtc()}


def _nvrtc() -> dict:
    try:
        found = _Nvrtc.get()
    except Exception as exc:  # noqa: BLE001 - not found is an answer
        return {"found": False, "why": str(exc).splitlines()[0] if str(exc) else
                type(exc).__name__}
    return {"found": True, "identity": found.identity}


_BUILDS = (("core", build_tools.core_library_path, build_tools.build_core_library),
           ("wrapper", build_tools.wrapper_path, build_tools.build_wrapper))


def _cached_before() -> dict:
    """Whether the core and the wrapper were in the cache before doctor asked for them:
    checking CUDA and the fast paths loads both, building what is missing."""
    found = {}
    for name, where, _ in _BUILDS:
        try:
            found[name] = where().is_file()
        except Exception:  # noqa: BLE001 - reported by _builds
            found[name] = False
    return found


def _builds(cached_before: dict) -> dict:
    """Where the core and the wrapper this process uses are (the prebuilt ones of an
    install, or the cache's), once the rest of the report has loaded them; `built_now`
    when doctor had to build one to find out."""
    out = {"python": f"{sys.implementation.name} {platform.python_version()}",
           "abi": build_tools.abi_tag()}
    for name, where, build in _BUILDS:
        try:
            cached = where()
            path = build()  # found (prebuilt or cached) by now, or built here
            prebuilt = path != cached
            out[name] = {"path": str(path), "built": path.is_file(), "prebuilt": prebuilt,
                         "built_now": not prebuilt and not cached_before[name]}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"path": None, "built": False, "prebuilt": False, "built_now": False,
                         "why": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return out


def _cuda() -> dict:
    """The driver and its devices, asked through the core (no toolkit needed)."""
    devices = []
    why = None
    for device in range(64):
        try:
            major, minor = cuda_device_capability(device)
            devices.append({"id": device, "capability": f"{major}.{minor}"})
        except Exception as exc:  # noqa: BLE001 - no driver, or no more devices
            if device == 0:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            break
    return {"driver": bool(devices), "devices": devices, **({"why": why} if why else {})}


def _fast_paths() -> dict:
    """Each fast path, decided as a kernel call would decide it (torch's are asked only
    when torch is installed)."""
    for name in ("ctypes", "cython"):
        try:
            backends.kernel_class(JITKernel, name)
        except Exception as exc:  # noqa: BLE001 - the wrapper cannot be built
            fast_paths.decided(f"{name} kernel class", False, str(exc).splitlines()[0])
    if _version("torch") is not None:
        try:
            import torch

            binding.describe(torch.Tensor, True)
            from ..frameworks.torch import dynamo  # noqa: F401 - decides the Dynamo constant

            fast_paths.decided("Dynamo constant (_dynamo_marked_constant)", fast_paths.FAST_PATHS,
                               "set on tilejit's trace-time functions" if fast_paths.FAST_PATHS
                               else "TILEJIT_FAST_PATHS=0: torch.compiler.assume_constant_result")
            from ..frameworks.torch import autograd, inductor, native_op

            if native_op.available() is None:
                native_op.plain_probe()  # decides the C autograd kernel's plain calls
            autograd.apply_checked()  # decides how recorded calls reach autograd
            inductor.decide()  # decides the Inductor lowering (imports Inductor)
        except Exception as exc:  # noqa: BLE001
            fast_paths.decided("torch", False, f"{type(exc).__name__}: {exc}")
    return {name: {"active": active, "why": why}
            for name, (active, why) in sorted(fast_paths.state().items())}


def report() -> dict:
    packages = {name: _version(dist) for name, dist in (
        ("torch", "torch"), ("numpy", "numpy"), ("tilelang", "tilelang"),
        ("tvm-ffi", "apache-tvm-ffi"), ("cython", "Cython"), ("jax", "jax"),
        ("jaxlib", "jaxlib"))}
    cached_before = _cached_before()
    compilers, cuda, paths = _compilers(), _cuda(), _fast_paths()
    return {
        "tilejit": __version__, "location": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(), "packages": packages,
        "compilers": compilers, "builds": _builds(cached_before), "cuda": cuda,
        "fast_paths_switch": "on" if fast_paths.FAST_PATHS else "off (TILEJIT_FAST_PATHS=0)",
        "fast_paths": paths,
        "cache_dir": str(_cache.cache_dir()),
        "cache_dir_from": "TILEJIT_CACHE_DIR" if env.text("TILEJIT_CACHE_DIR") else "default",
        "remote_cache": _cache.remote_report(),
        "torch_ops": _torch_ops() if packages["torch"] is not None else None,
        "torch_range": _torch_range(packages["torch"]),
        "jax": _jax() if packages["jax"] is not None else None,
    }


def _jax() -> str:
    """How kernels run in JAX programs here (XLA custom calls), or why not."""
    try:
        from ..frameworks import jax as jax_wing

        return jax_wing.describe()
    except Exception as exc:  # noqa: BLE001 - a broken JAX: say so
        return f"unavailable: {type(exc).__name__}: {exc}"


def _torch_range(version: str | None) -> dict | None:
    """The installed torch against the supported range (None: no torch)."""
    if version is None:
        return None
    from ..frameworks.torch import versions

    try:  # the version torch says it is (a local tag included: 2.14.1+cu130)
        import torch

        from ..frameworks.torch import dlpack

        version = torch.__version__
        if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
            reads = "torch's DLPack exchange API"
        else:
            from ..frameworks.torch import probes

            in_place = fast_paths.state().get(probes.READER, (False, ""))[0]
            reads = ("its TensorImpl, in place through torch's stable C ABI (this torch has "
                     "no DLPack exchange API; other tensors: __dlpack__" if in_place else
                     "__dlpack__ (this torch has no DLPack exchange API") + (
                ", the strides of size-0 and size-1 dimensions written back as the tensor "
                "has them)" if dlpack.rewrites_strides(torch) else ")")
    except Exception as exc:  # noqa: BLE001 - a broken torch: its package's version stands
        reads = f"unknown ({type(exc).__name__}: {exc})"

    return {"version": version, "inside": versions.inside(version),
            "range": versions.RANGE, "tested": list(versions.TESTED),
            "text": versions.describe(version), "tensors_read_through": reads}


def _torch_ops() -> str:
    """How kernels' torch ops are registered in this process (C or Python, and why)."""
    try:
        from ..frameworks.torch import native_op

        return native_op.describe()
    except Exception as exc:  # noqa: BLE001 - a broken torch: say so
        return f"unknown ({type(exc).__name__}: {exc})"


def _text(info: dict) -> str:
    lines = [f"tilejit {info['tilejit']}  ({info['location']})",
             f"python   {info['python']}", f"platform {info['platform']}", "", "packages"]
    lines += [f"  {name:<9} {version or 'not installed'}"
              for name, version in info["packages"].items()]
    lines += ["", "compilers"]
    for name, found in info["compilers"].items():
        if name == "nvrtc":
            text = found.get("identity") if found["found"] else f"not found ({found['why']})"
        else:
            text = (f"{found['path']}  {found['version'] or ''}".strip()
                    if found["path"] else "not found")
        lines.append(f"  {name:<9} {text}")
    builds = info["builds"]
    lines += ["", f"builds for {builds['python']} ({builds['abi']})"]
    for name in ("core", "wrapper"):
        b = builds[name]
        if not b["built"]:
            state = f"cannot be built: {b.get('why', 'unknown')}"
        elif b["built_now"]:
            state = "built just now by doctor, to check CUDA and the fast paths"
        else:
            state = "prebuilt, from the install" if b["prebuilt"] else "built, in the cache"
        lines.append(f"  {name:<9} {b['path']}  [{state}]")
    cuda = info["cuda"]
    lines += ["", "cuda"]
    if cuda["driver"]:
        lines += [f"  device {d['id']}: compute capability {d['capability']}"
                  for d in cuda["devices"]]
    else:
        lines.append(f"  no driver or device ({cuda.get('why', 'none found')})")
    if info["torch_range"] is not None:
        lines += ["", f"torch    {info['torch_range']['text']}"]
        if info["torch_range"]["tensors_read_through"]:
            lines.append(f"         tensors read through "
                         f"{info['torch_range']['tensors_read_through']}")
    lines += ["", f"fast paths: {info['fast_paths_switch']}"]
    for name, state in info["fast_paths"].items():
        mark = "active  " if state["active"] else "inactive"
        lines.append(f"  {mark} {name}: {state['why']}")
    if info["torch_ops"] is not None:
        lines += ["", f"torch ops: {info['torch_ops']}"]
    if info["jax"] is not None:
        lines += ["", f"jax: {info['jax']}"]
    source = ("from TILEJIT_CACHE_DIR" if info["cache_dir_from"] != "default" else
              "the default; TILEJIT_CACHE_DIR is unset")
    lines += ["", f"cache dir: {info['cache_dir']}  ({source})"]
    lines.append(f"remote cache: {_remote_line(info['remote_cache'])}")
    return "\n".join(lines)


def _remote_line(remote: dict) -> str:
    if "error" in remote:
        return remote["error"]
    if not remote["configured"]:
        return "none (TILEJIT_REMOTE_CACHE unset)"
    state = (f"reachable ({remote['round_trip_ms']:.1f} ms), {remote['entries']} entries"
             if remote["reachable"] else f"unreachable: {remote['reason']}")
    return (f"{remote['address']}  {state}; signing "
            f"{'on' if remote['signed'] else 'off (TILEJIT_REMOTE_CACHE_KEY unset)'}")


def main(as_json: bool = False) -> int:
    info = report()
    print(json.dumps(info, indent=2) if as_json else _text(info))
    return 0
