"""TileLang kernels of the kinds real kernel libraries write, through tilejit, launched
exactly as TileLang's own host code launches them.

Each kernel here is written as a TileLang user writes it: a varlen-style grid over a
``T.int32`` parameter, a split kernel with a ``T.alloc_global`` workspace and a tensor map
over it, an im2col convolution, a cluster kernel with programmatic dependent launch. They
are lowered by the real TileLang, compiled by the real nvcc and launched against the fake
driver, and every recorded value is compared with an oracle read from TileLang's own
lowering: the host function's ``call_packed`` of each kernel (its arguments and launch
parameters, evaluated for the call's values) and of each tensor map, under the launch
rules of TileLang's default runtime (a cluster launch only when a dimension exceeds 1,
always with programmatic stream serialization; otherwise that attribute only for kernels
that wait on their predecessor; a cooperative launch only when neither applies).
"""

import gc

import pytest

tilelang = pytest.importorskip(
    "tilelang", reason="TileLang is not installed (pip install 'tilejit[tilelang]')",
    exc_type=ImportError)
import tilelang.language as TL
from conftest import load_fakes
from tvm import arith, tirx
from tvm.target import Target

import tilejit
import tilejit.tilelang as tt

fakes = load_fakes()
FakeCudaTensor = fakes.FakeCudaTensor
SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
CLUSTER, COOPERATIVE, PSS = 4, 2, 6  # CUlaunchAttributeID


@pytest.fixture(autouse=True, scope="module")
def tilelang_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILELANG_CACHE_DIR", str(tmp_path_factory.mktemp("tilelang-cache")))
        yield


# ---- Kernels, as TileLang users write them ------------------------------------------------------


def varlen_copy():
    """A varlen-attention-shaped kernel: the grid is over max_seqlen_q, a scalar."""
    total = TL.dynamic("total")

    @TL.prim_func
    def varlen(Q: TL.Tensor((total, 128), "float16"), O: TL.Tensor((total, 128), "float16"),
               max_seqlen_q: TL.int32):
        with TL.Kernel(TL.ceildiv(max_seqlen_q, 64), 4, threads=128) as (bx, _by):
            s = TL.alloc_shared((64, 128), "float16")
            TL.copy(Q[bx * 64, 0], s)
            TL.copy(s, O[bx * 64, 0])
    return varlen


def split_kv():
    """Split-KV decoding's shape: partial results in a T.alloc_global workspace, written
    and read back through a TMA tensor map over it, the grid over a scalar."""
    @TL.prim_func
    def split(Q: TL.Tensor((1024, 128), "float16"), O: TL.Tensor((1024, 128), "float16"),
              max_seqlen_q: TL.int32):
        with TL.Kernel(TL.ceildiv(max_seqlen_q, 64), 4, threads=128) as (bx, by):
            partial = TL.alloc_global((4, 1024, 128), "float16")
            s = TL.alloc_shared((64, 128), "float16")
            s2 = TL.alloc_shared((64, 128), "float16")
            TL.copy(Q[bx * 64, 0], s)
            TL.copy(s, partial[by, bx * 64, 0])
            TL.copy(partial[by, bx * 64, 0], s2)
            TL.copy(s2, O[bx * 64, 0])
    return split


def im2col_conv():
    """A convolution's im2col load through a TMA im2col tensor map (NHWC, 3x3, pad 1)."""
    @TL.prim_func
    def conv(data: TL.Tensor((2, 16, 16, 64), "float16"),
             out: TL.Tensor((2 * 16 * 16, 64), "float16")):
        with TL.Kernel(2 * 16 * 16 // 64, threads=128) as bx:
            s = TL.alloc_shared((64, 64), "float16")
            TL.im2col(data, s, bx, 0, 3, 1, 1, 1)
            TL.copy(s, out[bx * 64, 0])
    return conv


def cluster_kernel():
    """A cluster kernel that signals its successor (T.pdl_trigger) but does not wait."""
    import tilelang.cuda.language as TC

    n = TL.dynamic("n")

    @TL.prim_func
    def clustered(A: TL.Tensor((n,), "float32"), B: TL.Tensor((n,), "float32")):
        with TL.Kernel(TL.ceildiv(n, 128), threads=128, cluster_dims=(2, 1, 1)) as bx:
            for i in TL.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i] + 1.0
            TC.pdl_trigger()
    return clustered


