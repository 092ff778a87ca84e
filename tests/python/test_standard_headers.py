"""C++ standard headers under NVRTC (issue 40). NVRTC ships no <cmath>, <complex>, <sstream> and the like, and
thrust/complex.h of CUDA 13.0's CCCL includes all three: without help NVRTC stops at "cannot open source file
"cmath"". kjit stands in for the standard headers device code reaches with files of kernel_templates/std/
(docs/header-libraries.md), reached only for a name that no folder of the template's, the user's or the CUDA
toolkit's has, and hashed into the key like every header. So:
- a thrust::complex kernel compiles for sm_80 and sm_90 (no GPU needed), and so does one on <cmath>'s functions;
- the stand-ins are headers of the template (Template.headers), and editing one keys the template anew;
- the user's own <cmath> (include_dirs) is the one used; a name kjit has no stand-in for stays unresolved;
- on the GPU, thrust::complex and <cmath> results are PyTorch's.
"""

import json
import pathlib
import shutil

import pytest
import torch

import kjit
from support import run_python

THRUST_COMPLEX = """
#include <thrust/complex.h>

// z: n complex numbers as (real, imaginary) pairs; out: a complex result and |z|, arg(z) per element.
template <typename T>
__global__ void complex_math(const T* z_pairs, T* out_pairs, T* abs_arg, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const thrust::complex<T> z = reinterpret_cast<const thrust::complex<T>*>(z_pairs)[i];
  const thrust::complex<T> r = thrust::exp(z) * thrust::sqrt(z) + thrust::log(z) - thrust::pow(z, T(2)) +
                               thrust::sin(z) * thrust::cosh(z) + thrust::conj(z) / (z + T(1));
  reinterpret_cast<thrust::complex<T>*>(out_pairs)[i] = r;
  abs_arg[2 * i] = thrust::abs(z);
  abs_arg[2 * i + 1] = thrust::arg(z);
}
"""

CMATH = """
#include <cmath>

template <typename T>
__global__ void real_math(const T* x, T* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const T v = x[i];
  out[i] = std::sqrt(std::abs(v)) + std::exp(v) + std::pow(v, 2.0) + std::atan2(v, T(1)) + std::fmax(v, 0.5) +
           std::tanh(v) + std::erf(v) + std::hypot(v, T(3)) + std::log1p(std::abs(v)) + std::cbrt(v) +
           std::fmod(v, T(0.75)) + std::sqrt(3) + (std::isnan(v) ? T(1) : T(0)) + (v > T(-4) ? T(0) : -INFINITY);
}
"""


def test_a_thrust_complex_kernel_compiles_for_sm80_and_sm90():
    family = kjit.Template(THRUST_COMPLEX, name="thrust_complex.cu").kernel("complex_math")
    for arch in ("sm_80", "sm_90"):
        for dtype in (torch.float32, torch.float64):
            k = family.specialize(arch=arch, T=dtype)
            assert k.origin in ("compiled", "disk", "memory")


# A library that includes its stream header only outside NVRTC, yet declares a host stream operator wherever it
# is compiled, as CCCL 3.2's thrust/complex.h does (it skips <sstream> under NVRTC; thrust/detail/complex/
# stream.h declares operator<< on std::basic_ostream): kjit pre-includes its <iosfwd> stand-in, a header of the
# template already, so the declaration parses.
STREAM_SKIPPED_UNDER_NVRTC = """
#if !defined(__CUDACC_RTC__)
#include <sstream>
#endif
struct Pair { float a, b; };
template <class CharT, class Traits>
std::basic_ostream<CharT, Traits>& operator<<(std::basic_ostream<CharT, Traits>& os, const Pair& p);
__global__ void pair_sum(const Pair* p, float* out) { out[0] = p[0].a + p[0].b; }
"""


