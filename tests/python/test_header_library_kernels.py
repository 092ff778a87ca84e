"""Kernels built on CUDA's C++ libraries through NVRTC: CUB, thrust, libcu++ and CuTe (issue 28).

thrust and CUB compute header names with macros (`#include __THRUST_DEVICE_SYSTEM_TAG_HEADER`), CuTe too
(`#include CUDA_STD_HEADER(type_traits)`): no reading of the text names those headers, NVRTC asks for them
(it may open no file itself), kjit resolves what it asks, hands it over, hashes it into the key and keeps
what it learned in the header index. So:
- each kernel compiles (sm_80 and sm_90, no GPU needed), and in a new process it keys the same and is a
  disk hit, without compiling;
- a header reached only through a macro is in the key: edit it, and a new process compiles anew;
- on the GPU, each kernel's results are those of PyTorch.
The kernels are bench/library_kernels/*.cu (the bench times their compiles). Where kjit finds these
libraries' headers: test_header_library_search.py; the C++ standard headers NVRTC lacks:
test_standard_headers.py.
"""

import json
import pathlib

import pytest
import torch

import kjit
from support import run_python

HERE = pathlib.Path(__file__).resolve().parent
KERNELS_DIR = HERE.parent.parent / "bench" / "library_kernels"  # shared with the bench (kjit.bench)


# name -> (file, kernel, template arguments, kernel() options, include dirs)
def kernels():
    cutlass = kjit._cutlass_include_dir()
    return {
        "cub_block_reduce": ("cub_block_reduce.cu", "block_sum", {"BLOCK": 256, "T": "float32"}, {}, []),
        "cub_warp_scan": ("cub_warp_scan.cu", "scan_plus_warp_sum", {"BLOCK": 128}, {}, []),
        "thrust": ("thrust_functional.cu", "max_plus", {"T": "float32"}, {}, []),
        "libcudacxx": ("libcudacxx.cu", "complex_norm_clamped", {"T": "float32"}, {}, []),
        # CuTe's unannotated constexpr helpers need NVRTC's -default-device.
        # From the nvidia-cutlass package, which kjit finds by itself (kjit info: CUTLASS).
        "cute": ("cute_mma.cu", "mma_16x8x16", {"SCALE": 1}, {"default_device": True}, [] if cutlass else None),
    }


KERNEL_NAMES = list(kernels())


def _version(text):
    try:
        return tuple(int(p) for p in (text or "").split(".")[:2])
    except ValueError:
        return ()


def need_kernel(name):
    file, kernel, params, options, include = kernels()[name]
    if include is None:
        pytest.skip("CuTe's headers are not installed: pip install nvidia-cutlass (.ci/python_env.sh installs it)")
    if name == "cute":
        tk = kjit._core.toolkit()
        cccl, cutlass = (tk.get("cccl") or {}).get("version"), (tk.get("cutlass") or {}).get("version")
        # CUTLASS 4.2's CuTe redeclares cuda::std's structured-binding templates of CCCL 3.1+ (CUDA 13.1+):
        # "declaration is incompatible with template parameter _Tp" in cute/container/array.hpp (seen with
        # NVRTC 13.2 and pip's CCCL 13.2): a version pair that does not compile together, outside kjit.
        if _version(cutlass) <= (4, 2) and _version(cccl) >= (3, 1):
            pytest.skip(
                f"CUTLASS {cutlass} does not compile with CCCL {cccl} (CuTe redeclares cuda::std's "
                "structured bindings): a newer CUTLASS, or the CCCL of CUDA 13.0"
            )
    return file, kernel, params, options, include


COMPILE_BOTH_ARCHS = """
import json, sys, kjit
file, kernel, params, options, include, archs = json.loads(sys.argv[1])
t = kjit.Template.from_file(file, include_dirs=include)
family = t.kernel(kernel, **options)
out = []
for arch in archs:
    k = family.specialize(arch=arch, **params)
    out.append({"arch": arch, "key": k.key, "origin": k.origin})
print(json.dumps(out))
"""


def compile_in_new_process(name, archs):
    file, kernel, params, options, include = need_kernel(name)
    arg = json.dumps([str(KERNELS_DIR / file), kernel, params, options, include, archs])
    r = run_python(["-c", COMPILE_BOTH_ARCHS, arg], timeout=600)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_compiles_for_sm80_and_sm90_and_a_new_process_keys_it_the_same_from_the_disk(name, cache_dir):
    first = compile_in_new_process(name, ["sm_80", "sm_90"])
    assert [r["origin"] for r in first] == ["compiled", "compiled"], first
    second = compile_in_new_process(name, ["sm_80", "sm_90"])
    assert [r["key"] for r in second] == [r["key"] for r in first]
    assert [r["origin"] for r in second] == ["disk", "disk"], second


STALE_TEMPLATE = """
#define KJIT_TEST_HEADER_OF(name) #name
#define KJIT_TEST_HEADER KJIT_TEST_HEADER_OF(reached_by_macro.h)
#include KJIT_TEST_HEADER
template <int N>
__global__ void value_plus(int* out) { out[0] = KJIT_TEST_VALUE + N; }
"""