def pdl_kernel():
    """A kernel that waits on its predecessor (T.pdl_sync), with no cluster."""
    import tilelang.cuda.language as TC

    n = TL.dynamic("n")

    @TL.prim_func
    def waits(A: TL.Tensor((n,), "float32"), B: TL.Tensor((n,), "float32")):
        with TL.Kernel(TL.ceildiv(n, 256), threads=256) as bx:
            TC.pdl_sync()
            for i in TL.Parallel(256):
                if bx * 256 + i < n:
                    B[bx * 256 + i] = A[bx * 256 + i] * 2.0
    return waits


# ---- The oracle: TileLang's own host code, evaluated ---------------------------------------------


def _evaluate(expr, values: dict) -> int:
    names = {}
    tirx.stmt_functor.post_order_visit(
        expr, lambda node: names.__setitem__(node.name, node) if isinstance(node, tirx.Var)
        else None)
    bound = {var: tirx.IntImm(var.dtype, values[name]) for name, var in names.items()}
    result = arith.Analyzer().simplify(tirx.stmt_functor.substitute(expr, bound))
    assert isinstance(result, tirx.IntImm), f"{expr} is not constant for {values}"
    return int(result.value)


def tilelang_plan(func, target) -> dict:
    """TileLang's host code for ``func``: each kernel launch and each tensor map, as its
    ``call_packed`` says, to be evaluated by `expected`."""
    with Target(target):
        artifact = tilelang.lower(func, target=target)
    (host,) = list(artifact.host_mod.functions.values())
    device = {gv.name_hint: f for gv, f in artifact.device_mod.functions.items()}
    calls = []

    def visit(node):
        if isinstance(node, tirx.Call) and node.args and isinstance(node.args[0],
                                                                    tirx.StringImm):
            calls.append((node.args[0].value, list(node.args[1:])))

    tirx.stmt_functor.post_order_visit(host.body, visit)
    launches = [(name, args, device[name]) for name, args in calls if name in device]
    maps = {str(args[0].name): (name, args[1:]) for name, args in calls
            if name.startswith("__tvm_tensormap_create")}
    return {"launches": launches, "maps": maps}


