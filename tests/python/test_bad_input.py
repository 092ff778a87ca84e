"""The bad-input matrix (issue 7): every public function of kjit, given bad input, raises the documented
error (exact exception type, and a message that says what was received and what is allowed), and the
process stays usable: right after each bad call, a valid call of the same function succeeds in the same
process. DESIGN.md section 6.

Structure
---------
1. The public surface, enumerated from the package: kjit.__all__ (functions and constructors) with the
   public methods of its classes, kjit.ops.__all__, and the kjit:: operators the dispatcher knows
   (kjit.ops.<name> is the direct entry of torch.ops.kjit.<name>.default, kjit.ops.registered(name)). test_the_matrix_covers_the_public_surface fails
   when a public function is added without rows here (and names the categories it lacks).
2. OPS (op_table.py, the op table): one row per operator: how to build a valid call from a tensor factory
   (Maker), its tensor arguments, and the PyTorch reference. The operator rows of every category are
   generated from it.
3. Case tables, one per category (cpu tensors, dtype, device, non-contiguous, empty, huge, NaN/Inf,
   argument counts and types, values, names). A row is a Case: the public name it calls, its category,
   the bad call (a function of a Maker, so that one row runs on meta tensors here and on CUDA tensors on
   a GPU), the exact exception type and a regex of the key words of the message.
4. Runners: run_bad() makes the bad call, then the valid call of the same target (CPU: the operator on
   meta tensors compared with PyTorch's meta result, or a compile-only specialization for sm_90; GPU: a
   real launch compared with PyTorch), and only then checks the error, so that even a wrong error is
   followed by the usability check.

CPU part (runs here): CPU tensors to everything, dtype / shape / value / argument errors through the
fake (meta) implementations that torch.compile sees, more-than-2^31-element meta tensors, the template,
specialize, elementwise and launcher API, compile-only NaN / Inf constants. GPU part (marked gpu, skipped
without CUDA): the same op rows on CUDA tensors, mixed devices, non-contiguous, empty, NaN / Inf compared
with PyTorch, huge views rejected before any allocation, and (marked big, guarded by free memory) more
than 2^31 elements through 64-bit indexing.

Rows marked known(...) (known_meta: on meta tensors only) are known bugs outside python/kjit (C++ in
python/src or engine/, or the PyTorch dispatcher): strict xfails that only accept a WrongError (a wrong
error type or message, or none); the usability check still runs and must pass.

Run: `pytest tests/python/test_bad_input.py` (CPU part here; GPU part where CUDA is available);
`-m "gpu and not big"` for the GPU part without the multi-GiB test, `-m big` for that test alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import kjit
from kjit import ops
from op_table import BF16, FLOAT_ALLOWED, IMG, OPS, U8_ALLOWED, Maker, check_op
from support import COMPLEX_HALF_IS_EXPERIMENTAL, ORIGINS

gpu = pytest.mark.gpu
big = pytest.mark.big
no_gpu_here = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU error: this machine has a GPU")
multi_gpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")

ADD = kjit.Template.builtin("add_constant").kernel("add_constant")
RGB = kjit.Template.builtin("rgb_to_gray").kernel("rgb_to_gray")
FMA = kjit.elementwise("x * y * s", "x, y", "s", name="bad_input_fma")
SPEC = kjit.elementwise("x * s", "x", "s", specialize="s", name="bad_input_spec")
LAUNCHER = kjit.launcher(ADD, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), block=256, T=kjit.arg("x").dtype, VEC=1)
NOT_A_TARGET = (
    r"is not valid: allowed sm_XY \(cubin\), sm_XYa \(arch-specific cubin\), compute_XY \(PTX\) or a "
    r"compute capability such as 9\.0; for example sm_90"
)


# =====================================================================================================
# 1. The public surface
# =====================================================================================================


def kjit_operator_names() -> list[str]:
    return sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("kjit::"))


def public_surface() -> set[str]:
    """Every public callable: kjit.<name> (functions and constructors), kjit.<Class>.<method> (and
    .__call__ where instances are called) and kjit.ops.<op>."""
    names = set()
    for n in kjit.__all__:
        obj = getattr(kjit, n)
        if isinstance(obj, type) and issubclass(obj, (BaseException, Warning)):
            continue  # the error classes are what the matrix checks for
        names.add(f"kjit.{n}")
        if isinstance(obj, type):
            names.update(f"kjit.{n}.{m}" for m in dir(obj) if not m.startswith("_") and callable(getattr(obj, m)))
            if "__call__" in vars(obj):
                names.add(f"kjit.{n}.__call__")
    names.update(f"kjit.ops.{n}" for n in ops.__all__)
    return names


def test_torch_ops_kjit_is_kjit_ops():
    """The dispatcher's kjit:: operators are kjit.ops.__all__ and kjit::elementwise (the op of every
    kjit.elementwise function)."""
    assert kjit_operator_names() == sorted(ops.__all__ + ["elementwise"])
    for n in ops.__all__:
        assert ops.registered(n) is getattr(torch.ops.kjit, n).default, n
        assert getattr(ops, n) is getattr(kjit._C.ops, n), n


# =====================================================================================================
# 3. Cases
# =====================================================================================================


class WrongError(AssertionError):
    """The bad call did not give the documented error (the only failure a known(...) row accepts)."""


@dataclass(frozen=True)
class Case:
    target: str  # the public name it calls (see public_surface())
    category: str
    call: Callable  # Maker -> the bad call's result
    exc: type
    pattern: str  # re.search in str(error)
    known_meta: str | None = None  # a known bug of the meta (fake) implementation only


CATEGORIES = ("cpu", "dtype", "device", "noncontig", "empty", "huge", "nan", "args", "value", "name")
COVERAGE: set[tuple[str, str]] = set()  # (target, category) of every row, bad and valid-input alike


def known_bug(reason):
    return pytest.mark.xfail(strict=True, raises=WrongError, reason=f"known bug: {reason}")


def case(target, category, call, exc, pattern, id, *, known=None, known_meta=None, marks=()):
    assert category in CATEGORIES, category
    COVERAGE.add((target, category))
    marks = list(marks)
    if known:
        marks.append(known_bug(known))
    return pytest.param(
        Case(target, category, call, exc, pattern, known_meta), id=f"{target.removeprefix('kjit.')}-{id}", marks=marks
    )


def covers(target, *categories):
    for c in categories:
        assert c in CATEGORIES, c
        COVERAGE.add((target, c))


def op(name):
    return f"kjit.ops.{name}"


# ---- the operator rows, generated from OPS ------------------------------------------------------------


def _cpu_tensor_rows():
    rows = []
    for name, spec in OPS.items():
        names = re.escape(spec.tensors)
        pattern = (
            rf"^kjit\.ops\.{name}: expected all tensors on one CUDA device, got cpu \({names}\); move them "
            r"with \.to\('cuda'\)"
        )
        rows.append(case(op(name), "cpu", lambda m, n=name: check_op(n, Maker("cpu")), kjit.ValueError, pattern, "cpu"))
        # requires_grad goes through the autograd kernel first; the same error comes out.
        rows.append(
            case(
                op(name),
                "cpu",
                lambda m, n=name: getattr(ops, n)(
                    *[
                        a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                        for a in OPS[n].build(Maker("cpu"))
                    ]
                ),
                kjit.ValueError,
                pattern,
                "cpu-requires-grad",
            )
        )
    return rows


def _dtype_rows():
    rows = []
    for name, spec in OPS.items():
        bad = [torch.float32, torch.int8] if spec.allowed == U8_ALLOWED else [torch.int32, torch.bool, torch.complex64]
        for dt in bad:
            pattern = (
                rf"^kjit\.ops\.{name}: {spec.first} has dtype {re.escape(str(dt))}, which is not supported; "
                rf"{spec.allowed}"
            )
            rows.append(
                case(
                    op(name),
                    "dtype",
                    lambda m, n=name, dt=dt: check_op(n, Maker(m.device, dtype=dt)),
                    kjit.TypeError,
                    pattern,
                    str(dt).removeprefix("torch."),
                )
            )
    return rows


def _argument_rows():
    """Argument counts and types. The schema is checked by the PyTorch dispatcher before kjit sees the
    call: its RuntimeError names the operator, the argument and the type it found (see kjit.ops)."""
    rows = []
    for name in OPS:
        schema = ops.registered(name)._schema
        n_args = len(schema.arguments)
        first = schema.arguments[0].name
        rows += [
            case(
                op(name),
                "args",
                lambda m, n=name: getattr(ops, n)(),
                RuntimeError,
                rf"^kjit::{name}\(\) is missing value for argument '{first}'\. Declaration: kjit::{name}\(",
                "no-args",
            ),
            case(
                op(name),
                "args",
                lambda m, n=name: getattr(ops, n)(*OPS[n].build(m), 1),
                RuntimeError,
                rf"^kjit::{name}\(\) expected at most {n_args} argument\(s\) but received {n_args + 1} argument\(s\)",
                "one-too-many",
            ),
            case(
                op(name),
                "args",
                lambda m, n=name: getattr(ops, n)(*OPS[n].build(m), bogus=1),
                RuntimeError,
                rf"^kjit::{name}\(\) expected at most {n_args} argument\(s\)",
                "unknown-keyword",
            ),
            case(
                op(name),
                "args",
                lambda m, n=name: getattr(ops, n)([1.0], *OPS[n].build(m)[1:]),
                RuntimeError,
                rf"^kjit::{name}\(\) Expected a value of type 'Tensor' for argument '{first}' but instead found type "
                r"'list'",
                "list-for-tensor",
            ),
            case(
                op(name),
                "args",
                lambda m, n=name: getattr(ops, n)(None, *OPS[n].build(m)[1:]),
                kjit.TypeError,
                rf"^kjit\.ops\.{name}: {first} must be a torch\.Tensor, got NoneType",
                "None-for-tensor",
            ),
        ]
    return rows


# What the huge rows' shapes exceed where an op has a limit: a batch of 2^29 matrices is past bmm's 65535 (the
# grid's z), on meta tensors as on CUDA ones (GEMM_SIZE_CASES has the rest of the matrix ops' limits).
_HUGE_META_LIMITS = {
    n: rf"^kjit\.ops\.{n}: at most 65535 matrices per batch, got 536870912; " for n in ("bmm", "bmm_backward")
}


def _huge_meta_rows():
    return [
        case(
            op(name),
            "huge",
            lambda m, n=name: check_op(n, Maker("meta", lead=2**29)),
            kjit.ValueError if name in _HUGE_META_LIMITS else type(None),
            _HUGE_META_LIMITS.get(name, ""),
            "meta-2^31-elements",
        )
        for name in OPS
    ]


def _empty_meta_rows():
    return [
        case(op(name), "empty", lambda m, n=name: check_op(n, Maker("meta", lead=0)), type(None), "", "meta-empty")
        for name in OPS
    ]


OP_CPU_TENSOR_CASES = _cpu_tensor_rows()
OP_DTYPE_CASES = _dtype_rows()
OP_ARGUMENT_CASES = _argument_rows()
OP_VALID_META_CASES = _huge_meta_rows() + _empty_meta_rows()  # valid inputs: no error (exc NoneType)

# ---- operator values: shapes, dims, windows (run on meta here, on CUDA on a GPU) -----------------------

_ONE_DEVICE = r"expected all tensors on one CUDA device, got "


def _v(name, id, call, exc, pattern, *, category="value", known=None, known_meta=None):
    return case(op(name), category, call, exc, pattern, id, known=known, known_meta=known_meta)


OP_VALUE_CASES = [
    # dims of the reductions and softmax
    _v(
        "sum",
        "dim-2",
        lambda m: ops.sum(m.x(3, 4), 2),
        kjit.ValueError,
        r"^kjit\.ops\.sum: dim 2 is out of range for a tensor of 2 dims \(allowed: -2 to 1\)",
    ),
    _v(
        "mean",
        "dim--3",
        lambda m: ops.mean(m.x(3, 4), -3),
        kjit.ValueError,
        r"^kjit\.ops\.mean: dim -3 is out of range",
    ),
    _v(
        "amax",
        "dim-2^40",
        lambda m: ops.amax(m.x(3, 4), 2**40, True),
        kjit.ValueError,
        r"^kjit\.ops\.amax: dim 1099511627776 is out of range for a tensor of 2 dims",
    ),
    _v(
        "amin",
        "0-dim-dim-1",
        lambda m: ops.amin(m.x(3, 4)[0, 0], 1),
        kjit.ValueError,
        r"^kjit\.ops\.amin: dim 1 is out of range for a tensor of 0 dims \(allowed: -1 to 0\)",
    ),
    _v(
        "amax",
        "empty-dim",
        lambda m: ops.amax(m.x(4, 0), 1),
        kjit.ValueError,
        r"^kjit\.ops\.amax: dim 1 has size 0 and amax of nothing is undefined; reduce a non-empty dim",
        category="empty",
    ),
    _v(
        "amin",
        "empty-dim",
        lambda m: ops.amin(m.x(0), 0, True),
        kjit.ValueError,
        r"^kjit\.ops\.amin: dim 0 has size 0 and amin of nothing is undefined",
        category="empty",
    ),
    # the dispatcher reads True as 1 (schema int): the direct entry refuses a bool before calling it
    _v(
        "sum",
        "bool-dim",
        lambda m: ops.sum(m.x(3, 4), True),
        kjit.TypeError,
        r"^kjit\.ops\.sum: dim must be an int, got bool \(True\); pass an int",
        category="args",
    ),
    _v(
        "mean",
        "bool-dim-keyword",
        lambda m: ops.mean(m.x(3, 4), dim=False, keepdim=True),
        kjit.TypeError,
        r"^kjit\.ops\.mean: dim must be an int, got bool \(False\)",
        category="args",
    ),
    _v(
        "max_pool2d",
        "bool-in-int-list",
        lambda m: ops.max_pool2d(m.x(*IMG), [2, True], [2, 2], [0, 0]),
        kjit.TypeError,
        r"^kjit\.ops\.max_pool2d: kernel_size must be an int or a list of ints, got bool \(True\)",
        category="args",
    ),
    _v(
        "sum",
        "str-dim",
        lambda m: ops.sum(m.x(3, 4), "a"),
        RuntimeError,
        r"^kjit::sum\(\) Expected a value of type 'int' for argument 'dim' but instead found type 'str'",
        category="args",
    ),
    _v(
        "amin",
        "float-dim",
        lambda m: ops.amin(m.x(3, 4), 1.5),
        RuntimeError,
        r"Expected a value of type 'int' for argument 'dim' but instead found type 'float'",
        category="args",
    ),
    _v(
        "softmax",
        "dim-0",
        lambda m: ops.softmax(m.x(3, 5), 0),
        kjit.ValueError,
        r"^kjit\.ops\.softmax: only the last dim is supported, got dim=0 for a tensor of 2 dims; move it last with "
        r"x\.movedim\(0, -1\)",
    ),
    _v(
        "log_softmax",
        "dim--2",
        lambda m: ops.log_softmax(m.x(3, 5), -2),
        kjit.ValueError,
        r"^kjit\.ops\.log_softmax: only the last dim is supported, got dim=-2",
    ),
    _v(
        "softmax",
        "dim-2",
        lambda m: ops.softmax(m.x(3, 5), 2),
        kjit.ValueError,
        r"^kjit\.ops\.softmax: dim 2 is out of range",
    ),
    _v(
        "gelu",
        "approximate-fast",
        lambda m: ops.gelu(m.x(4), "fast"),
        kjit.ValueError,
        r"^kjit\.ops\.gelu: approximate='fast' is not supported; allowed: 'none', 'tanh'",
    ),
    _v(
        "gelu_backward",
        "approximate-erf",
        lambda m: ops.gelu_backward(m.x(4), m.x(4), "erf"),
        kjit.ValueError,
        r"^kjit\.ops\.gelu_backward: approximate='erf' is not supported; allowed: 'none', 'tanh'",
    ),
    _v(
        "gelu",
        "int-approximate",
        lambda m: ops.gelu(m.x(4), approximate=1),
        RuntimeError,
        r"^kjit::gelu\(\) Expected a value of type 'str' for argument 'approximate' but instead found type 'int'",
        category="args",
    ),
    # shapes and dtypes of the second tensors
    _v(
        "layer_norm",
        "2d-weight",
        lambda m: ops.layer_norm(m.x(4, 8), m.w(1, 8)),
        kjit.ValueError,
        r"^kjit\.ops\.layer_norm: weight has shape \[1, 8\] but must have shape \[8\]",
    ),
    _v(
        "layer_norm",
        "short-bias",
        lambda m: ops.layer_norm(m.x(4, 8), m.w(8), m.w(4)),
        kjit.ValueError,
        r"^kjit\.ops\.layer_norm: bias has shape \[4\] but must have shape \[8\]",
    ),
    _v(
        "layer_norm",
        "weight-dtype",
        lambda m: ops.layer_norm(m.x(4, 8), m.w(8).to(torch.float16)),
        kjit.TypeError,
        r"^kjit\.ops\.layer_norm: weight has dtype torch\.float16 but x has dtype torch\.float32: the dtypes must "
        r"match; convert with weight\.to\(x\.dtype\)",
        category="dtype",
    ),
    _v(
        "layer_norm",
        "int-bias",
        lambda m: ops.layer_norm(m.x(4, 8), None, m.w(8).to(torch.int32)),
        kjit.TypeError,
        r"^kjit\.ops\.layer_norm: bias has dtype torch\.int32, which is not supported; " + FLOAT_ALLOWED,
        category="dtype",
    ),
    _v(
        "layer_norm",
        "list-weight",
        lambda m: ops.layer_norm(m.x(4, 8), [1.0] * 8),
        RuntimeError,
        r"Expected a value of type 'Optional\[Tensor\]' for argument 'weight' but instead found type 'list'",
        category="args",
    ),
    _v(
        "layer_norm",
        "str-eps",
        lambda m: ops.layer_norm(m.x(4, 8), None, None, "1e-5"),
        RuntimeError,
        r"Expected a value of type 'float' for argument 'eps' but instead found type 'str'",
        category="args",
    ),
    _v(
        "rms_norm",
        "long-weight",
        lambda m: ops.rms_norm(m.x(4, 8), m.w(16)),
        kjit.ValueError,
        r"^kjit\.ops\.rms_norm: weight has shape \[16\] but must have shape \[8\]",
    ),
    _v(
        "rms_norm",
        "scalar-weight",
        lambda m: ops.rms_norm(m.x(4, 8), m.w()),
        kjit.ValueError,
        r"^kjit\.ops\.rms_norm: weight has shape \[\] but must have shape \[8\]",
    ),
    _v(
        "rms_norm",
        "0-dim",
        lambda m: ops.rms_norm(m.x(4, 8)[0, 0]),
        kjit.ValueError,
        r"^kjit\.ops\.rms_norm: x must have at least one dim \(the normalized last dim\), got a 0-dim tensor",
    ),
    _v(
        "rms_norm",
        "None-eps",
        lambda m: ops.rms_norm(m.x(4, 8), eps=None),
        RuntimeError,
        r"Expected a value of type 'float' for argument 'eps' but instead found type 'NoneType'",
        category="args",
    ),
    _v(
        "layer_norm_backward",
        "grad-shape",
        lambda m: ops.layer_norm_backward(m.x(4, 7), m.x(4, 8), None, False, 1e-5),
        kjit.ValueError,
        r"^kjit\.ops\.layer_norm_backward: grad has shape \[4, 7\] but must have shape \[4, 8\]",
    ),
    _v(
        "rms_norm_backward",
        "grad-dtype",
        lambda m: ops.rms_norm_backward(m.x(4, 8).double(), m.x(4, 8), None, False, 1e-6),
        kjit.TypeError,
        r"^kjit\.ops\.rms_norm_backward: grad has dtype torch\.float64 but x has dtype torch\.float32",
        category="dtype",
    ),
    _v(
        "add_rms_norm",
        "residual-shape",
        lambda m: ops.add_rms_norm(m.x(4, 8), m.x(4, 7), m.w(8)),
        kjit.ValueError,
        r"^kjit\.ops\.add_rms_norm: residual has shape \[4, 7\] but must have shape \[4, 8\]",
    ),
    _v(
        "add_layer_norm",
        "broadcast-residual",
        lambda m: ops.add_layer_norm(m.x(4, 8), m.w(8)),
        kjit.ValueError,
        r"^kjit\.ops\.add_layer_norm: residual has shape \[8\] but must have shape \[4, 8\]",
    ),
    _v(
        "add_layer_norm",
        "residual-dtype",
        lambda m: ops.add_layer_norm(m.x(4, 8), m.x(4, 8).half(), m.w(8)),
        kjit.TypeError,
        r"^kjit\.ops\.add_layer_norm: residual has dtype torch\.float16 but x has dtype torch\.float32: "
        r"the dtypes must match; convert with residual\.to\(x\.dtype\)",
        category="dtype",
    ),
    _v(
        "add_rms_norm",
        "None-residual",
        lambda m: ops.add_rms_norm(m.x(4, 8), None),
        kjit.TypeError,
        r"^kjit\.ops\.add_rms_norm: residual must be a torch\.Tensor, got NoneType",
        category="args",
    ),
    _v(
        "add_rms_norm",
        "short-weight",
        lambda m: ops.add_rms_norm(m.x(4, 8), m.x(4, 8), m.w(4)),
        kjit.ValueError,
        r"^kjit\.ops\.add_rms_norm: weight has shape \[4\] but must have shape \[8\]",
    ),
    _v(
        "add_rms_norm_backward",
        "grad_h-shape",
        lambda m: ops.add_rms_norm_backward(m.x(4, 8), m.x(8), m.x(4, 8), None, False, 1e-6),
        kjit.ValueError,
        r"^kjit\.ops\.add_rms_norm_backward: grad_h has shape \[8\] but must have shape \[4, 8\]",
    ),
    _v(
        "add_layer_norm_backward",
        "grad-dtype",
        lambda m: ops.add_layer_norm_backward(m.x(4, 8).double(), None, m.x(4, 8), None, False, 1e-5),
        kjit.TypeError,
        r"^kjit\.ops\.add_layer_norm_backward: grad has dtype torch\.float64 but h has dtype torch\.float32",
        category="dtype",
    ),
    _v(
        "relu_backward",
        "grad-shape",
        lambda m: ops.relu_backward(m.x(3), m.x(4)),
        kjit.ValueError,
        r"^kjit\.ops\.relu_backward: grad has shape \[3\] but must have shape \[4\]",
    ),
    _v(
        "silu_backward",
        "grad-dtype",
        lambda m: ops.silu_backward(m.x(4).half(), m.x(4)),
        kjit.TypeError,
        r"^kjit\.ops\.silu_backward: grad has dtype torch\.float16 but saved has dtype torch\.float32",
        category="dtype",
    ),
    _v(
        "gelu_backward",
        "grad-dtype",
        lambda m: ops.gelu_backward(m.x(4), m.x(4).bfloat16()),
        kjit.TypeError,
        r"^kjit\.ops\.gelu_backward: grad has dtype torch\.float32 but x has dtype torch\.bfloat16",
        category="dtype",
    ),
    _v(
        "softmax_backward",
        "grad-shape",
        lambda m: ops.softmax_backward(m.x(3), m.x(4)),
        kjit.ValueError,
        r"^kjit\.ops\.softmax_backward: grad has shape \[3\] but must have shape \[4\]",
    ),
    _v(
        "log_softmax_backward",
        "grad-dtype",
        lambda m: ops.log_softmax_backward(m.x(3, 8).double(), m.x(3, 8)),
        kjit.TypeError,
        r"^kjit\.ops\.log_softmax_backward: grad has dtype torch\.float64 but output has dtype "
        r"torch\.float32",
        category="dtype",
    ),
    # pool windows
    _v(
        "max_pool2d",
        "kernel_size-0",
        lambda m: ops.max_pool2d(m.x(*IMG), 0),
        kjit.ValueError,
        r"^kjit\.ops\.max_pool2d: kernel_size and stride must be >= 1 and padding >= 0, got kernel_size=\(0, 0\)",
    ),
    _v(
        "avg_pool2d",
        "kernel_size-neg",
        lambda m: ops.avg_pool2d(m.x(*IMG), [2, -1]),
        kjit.ValueError,
        r"got kernel_size=\(2, -1\)",
    ),
    _v("max_pool2d", "stride-0", lambda m: ops.max_pool2d(m.x(*IMG), 2, [1, 0]), kjit.ValueError, r"stride=\(1, 0\)"),
    _v("avg_pool2d", "stride-neg", lambda m: ops.avg_pool2d(m.x(*IMG), 2, -2), kjit.ValueError, r"stride=\(-2, -2\)"),
    _v(
        "max_pool2d",
        "padding-neg",
        lambda m: ops.max_pool2d(m.x(*IMG), 3, 1, [0, -1]),
        kjit.ValueError,
        r"padding=\(0, -1\)",
    ),
    _v(
        "max_pool2d",
        "padding-over-half",
        lambda m: ops.max_pool2d(m.x(*IMG), 3, 1, 2),
        kjit.ValueError,
        r"^kjit\.ops\.max_pool2d: padding \(2, 2\) must be at most half the kernel size \(3, 3\)",
    ),
    _v(
        "avg_pool2d",
        "padding-over-half-h",
        lambda m: ops.avg_pool2d(m.x(*IMG), [4, 4], 1, [3, 0]),
        kjit.ValueError,
        r"^kjit\.ops\.avg_pool2d: padding \(3, 0\) must be at most half the kernel size \(4, 4\)",
    ),
    _v(
        "max_pool2d",
        "window-too-big",
        lambda m: ops.max_pool2d(m.x(*IMG), 9),
        kjit.ValueError,
        r"the input's spatial size \(6, 6\) is too small for kernel_size \(9, 9\) with padding \(0, 0\) \(the output "
        r"would be \(0, 0\)\)",
    ),
    _v(
        "max_pool2d",
        "kernel_size-2^40",
        lambda m: ops.max_pool2d(m.x(*IMG), 2**40),
        kjit.ValueError,
        r"spatial size \(6, 6\) is too small for kernel_size \(1099511627776, 1099511627776\)",
    ),
    _v(
        "max_pool2d",
        "2-dims",
        lambda m: ops.max_pool2d(m.x(6, 6), 2),
        kjit.ValueError,
        r"^kjit\.ops\.max_pool2d: x must be NCHW or CHW \(4 or 3 dims\), got shape \[6, 6\]",
    ),
    _v(
        "avg_pool2d",
        "3-tuple",
        lambda m: ops.avg_pool2d(m.x(*IMG), (2, 2, 2)),
        kjit.TypeError,
        r"^kjit\.ops\.avg_pool2d: kernel_size must be an int or a pair of ints, got \[2, 2, 2\]",
    ),
    _v(
        "max_pool2d",
        "empty-kernel_size",
        lambda m: ops.max_pool2d(m.x(*IMG), []),
        kjit.TypeError,
        r"^kjit\.ops\.max_pool2d: kernel_size must be an int or a pair of ints, got \[\]",
    ),
    _v(
        "avg_pool2d",
        "str-kernel_size",
        lambda m: ops.avg_pool2d(m.x(*IMG), "2"),
        RuntimeError,
        r"Expected a value of type 'List\[int\]' for argument 'kernel_size' but instead found type 'str'",
        category="args",
    ),
    _v(
        "max_pool2d_backward",
        "grad-shape",
        lambda m: ops.max_pool2d_backward(m.x(*IMG), m.x(*IMG), [2, 2]),
        kjit.ValueError,
        r"^kjit\.ops\.max_pool2d_backward: grad has shape \[1, 2, 6, 6\] but must have shape "
        r"\[1, 2, 3, 3\]",
    ),
    _v(
        "avg_pool2d_backward",
        "bad-window",
        lambda m: ops.avg_pool2d_backward(m.x(1, 2, 3, 3), m.x(*IMG), [2, 2], [0, 1]),
        kjit.ValueError,
        r"^kjit\.ops\.avg_pool2d_backward: kernel_size and stride must be >= 1",
    ),
    # the C++ ops
    _v(
        "outer",
        "3-dims",
        lambda m: ops.outer(m.x(2, 3, 1), m.x(2, 4)),
        kjit.ValueError,
        r"^kjit\.ops\.outer: a has shape \[2, 3, 1\] and b has shape \[2, 4\]: expected a \[B, M\] and b \[B, N\]",
    ),
    _v(
        "outer",
        "batch-mismatch",
        lambda m: ops.outer(m.x(2, 3), m.x(3, 4)),
        kjit.ValueError,
        r"^kjit\.ops\.outer: a has shape \[2, 3\] and b has shape \[3, 4\]: the batch sizes \(first dimensions\) must "
        r"be equal",
    ),
    _v(
        "outer",
        "b-dtype",
        lambda m: ops.outer(m.x(2, 3), m.x(2, 4).double()),
        kjit.TypeError,
        r"^kjit\.ops\.outer: b has dtype torch\.float64 but a has dtype torch\.float32: the dtypes must match",
        category="dtype",
    ),
    _v(
        "fused_update",
        "shape-mismatch",
        lambda m: ops.fused_update(m.x(4), m.x(4), m.x(5), 1.0, 1.0, 1.0),
        kjit.ValueError,
        r"^kjit\.ops\.fused_update: .*(noise has shape \[5\] but x has shape \[4\]|same shape)",
    ),
    _v(
        "fused_update",
        "str-scalar",
        lambda m: ops.fused_update(m.x(4), m.x(4), m.x(4), 1.0, "b", 1.0),
        RuntimeError,
        r"Expected a value of type 'float' for argument 'b' but instead found type 'str'",
        category="args",
    ),
    _v(
        "add_constant",
        "str-constant",
        lambda m: ops.add_constant(m.x(4), "2"),
        RuntimeError,
        r"^kjit::add_constant\(\) Expected a value of type 'float' for argument 'c' but instead found type 'str'",
        category="args",
    ),
    _v(
        "add_constant",
        "constant-2^2000",
        lambda m: ops.add_constant(m.x(4), 2**2000),
        RuntimeError,
        r"Expected a value of type 'float' for argument 'c'",
        category="args",
    ),
    _v(
        "rgb_to_gray",
        "4-channels",
        lambda m: ops.rgb_to_gray(m.u8(5, 7, 4)),
        kjit.ValueError,
        r"^kjit\.ops\.rgb_to_gray: img has shape \[5, 7, 4\]: expected interleaved RGB of shape \[H, W, 3\] or "
        r"\[B, H, W, 3\]",
    ),
    _v(
        "outer_backward",
        "grad-shape",
        lambda m: ops.outer_backward(m.x(2, 3, 5), m.x(2, 3), m.x(2, 4)),
        kjit.ValueError,
        r"^kjit\.ops\.outer_backward: grad has shape \[2, 3, 5\] but outer\(a, b\) has shape "
        r"\[2, 3, 4\]: pass the gradient of outer's output",
    ),
    _v(
        "outer_backward",
        "grad-shape-unbatched",
        lambda m: ops.outer_backward(m.x(4, 3), m.x(3), m.x(4)),
        kjit.ValueError,
        r"^kjit\.ops\.outer_backward: grad has shape \[4, 3\] but outer\(a, b\) has shape \[3, 4\]",
    ),
]

# ---- the template / kernel API (no GPU needed: compile-only for sm_90) ---------------------------------

_PYBIND = r"incompatible (function|constructor) arguments\. The following argument types are supported:"

API_CASES = [
    case(
        "kjit.Template.builtin",
        "name",
        lambda m: kjit.Template.builtin(""),
        kjit.ValueError,
        r"built-in template name '' is not valid: names are letters, digits and '_' \(available: add_constant",
        "empty",
    ),
    case(
        "kjit.Template.builtin",
        "name",
        lambda m: kjit.Template.builtin("../add_constant"),
        kjit.ValueError,
        r"'\.\./add_constant' is not valid.*For a file of your own use Template\.from_file",
        "path",
    ),
    case(
        "kjit.Template.builtin",
        "name",
        lambda m: kjit.Template.builtin("no_such_template"),
        kjit.ValueError,
        r"no_such_template.*add_constant",
        "unknown",
    ),
    case(
        "kjit.Template.builtin",
        "args",
        lambda m: kjit.Template.builtin(None),
        TypeError,
        _PYBIND + r".*\(name: str\).*Invoked with: None",
        "None",
    ),
    case(
        "kjit.Template.builtin_names",
        "args",
        lambda m: kjit.Template.builtin_names(1),
        TypeError,
        _PYBIND + r".*Invoked with: 1",
        "extra-arg",
    ),
    case(
        "kjit.Template",
        "args",
        lambda m: kjit.Template(3),
        TypeError,
        _PYBIND + r".*source: str.*Invoked with: 3",
        "int-source",
    ),
    case(
        "kjit.Template",
        "args",
        lambda m: kjit.Template("__global__ void k() {}", include_dirs=3),
        TypeError,
        _PYBIND + r".*include_dirs",
        "int-include_dirs",
    ),
    case(
        "kjit.Template.from_file",
        "name",
        lambda m: kjit.Template.from_file("/"),
        kjit.ValueError,
        r"cannot read template file '/': it does not exist or is not readable",
        "directory",
    ),
    case(
        "kjit.Template.from_file",
        "name",
        lambda m: kjit.Template.from_file("/nonexistent/k.cu"),
        kjit.ValueError,
        r"cannot read template file '/nonexistent/k\.cu': it does not exist or is not readable\. Pass the path of a "
        r"\.cu/\.cuh file",
        "missing",
    ),
    case(
        "kjit.Template.from_file",
        "args",
        lambda m: kjit.Template.from_file(None),
        TypeError,
        _PYBIND + r".*Invoked with: None",
        "None",
    ),
    case(
        "kjit.Template.kernel",
        "name",
        lambda m: ADD.template.kernel(""),
        kjit.ValueError,
        r"template 'add_constant' has no __global__ kernel named '' \(it declares: add_constant\)",
        "empty",
    ),
    case(
        "kjit.Template.kernel",
        "name",
        lambda m: kjit.Template.builtin("softmax").kernel("softmax"),
        kjit.ValueError,
        r"template 'softmax' has no __global__ kernel named 'softmax' \(it declares: .*softmax_forward",
        "unknown",
    ),
    case(
        "kjit.Template.kernel",
        "name",
        lambda m: kjit.Template("int x;", name="nokernel.cu").kernel("x"),
        kjit.ValueError,
        r"template 'nokernel\.cu' has no __global__ kernel named 'x' \(it declares: none\)",
        "none",
    ),
    case(
        "kjit.Template.kernel",
        "value",
        lambda m: ADD.template.kernel("add_constant", max_registers=1000),
        kjit.ValueError,
        r"compile option max_registers=1000 is not valid: allowed 16\.\.255, or unset",
        "max_registers",
    ),
    case(
        "kjit.Template.kernel",
        "value",
        lambda m: ADD.template.kernel("add_constant", defines={"1A": 1}),
        kjit.ValueError,
        r"macro name '1A' is not a C identifier",
        "define-name",
    ),
    case(
        "kjit.Template.kernel",
        "args",
        lambda m: ADD.template.kernel("add_constant", defines=[3]),
        kjit.TypeError,
        r"defines must be a dict \{name: value\} or a list of 'NAME' / 'NAME=VALUE' strings, got an item the int 3",
        "define-item",
    ),
    case(
        "kjit.Template.kernel",
        "args",
        lambda m: ADD.template.kernel(3),
        TypeError,
        _PYBIND + r".*Invoked with:",
        "int-name",
    ),
    case(
        "kjit.Template.kernel",
        "args",
        lambda m: ADD.template.kernel("add_constant", fastmath=True),
        TypeError,
        _PYBIND + r".*fast_math.*Invoked with:.*fastmath=True",
        "unknown-option",
    ),
    case(
        "kjit.Kernel",
        "args",
        lambda m: kjit.Kernel(),
        TypeError,
        r"kjit\._core\.Kernel: No constructor defined",
        "constructor",
    ),
    case(
        "kjit.KernelFamily",
        "args",
        lambda m: kjit.KernelFamily(),
        TypeError,
        r"kjit\._core\.KernelFamily: No constructor defined",
        "constructor",
    ),
    # specialize(): parameter names and values, devices and targets
    case(
        "kjit.KernelFamily.specialize",
        "name",
        lambda m: ADD.specialize(t=torch.float32, VEC=4, arch="sm_90"),
        kjit.ValueError,
        r"^kernel 'add_constant' has no template parameter 't'; its parameters are T \(type\), VEC "
        r"\(int\)$",
        "lowercase-name",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: ADD.specialize(arch="sm_90"),
        kjit.ValueError,
        r"^kernel 'add_constant' needs template parameters T, VEC; its parameters are T \(type\), VEC \(int\)$",
        "no-parameters",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: ADD.specialize(torch.float32),
        kjit.TypeError,
        r"^specialize\(\) takes keyword arguments only .*got 1 positional; the parameters of 'add_constant' are "
        r"T \(type\), VEC \(int\)",
        "positional",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "dtype",
        lambda m: ADD.specialize(T=torch.complex64, VEC=4, arch="sm_90"),
        kjit.TypeError,
        r"template parameter 'T' of kernel 'add_constant' got torch\.complex64, which kjit cannot "
        r"specialize on; allowed dtypes: float32, float64",
        "complex64",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "dtype",
        lambda m: ADD.specialize(T="float128", VEC=4, arch="sm_90"),
        kjit.ValueError,
        r"template parameter 'T' of kernel 'add_constant': unknown dtype name 'float128'; allowed: "
        r"float32, .*\(or a torch\.dtype\)",
        "unknown-dtype-name",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: ADD.specialize(T=None, VEC=4, arch="sm_90"),
        kjit.TypeError,
        r"template parameter 'T' of kernel 'add_constant' is a type: pass a torch\.dtype, a numpy / CuPy / JAX "
        r"dtype or a dtype name \(e\.g\. torch\.float32, numpy\.float32, 'bfloat16'\), got None",
        "T-None",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: ADD.specialize(T=torch.float32, VEC=None, arch="sm_90"),
        kjit.TypeError,
        r"template parameter 'VEC' of kernel 'add_constant' is an integer \(int\): pass an int, "
        r"got None",
        "VEC-None",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: RGB.specialize(H=1.5, W=4, arch="sm_90"),
        kjit.TypeError,
        r"template parameter 'H' of kernel 'rgb_to_gray' is an integer \(int\): pass an int, got the float 1\.5",
        "H-float",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: ADD.specialize(T=torch.float32, VEC=3, arch="sm_90"),
        kjit.CompileError,
        r"NVRTC could not compile add_constant\(T=float32, VEC=3\).*VEC must be a power of two",
        "VEC-3-does-not-compile",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, device="cuda:x"),
        kjit.ValueError,
        r"device 'cuda:x' is not a device name: pass an int, a torch\.device or a str such as "
        r"'cuda:0'",
        "bad-device-name",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, device="cpu"),
        kjit.ValueError,
        r"kernels run on CUDA devices, got the device 'cpu'",
        "cpu-device",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, device=[0]),
        kjit.TypeError,
        r"device must be None \(the current device\), an int, a torch\.device or a str such as "
        r"'cuda:0'",
        "list-device",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, device=0, arch="sm_90"),
        kjit.ValueError,
        r"specialize\(\) takes device= \(to launch\) or arch= \(to compile only\), not both",
        "device-and-arch",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=4),
        kjit.ValueError,
        r"^no CUDA device is available \(.*\); to compile without a GPU, pass the target architecture, e\.g\. "
        r"specialize\(arch='sm_90', \.\.\.\)",
        "no-gpu",
        marks=[no_gpu_here],
    ),
    case(
        "kjit.KernelFamily.specialize",
        "args",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch=["sm_90"]),
        kjit.TypeError,
        r"arch must be a str such as 'sm_90', 'sm_90a' or 'compute_90', got a list",
        "arch-list",
    ),
    *[
        case(
            "kjit.KernelFamily.specialize",
            "value",
            lambda m, a=a: ADD.specialize(T=torch.float32, VEC=4, arch=a),
            kjit.ValueError,
            rf"^target '{re.escape(a)}' {NOT_A_TARGET}$",
            f"arch-{a.strip() or 'empty'}",
        )
        for a in ["banana", "", "sm_", "SM_90", " sm_90", "sm_1000", "sm_90b", "compute_"]
    ],
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_10"),
        kjit.ValueError,
        r"^target 'sm_10' is older than anything CUDA 12\+ supports \(sm_50 and newer\)",
        "arch-sm_10",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="compute_91"),
        kjit.ValueError,
        r"^NVRTC \S+ cannot compile for compute_91: it supports compute_.*, compute_90\b.* for PTX "
        r"\(or sm_XY for a cubin\)$",
        "arch-compute_91",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_91"),
        kjit.ValueError,
        r"^NVRTC \S+ cannot compile for sm_91: it supports sm_.*, sm_90\b",
        "arch-sm_91",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: (
            kjit.Template('#include "nope_zz.cuh"\n__global__ void k(float* x) {}', name="inc.cu")
            .kernel("k")
            .specialize(arch="sm_90")
        ),
        kjit.CompileError,
        r"NVRTC could not compile k\(\) from template inc\.cu for sm_90.*kjit did not find 'nope_zz\.cuh'.*(could not|cannot) open source file "
        r"\"nope_zz\.cuh\"",
        "missing-include",
    ),
    case(
        "kjit.KernelFamily.specialize",
        "value",
        lambda m: (
            kjit.Template("__global__ void k(float* x) { x[0] = undefined_q; }", name="bad.cu")
            .kernel("k")
            .specialize(arch="sm_90")
        ),
        kjit.CompileError,
        r"bad\.cu\(1\): error: identifier \"undefined_q\" is undefined",
        "does-not-compile",
    ),
    # Kernel.launch of a compile-only kernel: the argument errors first, then LaunchError whatever the arguments
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_90").launch(1),
        kjit.TypeError,
        r"^launch\(\) takes grid and block, then the kernel's arguments \(x, y, c, n\); got 1 "
        r"positional argument$",
        "one-arg",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_90").launch(1, 1, bogus=2),
        kjit.TypeError,
        r"launch\(\) got an unexpected keyword argument 'bogus': it takes launch\(grid, "
        r"block, \*args, shared_mem=0, stream=None\)",
        "unknown-keyword",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_90").launch(1, 256, "a", [1], None),
        kjit.LaunchError,
        r"^add_constant<float, 4> is compiled for sm_90 only "
        r"\(arch='sm_90'\); specialize with a device to launch$",
        "compile-only",
    ),
    case(
        "kjit.Kernel.launch",
        "cpu",
        lambda m: ADD.specialize(T=torch.float32, VEC=4, arch="sm_90").launch(
            1, 256, torch.ones(4), torch.ones(4), 1.0, 4
        ),
        kjit.LaunchError,
        r"is compiled for sm_90 only",
        "compile-only-cpu-tensors",
    ),
    # process-wide functions
    case("kjit.stats", "args", lambda m: kjit.stats(1), TypeError, _PYBIND + r".*\(\) -> dict.*Invoked with: 1", "arg"),
    case("kjit.reset_stats", "args", lambda m: kjit.reset_stats(1), TypeError, _PYBIND + r".*Invoked with: 1", "arg"),
    case("kjit.cache_info", "args", lambda m: kjit.cache_info("x"), TypeError, _PYBIND + r".*Invoked with: 'x'", "arg"),
    case(
        "kjit.clear_memory",
        "args",
        lambda m: kjit.clear_memory(None),
        TypeError,
        _PYBIND + r".*Invoked with: None",
        "arg",
    ),
]

# ---- kjit.elementwise ----------------------------------------------------------------------------------

_NOT_USABLE = (
    r"is not usable: names are C\+\+ identifiers, not C\+\+ keywords, not C, TO, I, VEC, TAIL or out, and "
    r"not starting with 'kjit_', 'T_' or '__'"
)


def _ew(target, category, call, exc, pattern, id, **kw):
    return case(target, category, call, exc, pattern, id, **kw)


EW_CASES = [
    *[
        _ew(
            "kjit.elementwise",
            "name",
            lambda m, n=n: kjit.elementwise("x", ("x", n)),
            kjit.ValueError,
            rf"^kjit\.elementwise: input name '{re.escape(n)}' {_NOT_USABLE}$",
            f"input-{n}",
        )
        for n in ["C", "VEC", "T_x", "__x", "None", "lambda", "a-b", "out"]
    ],
    *[
        _ew(
            "kjit.elementwise",
            "name",
            lambda m, n=n: kjit.elementwise("x", "x", n),
            kjit.ValueError,
            rf"^kjit\.elementwise: scalar name '{n}'",
            f"scalar-{n}",
        )
        for n in ["TO", "int", "kjit_s"]
    ],
    _ew(
        "kjit.elementwise",
        "name",
        lambda m: kjit.elementwise("x * s", "x", "s, s"),
        kjit.ValueError,
        r"names \['s'\] are given more than once",
        "scalar-twice",
    ),
    _ew(
        "kjit.elementwise",
        "name",
        lambda m: kjit.elementwise("x * s + y", "x, y", {"x": 1.0, "s": 2.0}),
        kjit.ValueError,
        r"names \['x'\] are given more than once",
        "scalar-shadows-input",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x", None),
        kjit.TypeError,
        r"kjit\.elementwise: input must be a name, a list of names or a string of names separated by commas, got None",
        "inputs-None",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x", ""),
        kjit.ValueError,
        r"kjit\.elementwise: at least one input tensor is needed",
        "no-inputs",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x", "x", 3),
        kjit.TypeError,
        r"scalar must be a name, .*got 3",
        "scalars-int",
    ),
    _ew(
        "kjit.elementwise",
        "dtype",
        lambda m: kjit.elementwise("x", "x", dtype="float32"),
        kjit.TypeError,
        r"kjit\.elementwise: dtype=float32 is not supported; allowed: torch\.float32",
        "dtype-str",
    ),
    _ew(
        "kjit.elementwise",
        "dtype",
        lambda m: kjit.elementwise("x", "x", dtype=torch.complex32),
        kjit.TypeError,
        r"dtype=torch\.complex32 is not supported",
        "dtype-complex32",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise(None, "x"),
        kjit.TypeError,
        r"the expression must be a non-empty string of C\+\+, got None",
        "expr-None",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("  ", "x"),
        kjit.TypeError,
        r"the expression must be a non-empty string of C\+\+, got '  '",
        "expr-blank",
    ),
    *[
        _ew(
            "kjit.elementwise",
            "value",
            lambda m, e=e: kjit.elementwise(e, "x"),
            kjit.ValueError,
            r"must be one C\+\+ expression \(no ';', braces, comments or preprocessor lines\)",
            f"expr-{i}",
        )
        for i, e in enumerate(["x; return 0", "x }", "#define A", "x /* c", "x // c"])
    ],
    _ew(
        "kjit.elementwise",
        "name",
        lambda m: kjit.elementwise("x * s", "x", "s", specialize="s, s"),
        kjit.ValueError,
        r"kjit\.elementwise: specialize names \['s'\] more than once",
        "specialize-twice",
    ),
    _ew(
        "kjit.elementwise",
        "name",
        lambda m: kjit.elementwise("x * s", "x", "s", specialize="t"),
        kjit.ValueError,
        r"specialize=\['t'\] names \['t'\], which are not scalars; the scalars are \['s'\]",
        "specialize-unknown",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x * s", "x", "s", specialize=3),
        kjit.TypeError,
        r"specialized scalar must be a name, a list of names .*got 3",
        "specialize-int",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x * s", "x", {"s": "2"}),
        kjit.TypeError,
        r"the default of scalar 's' must be a Python int or float, got str '2'",
        "str-default",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x", "x", name=3),
        kjit.TypeError,
        r"kjit\.elementwise: name must be a str .*got int 3",
        "int-name",
    ),
    _ew(
        "kjit.elementwise",
        "args",
        lambda m: kjit.elementwise("x", "x", fused=True),
        TypeError,
        r"elementwise\(\) got an unexpected keyword argument 'fused'",
        "unknown-keyword",
    ),
    _ew(
        "kjit.Elementwise",
        "args",
        lambda m: kjit.Elementwise("x"),
        TypeError,
        r"missing 1 required positional argument: 'inputs'",
        "no-inputs",
    ),
    _ew(
        "kjit.Elementwise",
        "name",
        lambda m: kjit.Elementwise("x", "x, x"),
        kjit.ValueError,
        r"names \['x'\] are given more than once",
        "input-twice",
    ),
    # calls (CPU tensors: the argument checks come before the device check)
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(),
        kjit.TypeError,
        r"is missing input 'x' \(inputs: x, y\)",
        "no-args",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA([1.0], m.x(2), s=1.0),
        kjit.TypeError,
        r"input 'x' must be a torch\.Tensor, got list \[1\.0\]; pass numbers as scalars",
        "list",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(None, m.x(2), s=1.0),
        kjit.TypeError,
        r"input 'x' must be a torch\.Tensor, got NoneType None",
        "None",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), m.x(2), s=None),
        kjit.TypeError,
        r"scalar 's' must be a Python int or float, got NoneType None",
        "scalar-None",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), m.x(2), s=m.x(2)),
        kjit.TypeError,
        r"scalar 's' must be a Python int or float, got a torch\.float32 tensor of shape \[2\]",
        "scalar-tensor",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), m.x(2)),
        kjit.TypeError,
        r"is missing scalar 's' \(pass s=<number>\)",
        "scalar-missing",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), m.x(2), 1.0),
        kjit.TypeError,
        r"takes 2 tensor\(s\) \(x, y\) and scalars \['s'\] by keyword, got 3 positional",
        "scalar-positional",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), m.x(2), s=1.0, z=1),
        kjit.TypeError,
        r"unexpected keyword arguments \['z'\]; inputs \['x', 'y'\], scalars \['s'\], out=",
        "unknown-keyword",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(2), x=m.x(2), s=1.0),
        kjit.TypeError,
        r"got input 'x' twice, by position and by keyword \(inputs: x, y\)",
        "input-twice",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "dtype",
        lambda m: FMA(m.x(2), m.x(2).to(torch.complex32), s=1.0),
        kjit.TypeError,
        r"input 'y' has dtype torch\.complex32, which is not supported; allowed: torch\.float32",
        "complex32",
        marks=[COMPLEX_HALF_IS_EXPERIMENTAL],  # making the complex32 input, torch says so
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "cpu",
        lambda m: FMA(torch.ones(3), torch.ones(3), s=1.0),
        kjit.ValueError,
        r"^kjit\.elementwise\('bad_input_fma': 'x \* y \* s'\): expected all inputs on one CUDA device, got x on cpu, "
        r"y on cpu; move them with \.to\('cuda'\)",
        "cpu",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "cpu",
        lambda m: FMA(torch.ones(0), torch.ones(0), s=1.0),
        kjit.ValueError,
        r"expected all inputs on one CUDA device, got x on cpu, y on cpu",
        "cpu-empty",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "cpu",
        lambda m: FMA(torch.ones(4, 4).t(), torch.ones(4), s=1.0),
        kjit.ValueError,
        r"expected all inputs on one CUDA device, got x on cpu, y on cpu",
        "cpu-non-contiguous",
    ),
    _ew(
        "kjit.Elementwise.__call__",
        "device",
        lambda m: FMA(m.x(2), m.x(2), s=1.0),
        kjit.ValueError,
        r"expected all inputs on one CUDA device, got x on meta, y on meta",
        "meta",
    ),
    # compile(), source(), template()
    _ew(
        "kjit.Elementwise.compile",
        "value",
        lambda m: kjit.elementwise("x +", "x", name="syntax").compile(arch="sm_90", dtypes=(torch.float32,)),
        kjit.CompileError,
        r"NVRTC could not compile kjit_elementwise\(.*\) from template kjit_elementwise_syntax for sm_90",
        "syntax",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "name",
        lambda m: kjit.elementwise("x + undefined_zz", "x", name="undef").compile(
            arch="sm_90", dtypes=(torch.float32,)
        ),
        kjit.CompileError,
        r"identifier \"undefined_zz\" is undefined",
        "undefined-name",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "value",
        lambda m: FMA.compile(arch="banana", dtypes=(torch.float32,) * 2),
        kjit.ValueError,
        rf"^target 'banana' {NOT_A_TARGET}$",
        "bad-arch",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "dtype",
        lambda m: FMA.compile(arch="sm_90", dtypes=(torch.float32, torch.complex32)),
        kjit.TypeError,
        r"input 'y' has dtype torch\.complex32, which is not supported; allowed: torch\.float32",
        "complex32",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "args",
        lambda m: FMA.compile(arch="sm_90", dtypes="ff"),
        kjit.TypeError,
        r"dtypes must be a tuple of torch\.dtype, one per input \(x, y\), got str 'ff'",
        "dtypes-str",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "args",
        lambda m: FMA.compile(arch="sm_90", dtypes=None),
        kjit.TypeError,
        r"dtypes must be a tuple of torch\.dtype, one per input \(x, y\), got NoneType None",
        "dtypes-None",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "args",
        lambda m: FMA.compile(arch="sm_90", dtypes=(torch.float32,)),
        kjit.ValueError,
        r"dtypes gives 1 dtypes for 2 inputs",
        "dtypes-count",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "value",
        lambda m: FMA.compile(arch="sm_90", dtypes=(torch.float32,) * 2, rank=7),
        kjit.ValueError,
        r"rank must be 0 \(the flat kernel\) to 6, got 7",
        "rank-7",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "args",
        lambda m: SPEC.compile(arch="sm_90", dtypes=(torch.float32,)),
        kjit.ValueError,
        r"specialized_values must be a tuple of one number per specialized scalar \['s'\], got "
        r"tuple \(\)",
        "specialized_values-missing",
    ),
    _ew(
        "kjit.Elementwise.compile",
        "args",
        lambda m: FMA.compile(dtypes=(torch.float32,) * 2),
        TypeError,
        r"compile\(\) missing 1 required keyword-only argument: 'arch'",
        "no-arch",
    ),
    _ew(
        "kjit.Elementwise.source",
        "args",
        lambda m: SPEC.source(1),
        kjit.ValueError,
        r"specialized_values must be a tuple of one number per specialized scalar \['s'\], got int 1",
        "int",
    ),
    _ew(
        "kjit.Elementwise.source",
        "args",
        lambda m: SPEC.source(("a",)),
        kjit.ValueError,
        r"specialized_values must be a tuple of one number .*got tuple \('a',\)",
        "str-value",
    ),
    _ew(
        "kjit.Elementwise.template",
        "args",
        lambda m: SPEC.template(None),
        kjit.ValueError,
        r"specialized_values must be a tuple of one number .*got NoneType None",
        "None",
    ),
]

# ---- kjit.launcher / kjit.arg / kjit.cdiv ----------------------------------------------------------------

LAUNCHER_CASES = [
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher("add_constant", grid=1),
        kjit.TypeError,
        r"kjit\.launcher\(\) takes a kjit\.KernelFamily \(template\.kernel\(name\)\), got str",
        "not-a-family",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD.template, grid=1),
        kjit.TypeError,
        r"got Template",
        "a-template",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD),
        TypeError,
        r"launcher\(\) missing 1 required keyword-only argument: 'grid'",
        "no-grid",
    ),
    case(
        "kjit.launcher",
        "name",
        lambda m: kjit.launcher(ADD, grid=1, WIDTH=4),
        kjit.ValueError,
        r"kernel 'add_constant' has no template parameter 'WIDTH'; its parameters are T \(type\), VEC \(int\)",
        "unknown-parameter",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD, grid=(1, 2, 3, 4)),
        kjit.TypeError,
        r"grid must be an int or a tuple of 1 to 3 ints .*got \(1, 2, 3, 4\)",
        "grid-4d",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD, grid=1, block=True),
        kjit.TypeError,
        r"block must be an int or a tuple of 1 to 3 ints, got True",
        "block-bool",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD, grid=1, shared_mem="0"),
        kjit.TypeError,
        r"shared_mem must be an int or a callable, got '0'",
        "shared_mem-str",
    ),
    case(
        "kjit.launcher",
        "name",
        lambda m: kjit.launcher(ADD, grid=1, T=kjit.arg("z").dtype),
        kjit.ValueError,
        r"kjit\.arg\('z'\)\.dtype: kernel 'add_constant' has no parameter 'z'; its parameters are \(x, y, c, n\)",
        "arg-unknown-name",
    ),
    case(
        "kjit.launcher",
        "args",
        lambda m: kjit.launcher(ADD, grid=1, T=kjit.arg(-5).dtype),
        kjit.ValueError,
        r"kjit\.arg\(-5\)\.dtype: kernel 'add_constant' has 4 parameters \(x, y, c, n\)",
        "arg-bad-position",
    ),
    case(
        "kjit.Launcher",
        "args",
        lambda m: kjit.Launcher(ADD, grid=1),
        TypeError,
        r"missing 1 required keyword-only argument: 'specialize'",
        "no-specialize",
    ),
    case(
        "kjit.Launcher",
        "args",
        lambda m: kjit.Launcher(None, grid=1, specialize={}),
        kjit.TypeError,
        r"kjit\.launcher\(\) takes a kjit\.KernelFamily .*got NoneType",
        "None-family",
    ),
    case(
        "kjit.arg",
        "args",
        lambda m: kjit.arg(None),
        kjit.TypeError,
        r"kjit\.arg\(\) takes a parameter name or position, got None",
        "None",
    ),
    case(
        "kjit.arg",
        "args",
        lambda m: kjit.arg(True),
        kjit.TypeError,
        r"kjit\.arg\(\) takes a parameter name or position, got True",
        "bool",
    ),
    case(
        "kjit.arg",
        "args",
        lambda m: kjit.arg("x").stride[1.0],
        kjit.TypeError,
        r"kjit\.arg\('x'\)\.stride\[\.\.\.\] takes an int dimension, got 1\.0",
        "stride-float",
    ),
    case(
        "kjit.arg",
        "args",
        lambda m: kjit.arg("x").shape["a"],
        kjit.TypeError,
        r"kjit\.arg\('x'\)\.shape\[\.\.\.\] takes an int dimension, got 'a'",
        "shape-str",
    ),
    case("kjit.cdiv", "args", lambda m: kjit.cdiv("8", 2), TypeError, r"bad operand type for unary -: 'str'", "str"),
    case("kjit.cdiv", "value", lambda m: kjit.cdiv(8, 0), ZeroDivisionError, r"division or modulo by zero", "zero"),
    # calls: the argument checks come before the device check
    case(
        "kjit.Launcher.__call__",
        "args",
        lambda m: LAUNCHER(m.x(2), m.x(2), 1.0),
        kjit.TypeError,
        r"^kernel add_constant takes 4 arguments \(x, y, c, n\), got 3$",
        "too-few",
    ),
    case(
        "kjit.Launcher.__call__",
        "args",
        lambda m: LAUNCHER(m.x(2), m.x(2), 1.0, 2, 5),
        kjit.TypeError,
        r"^kernel add_constant takes 4 arguments \(x, y, c, n\), got 5$",
        "too-many",
    ),
    case(
        "kjit.Launcher.__call__",
        "args",
        lambda m: LAUNCHER(m.x(2), m.x(2), 1.0, 2, w=1),
        kjit.TypeError,
        r"kernel add_constant has no parameter 'w'; its parameters are \(x, y, c, n\)",
        "unknown-keyword",
    ),
    case(
        "kjit.Launcher.__call__",
        "args",
        lambda m: LAUNCHER(m.x(2), m.x(2), 1.0, n=2, c=1.0),
        kjit.TypeError,
        r"kernel add_constant got argument 'c' twice",
        "twice",
    ),
    case(
        "kjit.Launcher.__call__",
        "args",
        lambda m: LAUNCHER(m.x(2), y=m.x(2), c=1.0),
        kjit.TypeError,
        r"kernel add_constant takes 4 arguments \(x, y, c, n\), missing n",
        "missing",
    ),
    case(
        "kjit.Launcher.__call__",
        "cpu",
        lambda m: LAUNCHER(torch.ones(2), torch.ones(2), 1.0, 2),
        kjit.ValueError,
        r"^add_constant: expected all tensors on one CUDA device, got cpu \(x, y\); move them with \.to\('cuda'\)$",
        "cpu",
    ),
    case(
        "kjit.Launcher.__call__",
        "cpu",
        lambda m: LAUNCHER(torch.ones(0), torch.ones(0), 1.0, 0),
        kjit.ValueError,
        r"got cpu \(x, y\)",
        "cpu-empty",
    ),
    case(
        "kjit.Launcher.specialize",
        "args",
        lambda m: LAUNCHER.specialize(m.x(2), m.x(2)),
        kjit.TypeError,
        r"^kernel add_constant takes 4 arguments \(x, y, c, n\), got 2$",
        "too-few",
    ),
    case(
        "kjit.Launcher.specialize",
        "cpu",
        lambda m: LAUNCHER.specialize(torch.ones(2), torch.ones(2), 1.0, 2),
        kjit.ValueError,
        r"^add_constant: expected all tensors on one CUDA device, got cpu \(x, y\)",
        "cpu",
    ),
    case(
        "kjit.Launcher.specialize",
        "args",
        lambda m: LAUNCHER.specialize(1.0, 2.0, 3.0, 4),
        kjit.TypeError,
        r"^add_constant: T=kjit\.arg\('x'\)\.dtype cannot be read from this call: 'float' object has no attribute "
        r"'dtype'",
        "no-tensor",
    ),
]


# =====================================================================================================
# 4. Runners and valid calls
# =====================================================================================================


def _compile_only_ok():
    k = ADD.specialize(T=torch.float32, VEC=4, arch="sm_90")
    assert k.origin in ORIGINS and k.target == "sm_90" and k.name_expression == "add_constant<float, 4>"


def _elementwise_ok_cpu():
    assert FMA.compile(arch="sm_90", dtypes=(torch.float32, torch.float16)).origin in ORIGINS
    assert "x * y * s" in FMA.source()


def _launcher_ok_cpu():
    assert kjit.cdiv(10, 4) == 3
    run = kjit.launcher(ADD, grid=lambda x, y, c, n: kjit.cdiv(n, 256), T=kjit.arg("x").dtype, VEC=1)
    assert run.family.specialize(T=torch.float32, VEC=1, arch="sm_90").origin in ORIGINS


def _engine_ok():
    s = kjit.stats()
    assert s["compiles"] >= 0 and s["memory_hits"] >= 0
    assert kjit.cache_info()["dir"]


def valid_cpu(target: str):
    """A valid call of `target` in this process, without a GPU."""
    if target.startswith("kjit.ops."):
        check_op(target.removeprefix("kjit.ops."), Maker("meta"))
    elif target.startswith(("kjit.Template", "kjit.Kernel")):
        _compile_only_ok()
    elif target.startswith(("kjit.elementwise", "kjit.Elementwise")):
        _elementwise_ok_cpu()
    elif target.startswith(("kjit.launcher", "kjit.Launcher", "kjit.arg", "kjit.cdiv")):
        _launcher_ok_cpu()
    else:
        _engine_ok()
    _engine_ok()


def _fma_ok_gpu():
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(6, 40, generator=g).cuda(), torch.randn(40, generator=g).cuda()
    torch.testing.assert_close(FMA(x, y, s=0.5), x * y * 0.5, rtol=1e-6, atol=1e-6)


def _kernel_ok_gpu():
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    k = ADD.specialize(T=torch.float32, VEC=4, device=x.device)
    k.launch(kjit.cdiv(1000, 1024), 256, x, y, 2.5, 1000)
    torch.testing.assert_close(y, x + 2.5, rtol=0, atol=0)
    z = torch.empty_like(x)
    LAUNCHER(x, z, -1.0, 1000)
    torch.testing.assert_close(z, x - 1.0, rtol=0, atol=0)


def valid_gpu(target: str):
    """A valid call of `target` launched on the GPU and compared with PyTorch."""
    if target.startswith("kjit.ops."):
        check_op(target.removeprefix("kjit.ops."), Maker("cuda"))
    elif target.startswith(("kjit.elementwise", "kjit.Elementwise")):
        _fma_ok_gpu()
    elif target.startswith(("kjit.stats", "kjit.reset_stats", "kjit.cache_info", "kjit.clear_memory")):
        _engine_ok()
    else:
        _kernel_ok_gpu()
    x = torch.linspace(-3, 3, 240, device="cuda").view(6, 40)  # and the library as a whole
    torch.testing.assert_close(ops.softmax(x), torch.softmax(x, -1), rtol=3e-5, atol=1e-6)
    torch.cuda.synchronize()  # an asynchronous fault of the bad call would surface here


def run_bad(c: Case, device: str, request=None):
    """Makes the bad call, then a valid call of the same target, then checks the error."""
    if c.known_meta and device == "meta":
        request.node.add_marker(known_bug(c.known_meta))
    m = Maker(device)
    err = None
    try:
        c.call(m)
    except Exception as e:  # noqa: BLE001  (any error: its type is checked below)
        err = e
    (valid_gpu if device == "cuda" else valid_cpu)(c.target)
    if c.exc is type(None):  # a valid input: no error
        if err is not None:
            raise err
        return
    if err is None:
        raise WrongError(f"{c.target}: no error; expected {c.exc.__module__}.{c.exc.__qualname__} /{c.pattern}/")
    if type(err) is not c.exc:
        raise WrongError(
            f"{c.target}: {type(err).__module__}.{type(err).__qualname__}: {err}\n"
            f"expected exactly {c.exc.__module__}.{c.exc.__qualname__} /{c.pattern}/"
        ) from err
    if isinstance(err, kjit.Error) != issubclass(c.exc, kjit.Error):
        raise WrongError(f"{c.target}: {err!r} and kjit.Error")
    if not re.search(c.pattern, str(err), re.S):
        raise WrongError(f"{c.target}: message {str(err)!r} does not match /{c.pattern}/") from err


# ---- CPU part --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", OP_CPU_TENSOR_CASES)
def test_cpu_tensors(c):
    run_bad(c, "meta")


@pytest.mark.parametrize("c", OP_DTYPE_CASES)
def test_op_dtypes_meta(c):
    run_bad(c, "meta")


@pytest.mark.parametrize("c", OP_ARGUMENT_CASES)
def test_op_arguments(c):
    run_bad(c, "meta")


@pytest.mark.parametrize("c", OP_VALUE_CASES)
def test_op_values_meta(c, request):
    run_bad(c, "meta", request)


@pytest.mark.parametrize("c", OP_VALID_META_CASES)
def test_op_empty_and_huge_meta_shapes(c):
    run_bad(c, "meta")


@pytest.mark.parametrize("c", API_CASES + EW_CASES + LAUNCHER_CASES)
def test_api(c):
    run_bad(c, "meta")


covers("kjit.Elementwise.compile", "huge", "nan")
covers("kjit.Elementwise.source", "nan")


def test_elementwise_compile_only_64_bit_index_and_special_constants():
    """Valid inputs: the 64-bit index variants compile, and so do NaN / +-Inf specialized constants."""
    for rank in (0, 1, 3):
        k = FMA.compile(arch="sm_90", dtypes=(torch.float16, torch.float32), index=torch.int64, rank=rank)
        assert k.origin in ORIGINS and ", long long, 0ull, __half, float>" in k.name_expression, k.name_expression
    for v in (float("nan"), float("inf"), float("-inf")):
        assert SPEC.compile(arch="sm_90", dtypes=(torch.float32,), specialized_values=(v,)).origin in ORIGINS
    assert "__int_as_float(0x7fffffff)" in SPEC.source((float("nan"),))
    # An expression is one line: a line break could hide a preprocessor line (issue 14: "%:include").
    with pytest.raises(kjit.ValueError, match="on one line: no line breaks"):
        kjit.elementwise("x *\n s", "x", "s", name="bad_input_multiline")
    valid_cpu("kjit.Elementwise.compile")


# ---- the matrix covers the public surface ------------------------------------------------------------------

TENSOR_FUNCTIONS = {
    "kjit.Elementwise.__call__": {"cpu", "dtype", "device", "noncontig", "empty", "huge", "nan", "args"},
    "kjit.Launcher.__call__": {"cpu", "dtype", "device", "noncontig", "empty", "args"},
    "kjit.Kernel.launch": {"cpu", "dtype", "device", "empty", "args"},
}


def required_categories(target: str) -> set[str]:
    if target.startswith("kjit.ops."):
        spec = OPS.get(target.removeprefix("kjit.ops."))
        if spec is None:
            return {"cpu"}  # reported below as missing from OPS
        need = {"cpu", "dtype", "args", "empty", "huge", "noncontig"}
        if spec.special:
            need.add("nan")
        if len(spec.names) > 1:
            need.add("device")
        return need
    return TENSOR_FUNCTIONS.get(target, {"args"})


def test_the_matrix_covers_the_public_surface():
    surface = public_surface()
    assert sorted(OPS) == sorted(ops.__all__), "kjit.ops.__all__ and OPS differ: add a row to OPS"
    missing = {t: sorted(required_categories(t) - {c for tt, c in COVERAGE if tt == t}) for t in sorted(surface)}
    missing = {t: c for t, c in missing.items() if c}
    assert not missing, f"public functions without bad-input rows (target: missing categories): {missing}"
    unknown = sorted({t for t, _ in COVERAGE} - surface)
    assert not unknown, f"rows for names that are not public: {unknown}"


# =====================================================================================================
# GPU part
# =====================================================================================================


@gpu
@pytest.mark.parametrize("c", OP_DTYPE_CASES + OP_VALUE_CASES + [p for p in OP_ARGUMENT_CASES if "None" in p.id])
def test_op_rows_on_cuda(c):
    """The same rows with CUDA tensors: the CUDA implementations give the errors of the fake ones."""
    run_bad(c, "cuda")


@gpu
@pytest.mark.parametrize("name", list(OPS))
def test_op_valid_on_cuda(name):
    check_op(name, Maker("cuda"))
    check_op(name, Maker("cuda", dtype=torch.float64) if OPS[name].allowed == FLOAT_ALLOWED else Maker("cuda"))


# ---- mixed devices ---------------------------------------------------------------------------------------


def _mixed_rows():
    rows = []
    for name, spec in OPS.items():
        if len(spec.names) < 2:
            continue
        moved = spec.names[-1]

        def call(m, n=name):
            args = list(OPS[n].build(Maker("cuda")))
            i = max(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
            args[i] = args[i].cpu()
            return getattr(ops, n)(*args)

        rows.append(
            case(
                op(name),
                "device",
                call,
                kjit.ValueError,
                rf"^kjit\.ops\.{name}: {_ONE_DEVICE}.*cpu \([^)]*\b{moved}\b[^)]*\).*; move them with "
                r"\.to\('cuda(:\d+)?'\)",
                f"cpu-{moved}",
            )
        )
    return rows


def _second_gpu(name):
    def call(m):
        args = list(OPS[name].build(Maker("cuda")))
        i = max(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        args[i] = args[i].to("cuda:1")
        return getattr(ops, name)(*args)

    return call


MIXED_DEVICE_CASES = _mixed_rows() + [
    # Every tensor grouped by its device, in argument order (the C++ ops' message).
    case(
        op("layer_norm"),
        "device",
        _second_gpu("layer_norm"),
        kjit.ValueError,
        rf"{_ONE_DEVICE}cuda:0 \(x, weight\) and "
        r"cuda:1 \(bias\); move them with \.to\('cuda:0'\)",
        "cuda:1",
        marks=[multi_gpu],
    ),
    case(
        op("outer"),
        "device",
        _second_gpu("outer"),
        kjit.ValueError,
        rf"{_ONE_DEVICE}cuda:0 \(a\) and cuda:1 \(b\)",
        "cuda:1",
        marks=[multi_gpu],
    ),
    case(
        op("layer_norm"),
        "device",
        lambda m: ops.layer_norm(torch.ones(3, 8), m.w(8).cuda()),
        kjit.ValueError,
        rf"^kjit\.ops\.layer_norm: {_ONE_DEVICE}cpu \(x\) and cuda:\d+ \(weight\); move them with \.to\('cuda:\d+'\)",
        "cpu-x",
    ),
    case(
        op("relu_backward"),
        "args",
        lambda m: ops.relu_backward(m.x(4).cuda(), None),
        kjit.TypeError,
        r"^kjit\.ops\.relu_backward: saved must be a torch\.Tensor, got NoneType",
        "cuda-and-None",
    ),
    case(
        "kjit.Elementwise.__call__",
        "device",
        lambda m: FMA(torch.ones(4, device="cuda"), torch.ones(4), s=1.0),
        kjit.ValueError,
        r"expected all inputs on one CUDA device, got x on cuda:\d+, y on cpu; move them with "
        r"\.to\('cuda'\)",
        "cpu-y",
    ),
    case(
        "kjit.Elementwise.__call__",
        "device",
        lambda m: FMA(torch.ones(4, device="cuda"), torch.ones(4), s=1.0, out=torch.empty(4)),
        kjit.ValueError,
        r"expected all inputs on one CUDA device",
        "cpu-out",
    ),
    case(
        "kjit.Launcher.__call__",
        "device",
        lambda m: LAUNCHER(torch.ones(4, device="cuda"), torch.ones(4), 1.0, 4),
        kjit.ValueError,
        r"^add_constant: expected all tensors on one CUDA device, got cuda:\d+ \(x\) and cpu \(y\); "
        r"move them with \.to\('cuda:\d+'\)",
        "cpu-y",
    ),
    case(
        "kjit.Kernel.launch",
        "device",
        lambda m: ADD.specialize(T=torch.float32, VEC=1, device=0).launch(
            1, 256, torch.ones(4, device="cuda"), torch.ones(4), 1.0, 4
        ),
        kjit.ValueError,
        r"argument 'y' of add_constant<float, 1> is on cpu, but the kernel runs on cuda:0; move it with "
        r"y\.to\('cuda:0'\) or specialize for its device",
        "cpu-y",
    ),
    case(
        "kjit.Kernel.launch",
        "cpu",
        lambda m: ADD.specialize(T=torch.float32, VEC=1, device=0).launch(1, 256, torch.ones(4), torch.ones(4), 1.0, 4),
        kjit.ValueError,
        r"argument 'x' of add_constant<float, 1> is on "
        r"cpu, but the kernel runs on cuda:0",
        "cpu",
    ),
]


@gpu
@pytest.mark.parametrize("c", MIXED_DEVICE_CASES)
def test_mixed_devices(c):
    run_bad(c, "cuda")


# ---- the GPU launch API: dtypes, arguments, non-contiguous, empty -----------------------------------------


def _k1():
    return ADD.specialize(T=torch.float32, VEC=1, device=0)


GPU_API_CASES = [
    case(
        "kjit.Kernel.launch",
        "dtype",
        lambda m: _k1().launch(1, 256, m.x(4).double(), m.x(4), 1.0, 4),
        kjit.TypeError,
        r"argument 'x' of add_constant<float, 1> points to torch\.float32 elements, got a torch\.float64 tensor; "
        r"convert it with x\.to\(torch\.float32\)",
        "float64",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: _k1().launch(1, 256, m.x(4), m.x(4), 1.0),
        kjit.TypeError,
        r"^kernel add_constant<float, 1> takes 4 arguments \(x, y, c, n\), got 3",
        "too-few",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: _k1().launch(1, 256, m.x(4), m.x(4), "1", 4),
        kjit.TypeError,
        r"argument 'c' of add_constant<float, 1> is .*: pass a float or an int, got",
        "str-scalar",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: _k1().launch(1, 256, m.x(4), m.x(4), m.x(1), 4),
        kjit.TypeError,
        r"argument 'c' of add_constant<float, 1> is .*a tensor \(pass a Python number; for a one-element tensor, "
        r"t\.item\(\)\)",
        "tensor-scalar",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: _k1().launch(1, 256, m.x(4), m.x(4), 1.0, 2**70),
        kjit.ValueError,
        r"argument 'n' of add_constant<float, 1> is .*: the value 1180591620717411303424 is out of its range",
        "n-2^70",
    ),
    case(
        "kjit.Kernel.launch",
        "empty",
        lambda m: _k1().launch(0, 256, m.x(0), m.x(0), 1.0, 0),
        kjit.LaunchError,
        r"grid \(0, 1, 1\) is empty: every grid dimension must be >= 1 \(skip the launch when there is no work\)",
        "grid-0",
    ),
    case(
        "kjit.Kernel.launch",
        "value",
        lambda m: _k1().launch(1, 2048, m.x(4), m.x(4), 1.0, 4),
        kjit.LaunchError,
        r"block \(2048, 1, 1\) has 2048 threads: allowed at most 1024 threads per block",
        "block-2048",
    ),
    case(
        "kjit.Kernel.launch",
        "value",
        lambda m: _k1().launch((1, 70000), 256, m.x(4), m.x(4), 1.0, 4),
        kjit.LaunchError,
        r"exceeds the CUDA limits: x <= 2\^31-1, y and z <= 65535",
        "grid-y-70000",
    ),
    case(
        "kjit.Kernel.launch",
        "args",
        lambda m: _k1().launch(1, 256, m.x(4), m.x(4), 1.0, 4, stream="s"),
        kjit.TypeError,
        r"stream must be None \(the current stream\), a torch\.cuda\.Stream or an int handle",
        "stream",
    ),
    case(
        "kjit.Launcher.__call__",
        "dtype",
        lambda m: LAUNCHER(m.x(4), m.x(4).double(), 1.0, 4),
        kjit.TypeError,
        r"^add_constant: argument 'y' has dtype torch\.float64, but add_constant<float, 1> takes it as .*"
        r"\(torch\.float32\); convert it with y\.to\(torch\.float32\)",
        "y-float64",
    ),
    case(
        "kjit.Launcher.__call__",
        "noncontig",
        lambda m: LAUNCHER(m.x(8, 12).t(), m.x(12, 8), 1.0, 96),
        kjit.ValueError,
        r"^add_constant: argument 'x' is not contiguous \(shape \[12, 8\], strides \[1, 12\]\): call "
        r"x\.contiguous\(\) first",
        "transposed",
    ),
    case(
        "kjit.Elementwise.__call__",
        "value",
        lambda m: FMA(m.x(3, 4), m.x(5), s=1.0),
        kjit.ValueError,
        r"the input shapes do not broadcast: x \[3, 4\], y \[5\]",
        "broadcast",
    ),
    case(
        "kjit.Elementwise.__call__",
        "args",
        lambda m: FMA(m.x(4), m.x(4), s=1.0, out=[0.0]),
        kjit.TypeError,
        r"out must be a torch\.Tensor, got list",
        "out-list",
    ),
    case(
        "kjit.Elementwise.__call__",
        "dtype",
        lambda m: FMA(m.x(4), m.x(4), s=1.0, out=m.x(4).half()),
        kjit.ValueError,
        r"out must be a contiguous torch\.float32 tensor of shape \[4\] on cuda:\d+, got a torch\.float16 tensor",
        "out-dtype",
    ),
    case(
        "kjit.Elementwise.__call__",
        "noncontig",
        lambda m: FMA(m.x(4), m.x(4), s=1.0, out=m.x(8)[::2]),
        kjit.ValueError,
        r"out must be a contiguous .*\(contiguous: False\)",
        "out-strided",
    ),
    case(
        "kjit.Elementwise.__call__",
        "value",
        lambda m: (lambda t: FMA(t[1:], t[:-1], s=1.0, out=t[:-1]))(m.x(9)),
        kjit.ValueError,
        r"out overlaps input 'x' without being that very tensor",
        "out-overlaps",
    ),
]
covers("kjit.Launcher.__call__", "empty")
covers("kjit.Elementwise.__call__", "empty", "noncontig", "nan", "huge")


@gpu
@pytest.mark.parametrize("c", GPU_API_CASES)
def test_gpu_api(c):
    run_bad(c, "cuda")


@gpu
def test_launcher_and_elementwise_valid_edge_inputs():
    """Empty inputs launch nothing; strided and broadcast inputs are read through their strides; NaN and
    Inf go through as values (runtime and specialized scalars)."""
    x = torch.empty(0, device="cuda")
    LAUNCHER(x, torch.empty_like(x), 1.0, 0)  # grid 0: no launch, no error
    assert FMA(torch.empty(3, 0, device="cuda"), torch.empty(1, 0, device="cuda"), s=1.0).shape == (3, 0)
    a = torch.randn(7, 6, device="cuda").t()
    torch.testing.assert_close(FMA(a, a[0], s=2.0), a * a[0] * 2.0, rtol=1e-6, atol=1e-6)
    v = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0, 0.0], device="cuda")
    for s in (float("nan"), float("inf"), 2.0):
        torch.testing.assert_close(FMA(v, v, s=s), v * v * s, equal_nan=True)
        torch.testing.assert_close(SPEC(v, s=s), v * s, equal_nan=True)
    valid_gpu("kjit.Launcher.__call__")


# ---- the ops on edge inputs: non-contiguous, empty, NaN / Inf -----------------------------------------------


def _contiguous_only_rows():
    rows = []
    for name, spec in OPS.items():
        if spec.contiguous_only:
            rows.append(
                case(
                    op(name),
                    "noncontig",
                    lambda m, n=name: check_op(n, Maker("cuda", noncontig=True)),
                    kjit.ValueError,
                    rf"^kjit\.ops\.{name}: {spec.first} is not contiguous \(shape \[[\d, ]*\], "
                    rf"strides \[[\d, ]*\]\): call {spec.first}\.contiguous\(\) first",
                    "strided",
                )
            )
    return rows


CONTIGUOUS_ONLY_CASES = _contiguous_only_rows()
ANY_LAYOUT_OPS = [n for n, s in OPS.items() if not s.contiguous_only]
SPECIAL_OPS = [n for n, s in OPS.items() if s.special]
for _n in OPS:
    covers(op(_n), "noncontig", "empty")
for _n in SPECIAL_OPS:
    covers(op(_n), "nan")


@gpu
@pytest.mark.parametrize("c", CONTIGUOUS_ONLY_CASES)
def test_non_contiguous_inputs_of_contiguous_only_ops_are_an_error(c):
    run_bad(c, "cuda")


@gpu
@pytest.mark.parametrize("name", ANY_LAYOUT_OPS)
def test_non_contiguous_inputs_match_torch(name):
    check_op(name, Maker("cuda", noncontig=True))
    valid_gpu(op(name))


@gpu
@pytest.mark.parametrize("name", list(OPS))
def test_empty_inputs_match_torch(name):
    check_op(name, Maker("cuda", lead=0))
    valid_gpu(op(name))


@gpu
@pytest.mark.parametrize("name", SPECIAL_OPS)
def test_nan_and_inf_propagate_like_torch(name):
    """NaN / +-Inf are values: the results have NaN and infinities where PyTorch has them."""
    check_op(name, Maker("cuda", special=OPS[name].special))
    valid_gpu(op(name))


@gpu
def test_nan_cases_have_specials():
    """The NaN / Inf inputs of test_nan_and_inf_propagate_like_torch do contain them."""
    for name in SPECIAL_OPS:
        t = OPS[name].build(Maker("cuda", special="naninf"))[0]
        assert t.isnan().any(), name


# ---- huge: more than 2^31 elements ----------------------------------------------------------------------------


def _expanded(*shape, dtype=torch.float32):
    """A view of `shape` on one element: nothing is allocated."""
    return torch.zeros(1, dtype=dtype, device="cuda").view([1] * len(shape)).expand(*shape)


HUGE_VIEW_CASES = [
    *[
        case(
            op(n),
            "huge",
            lambda m, n=n: getattr(ops, n)(_expanded(2**40)),
            kjit.ValueError,
            rf"^kjit\.ops\.{n}: dim 0 has 1099511627776 elements; at most 2\^31 - 1 can be reduced in one dim",
            "R-2^40",
        )
        for n in ("sum", "mean", "amax", "amin")
    ],
    *[
        case(
            op(n),
            "huge",
            lambda m, n=n: getattr(ops, n)(_expanded(1, 2**31)),
            kjit.ValueError,
            rf"^kjit\.ops\.{n}: rows of 2147483648 elements are too long \(at most 2\^31 - 1 elements in the last dim\)",
            "row-2^31",
        )
        for n in ("softmax", "log_softmax")
    ],
    case(
        op("softmax_backward"),
        "huge",
        lambda m: ops.softmax_backward(_expanded(2, 2**31), _expanded(2, 2**31)),
        kjit.ValueError,
        r"^kjit\.ops\.softmax_backward: rows of 2147483648 elements are too long",
        "row-2^31",
    ),
    *[
        case(
            op(n),
            "huge",
            lambda m, n=n: getattr(ops, n)(_expanded(1, 1, 2**16, 2**16), 2),
            kjit.ValueError,
            rf"^kjit\.ops\.{n}: planes of 65536 x 65536 elements are too large \(at most 2\^31 - 1 per plane\)",
            "plane-2^32",
        )
        for n in ("max_pool2d", "avg_pool2d")
    ],
    case(
        op("max_pool2d_backward"),
        "huge",
        lambda m: ops.max_pool2d_backward(_expanded(1, 1, 2**15, 2**15), _expanded(1, 1, 2**16, 2**16), [2, 2]),
        kjit.ValueError,
        r"planes of 65536 x 65536 elements are too large",
        "plane-2^32",
    ),
    case(
        op("layer_norm"),
        "huge",
        lambda m: ops.layer_norm(_expanded(1, 2**18)),
        kjit.ValueError,
        r"^kjit\.ops\.layer_norm: rows of 262144 elements are longer than the kernel holds in registers \(at most "
        r"131072 elements at this alignment\); use torch\.nn\.functional for such rows",
        "row-2^18",
    ),
    case(
        op("rgb_to_gray"),
        "huge",
        lambda m: ops.rgb_to_gray(torch.zeros(65535 * 8 + 1, 1, 3, dtype=torch.uint8, device="cuda")),
        kjit.ValueError,
        r"^kjit\.ops\.rgb_to_gray: an image of 524281 x 1 pixels is too large: allowed H <= 524280",
        "H-524281",
    ),
    # An output of 2^40 elements cannot be allocated: PyTorch's allocator says so at once.
    case(
        op("relu"),
        "huge",
        lambda m: ops.relu(_expanded(2**40)),
        torch.OutOfMemoryError,
        r"out of memory",
        "output-2^40",
    ),
    case(
        op("add_constant"),
        "huge",
        lambda m: ops.add_constant(_expanded(2**40), 1.0),
        kjit.ValueError,
        r"^kjit\.ops\.add_constant: x is not contiguous",
        "expanded-2^40",
    ),
    case(
        "kjit.Elementwise.__call__",
        "huge",
        lambda m: FMA(_expanded(2**40), _expanded(2**40), s=1.0),
        torch.OutOfMemoryError,
        r"out of memory",
        "output-2^40",
    ),
]


@gpu
@pytest.mark.parametrize("c", HUGE_VIEW_CASES)
def test_huge_views(c):
    """Sizes kjit cannot handle are rejected before anything of their size is allocated."""
    run_bad(c, "cuda")


# ---- the matrix ops' sizes: the same error from the Meta (fake) implementation and the CUDA one --------


def _sized(m, *shape, dtype=BF16):
    """A tensor of `shape` that costs no memory: a meta tensor on meta, a view of one element on CUDA."""
    if m.device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    return _expanded(*shape, dtype=dtype)


_GEMM_DIMS = r"M, N and K must each be at most 2147483640 \(2\^31 - 8: the kernels index with 32-bit integers\), "
_BIG = 2**31


def _gemm_dims(name, id, call, got):
    return case(op(name), "huge", call, kjit.ValueError, rf"^kjit\.ops\.{name}: {_GEMM_DIMS}got {re.escape(got)}; ", id)


# M (the rows of x or a, all its dims but the last), N (the weight's rows; w_gate_up's 2F rows for SwiGLU,
# the kernels' row count), K, and the batch of bmm (the grid's z): every matrix op and backward op refuses
# what its kernels cannot index, on meta tensors (torch.compile's fake tensors) as on CUDA tensors, before any
# allocation. The CUDA path used to refuse M, N or K >= 2^31 only when it reached the GEMM, and the Meta
# kernels not at all; linear_swiglu let 2F >= 2^31 through to the kernel (F < 2^31), where the up rows' index
# (n + col, an int) overflowed.
GEMM_SIZE_CASES = [
    _gemm_dims("linear", "M-2^31", lambda m: ops.linear(_sized(m, _BIG, 8), _sized(m, 6, 8)), "M=2147483648 N=6 K=8"),
    _gemm_dims(
        "linear",
        "M-2^31-of-leading-dims",
        lambda m: ops.linear(_sized(m, 2**16, 2**15, 8), _sized(m, 6, 8)),
        "M=2147483648 N=6 K=8",
    ),
    _gemm_dims("linear", "N-2^31", lambda m: ops.linear(_sized(m, 4, 8), _sized(m, _BIG, 8)), "M=4 N=2147483648 K=8"),
    _gemm_dims(
        "linear", "K-2^31", lambda m: ops.linear(_sized(m, 4, _BIG), _sized(m, 6, _BIG)), "M=4 N=6 K=2147483648"
    ),
    # K is padded to a multiple of 8 for the kernels: 2^31 - 7 would be 2^31 there.
    _gemm_dims(
        "linear",
        "K-2^31-7",
        lambda m: ops.linear(_sized(m, 4, _BIG - 7), _sized(m, 6, _BIG - 7)),
        "M=4 N=6 K=2147483641",
    ),
    _gemm_dims(
        "linear_aux",
        "M-2^31",
        lambda m: ops.linear_aux(_sized(m, _BIG, 8), _sized(m, 6, 8), None, "relu"),
        "M=2147483648 N=6 K=8",
    ),
    _gemm_dims(
        "linear_swiglu",
        "2F-2^31",
        lambda m: ops.linear_swiglu(_sized(m, 4, 8), _sized(m, _BIG, 8)),
        "M=4 N=2147483648 K=8",
    ),
    _gemm_dims(
        "linear_swiglu_aux",
        "M-2^31",
        lambda m: ops.linear_swiglu_aux(_sized(m, _BIG, 8), _sized(m, 12, 8)),
        "M=2147483648 N=12 K=8",
    ),
    _gemm_dims(
        "linear_backward",
        "M-2^31",
        lambda m: ops.linear_backward(_sized(m, _BIG, 6), _sized(m, _BIG, 8), _sized(m, 6, 8), None, None, 1.0, False),
        "M=2147483648 N=6 K=8",
    ),
    _gemm_dims(
        "linear_backward",
        "K-2^31",
        lambda m: ops.linear_backward(_sized(m, 4, 6), _sized(m, 4, _BIG), _sized(m, 6, _BIG), None, None, 1.0, True),
        "M=4 N=6 K=2147483648",
    ),
    _gemm_dims(
        "linear_swiglu_backward",
        "M-2^31",
        lambda m: ops.linear_swiglu_backward(
            _sized(m, _BIG, 6), _sized(m, _BIG, 8), _sized(m, 12, 8), _sized(m, _BIG, 12)
        ),
        "M=2147483648 N=12 K=8",
    ),
    _gemm_dims("matmul", "M-2^31", lambda m: ops.matmul(_sized(m, _BIG, 8), _sized(m, 8, 6)), "M=2147483648 N=6 K=8"),
    _gemm_dims(
        "matmul",
        "M-2^31-of-leading-dims",
        lambda m: ops.matmul(_sized(m, 2, 2**30, 8), _sized(m, 8, 6)),
        "M=2147483648 N=6 K=8",
    ),
    _gemm_dims("matmul", "N-2^31", lambda m: ops.matmul(_sized(m, 4, 8), _sized(m, 8, _BIG)), "M=4 N=2147483648 K=8"),
    _gemm_dims(
        "matmul", "K-2^31", lambda m: ops.matmul(_sized(m, 4, _BIG), _sized(m, _BIG, 6)), "M=4 N=6 K=2147483648"
    ),
    _gemm_dims(
        "matmul_backward",
        "M-2^31",
        lambda m: ops.matmul_backward(_sized(m, _BIG, 6), _sized(m, _BIG, 8), _sized(m, 8, 6)),
        "M=2147483648 N=6 K=8",
    ),
    _gemm_dims("bmm", "M-2^31", lambda m: ops.bmm(_sized(m, 2, _BIG, 8), _sized(m, 2, 8, 6)), "M=2147483648 N=6 K=8"),
    _gemm_dims("bmm", "N-2^31", lambda m: ops.bmm(_sized(m, 2, 4, 8), _sized(m, 2, 8, _BIG)), "M=4 N=2147483648 K=8"),
    _gemm_dims(
        "bmm_backward",
        "K-2^31",
        lambda m: ops.bmm_backward(_sized(m, 2, 4, 6), _sized(m, 2, 4, _BIG), _sized(m, 2, _BIG, 6)),
        "M=4 N=6 K=2147483648",
    ),
    *[
        case(
            op(n),
            "huge",
            call,
            kjit.ValueError,
            rf"^kjit\.ops\.{n}: at most 65535 matrices per batch, got 65536; ",
            "batch-65536",
        )
        for n, call in (
            ("bmm", lambda m: ops.bmm(_sized(m, 65536, 4, 8), _sized(m, 65536, 8, 6))),
            (
                "bmm_backward",
                lambda m: ops.bmm_backward(_sized(m, 65536, 4, 6), _sized(m, 65536, 4, 8), _sized(m, 65536, 8, 6)),
            ),
        )
    ],
]

# The largest sizes allowed: no error (meta only: on CUDA they would run).
GEMM_SIZE_LIMIT_META_CASES = [
    case(op("linear"), "huge", lambda m: ops.linear(_sized(m, _BIG - 8, 8), _sized(m, 6, 8)), type(None), "", "M-max"),
    case(
        op("linear"),
        "huge",
        lambda m: ops.linear(_sized(m, 4, _BIG - 8), _sized(m, _BIG - 8, _BIG - 8)),
        type(None),
        "",
        "N-K-max",
    ),
    case(
        op("linear_swiglu"),
        "huge",
        lambda m: ops.linear_swiglu(_sized(m, 4, 8), _sized(m, _BIG - 8, 8)),
        type(None),
        "",
        "2F-max",
    ),
    case(
        op("bmm"),
        "huge",
        lambda m: ops.bmm(_sized(m, 65535, _BIG - 8, 8), _sized(m, 65535, 8, 6)),
        type(None),
        "",
        "batch-M-max",
    ),
]


@pytest.mark.parametrize("c", GEMM_SIZE_CASES + GEMM_SIZE_LIMIT_META_CASES)
def test_gemm_sizes_meta(c):
    run_bad(c, "meta")


@gpu
@pytest.mark.parametrize("c", GEMM_SIZE_CASES)
def test_gemm_sizes_gpu(c):
    """The same errors from the CUDA path, before anything of the operands' size is allocated."""
    run_bad(c, "cuda")