def test_a_stream_operator_declared_where_the_stream_header_is_skipped_under_nvrtc_compiles():
    t = kjit.Template(STREAM_SKIPPED_UNDER_NVRTC, name="stream_skipped.cu")
    assert "iosfwd" in t.headers
    for arch in ("sm_80", "sm_90"):
        assert t.kernel("pair_sum").specialize(arch=arch).origin in ("compiled", "disk", "memory")


def test_cmath_device_functions_compile_for_float_and_double():
    family = kjit.Template(CMATH, name="cmath_kernel.cu").kernel("real_math")
    for dtype in (torch.float32, torch.float64):
        assert family.specialize(arch="sm_90", T=dtype).origin in ("compiled", "disk", "memory")


def test_the_stand_ins_are_headers_of_the_template():
    t = kjit.Template(THRUST_COMPLEX, name="thrust_complex.cu")
    for name in ("cmath", "complex", "sstream", "iosfwd", "cstdint", "cfloat", "math.h"):
        assert name in t.headers, name
        assert name not in t.unresolved_includes, name
    # Helper headers, not kernels: never listed as built-in templates.
    assert not {"cmath", "complex", "sstream"} & set(kjit.Template.builtin_names())


KEY_OF = """
import json, sys, kjit
t = kjit.Template(sys.argv[1], name="cmath_kernel.cu")
k = t.kernel("real_math").specialize(arch="sm_90", T="float32")
print(json.dumps({"key": k.key, "origin": k.origin}))
"""


def test_editing_a_stand_in_keys_the_template_anew(tmp_path, cache_dir):
    """The stand-in's bytes are in the key: a kjit whose <cmath> differs compiles anew, never serving the kernel
    of the other bytes (KJIT_TEMPLATES_DIR: a copy of kjit's templates folder)."""
    templates = tmp_path / "kernel_templates"
    shutil.copytree(pathlib.Path(kjit.__file__).parent / "kernel_templates", templates)

    def run():
        r = run_python(["-c", KEY_OF, CMATH], env={"KJIT_TEMPLATES_DIR": templates})
        return json.loads(r.stdout.strip().splitlines()[-1])

    first = run()
    assert first["origin"] == "compiled"
    assert run() == {**first, "origin": "disk"}
    cmath = templates / "std" / "cmath"
    cmath.write_text(cmath.read_text() + "// edited\n")
    edited = run()
    assert edited["key"] != first["key"]
    assert edited["origin"] == "compiled"


def test_a_users_own_cmath_is_the_one_used(tmp_path):
    (tmp_path / "cmath").write_text("#pragma once\n#define USERS_OWN_CMATH 1\n")
    src = (
        "#include <cmath>\n"
        'static_assert(USERS_OWN_CMATH == 1, "kjit\'s <cmath> was used");\n'
        "template <typename T> __global__ void k(T* out) { out[0] = T(1); }\n"
    )
    t = kjit.Template(src, name="users_cmath.cu", include_dirs=[str(tmp_path)])
    assert "cmath" in t.headers
    assert t.kernel("k").specialize(arch="sm_90", T=torch.float32).origin in ("compiled", "disk", "memory")


def test_a_name_kjit_has_no_stand_in_for_stays_unresolved():
    src = "#include <vector>\n#include <not_a_header.h>\ntemplate <typename T> __global__ void k(T* out) {}\n"
    t = kjit.Template(src, name="vector.cu")
    assert t.unresolved_includes == ["vector", "not_a_header.h"]
    with pytest.raises(kjit.CompileError) as e:
        t.kernel("k").specialize(arch="sm_90", T=torch.float32)
    msg = str(e.value)
    assert "kjit did not find 'vector'" in msg
    # What to do instead: NVRTC has no standard library; kjit's stand-ins, or libcu++.
    assert "'vector' looks like a C++ standard library header, and NVRTC ships none" in msg
    assert "<cmath>, <complex>" in msg and "<cuda/std/...>" in msg
    # A header of the user's (a name with an extension) gets no such note.
    other = kjit.Template(
        "#include <not_a_header.h>\ntemplate <typename T> __global__ void k(T* out) {}\n", name="h.cu"
    )
    with pytest.raises(kjit.CompileError) as e:
        other.kernel("k").specialize(arch="sm_90", T=torch.float32)
    assert "kjit did not find 'not_a_header.h'" in str(e.value)
    assert "standard library" not in str(e.value)