STALE_RUN = """
import json, sys, kjit
k = kjit.Template.from_file(sys.argv[1]).kernel("value_plus").specialize(arch="sm_90", N=1)
print(json.dumps({"key": k.key, "origin": k.origin, "headers": kjit.Template.from_file(sys.argv[1]).headers}))
"""


def test_a_header_reached_only_through_a_macro_is_in_the_key(tmp_path, cache_dir):
    """Edit the header that only a macro-computed include reaches: the same template in a new process keys
    anew and compiles, never serving the kernel of the old header."""
    src = tmp_path / "macro_include.cu"
    src.write_text(STALE_TEMPLATE)
    header = tmp_path / "reached_by_macro.h"
    header.write_text("#define KJIT_TEST_VALUE 1\n")

    def run():
        return json.loads(run_python(["-c", STALE_RUN, str(src)]).stdout.strip().splitlines()[-1])

    first = run()
    assert first["origin"] == "compiled"
    again = run()
    assert again == {**first, "origin": "disk"}
    # Learned: a fresh load in a new process hands (and hashes) the header without compiling.
    assert "reached_by_macro.h" in again["headers"]
    header.write_text("#define KJIT_TEST_VALUE 2\n")
    edited = run()
    assert edited["key"] != first["key"]
    assert edited["origin"] == "compiled"
    assert run() == {**edited, "origin": "disk"}


def test_an_include_a_macro_computes_that_is_nowhere_is_a_compile_error_naming_it(tmp_path):
    src = '#define H "not_anywhere.h"\n#include H\ntemplate <int N> __global__ void k(int* o) { o[0] = N; }\n'
    family = kjit.Template(src, name="computed_missing.cu").kernel("k")
    with pytest.raises(kjit.CompileError) as e:
        family.specialize(arch="sm_90", N=1)
    assert "not_anywhere.h" in str(e.value)
    assert "KJIT_INCLUDE_PATH" in str(e.value)  # where kjit looked, and what to do
    # The process stays usable.
    assert kjit.Template("template <int N> __global__ void k(int* o) { o[0] = N; }\n", name="ok.cu").kernel(
        "k"
    ).specialize(arch="sm_90", N=2).origin in ("compiled", "disk")


# ---- on the GPU: results against PyTorch ------------------------------------------------------------------


def gpu_kernel(name, **params):
    """The kernel `name` of kernels() specialized for this GPU, its template arguments updated by `params`."""
    file, kernel, defaults, options, include = need_kernel(name)
    t = kjit.Template.from_file(str(KERNELS_DIR / file), include_dirs=include)
    return t.kernel(kernel, **options).specialize(**{**defaults, **params})


@pytest.mark.gpu
def test_cub_block_reduce_sums_each_block_as_torch_does():
    k = gpu_kernel("cub_block_reduce", T=torch.float32)
    n = 1000
    x = torch.randn(n, device="cuda")
    blocks = kjit.cdiv(n, 256)
    out = torch.empty(blocks, device="cuda")
    k.launch(blocks, 256, x, out, n)
    expect = torch.nn.functional.pad(x, (0, blocks * 256 - n)).view(blocks, 256).sum(1)
    torch.testing.assert_close(out, expect, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_cub_warp_reduce_and_block_scan_match_torch():
    k = gpu_kernel("cub_warp_scan")
    x = torch.randint(-100, 100, (4 * 128,), device="cuda", dtype=torch.int32)
    out = torch.empty_like(x)
    k.launch(4, 128, x, out)
    blocks = x.view(4, 128).to(torch.int64)
    warp_sums = blocks.view(4, 4, 32).sum(2, keepdim=True).expand(4, 4, 32).reshape(4, 128)
    expect = blocks.cumsum(1) + warp_sums
    torch.testing.assert_close(out, expect.view(-1).to(torch.int32))


# The element-wise kernels: out[i] = f(a[i], b[i]) of two float32 inputs, then their scalars and n. thrust's
# device functions (max_plus: maximum(a, b) + a * b), libcu++'s complex and algorithms (complex_norm_clamped:
# |a + ib|^2 clamped to [0, hi]).
ELEMENTWISE = {
    "thrust": (4097, (), lambda a, b: torch.maximum(a, b) + a * b),
    "libcudacxx": (
        3001,
        (2.5,),
        lambda re, im: (torch.complex(re, im) * torch.complex(re, im).conj()).real.clamp(0, 2.5),
    ),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_thrust_and_libcudacxx_elementwise_kernels_match_torch(name):
    n, scalars, reference = ELEMENTWISE[name]
    k = gpu_kernel(name, T=torch.float32)
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(a)
    k.launch(kjit.cdiv(n, 256), 256, a, b, out, *scalars, n)
    torch.testing.assert_close(out, reference(a, b))


@pytest.mark.gpu
def test_cute_mma_atom_matches_torch_matmul():
    k = gpu_kernel("cute", SCALE=3)
    a = torch.randn(16, 16, device="cuda", dtype=torch.float16)
    b = torch.randn(8, 16, device="cuda", dtype=torch.float16)
    c = torch.empty(16, 8, device="cuda", dtype=torch.float32)
    k.launch(1, 32, a, b, c)
    torch.testing.assert_close(c, 3 * (a.float() @ b.float().T), rtol=1e-3, atol=1e-3)