def expected(plan: dict, values: dict, addresses: dict) -> tuple[list, dict]:
    """The launches and tensor-map encodes TileLang's runtime would make for a call whose
    variables have ``values`` and whose buffers are at ``addresses``."""
    maps = {}
    for desc, (kind, args) in plan["maps"].items():
        dtype, rank, address, *rest = args
        rank = int(rank)
        ints = [_evaluate(v, values) for v in rest[:-4]]
        record = {"data_type": int(dtype), "rank": rank,
                  "address": addresses.get(address.name),  # None: over a workspace
                  "dims": ints[:rank], "strides": ints[rank + 1:2 * rank]}
        ints = ints[2 * rank:]
        if kind.endswith("tiled"):
            record.update(fn="cuTensorMapEncodeTiled", box=ints[:rank],
                          element_strides=ints[rank:2 * rank])
        else:
            corners = rank - 2
            record.update(fn="cuTensorMapEncodeIm2col", element_strides=ints[:rank],
                          lower_corner=ints[rank:rank + corners],
                          upper_corner=ints[rank + corners:rank + 2 * corners],
                          pixels_per_column=ints[rank + 2 * corners],
                          channels_per_pixel=ints[rank + 2 * corners + 1])
        record.update(zip(("interleave", "swizzle", "l2_promotion", "oob_fill"),
                          (int(v) for v in rest[-4:])))
        maps[desc] = record
    launches = []
    for name, args, dfunc in plan["launches"]:
        nparams = len(dfunc.params)
        tags = [str(t) for t in dfunc.attrs["tirx.kernel_launch_params"]]
        launch_values = dict(zip(tags, args[nparams:]))
        dims = {tag: _evaluate(v, values) for tag, v in launch_values.items()
                if tag != "tirx.use_dyn_shared_memory"}
        smem = launch_values.get("tirx.use_dyn_shared_memory")
        cluster = [dims.get(f"tir.cluster_dim_{a}", 1) for a in "xyz"]
        pdl = bool(dfunc.attrs.get("has_cuda_pdl_sync", 0))
        kernel_args = []
        for a in args[:nparams]:
            if isinstance(a, tirx.Var) and a.name in maps:
                kernel_args.append(("map", a.name))
            elif isinstance(a, tirx.Var) and a.name in addresses:
                kernel_args.append(("address", addresses[a.name]))
            elif str(a.dtype).startswith("handle"):
                kernel_args.append(("workspace", a.name))
            else:
                kernel_args.append(("int", _evaluate(a, values), int(a.dtype.bits) // 8))
        attrs = []
        if max(cluster) > 1:
            attrs = [{"id": CLUSTER, "cluster": cluster},
                     {"id": PSS, "programmatic_stream_serialization": 1}]
        elif pdl:
            attrs = [{"id": PSS, "programmatic_stream_serialization": 1}]
        elif dfunc.attrs.get("use_cooperative_groups", False):
            attrs = [{"id": COOPERATIVE, "cooperative": 1}]
        launches.append({
            "function": name, "grid": [dims.get(f"blockIdx.{a}", 1) for a in "xyz"],
            "block": [dims.get(f"threadIdx.{a}", 1) for a in "xyz"],
            "shared_mem": 0 if smem is None else _evaluate(smem, values),
            "attrs": attrs, "args": kernel_args})
    return launches, maps


def _map_bytes(record: dict) -> str:
    """The bytes the fake driver writes for an encoded map (fake_cuda.c)."""
    words = [0] * 16
    words[0] = record["address"]
    for i, d in enumerate(record["dims"]):
        words[1 + i] = d
    for i, s in enumerate(record["strides"]):
        words[6 + i] = s
    if "box" in record:
        for i, b in enumerate(record["box"]):
            words[11 + i] = b
    else:
        words[11], words[12] = record["channels_per_pixel"], record["pixels_per_column"]
    return b"".join(w.to_bytes(8, "little") for w in words).hex()


def check_call(fake, plan, values: dict, addresses: dict, stream: int) -> dict:
    """Compares the recorded launches and encodes of the last call with the oracle's;
    returns the workspaces' addresses as the kernels received them."""
    launches, maps = expected(plan, values, addresses)
    encodes = [r for r in fake.records() if r["fn"].startswith("cuTensorMapEncode")]
    recorded = fake.launches()[-len(launches):]
    workspaces = {}
    by_desc = dict(zip(maps, encodes[-len(maps):] if maps else []))
    for desc, want in maps.items():
        got = dict(by_desc[desc])
        for key in ("result", "context"):
            got.pop(key)
        if want["address"] is None:  # over a workspace: where it was allocated
            want = {**want, "address": got["address"]}
            workspaces[plan["maps"][desc][1][2].name] = got["address"]
        assert got == want, desc
        maps[desc] = want
    for want, got in zip(launches, recorded):
        args = []
        for kind, *rest in want["args"]:
            if kind == "map":
                args.append(_map_bytes(maps[rest[0]]))
            elif kind == "address":
                args.append(rest[0].to_bytes(8, "little").hex())
            elif kind == "workspace":  # the same workspace wherever it is passed
                address = int.from_bytes(bytes.fromhex(got["args"][len(args)]), "little")
                assert workspaces.setdefault(rest[0], address) == address
                args.append(got["args"][len(args)])
            else:
                value, size = rest
                args.append(value.to_bytes(size, "little", signed=True).hex())
        fn = "cuLaunchKernelEx" if want["attrs"] else "cuLaunchKernel"
        expect = {"fn": fn, "result": 0, "context": got["context"], "function": want["function"],
                  "module": got["module"], "grid": want["grid"], "block": want["block"],
                  "shared_mem": want["shared_mem"], "stream": stream, "args": args}
        if want["attrs"]:
            expect["attrs"] = want["attrs"]
        assert got == expect
    return workspaces


# ---- The kernels, launched ---------------------------------------------------------------------


def test_a_grid_over_a_scalar_parameter_launches_as_tilelang(fake):
    func = varlen_copy()
    k = tt.compile(func, out_idx=[1], target=SM80)
    plan = tilelang_plan(func, SM80)
    assert k.c_prototype == ('extern "C" __global__ void varlen_kernel(tj_float16 *O, '
                             "const tj_float16 *Q, int32_t max_seqlen_q, int32_t total)")
    for total, max_seqlen in ((1000, 1), (1000, 64), (4096, 1000), (7, 0)):
        q = FakeCudaTensor((total, 128), "float16")
        o = k(q, max_seqlen, stream=0x42)
        assert o.shape == (total, 128)
        if max_seqlen == 0:  # an empty grid: nothing launches, as in TileLang's runtime
            continue
        check_call(fake, plan, {"total": total, "max_seqlen_q": max_seqlen},
                   {"Q": q.address, "O": o.address}, 0x42)
    assert len(fake.launches()) == 3
    # The scalar's value is checked as the parameter's type says, naming it.
    with pytest.raises(ValueError, match=r"varlen: argument 1 'max_seqlen_q': value 4294967296 "
                                         r"is out of range for int32"):
        k(FakeCudaTensor((10, 128), "float16"), 1 << 32)
    with pytest.raises(TypeError, match=r"varlen: argument 1 'max_seqlen_q': expected an int"):
        k(FakeCudaTensor((10, 128), "float16"), 2.5)
    # A negative length makes a negative grid: refused before anything launches.
    with pytest.raises(ValueError, match=r"varlen.*grid\[0\] = \(max_seqlen_q \+ 63\) // 64 "
                                         r"evaluates to -1"):
        k(FakeCudaTensor((10, 128), "float16"), -100)
    assert len(fake.launches()) == 3


def test_a_global_workspace_is_allocated_per_call_with_a_tensor_map_over_it(fake):
    func = split_kv()
    k = tilelang.compile(func, out_idx=[1], target=SM90, execution_backend="tilejit")
    inner = k.adapter.kernel
    plan = tilelang_plan(func, SM90)
    fake.set_capability(9, 0)
    (workspace,) = inner.program.workspaces
    assert (workspace.name, workspace.shape, workspace.dtype, workspace.zero) == (
        "partial", (524288,), "float16", False)
    seen = set()
    for max_seqlen in (64, 1000, 65):
        q = FakeCudaTensor((1024, 128), "float16")
        before = FakeCudaTensor._next_address
        o = k(q, max_seqlen, stream=0x42)
        # The output, then the workspace, from the inputs' framework allocator.
        assert o.address == before
        addresses = {"Q": q.address, "O": o.address}
        spaces = check_call(fake, plan, {"max_seqlen_q": max_seqlen}, addresses, 0x42)
        assert spaces == {"partial": before + (1 << 20)}
        seen.add(spaces["partial"])
        # TileLang's runtime hands the kernel workspace memory as it finds it: no memset.
        assert not fake.records("cuMemsetD8Async")
    assert len(seen) == 3  # one per call, released after it
    # Released once the launch is enqueued: calls leave no workspace alive.
    gc.collect()
    alive = sum(type(o) is FakeCudaTensor for o in gc.get_objects())
    for _ in range(20):
        k(FakeCudaTensor((1024, 128), "float16"), 64)
    gc.collect()
    assert sum(type(o) is FakeCudaTensor for o in gc.get_objects()) <= alive + 1


def test_an_im2col_tensor_map_encodes_as_tilelang(fake):
    func = im2col_conv()
    k = tt.compile(func, out_idx=-1, target=SM90)
    plan = tilelang_plan(func, SM90)
    fake.set_capability(9, 0)
    for _ in range(2):
        data = FakeCudaTensor((2, 16, 16, 64), "float16")
        out = k(data, stream=0x42)
        check_call(fake, plan, {}, {"data": data.address, "out": out.address}, 0x42)
    (encode,) = fake.records("cuTensorMapEncodeIm2col")[-1:]
    assert (encode["lower_corner"], encode["upper_corner"], encode["channels_per_pixel"],
            encode["pixels_per_column"]) == ([-1, -1], [-1, -1], 64, 64)


@pytest.mark.parametrize("make, attrs", [
    (cluster_kernel, [{"id": CLUSTER, "cluster": [2, 1, 1]},
                      {"id": PSS, "programmatic_stream_serialization": 1}]),
    (pdl_kernel, [{"id": PSS, "programmatic_stream_serialization": 1}])])
def test_cluster_and_pdl_launches_follow_tilelangs_runtime(fake, make, attrs):
    func = make()
    k = tt.compile(func, out_idx=-1, target=SM90)
    plan = tilelang_plan(func, SM90)
    fake.set_capability(9, 0)
    for n in (512, 1024):
        a = FakeCudaTensor((n,))
        b = k(a, stream=0x42)
        check_call(fake, plan, {"n": n}, {"A": a.address, "B": b.address}, 0x42)
        assert fake.launches()[-1]["attrs"] == attrs


# ---- Every failure to describe a kernel is a TileLangError -------------------------------------


def test_conversion_failures_are_tilelang_errors_naming_the_kernel():
    bad = {"version": 2, "name": "k", "target": "cuda", "arch": "sm_90a",
           "params": [{"kind": "buffer", "name": "A", "dtype": "float32", "shape": [["var", "n"]],
                       "strides": None, "const": False}],
           "symbols": {}, "functions": [], "tensormaps": {}, "workspaces": []}
    with pytest.raises(tt.TileLangError, match=r"^k: tilejit cannot describe this kernel: "
                                               r"KeyError: 'n'"):
        tt.program(bad, "")
    launch = {"name": "k_kernel", "args": [], "grid": [["var", "m"], 1, 1], "block": [1, 1, 1],
              "shared_mem": 0, "cluster": None, "cooperative": False, "pdl": False}
    with pytest.raises(tt.TileLangError, match=r"^k: the launch uses m, which is neither a "
                                               r"dynamic dimension nor an integer scalar"):
        tt.program(dict(bad, params=[], functions=[launch]), "")
    # A float scalar in a launch shape is named as such.
    scalar = {"kind": "scalar", "name": "alpha", "dtype": "float32"}
    with pytest.raises(tt.TileLangError, match=r"^k: the launch uses alpha"):
        tt.program(dict(bad, params=[scalar], functions=[launch | {"grid": [["var", "alpha"],
                                                                            1, 1]}]), "")


def test_a_scalar_in_a_launch_shape_exports_and_loads(fake, tmp_path):
    func = varlen_copy()
    k = tt.compile(func, out_idx=[1], target=SM80)
    k.export(tmp_path / "varlen")
    loaded = tilejit.load(tmp_path / "varlen")
    q = FakeCudaTensor((300, 128), "float16")
    for kernel in (k, loaded):
        o = kernel(q, 100, stream=0x42)
        assert fake.launches()[-1]["grid"] == [2, 4, 1]
        assert fake.launches()[-1]["args"][-2:] == [(100).to_bytes(4, "little").hex(),
                                                    (300).to_bytes(4, "little").hex()]
        assert o.shape == (300, 128)
    assert "scalar 2 max_seqlen_q 0:32:1 1" in (tmp_path / "varlen" / "signature.tj").read_text()


_CACHE_RUN = """
import json, sys
sys.path.insert(0, {here!r})
import tilelang
import test_tilelang_zoo as zoo
driver = zoo.fakes.FakeDriver({driver!r})
driver.set_capability(9, 0)
out = []
for make, target, args in ((zoo.varlen_copy, zoo.SM80, lambda: (zoo.FakeCudaTensor((300, 128),
                            "float16"), 100)),
                           (zoo.split_kv, zoo.SM90, lambda: (zoo.FakeCudaTensor((1024, 128),
                            "float16"), 1000)),
                           (zoo.im2col_conv, zoo.SM90, lambda: (zoo.FakeCudaTensor(
                            (2, 16, 16, 64), "float16"),))):
    k = tilelang.compile(make(), out_idx=-1 if make is zoo.im2col_conv else [1], target=target,
                         execution_backend="tilejit")
    k(*args(), stream=0x42)
    out.append(k.adapter.from_cache)
records = [r for r in driver.records() if r["fn"].startswith(("cuLaunch", "cuTensorMapEncode"))]
print(json.dumps({{"from_cache": out, "records": records}}))
"""


@pytest.mark.slow  # two processes lowering
def test_kernels_from_tilelangs_disk_cache_launch_as_compiled_ones(tmp_path, fake_driver_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = dict(os.environ, TILELANG_CACHE_DIR=str(tmp_path / "tl-cache"),
               TILEJIT_LIBCUDA=str(fake_driver_path))
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", _CACHE_RUN.format(
            here=str(here), driver=str(fake_driver_path))], check=False, capture_output=True,
            text=True, env=env, cwd=here.parent, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert [r["from_cache"] for r in runs] == [[False] * 3, [True] * 3]
    assert runs[0]["records"] == runs[1]["records"]
    assert [r["fn"] for r in runs[0]["records"]] == [
        "cuLaunchKernel", "cuTensorMapEncodeTiled", "cuTensorMapEncodeTiled", "cuLaunchKernel",
        "cuTensorMapEncodeIm2col", "cuLaunchKernel"]


# ---- On a GPU (marked `cuda`): the same kernels, TileLang's own backend as the oracle ----------

_GPU_RUN = """
import sys, torch, tilelang
sys.path.insert(0, {here!r})
import test_tilelang_zoo as zoo
major, _ = torch.cuda.get_device_capability()
target = {{"kind": "cuda", "arch": "sm_90a" if major == 9 else f"sm_{{major}}0"}}
dev = torch.device("cuda")
q4096 = torch.randn(4096, 128, dtype=torch.float16, device=dev)
q1024 = torch.randn(1024, 128, dtype=torch.float16, device=dev)
a = torch.randn(1 << 16, device=dev)
cases = [(zoo.varlen_copy, [1], (q4096, 1000), slice(0, 1000), q4096[:1000]),
         (zoo.split_kv, [1], (q1024, 1000), slice(0, 1000), q1024[:1000])]
if major == 9:  # TMA im2col, clusters and PDL: Hopper
    data = torch.randn(2, 16, 16, 64, dtype=torch.float16, device=dev)
    cases += [(zoo.im2col_conv, -1, (data,), slice(None), None),
              (zoo.cluster_kernel, -1, (a,), slice(None), a + 1),
              (zoo.pdl_kernel, -1, (a,), slice(None), a * 2)]
for make, out_idx, args, region, want in cases:
    results = [tilelang.compile(make(), out_idx=out_idx, target=target,
                                execution_backend=backend)(*args)[region]
               for backend in ("tvm_ffi", "tilejit")]
    torch.cuda.synchronize()
    assert torch.equal(results[0], results[1]), make.__name__
    assert want is None or torch.equal(results[1], want), make.__name__
    print(make.__name__, "identical to tvm_ffi")
print("ok")
"""


@pytest.mark.cuda
@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="no CUDA GPU (torch.cuda.is_available())")
def test_gpu_zoo_kernels_match_tilelangs_default_backend(child_env):
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = child_env()
    env.pop("TILEJIT_LIBCUDA", None)
    done = subprocess.run([sys.executable, "-c", _GPU_RUN.format(here=str(here))],
                          check=False, capture_output=True, text=True, env=env, timeout=900,
                          cwd=here.parent)
    print(done.stdout, done.stderr)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok")


def test_host_side_bindings_in_launch_arguments_are_inlined():
    # Host code may bind a value once and pass the variable (common subexpressions): the
    # description reads through it to the parameters and dimensions tilejit binds.
    n = tirx.Var("n", "int32")
    cse1, cse2 = tirx.Var("cse_var_1", "int32"), tirx.Var("cse_var_2", "int32")
    body = tirx.SeqStmt([tirx.Bind(cse1, tirx.floordiv(n + 127, 128)),
                         tirx.Bind(cse2, cse1 * 2), tirx.Evaluate(cse2)])
    inline = tt._host_lets(tirx.PrimFunc([n], body), {"n"})
    assert tt._expr(inline(cse2 + 1), "k", "grid") == [
        "+", ["*", ["//", ["+", ["var", "n"], 127], 128], 2], 1]
    assert tt._expr(inline(n), "k", "grid") == ["var", "n"]