def _need_free(gib: float):
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of free GPU memory, {free / 2**30:.1f} GiB free")


@gpu
@big
def test_more_than_2_31_elements_use_64_bit_offsets():
    """Every op family on 2^31 + 3072 float16 elements: the rows, planes and elements past 2^31 are right."""
    _need_free(24)
    rows, d = 2**21 + 3, 1024  # row r starts at element r * 1024: rows >= 2^21 lie past 2^31
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, d, device="cuda", dtype=torch.float16, generator=g)
    tail = slice(2**21 - 2, rows)  # rows on both sides of element 2^31
    xt = x[tail].float()

    def close(out, ref, rtol, atol):
        torch.testing.assert_close(out.float(), ref.float(), rtol=rtol, atol=atol)

    y = ops.relu(x)
    assert torch.equal(y[tail], torch.relu(x[tail]))
    del y
    y = ops.add_constant(x, 2.5)
    close(y[tail], (xt + 2.5).half(), 0, 0)
    del y
    y = ops.softmax(x)
    close(y[tail], torch.softmax(xt, -1).half(), 2e-3, 1e-6)
    del y
    y = ops.layer_norm(x)
    close(y[tail], F.layer_norm(xt, (d,)).half(), 1e-2, 1e-2)
    del y
    close(ops.sum(x)[tail], xt.sum(-1).half(), 1e-2, 1e-1)
    assert torch.equal(ops.amax(x, 0), x.amax(0))
    y = ops.max_pool2d(x.view(1, rows, 32, 32), 2)
    assert torch.equal(y[0, -5:], F.max_pool2d(x.view(1, rows, 32, 32)[:, -5:].float(), 2)[0].half())
    del y
    f = kjit.elementwise("a * b", "a, b", name="bad_input_huge_broadcast")  # strided kernel, 64-bit index
    a = torch.randn(2**16 + 1, 1, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(1, 2**15, device="cuda", dtype=torch.float16, generator=g)
    y = f(a, b)
    assert y.numel() > 2**31
    assert torch.equal(y[-3:], (a[-3:].float() * b.float()).half())
    del x, y
    valid_gpu("kjit.ops.relu")


covers("kjit.ops.relu", "huge")