RECORD = """
import sys, kjit
kjit.Template(sys.argv[1], name="thrust_complex.cu").kernel("complex_math").specialize(arch="sm_90", T="float32")
"""


def test_a_recorded_thrust_complex_kernel_warms_from_its_manifest(tmp_path, run_kjit, cache_dir):
    """`kjit warm` rebuilds the template from the manifest (it reads none of the user's folders, and compiles in
    the child that can open no file): the stand-ins come with the record, and it compiles."""
    manifest = tmp_path / "manifest.jsonl"
    run_python(
        ["-c", RECORD, THRUST_COMPLEX], env={"KJIT_RECORD": manifest, "KJIT_CACHE_DIR": tmp_path / "record-cache"}
    )
    lines = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    recorded = [line["sources"]["headers"] for line in lines if "sources" in line]
    assert len(recorded) == 1 and {"cmath", "complex", "sstream"} <= set(recorded[0]), recorded
    r = run_kjit("warm", str(manifest), "--arch", "sm_80,sm_90")
    assert "2 compiled, 0 already cached, 0 failed" in r.stdout, r


# ---- on the GPU: results against PyTorch ------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_thrust_complex_results_match_torch(dtype):
    ctype = getattr(torch, dtype)
    real = torch.float32 if ctype == torch.complex64 else torch.float64
    k = kjit.Template(THRUST_COMPLEX, name="thrust_complex.cu").kernel("complex_math").specialize(T=real)
    n = 4097
    g = torch.Generator(device="cuda").manual_seed(40)
    # Away from the branch cuts of sqrt and log (the negative real axis) and from 0 and -1.
    z = torch.complex(
        torch.rand(n, device="cuda", generator=g, dtype=real) * 1.5 + 0.25,
        torch.rand(n, device="cuda", generator=g, dtype=real) * 2 - 1,
    )
    out = torch.empty_like(z)
    abs_arg = torch.empty(n, 2, device="cuda", dtype=real)
    k.launch(kjit.cdiv(n, 256), 256, torch.view_as_real(z), torch.view_as_real(out), abs_arg, n)
    expect = torch.exp(z) * torch.sqrt(z) + torch.log(z) - z**2 + torch.sin(z) * torch.cosh(z) + z.conj() / (z + 1)
    tol = {"rtol": 2e-5, "atol": 2e-5} if real == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out, expect, **tol)
    torch.testing.assert_close(abs_arg[:, 0], z.abs(), **tol)
    torch.testing.assert_close(abs_arg[:, 1], z.angle(), **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cmath_results_match_torch(dtype):
    real = getattr(torch, dtype)
    k = kjit.Template(CMATH, name="cmath_kernel.cu").kernel("real_math").specialize(T=real)
    n = 1000
    g = torch.Generator(device="cuda").manual_seed(40)
    x = torch.rand(n, device="cuda", generator=g, dtype=real) * 6 - 3
    x[0] = -5  # below -4: -INFINITY
    out = torch.empty_like(x)
    k.launch(kjit.cdiv(n, 256), 256, x, out, n)
    f = x.to(torch.float64)
    expect = (
        f.abs().sqrt()
        + f.exp()
        + f**2
        + torch.atan2(f, torch.ones_like(f))
        + torch.clamp(f, min=0.5)
        + f.tanh()
        + torch.erf(f)
        + torch.hypot(f, torch.full_like(f, 3))
        + torch.log1p(f.abs())
        + f.sign() * f.abs().pow(1 / 3)
        + torch.fmod(f, 0.75)
        + 3**0.5
    )
    expect[0] = float("-inf")
    tol = {"rtol": 1e-5, "atol": 1e-5} if real == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(out, expect.to(real), **tol)
