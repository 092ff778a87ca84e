"""Launching kernels of the kernel API (test_kernel_api.py) on a GPU: correctness against PyTorch, runtime
vs specialized arguments, streams, CUDA graphs, the cache across processes, launch-time argument errors and
the compiler preload that starting CUDA begins. kjit.launcher on a GPU: test_launcher.py."""

import pytest
import torch

import kjit
from support import unique_source

pytestmark = pytest.mark.gpu

SIZES = [1, 7, 1000, 4097]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def launch_add(k, x, y, c, vec):
    n = x.numel()
    k.launch(max(1, kjit.cdiv(n, 256 * vec)), 256, x, y, c, n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_add_constant_matches_torch(add, dtype, n):
    x = torch.randn(n, device="cuda").to(dtype)
    y = torch.empty_like(x)
    k = add.specialize(T=dtype, VEC=4)
    assert k.device == torch.cuda.current_device()
    launch_add(k, x, y, 5.0, 4)
    torch.testing.assert_close(y, x + 5.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_add_constant_misaligned_view(add, dtype, n):
    base = torch.randn(n + 1, device="cuda").to(dtype)
    x = base[1:]  # offset by one element: not aligned for vector access
    out = torch.empty(n + 1, device="cuda", dtype=dtype)
    y = out[1:]
    k = add.specialize(T=dtype, VEC=1)
    launch_add(k, x, y, -2.5, 1)
    torch.testing.assert_close(y, x - 2.5)


def test_runtime_argument_never_recompiles(add):
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    add.specialize(T=torch.float32, VEC=4)  # warm
    kjit.reset_stats()
    for c in [1.0, 2.5, -3.0, 1e6, 0]:
        k = add.specialize(T=torch.float32, VEC=4)
        assert k.origin == "memory"
        launch_add(k, x, y, c, 4)
        torch.testing.assert_close(y, x + c)
    s = kjit.stats()
    assert s["compiles"] == 0 and s["disk_hits"] == 0 and s["memory_hits"] == 5


def test_one_compile_per_specialized_value():
    f = kjit.Template(
        unique_source("template <int N> __global__ void fill(float* y) { y[threadIdx.x] = N; }"), name="fill.cu"
    ).kernel("fill")
    y = torch.zeros(32, device="cuda")
    kjit.reset_stats()
    for n in [1, 2, 3, 1, 2, 3, 3]:
        k = f.specialize(N=n)
        k.launch(1, 32, y)
        assert torch.all(y == n)
    assert kjit.stats()["compiles"] == 3


def test_memory_hit_returns_the_same_object(add):
    a = add.specialize(T=torch.float32, VEC=2)
    b = add.specialize(T=torch.float32, VEC=2)
    assert b.origin == "memory" and b.key == a.key
    assert add.specialize(T=torch.float32, VEC=2) is b


def test_side_stream_ordering(add):
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    k = add.specialize(T=torch.float32, VEC=4)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        z = x * 2  # on s
        launch_add(k, z, y, 1.0, 4)  # the current stream is s: ordered after z
    s.synchronize()
    torch.testing.assert_close(y, x * 2 + 1.0)
    # The same with an explicit stream argument.
    y2 = torch.empty_like(x)
    with torch.cuda.stream(s):
        z2 = x * 3
    k.launch(kjit.cdiv(x.numel(), 1024), 256, z2, y2, 1.0, x.numel(), stream=s)
    s.synchronize()
    torch.testing.assert_close(y2, x * 3 + 1.0)
    # ... and a raw handle.
    y3 = torch.empty_like(x)
    k.launch(kjit.cdiv(x.numel(), 1024), 256, x, y3, 4.0, x.numel(), stream=s.cuda_stream)
    s.synchronize()
    torch.testing.assert_close(y3, x + 4.0)


def test_graph_capture_of_a_cached_kernel(add):
    x = torch.randn(4097, device="cuda")
    y = torch.empty_like(x)
    k = add.specialize(T=torch.float32, VEC=4)
    launch_add(k, x, y, 1.0, 4)  # compiled and loaded before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch_add(add.specialize(T=torch.float32, VEC=4), x, y, 3.0, 4)
    x.copy_(torch.arange(4097, device="cuda", dtype=torch.float32))
    y.zero_()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 3.0)


def test_compiling_during_capture_is_an_error():
    f = kjit.Template(
        unique_source("template <int N> __global__ void fill(float* y) { y[threadIdx.x] = N; }"), name="fill.cu"
    ).kernel("fill")
    y = torch.zeros(32, device="cuda")
    g = torch.cuda.CUDAGraph()
    with pytest.raises(kjit.LaunchError) as e:
        with torch.cuda.graph(g):
            f.specialize(N=7)
    assert (
        "the stream is being captured by a CUDA graph; run the kernel once before capture so that it is "
        "compiled and cached" in str(e.value)
    )
    # The process is fine afterwards.
    f.specialize(N=7).launch(1, 32, y)
    torch.cuda.synchronize()
    assert torch.all(y == 7)


def test_second_process_loads_from_disk(run_py):
    snippet = """
        import kjit, torch
        x = torch.arange(10, device='cuda', dtype=torch.float32)
        y = torch.empty_like(x)
        k = kjit.Template.builtin('add_constant').kernel('add_constant').specialize(T=torch.float32, VEC=4)
        k.launch(1, 256, x, y, 0.5, 10)
        torch.cuda.synchronize()
        s = kjit.stats()
        print(k.origin, s['compiles'], s['disk_hits'], bool(torch.equal(y, x + 0.5)))
    """
    assert run_py(snippet).stdout.split() == ["compiled", "1", "0", "True"]
    assert run_py(snippet).stdout.split() == ["disk", "0", "1", "True"]


def test_rgb_to_gray_matches_formula():
    f = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray")
    b, h, w = 2, 37, 53
    img = torch.randint(0, 256, (b, h, w, 3), device="cuda", dtype=torch.uint8)
    gray = torch.empty(b, h, w, device="cuda", dtype=torch.uint8)
    k = f.specialize(H=h, W=w)
    k.launch((kjit.cdiv(w, 16), kjit.cdiv(h, 16), b), (16, 16), img, gray)
    p = img.to(torch.int32)
    want = ((77 * p[..., 0] + 150 * p[..., 1] + 29 * p[..., 2] + 128) >> 8).to(torch.uint8)
    torch.testing.assert_close(gray, want)


def test_launch_argument_errors(add):
    k = add.specialize(T=torch.float32, VEC=4)
    x = torch.zeros(8, device="cuda")

    def msg(exc, *args, **kw):
        with pytest.raises(exc) as e:
            k.launch(*args, **kw)
        return str(e.value)

    assert (
        msg(kjit.TypeError, 1, 32, x, x, 1.0) == "kernel add_constant<float, 4> takes 4 arguments (x, y, c, n), got 3"
    )
    assert (
        msg(kjit.TypeError, 1, 32, x, x, 1.0, 8.0)
        == "argument 'n' of add_constant<float, 4> is an int64 scalar (long long): pass an int, got the float 8.0"
    )
    assert (
        msg(kjit.TypeError, 1, 32, x, 5, 1.0, 8)
        == "argument 'y' of add_constant<float, 4> is a pointer (float* __restrict__): pass a CUDA tensor, a CUDA array (__cuda_array_interface__ or __dlpack__: CuPy, JAX, Numba...) or None, "
        "got the int 5"
    )
    assert msg(kjit.TypeError, 1, 32, x, x, x, 8).startswith(
        "argument 'c' of add_constant<float, 4> is a float32 scalar (float): pass a float or an int, got a tensor"
    )
    assert msg(kjit.ValueError, 1, 32, x, x, 1e300, 8).startswith(
        "argument 'c' of add_constant<float, 4> is a float32 scalar (float): the value 1e+300 overflows it"
    )
    assert (
        msg(kjit.ValueError, 1, 32, torch.zeros(8), x, 1.0, 8)
        == f"argument 'x' of add_constant<float, 4> is on cpu, but the kernel runs on cuda:{k.device}; move it with "
        f"x.to('cuda:{k.device}') or specialize for its device"
    )
    assert (
        msg(kjit.TypeError, 1.0, 32, x, x, 1.0, 8) == "grid must be an int or a tuple of 1 to 3 ints, got the float 1.0"
    )
    assert msg(kjit.LaunchError, 1, 2048, x, x, 1.0, 8).startswith("block (2048, 1, 1) has 2048 threads")
    assert msg(kjit.LaunchError, 0, 32, x, x, 1.0, 8).startswith("grid (0, 1, 1) is empty")
    assert msg(kjit.TypeError, 1, 32, x, x, 1.0, 8, bogus=1).startswith(
        "launch() got an unexpected keyword argument 'bogus'"
    )
    k.launch(1, 32, x, None, 1.0, 0)  # None is a null pointer; n = 0 touches nothing
    torch.cuda.synchronize()


def test_kernel_metadata_on_device(add):
    k = add.specialize(T=torch.float32, VEC=4)
    assert k.param_sizes in (None, [8, 8, 4, 8])
    assert k.target.startswith(("sm_", "compute_"))
    assert "on cuda:" in repr(k)


@pytest.mark.gpu
def test_launch_rejects_a_tensor_of_another_dtype_than_the_pointer():
    k = kjit.Template.builtin("add_constant").kernel("add_constant").specialize(T=torch.float32, VEC=1)
    x = torch.ones(8, device="cuda", dtype=torch.float16)
    y = torch.empty(8, device="cuda")
    with pytest.raises(kjit.TypeError) as e:
        k.launch(1, 32, x, y, 1.0, 8)
    assert str(e.value).startswith("argument 'x' of add_constant<float, 1>")
    assert "points to torch.float32 elements, got a torch.float16 tensor" in str(e.value)
    k.launch(1, 32, x.float(), y, 1.0, 8)  # the process stays usable
    torch.testing.assert_close(y, torch.full_like(y, 2.0))


def test_starting_cuda_preloads_the_compiler(run_py):
    # The package's hook (torch.cuda._lazy_call): once torch starts CUDA, NVRTC is loaded and one compile runs on a
    # background thread; the first kjit compile after that is an ordinary one.
    r = run_py("""
        import torch, kjit
        from kjit import _core
        print(_core._compiler_preload())
        torch.zeros(1, device='cuda')
        _core._wait_for_compiler_preload()
        print(_core._compiler_preload()['compiled'])
        y = kjit.ops.add_constant(torch.ones(1000, device='cuda'), 1.0)
        print(float(y.sum()), kjit.stats()['compiles'])
    """)
    assert r.stdout.split("\n")[:3] == ["None", "True", "2000.0 1"], r


@pytest.mark.parametrize(
    "env,report",
    [({"KJIT_PRELOAD_COMPILER": "0"}, "None"), ({"KJIT_CACHE_MODE": "strict"}, "False")],
    ids=["off", "strict"],
)
def test_no_compiler_preload_when_turned_off_and_no_nvrtc_in_strict_mode(run_py, env, report):
    r = run_py(
        """
        import torch, kjit
        from kjit import _core
        torch.zeros(1, device='cuda')
        _core._wait_for_compiler_preload()
        print((_core._compiler_preload() or {}).get('compiled'))
    """,
        env=env,
    )
    assert r.stdout.strip() == report, r


def test_a_kernel_specialized_for_an_arch_never_launches_even_after_the_same_kernel_was_launched(add):
    """specialize(arch=...) is compile-only whatever this process launched before: for the device's own arch,
    after the same specialization was loaded and launched, it still refuses to launch (it used to be handed the
    loaded kernel, so whether it launched depended on earlier calls)."""
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    x = torch.ones(1024, device="cuda")
    y = torch.empty_like(x)
    launch_add(add.specialize(T=torch.float32, VEC=4), x, y, 1.0, 4)
    torch.testing.assert_close(y, x + 1)
    compiled = add.specialize(T=torch.float32, VEC=4, arch=arch)
    assert compiled.device is None, compiled
    with pytest.raises(kjit.LaunchError, match=f"is compiled for {arch} only"):
        compiled.launch(1, 256, x, y, 1.0, 1024)
    # The launchable kernel is unchanged by the compile-only request.
    launch_add(add.specialize(T=torch.float32, VEC=4), x, y, 2.0, 4)
    torch.testing.assert_close(y, x + 2)
