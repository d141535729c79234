"""tilejit as a TileLang execution backend: TileLang's kernels, unchanged, validated and
launched by tilejit.

>>> import tilelang, tilejit.tilelang          # the import registers "tilejit"
>>> target = {"kind": "cuda", "arch": "sm_90a"}
>>> kernel = tilelang.compile(gemm, out_idx=-1, target=target, execution_backend="tilejit")
>>> c = kernel(a, b)                             # tilejit checks, allocates, launches
>>> k2 = tilejit.tilelang.compile(gemm, out_idx=-1, target=target)   # a tilejit JITKernel

TileLang lowers the kernel as it does for its own backends; this module reads what the
lowering produced and describes it to tilejit once:

- the parameters from the PrimFunc's buffer map (names, dtypes, shapes and strides over
  its dynamic variables, which become tilejit symbols of the same integer type);
- the kernel functions in the order the host code launches them, each with its
  arguments (buffers, tensor maps, symbols and expressions), grid, block and dynamic
  shared memory (``thread_extent``, ``dyn_shared_memory_buf``) and launch attributes
  (``cluster_dims``, ``use_cooperative_groups``, ``has_cuda_pdl_sync``);
- Hopper TMA descriptors (``tma_descriptor_args``) as ``T.TensorMap`` arguments, encoded
  by tilejit at every call from the bound tensor;
- read-only buffers (``tl.readonly_param_indices``) as ``const=True`` parameters, so
  read-only tensors are accepted.

The description is plain data (``describe``); TileLang's disk cache stores it beside the
compiled image, so a cached kernel reloads without lowering again. CUDA sources compile
with nvcc (``-std=c++20`` and TileLang's template and CUTLASS include paths); the CPU
target ``"c"`` compiles as C++ through tilejit's C++ path.

TileLang has no plugin registry: registering patches its backend registry, its
adapter factories and its cache dispatch; `check_registration` says what moved if a
TileLang release moves them.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tilelang
from tilelang.backend import module as _tl_module
from tilelang.backend.execution_backend import ExecutionBackendSpec
from tilelang.jit import kernel as _tl_kernel
from tilelang.jit.adapter.base import BaseKernelAdapter
from tvm import tirx

import tilejit
from tilejit import Launch, Program, T

BACKEND = "tilejit"
# 2: scalar parameters in expressions, global workspaces, im2col tensor maps, TileLang's
# launch policy. A version-1 description (in TileLang's disk cache) means the same today.
DESCRIPTION_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_JIT = _tl_kernel.JITKernel


class TileLangError(ValueError):
    """A lowered TileLang kernel tilejit cannot describe (the message names the kernel and
    the construct)."""


# ---- Lowered TileLang -> a description (plain, JSON-able data) -----------------------------

_OPS = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//",
        tirx.FloorMod: "%", tirx.Min: "min", tirx.Max: "max",
        # Integer division of the non-negative sizes TileLang launches with is floor division.
        tirx.Div: "//"}


def _expr(e, kernel: str, what: str):
    """A TIR integer expression as nested lists: ints, ["var", name], [op, a, b]."""
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    if isinstance(e, tirx.Var):
        return ["var", e.name]
    if isinstance(e, tirx.Cast):
        return _expr(e.value, kernel, what)
    op = _OPS.get(type(e))
    if op is None:
        raise TileLangError(f"{kernel}: {what} = {e} ({type(e).__name__}) is not an integer "
                            "expression tilejit can evaluate (+ - * // % min max over the "
                            "dynamic dimensions)")
    return [op, _expr(e.a, kernel, what), _expr(e.b, kernel, what)]


def _tir_vars(e) -> dict:
    """{name: dtype} of the variables in a TIR integer expression."""
    if isinstance(e, tirx.Var):
        return {e.name: str(e.dtype)}
    if isinstance(e, tirx.Cast):
        return _tir_vars(e.value)
    if type(e) in _OPS:
        return {**_tir_vars(e.a), **_tir_vars(e.b)}
    return {}


def _host_calls(host_func, names: set) -> dict:
    """{kernel function name: (first call's position, its argument expressions)} from the
    host code: ``call_packed("main_kernel", ...)`` (CUDA), ``call_extern("int32",
    "main_kernel", ...)`` or a direct call (CPU)."""
    calls = {}

    def visit(node):
        if not isinstance(node, tirx.Call):
            return
        name = getattr(node.op, "name_hint", None)
        args = list(node.args)
        if name not in names:  # an intrinsic naming the function in a string argument
            at = next((i for i, a in enumerate(args[:2]) if isinstance(a, tirx.StringImm)),
                      None)
            if at is None:
                return
            name, args = args[at].value, args[at + 1:]
        if name in names and name not in calls:
            calls[name] = (len(calls), args)

    tirx.stmt_functor.post_order_visit(host_func.body, visit)
    return calls


def _attr(attrs, key, default=None):
    return attrs[key] if attrs is not None and key in attrs else default


def describe(func, host_mod, device_mod, target_kind: str, arch: str | None = None) -> dict:
    """What tilejit needs to run a lowered TileLang kernel, as plain data. A construct
    tilejit cannot run is a TileLangError naming the kernel and what."""
    name = "main"
    try:
        if func.attrs and "global_symbol" in func.attrs:
            name = str(func.attrs["global_symbol"])
        return _describe(name, func, host_mod, device_mod, target_kind, arch)
    except TileLangError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise TileLangError(f"{name}: tilejit cannot read this lowered kernel: "
                            f"{type(exc).__name__}: {exc}") from exc


def _describe(name: str, func, host_mod, device_mod, target_kind: str, arch) -> dict:
    params, symbols, data_vars = [], {}, {}
    for p in func.params:
        if p in func.buffer_map:
            buf = func.buffer_map[p]
            shape = [_expr(d, name, f"{buf.name}.shape") for d in buf.shape]
            strides = [_expr(s, name, f"{buf.name}.strides") for s in buf.strides] or None
            for dim in (*buf.shape, *buf.strides):
                symbols.update(_tir_vars(dim))
            params.append({"kind": "buffer", "name": buf.name, "dtype": str(buf.dtype),
                           "shape": shape, "strides": strides, "const": False})
            data_vars[buf.data.name] = buf.name
        else:
            params.append({"kind": "scalar", "name": p.name, "dtype": str(p.dtype)})
            data_vars[p.name] = p.name
    hosts = [f for _, f in host_mod.functions.items()]
    if len(hosts) != 1:
        raise TileLangError(f"{name}: expected one host function, the lowering made "
                            f"{len(hosts)}")
    (host_func,) = hosts
    inline = _host_lets(host_func, {*symbols, *data_vars})
    workspaces = _workspaces(name, host_func, inline)
    for w in workspaces:
        data_vars[w["var"]] = w["name"]
    tma = _attr(host_func.attrs, "tma_descriptor_args", {}) or {}
    tensormaps = {str(var.name): _tensormap(name, str(var.name), [inline(a) for a in args],
                                            data_vars)
                  for var, args in tma.items()}
    device = {gv.name_hint: f for gv, f in device_mod.functions.items()}
    calls = _host_calls(host_func, set(device))
    missing = sorted(set(device) - set(calls))
    if missing:
        raise TileLangError(f"{name}: the host code launches no {', '.join(missing)}")
    readonly_everywhere: dict[str, bool] = {}
    functions = []
    for fname in sorted(calls, key=lambda n: calls[n][0]):
        dfunc = device[fname]
        nargs = len(dfunc.params)
        host_args = calls[fname][1][:nargs]
        readonly = {int(i) for i in _attr(dfunc.attrs, "tl.readonly_param_indices", ())}
        args = []
        for i, (dparam, harg) in enumerate(zip(dfunc.params, host_args)):
            label = f"{fname} argument {i} ('{dparam.name}')"
            if isinstance(harg, tirx.Var) and harg.name in tensormaps:
                args.append({"tensormap": harg.name})
                target_buf = tensormaps[harg.name]["buffer"]
            elif isinstance(harg, tirx.Var) and harg.name in data_vars:
                args.append({"param": data_vars[harg.name]})
                target_buf = data_vars[harg.name]
            elif str(harg.dtype).startswith(("int", "uint")):
                args.append({"expr": _expr(inline(harg), name, label),
                             "dtype": str(dparam.dtype)})
                continue
            else:
                raise TileLangError(f"{name}: {label} is {harg} ({harg.dtype}), which is no "
                                    "buffer, tensor map or integer")
            if any(p["name"] == target_buf and p["kind"] == "buffer" for p in params):
                was = readonly_everywhere.get(target_buf, True)
                readonly_everywhere[target_buf] = was and i in readonly
        launch = {"name": fname, "args": args}
        if target_kind == "cuda":
            launch.update(_launch_shape(name, fname, dfunc.attrs))
        functions.append(launch)
    for p in params:
        if p["kind"] == "buffer":
            # A buffer no kernel function writes; one no kernel takes is never written.
            p["const"] = readonly_everywhere.get(p["name"], True)
    return {"version": DESCRIPTION_VERSION, "name": name, "target": target_kind, "arch": arch,
            "params": params, "symbols": symbols, "functions": functions,
            "tensormaps": tensormaps,
            "workspaces": [{k: w[k] for k in ("name", "dtype", "shape")} for w in workspaces]}


def _host_lets(host_func, known: set):
    """A function inlining, into a host-side expression, the integer variables the host
    code binds itself (``cse_var_1 = (n + 127) // 128``, say): what remains is over the
    parameters and the dynamic dimensions (``known``), which tilejit binds."""
    lets = {}

    def visit(node):
        # tirx.Bind in this TVM, LetStmt in others: a variable bound to a value.
        if type(node).__name__ in ("Bind", "LetStmt") and node.var.name not in known and \
                str(node.var.dtype).startswith(("int", "uint")):
            lets[node.var] = node.value

    tirx.stmt_functor.post_order_visit(host_func.body, visit)

    def inline(e):
        if not lets or not isinstance(e, tirx.PrimExpr) or isinstance(e, tirx.StringImm):
            return e
        for _ in range(len(lets)):  # a chain of lets resolves in as many rounds
            inlined = tirx.stmt_functor.substitute(e, lets)
            if inlined.same_as(e):
                break
            e = inlined
        return e

    return inline


def _workspaces(kernel: str, host_func, inline) -> list[dict]:
    """The global workspaces the host code allocates (``T.alloc_global``): each
    ``AllocBuffer`` of global scope in the host function, with its (flattened) shape and
    dtype, and the variable kernels and tensor maps receive it as. (A kernel handed any
    other host allocation is refused where its arguments are read.)"""
    found = []

    def visit(node):
        if type(node).__name__ != "AllocBuffer":
            return
        buf = node.buffer
        scope = str(buf.scope()) if callable(getattr(buf, "scope", None)) else "global"
        if scope != "global":  # host scratch of the host code's own, never a kernel's
            return
        found.append({"name": str(buf.name), "var": str(buf.data.name), "dtype": str(buf.dtype),
                      "shape": [_expr(inline(d), kernel, f"workspace '{buf.name}' shape")
                                for d in buf.shape]})

    tirx.stmt_functor.post_order_visit(host_func.body, visit)
    names = [w["name"] for w in found]
    for w in found:  # the names become C identifiers next to the parameters'
        if names.count(w["name"]) > 1:
            w["name"] = w["var"]
    return found


def _launch_shape(kernel: str, fname: str, attrs) -> dict:
    grid, block = [1, 1, 1], [1, 1, 1]
    for tag, extent in (_attr(attrs, "thread_extent", {}) or {}).items():
        tag = str(tag)
        axis = "xyz".index(tag[-1])
        if tag.startswith("blockIdx"):
            grid[axis] = _expr(extent, kernel, f"{fname} {tag}")
        elif tag.startswith("threadIdx"):
            block[axis] = _expr(extent, kernel, f"{fname} {tag}")
    smem = _attr(attrs, "dyn_shared_memory_buf", 0)
    cluster = _attr(attrs, "cluster_dims")
    try:
        cluster = None if cluster is None else [int(c) for c in cluster]
    except (TypeError, ValueError):
        raise TileLangError(f"{kernel}: {fname} cluster_dims = {cluster}; tilejit launches "
                            "constant cluster dimensions") from None
    # TileLang's default runtime (tvm_ffi's CUDA module) launches a cluster only when a
    # dimension exceeds 1, always with programmatic stream serialization; other launches
    # get it when the kernel waits on its predecessor (T.pdl_sync); a cooperative launch
    # only when neither applies.
    if cluster is not None and all(c == 1 for c in cluster):
        cluster = None
    pdl = cluster is not None or bool(_attr(attrs, "has_cuda_pdl_sync", 0))
    cooperative = bool(_attr(attrs, "use_cooperative_groups", False)) and not pdl
    return {"grid": grid, "block": block,
            "shared_mem": _expr(smem, kernel, f"{fname} dynamic shared memory"),
            "cluster": cluster, "cooperative": cooperative, "pdl": pdl}


_TENSORMAP_KINDS = {
    # ["__tvm_tensormap_create_tiled", desc, data type, rank, address, dims[rank],
    #  strides[rank] (the element size first), box[rank], element strides[rank], flags[4]]
    "__tvm_tensormap_create_tiled": (("dims", 0), ("strides", 0), ("box", 0),
                                     ("element_strides", 0)),
    # ["__tvm_tensormap_create_im2col", desc, data type, rank, address, dims[rank],
    #  strides[rank], element strides[rank], lower corner[rank - 2], upper corner[rank - 2],
    #  pixels per column, channels per pixel, flags[4]]
    "__tvm_tensormap_create_im2col": (("dims", 0), ("strides", 0), ("element_strides", 0),
                                      ("lower_corner", 2), ("upper_corner", 2),
                                      ("pixels_per_column", None),
                                      ("channels_per_pixel", None)),
}


def _tensormap(kernel: str, desc: str, args: list, data_vars: dict) -> dict:
    """``tma_descriptor_args[desc]``, a tiled or an im2col map (the layouts above; flags:
    interleave, swizzle, L2 promotion, OOB fill), as the fields tilejit encodes."""
    kind = str(args[0].value if isinstance(args[0], tirx.StringImm) else args[0])
    if kind not in _TENSORMAP_KINDS:
        raise TileLangError(f"{kernel}: tensor map '{desc}' is made by {kind}; tilejit encodes "
                            f"tiled and im2col tensor maps ({', '.join(_TENSORMAP_KINDS)})")
    try:
        rank = int(args[3])
    except (TypeError, ValueError):
        raise TileLangError(f"{kernel}: tensor map '{desc}' has rank {args[3]}, not a "
                            "constant") from None
    address = args[4]
    if not isinstance(address, tirx.Var) or address.name not in data_vars:
        raise TileLangError(f"{kernel}: tensor map '{desc}' is of {address}, which is neither "
                            "a buffer parameter nor a workspace")
    layout = _TENSORMAP_KINDS[kind]
    expected = 5 + sum(1 if less is None else rank - less for _, less in layout) + 4
    if len(args) != expected:
        raise TileLangError(f"{kernel}: tensor map '{desc}' ({kind}) has {len(args)} "
                            f"arguments, expected {expected} for rank {rank}")
    at = 5
    fields = {}
    for field, less in layout:
        n = 1 if less is None else rank - less
        values = [_expr(v, kernel, f"tensor map '{desc}' {field}") for v in args[at:at + n]]
        fields[field] = values[1:] if field == "strides" else values
        at += n
    try:
        interleave, swizzle, l2, oob = (int(v) for v in args[at:at + 4])
    except (TypeError, ValueError):
        raise TileLangError(f"{kernel}: tensor map '{desc}': interleave, swizzle, L2 "
                            "promotion and OOB fill must be constants") from None
    return {"kind": "im2col" if "im2col" in kind else "tiled",
            "buffer": data_vars[address.name], "data_type": int(args[2]), **fields,
            "interleave": interleave, "swizzle": swizzle, "l2_promotion": l2,
            "oob_fill": oob}


# ---- A description -> a tilejit Program ------------------------------------------------------


def _to_expr(e, symbols: dict):
    """A described expression over ``symbols`` ({name: T.symbol or integer T.Scalar})."""
    if isinstance(e, int):
        return e
    if e[0] == "var":
        return symbols[e[1]]
    a, b = _to_expr(e[1], symbols), _to_expr(e[2], symbols)
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
            "%": lambda: a % b, "min": lambda: T.min(a, b), "max": lambda: T.max(a, b)}[e[0]]()


def _expr_names(e) -> set:
    if isinstance(e, int):
        return set()
    if e[0] == "var":
        return {e[1]}
    return _expr_names(e[1]) | _expr_names(e[2])


def template_include_dirs() -> list[str]:
    """TileLang's ``tl_templates`` and CUTLASS include directories."""
    from tilelang import env

    return [d for d in (env.TILELANG_TEMPLATE_PATH, env.CUTLASS_INCLUDE_DIR) if d]


def program(description: dict, source: str | None, binary=None) -> tuple[Program, list[str]]:
    """The tilejit Program of a description, and the compile flags its source needs. A
    construct tilejit cannot run is a TileLangError naming the kernel and what."""
    try:
        return _program(description, source, binary)
    except TileLangError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        name = description.get("name", "?") if isinstance(description, dict) else "?"
        raise TileLangError(f"{name}: tilejit cannot describe this kernel: "
                            f"{type(exc).__name__}: {exc}") from exc


def _program(description: dict, source: str | None, binary=None) -> tuple[Program, list[str]]:
    name = description["name"]
    symbols, scalars = _symbols(description)
    params, by_name, workspaces = _params(description, symbols, scalars)
    maps = _tensormaps(description, symbols, by_name)

    def kernel_args(function):
        out = []
        for a in function["args"]:
            if "param" in a:
                out.append(by_name[a["param"]])
            elif "tensormap" in a:
                out.append(maps[a["tensormap"]])
            else:
                out.append(_to_expr(a["expr"], symbols))
        return out

    readonly = [p["name"] for p in description["params"] if p.get("const")]
    if description["target"] == "cpu":
        if len(description["functions"]) != 1:
            raise TileLangError(f"{name}: a CPU kernel calls one function, the host code "
                                f"calls {len(description['functions'])}")
        (function,) = description["functions"]
        prog = Program(function["name"], params, source, kernel_args=kernel_args(function),
                       language="c++", readonly_params=readonly, workspaces=workspaces)
        return prog, ["-std=c++17", *(f"-I{d}" for d in template_include_dirs())]
    launches = [Launch(f["name"], grid=[_to_expr(g, symbols) for g in f["grid"]],
                       block=[_to_expr(b, symbols) for b in f["block"]],
                       shared_mem=_to_expr(f["shared_mem"], symbols),
                       kernel_args=kernel_args(f), cluster=f["cluster"],
                       cooperative=f["cooperative"], pdl=f["pdl"])
                for f in description["functions"]]
    prog = Program(name, params, source, launches=launches, binary=binary,
                   readonly_params=readonly, workspaces=workspaces)
    flags = ["-std=c++20", *(f"-I{d}" for d in template_include_dirs()),
             "-Xcudafe", "--diag_suppress=177", "-w"]
    return prog, flags


def _symbols(description: dict) -> tuple[dict, dict]:
    """``(symbols, scalars)``: every name the launch may use, and the scalar parameters.
    An integer scalar parameter is an expression of its own: where the lowering uses it
    (a grid of ceildiv(max_seqlen_q, 64)) or a dynamic dimension shares its name, the
    scalar stands for it. A name the launch uses that is neither is refused."""
    scalars = {p["name"]: T.Scalar(p["dtype"], name=p["name"]) for p in description["params"]
               if p["kind"] == "scalar"}
    symbols = {sym: scalars[sym] if sym in scalars else
               T.symbol(sym, dtype=dtype if dtype in ("int32", "int64") else "int64")
               for sym, dtype in description["symbols"].items()}
    for scalar_name, scalar in scalars.items():
        if scalar_name not in symbols and scalar.is_integer:
            symbols[scalar_name] = scalar
    used = set()
    for f in description["functions"]:
        for key in ("grid", "block"):
            for e in f.get(key, ()):
                used |= _expr_names(e)
        used |= _expr_names(f.get("shared_mem", 0))
        for a in f["args"]:
            if "expr" in a:
                used |= _expr_names(a["expr"])
    unknown = sorted(n for n in used if n not in symbols)
    if unknown:
        raise TileLangError(f"{description['name']}: the launch uses {', '.join(unknown)}, "
                            "which is neither a dynamic dimension nor an integer scalar "
                            "parameter")
    return symbols, scalars


def _params(description: dict, symbols: dict, scalars: dict) -> tuple[list, dict, list]:
    """``(params, by_name, workspaces)``: the kernel's parameters in order, every buffer,
    scalar and workspace by name, and the workspaces."""
    params, by_name = [], {}
    for p in description["params"]:
        if p["kind"] == "buffer":
            strides = p["strides"]
            param = T.Buffer(tuple(_to_expr(d, symbols) for d in p["shape"]), p["dtype"],
                             strides=None if strides is None else
                             tuple(_to_expr(s, symbols) for s in strides),
                             name=p["name"], const=p["const"])
        else:
            param = scalars[p["name"]]
        params.append(param)
        by_name[p["name"]] = param
    workspaces = []
    for w in description.get("workspaces", ()):
        # TileLang's default runtime hands kernels workspace memory as it finds it (its
        # pool is not cleared): no zero fill.
        workspace = T.Workspace(tuple(_to_expr(d, symbols) for d in w["shape"]), w["dtype"],
                                name=w["name"])
        workspaces.append(workspace)
        by_name[w["name"]] = workspace
    return params, by_name, workspaces


def _tensormaps(description: dict, symbols: dict, by_name: dict) -> dict:
    """The kernel's TMA descriptors by name: tiled, or im2col."""
    maps = {}
    for desc, m in description["tensormaps"].items():
        fields = {key: [_to_expr(v, symbols) for v in m[key]]
                  for key in ("dims", "strides", "element_strides")}
        flags = {key: m[key] for key in ("data_type", "interleave", "swizzle", "l2_promotion",
                                         "oob_fill")}
        if m.get("kind", "tiled") == "im2col":
            maps[desc] = T.TensorMap.im2col_map(
                by_name[m["buffer"]],
                lower_corner=[_to_expr(v, symbols) for v in m["lower_corner"]],
                upper_corner=[_to_expr(v, symbols) for v in m["upper_corner"]],
                channels_per_pixel=_to_expr(m["channels_per_pixel"][0], symbols),
                pixels_per_column=_to_expr(m["pixels_per_column"][0], symbols),
                **fields, **flags, name=desc)
        else:
            maps[desc] = T.TensorMap(by_name[m["buffer"]],
                                     box=[_to_expr(v, symbols) for v in m["box"]],
                                     **fields, **flags, name=desc)
    return maps


def _outputs_writable(description: dict, out_idx) -> dict:
    """Outputs are written: never const, whatever the lowering said."""
    out = set(out_idx or ())
    params = [dict(p, const=False) if i in out and p["kind"] == "buffer" else p
              for i, p in enumerate(description["params"])]
    return dict(description, params=params)


def build(description: dict, source: str | None, out_idx, *, binary=None, compile_flags=(),
          execution_backend: str = "auto", verbose: bool = False):
    """Compiles (or, with ``binary``, loads) a described kernel as a tilejit JITKernel."""
    description = _outputs_writable(description, out_idx)
    if description["target"] == "cpu":
        # A CPU library is tilejit's own build of the source (the kernel and its packed
        # entry): rebuilt from the source, which tilejit's artifact cache finds.
        binary = None
    prog, flags = program(description, None if binary is not None else source, binary)
    options = {"out_idx": list(out_idx or []), "execution_backend": execution_backend,
               "compile_flags": [*flags, *compile_flags], "verbose": verbose}
    if description["target"] == "cuda":
        options["target"] = "cuda"
        if binary is None:  # compiled here; a cached image is loaded as it is
            options.update(arch=description["arch"], compiler="nvcc")
    return tilejit.compile(prog, **options)


# ---- The TileLang adapter and cache ---------------------------------------------------------


def _arch(target) -> str | None:
    arch = target.attrs.get("arch") if hasattr(target, "attrs") else None
    return str(arch) if arch is not None else None


def _target_kind(target) -> str:
    kind = target.kind.name
    if kind == "cuda":
        return "cuda"
    if kind == "c":
        return "cpu"
    raise TileLangError(f"tilejit runs TileLang kernels for targets 'cuda' and 'c', not "
                        f"{kind!r}")


class TilejitKernelAdapter(BaseKernelAdapter):
    """TileLang's view of a tilejit kernel: ``func`` is the tilejit JITKernel itself, so
    a call goes straight to tilejit's backend."""

    def __init__(self, params, result_idx, target, func_or_mod, host_mod=None,
                 device_mod=None, device_kernel_source=None, verbose=False, pass_configs=None,
                 compile_flags=None, **_):
        self.params = params
        self.result_idx = self._legalize_result_idx(result_idx)
        func = func_or_mod if isinstance(func_or_mod, tirx.PrimFunc) else \
            next(iter(func_or_mod.functions.values()))
        self.description = describe(func, host_mod, device_mod, _target_kind(target),
                                    _arch(target))
        self.from_cache = False
        self._finish(device_kernel_source, None, compile_flags, verbose)

    def _finish(self, source, binary, compile_flags, verbose):
        self.device_kernel_source = self.kernel_global_source = source
        flags = [compile_flags] if isinstance(compile_flags, str) else list(compile_flags or ())
        self.kernel = build(self.description, source, self.result_idx, binary=binary,
                            compile_flags=flags, verbose=verbose)
        self.libpath = self.kernel.library_path
        self._post_init()

    @classmethod
    def from_database(cls, params, result_idx, target, func_or_mod, host_kernel_source,
                      device_kernel_source, kernel_lib_path, verbose=False, pass_configs=None,
                      compile_flags=None, **_):
        adapter = cls.__new__(cls)
        adapter.params = params
        adapter.result_idx = adapter._legalize_result_idx(result_idx)
        host = adapter._set_cached_text_source("_description_text", "_description_path",
                                               host_kernel_source)
        device = adapter._set_cached_text_source("device_kernel_source", "_device_path",
                                                 device_kernel_source)
        text = host.text
        if text is None and host.path is not None:
            with open(host.path, encoding="utf-8") as f:
                text = f.read()
        source = device.text
        if source is None and device.path is not None:
            with open(device.path, encoding="utf-8") as f:
                source = f.read()
        adapter.description = json.loads(text)
        adapter.from_cache = True
        if adapter.description.get("version") not in _READABLE_VERSIONS:
            raise TileLangError(f"a cached tilejit kernel description of version "
                                f"{adapter.description.get('version')!r}; this tilejit reads "
                                f"versions {', '.join(map(str, _READABLE_VERSIONS))}")
        adapter._finish(source, kernel_lib_path, compile_flags, verbose)
        return adapter

    def _convert_torch_func(self):
        return self.kernel

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        return self.device_kernel_source if kernel_only else self.kernel.get_host_source()

    def get_host_source(self) -> str:
        return self.kernel.get_host_source()


def _kernel_cache_class():
    from tilelang.cache.kernel_cache import KernelCache

    class TilejitKernelCache(KernelCache):
        """TileLang's disk cache for tilejit kernels: the description (as the "host"
        source), the device source and tilejit's compiled image."""

        def _save_wrapper_kernel_code_to_disk(self, kernel, cache_path, verbose=False):
            path = os.path.join(cache_path, self.host_kernel_path)
            text = json.dumps(kernel.adapter.description, sort_keys=True)
            KernelCache._safe_write_file(path, "w", lambda file: file.write(text))

        def _save_so_cubin_to_disk(self, kernel, cache_path, verbose=False):
            path = os.path.join(cache_path, self.kernel_lib_path)
            KernelCache._safe_write_file(path, "wb", lambda file: file.write(
                KernelCache._load_binary(kernel.adapter.libpath)))

    return TilejitKernelCache


# ---- Registration -----------------------------------------------------------------------------


def _supports(kind: str):
    def check(target) -> bool:
        return target.kind.name == kind
    return check


def check_registration() -> list[str]:
    """What of TileLang's integration points is missing (empty: all there): the backend
    registry, the adapter factories, the cache dispatch map."""
    problems = []
    if not hasattr(_tl_module, "_BACKENDS") or not hasattr(_tl_module, "list_backends"):
        problems.append("tilelang.backend.module._BACKENDS (the backend registry)")
    for name in ("_create_adapter_from_artifact", "_create_adapter_from_database",
                 "get_kernel_source", "get_host_source"):
        if not callable(getattr(_JIT, name, None)):
            problems.append(f"tilelang.jit.kernel.JITKernel.{name}")
    try:
        from tilelang import cache
        if not isinstance(getattr(cache, "_dispatch_map", None), dict):
            problems.append("tilelang.cache._dispatch_map")
    except ImportError:
        problems.append("tilelang.cache")
    fields = {f.name for f in dataclasses.fields(ExecutionBackendSpec)}
    if not {"name", "supports_target"} <= fields:
        problems.append("ExecutionBackendSpec(name, supports_target)")
    return problems


def registered() -> bool:
    """Whether "tilejit" is a TileLang execution backend for targets "cuda" and "c"."""
    from tilelang import cache

    kinds = set()
    for backend in _tl_module.list_backends().values():
        if any(spec.name == BACKEND for spec in backend.execution_backends):
            kinds.update(backend.target_kinds)
    return ({"cuda", "c"} <= kinds and BACKEND in cache._dispatch_map
            and getattr(_JIT._create_adapter_from_artifact, "_tilejit", False))


def register() -> None:
    """Makes "tilejit" a TileLang execution backend (idempotent)."""
    problems = check_registration()
    if problems:
        raise ImportError(f"tilejit.tilelang: this TileLang ({tilelang.__version__}) moved "
                          f"what tilejit registers with: {'; '.join(problems)}")
    for name, backend in list(_tl_module._BACKENDS.items()):
        kinds = [k for k in backend.target_kinds if k in ("cuda", "c")]
        if not kinds or any(s.name == BACKEND for s in backend.execution_backends):
            continue
        spec = ExecutionBackendSpec(BACKEND, supports_target=_supports(kinds[0]))
        _tl_module._BACKENDS[name] = dataclasses.replace(
            backend, execution_backends=(*backend.execution_backends, spec))

    if not getattr(_JIT._create_adapter_from_artifact, "_tilejit", False):
        from_artifact = _JIT._create_adapter_from_artifact
        from_database = _JIT._create_adapter_from_database
        kernel_source, host_source = _JIT.get_kernel_source, _JIT.get_host_source

        def create_from_artifact(self, tilelang_func, out_idx, artifact, pass_configs,
                                 compile_metadata):
            if self.execution_backend != BACKEND:
                return from_artifact(self, tilelang_func, out_idx, artifact, pass_configs,
                                     compile_metadata)
            return TilejitKernelAdapter(
                params=artifact.params, result_idx=out_idx, target=self.target,
                func_or_mod=tilelang_func, host_mod=artifact.host_mod,
                device_mod=artifact.device_mod, device_kernel_source=artifact.kernel_source,
                verbose=self.verbose, pass_configs=pass_configs,
                compile_flags=self.compile_flags)

        def create_from_database(self, params, result_idx, target, func_or_mod,
                                 host_kernel_source, device_kernel_source, kernel_lib_path,
                                 pass_configs=None, compile_flags=None):
            if self.execution_backend != BACKEND:
                return from_database(self, params, result_idx, target, func_or_mod,
                                     host_kernel_source, device_kernel_source, kernel_lib_path,
                                     pass_configs, compile_flags)
            return TilejitKernelAdapter.from_database(
                params, result_idx, self.target, func_or_mod, host_kernel_source,
                device_kernel_source, kernel_lib_path, pass_configs=pass_configs,
                compile_flags=compile_flags)

        def get_kernel_source(self, kernel_only=True):
            if self.execution_backend == BACKEND:
                return self.adapter.get_kernel_source(kernel_only=kernel_only)
            return kernel_source(self, kernel_only)

        def get_host_source(self):
            if self.execution_backend == BACKEND:
                return self.adapter.get_host_source()
            return host_source(self)

        create_from_artifact._tilejit = True
        _JIT._create_adapter_from_artifact = create_from_artifact
        _JIT._create_adapter_from_database = create_from_database
        _JIT.get_kernel_source = get_kernel_source
        _JIT.get_host_source = get_host_source

    from tilelang import cache

    if BACKEND not in cache._dispatch_map:
        cache._dispatch_map[BACKEND] = _kernel_cache_class()()


def compile(func, out_idx=None, target="auto", *, target_host=None, pass_configs=None,
            compile_flags=None, verbose=False):
    """``tilelang.compile(func, ..., execution_backend="tilejit")``, returning the tilejit
    JITKernel itself (its ``c_prototype``, ``with_backend``, ...)."""
    kernel = tilelang.compile(func, out_idx=out_idx, target=target, target_host=target_host,
                              execution_backend=BACKEND, pass_configs=pass_configs,
                              compile_flags=compile_flags, verbose=verbose)
    return kernel.adapter.kernel


register()
