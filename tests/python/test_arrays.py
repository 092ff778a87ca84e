"""Arrays of other frameworks: reading the CUDA Array Interface and DLPack (kjit._core.array_info) and every
refusal (CPU memory, malformed interfaces, masks, no protocol), numpy / JAX-style dtypes as template
arguments (compile-only specialization), all without a GPU; and, marked gpu, kjit kernels launched on such
arrays: CuPy and JAX (skipped where they are not installed), and both protocols driven by producers built
on torch tensors (always there): results, the producer's stream (CUDA Array Interface v3), DLPack's
consumer stream, explicit streams of every kind, and the launch-time refusals.

`Interface` (a Python class exposing exactly the __cuda_array_interface__ dict it is given) is a legitimate
producer without a GPU; numpy arrays give CPU DLPack. On the GPU, `CAI` and `DLPackOnly` wrap torch tensors."""

import os

import numpy as np
import pytest
import torch

import kjit
from kjit import _core
from support import error_of, no_device_reason

# ---- reading the protocols, without a GPU ------------------------------------------------------------------


class Interface:
    """A producer of the CUDA Array Interface: exactly the dict it is given."""

    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


def empty(typestr="<f4", **extra):
    """A well-formed interface of an empty array with a null pointer (no driver is asked about it)."""
    return Interface(shape=(0,), typestr=typestr, data=(0, False), version=3, **extra)


@pytest.mark.parametrize(
    "typestr,dtype",
    [
        ("<f2", "float16"),
        ("<f4", "float32"),
        ("<f8", "float64"),
        ("|i1", "int8"),
        ("<i2", "int16"),
        ("<i4", "int32"),
        ("<i8", "int64"),
        ("|u1", "uint8"),
        ("<u2", "uint16"),
        ("<u4", "uint32"),
        ("<u8", "uint64"),
        ("|b1", "bool"),
        ("=f4", "float32"),
        # No kjit element type: complex, big-endian, void (bfloat16 has no typestr of its own).
        ("<c8", None),
        (">f4", None),
        ("|V2", None),
    ],
)
def test_cai_typestr_maps_to_dtype(typestr, dtype):
    info = _core.array_info(empty(typestr))
    assert info["protocol"] == "cuda_array_interface"
    assert info["dtype"] == dtype
    assert info["typestr"] == typestr
    assert info["device"] is None  # an empty array with a null pointer: no memory, any device
    assert info["shape"] == (0,)
    assert info["strides"] is None


def test_cai_v3_stream_and_strides_are_read():
    a = Interface(shape=(0, 3), typestr="<f4", data=(0, False), strides=(12, 4), version=3, stream=7)
    info = _core.array_info(a)
    assert info["stream"] == 7 and info["strides"] == (12, 4) and info["data"] == 0
    # Before version 3 there is no stream in the interface: a 'stream' key is not read.
    assert (
        _core.array_info(Interface(shape=(0,), typestr="<f4", data=(0, False), version=2, stream=7))["stream"] is None
    )


MALFORMED = [
    (Interface(typestr="<f4", data=(0, False), version=3), "it has no 'shape'"),
    (Interface(shape=(0,), data=(0, False), version=3), "it has no 'typestr'"),
    (Interface(shape=(0,), typestr="<f4", version=3), "it has no 'data'"),
    (Interface(shape=[0], typestr="<f4", data=(0, False), version=3), "'shape' must be a tuple of ints, got a list"),
    (Interface(shape=(0,), typestr=4, data=(0, False), version=3), "'typestr' must be a str, got the int 4"),
    (
        Interface(shape=(0,), typestr="<f4", data=0, version=3),
        "'data' must be a tuple (pointer: int, read_only: bool), got the int 0",
    ),
    (Interface(shape=(0,), typestr="<f4", data=(0, False), version=4), "'version' is 4; kjit reads versions 0 to 3"),
    (Interface(shape=(-1,), typestr="<f4", data=(0, False), version=3), "'shape' has a negative extent -1"),
    (
        Interface(shape=(0, 2), typestr="<f4", data=(0, False), strides=(4,), version=3),
        "'strides' has 1 entries for 2 dimensions",
    ),
    (
        Interface(shape=(0,), typestr="<f4", data=(0, False), version=3, stream=0),
        "'stream' is 0, which the interface forbids (1: the legacy default stream)",
    ),
]


@pytest.mark.parametrize("array,detail", MALFORMED, ids=[d for _, d in MALFORMED])
def test_malformed_interface_is_refused(array, detail):
    msg = error_of(kjit.ValueError, lambda: _core.array_info(array, "argument 'x' of k"))
    assert msg.startswith(
        "argument 'x' of k is a test_arrays.Interface whose __cuda_array_interface__ is malformed: " + detail
    )
    assert "does not follow the CUDA Array Interface" in msg


def test_interface_that_is_not_a_dict_is_refused():
    class Bad:
        __cuda_array_interface__ = [1, 2]

    assert "__cuda_array_interface__ is malformed: it must be a dict, got a list" in error_of(
        kjit.ValueError, lambda: _core.array_info(Bad())
    )


def test_masked_array_is_refused():
    msg = error_of(kjit.ValueError, lambda: _core.array_info(empty(mask=object()), "argument 'x' of k"))
    assert msg.startswith("argument 'x' of k is a masked test_arrays.Interface")
    assert "pass the data without the mask" in msg


def test_numpy_array_is_refused_as_cpu_memory():
    msg = error_of(kjit.ValueError, lambda: _core.array_info(np.zeros(4, np.float32), "argument 'x' of k"))
    assert msg.startswith(
        "argument 'x' of k is a numpy.ndarray in CPU memory; kernels read CUDA device memory: "
        "copy it to the GPU first (e.g. cupy.asarray(x)"
    )


def test_dlpack_device_protocol():
    class OnGpu:
        def __dlpack__(self, stream=None):
            raise AssertionError("not exported by array_info")

        def __dlpack_device__(self):
            return (2, 1)  # kDLCUDA, device 1

    class Pinned(OnGpu):
        def __dlpack_device__(self):
            return (3, 0)  # kDLCUDAHost

    class NoDevice:
        def __dlpack__(self, stream=None):
            return None

    info = _core.array_info(OnGpu())
    assert info["protocol"] == "dlpack" and info["device"] == 1 and info["dtype"] is None
    assert "in CUDA pinned host memory; kernels read CUDA device memory" in error_of(
        kjit.ValueError, lambda: _core.array_info(Pinned())
    )
    assert "with __dlpack__ but no __dlpack_device__" in error_of(kjit.TypeError, lambda: _core.array_info(NoDevice()))


def test_object_without_a_protocol_is_refused():
    assert error_of(kjit.TypeError, lambda: _core.array_info([1.0, 2.0], "argument 'x' of k")) == (
        "argument 'x' of k is a list, which is no array: pass a CUDA tensor or an array with "
        "__cuda_array_interface__ or __dlpack__ (CuPy, JAX, Numba, TensorFlow)"
    )


def test_launcher_refuses_numpy_arrays_before_specializing(add):
    run = kjit.launcher(add, grid=1, block=256, T=kjit.arg("x").dtype, VEC=4)
    x = np.zeros(8, np.float32)
    msg = error_of(kjit.ValueError, lambda: run(x, x, 1.0, 8))
    assert msg.startswith("argument 'x' of add_constant is a numpy.ndarray in CPU memory")


@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.dtype("float32"), np.dtype(np.float32).type, "float32"],
    ids=["np.float32", "np.dtype", "dtype.type", "name"],
)
def test_numpy_dtypes_specialize_like_torch_dtypes(add, dtype):
    k = add.specialize(T=dtype, VEC=4, arch="sm_90")
    assert k.args == {"T": "float32", "VEC": 4}
    assert k.name_expression == "add_constant<float, 4>"


def test_numpy_bool_and_half_names(add):
    assert add.specialize(T=np.float16, VEC=1, arch="sm_90").args["T"] == "float16"
    assert add.specialize(T=np.dtype("float64"), VEC=1, arch="sm_90").args["T"] == "float64"


def test_dtype_objects_kjit_cannot_specialize_on(add):
    msg = error_of(kjit.TypeError, lambda: add.specialize(T=np.complex64, VEC=4, arch="sm_90"))
    assert msg.startswith("template parameter 'T' of kernel 'add_constant' got ")
    assert "got numpy.complex64 (dtype 'complex64'), which kjit cannot specialize on; allowed dtypes: float32" in msg
    msg = error_of(kjit.TypeError, lambda: add.specialize(T=np.dtype("complex128"), VEC=4, arch="sm_90"))
    assert "(dtype 'complex128'), which kjit cannot specialize on" in msg
    # Python's own `float` is float64 to numpy but float32 to C++: refused, not guessed.
    msg = error_of(kjit.TypeError, lambda: add.specialize(T=float, VEC=4, arch="sm_90"))
    assert "is a type: pass a torch.dtype, a numpy / CuPy / JAX dtype or a dtype name" in msg
    # Something else with a .name is no dtype.
    msg = error_of(kjit.TypeError, lambda: add.specialize(T=add, VEC=4, arch="sm_90"))
    assert msg.endswith("got a kjit.KernelFamily")
    # An array where a dtype goes: the hint names its .dtype.
    msg = error_of(kjit.TypeError, lambda: add.specialize(T=np.zeros(2), VEC=4, arch="sm_90"))
    assert msg.endswith("got a numpy.ndarray (pass the array's .dtype)")


def test_launcher_takes_numpy_dtype_constants(add):
    # np.float32 is callable (a type): it is a constant, not a callable of the call's arguments. The call
    # gets past specialization's arguments (to the device: none here, or a launch with nothing to do).
    run = kjit.launcher(add, grid=1, block=256, T=np.float32, VEC=4)
    x = empty()
    if no_device_reason() is None:
        run(x, x, 1.0, 0)
    else:
        assert "no CUDA device is available" in error_of(kjit.ValueError, lambda: run(x, x, 1.0, 0))


# ---- launching on such arrays, on a GPU -------------------------------------------------------------------

N = 4097
SLEEP = 50_000_000  # cycles of torch.cuda._sleep: long enough that an unordered launch reads stale data


def grid(n, vec=4):
    return max(1, kjit.cdiv(n, 256 * vec))


@pytest.fixture
def k(add):
    """add_constant<float, 4> for this GPU."""
    return add.specialize(T=torch.float32, VEC=4)


def fill_late(stream, x, value):
    """Fills x with `value` on `stream` behind a long sleep there: a launch not ordered after it reads zeros."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP)
        x.fill_(value)


class CAI:
    """A CUDA Array Interface producer over a torch tensor (v3, with the stream its data is ready on)."""

    def __init__(self, t, stream=None, version=3):
        self.t = t
        self.__cuda_array_interface__ = dict(t.__cuda_array_interface__, version=version, stream=stream)


class DLPackOnly:
    """A DLPack producer over a torch tensor (no __cuda_array_interface__); records the stream asked for."""

    def __init__(self, t):
        self.t = t
        self.dtype, self.shape = t.dtype, t.shape  # what JAX / TensorFlow arrays have (kjit.launcher reads them)
        self.streams = []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


class OldDLPack(DLPackOnly):
    """A producer from before the stream argument: __dlpack__() takes nothing."""

    def __dlpack__(self):
        self.streams.append("none")
        return self.t.__dlpack__()


class CudaStream:
    """A stream of the CUDA stream protocol."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.gpu
@pytest.mark.parametrize("wrap", [CAI, DLPackOnly, OldDLPack], ids=["cai", "dlpack", "dlpack-no-stream"])
def test_protocol_arrays_give_their_pointers(k, wrap):
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    k.launch(grid(N), 256, wrap(x), wrap(y), 5.0, N)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 5.0)


@pytest.mark.gpu
def test_dlpack_is_exported_for_the_launch_stream(k):
    x, y = torch.randn(N, device="cuda"), torch.zeros(N, device="cuda")
    s = torch.cuda.Stream()
    wx, wy = DLPackOnly(x), DLPackOnly(y)
    k.launch(grid(N), 256, wx, wy, 1.0, N, stream=s)
    assert wx.streams == [s.cuda_stream] and wy.streams == [s.cuda_stream]
    # No stream and no tensor: the legacy default stream, which DLPack spells 1 (0 is forbidden there).
    k.launch(grid(N), 256, wx, wy, 1.0, N)
    assert wx.streams[-1] == 1
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_dlpack_producer_orders_its_work_before_the_launch_stream(k):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):  # torch's current stream: where the producer's work is
        torch.cuda._sleep(SLEEP)
        x.fill_(2.0)
        k.launch(grid(N), 256, DLPackOnly(x), DLPackOnly(y), 5.0, N, stream=consumer)
    consumer.synchronize()
    assert torch.all(y == 7.0)


@pytest.mark.gpu
def test_cai_v3_producer_stream_is_the_launch_stream(k):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    s = torch.cuda.Stream()
    fill_late(s, x, 2.0)
    # No tensor among the arguments and no stream=: the kernel goes to the producer's stream s.
    k.launch(grid(N), 256, CAI(x, stream=s.cuda_stream), CAI(y, stream=s.cuda_stream), 5.0, N)
    s.synchronize()
    assert torch.all(y == 7.0)


@pytest.mark.gpu
def test_explicit_stream_waits_for_cai_producer_stream(k):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    producer, other = torch.cuda.Stream(), torch.cuda.Stream()
    fill_late(producer, x, 3.0)
    k.launch(grid(N), 256, CAI(x, stream=producer.cuda_stream), CAI(y), 1.0, N, stream=CudaStream(other.cuda_stream))
    other.synchronize()
    assert torch.all(y == 4.0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["torch", "int", "cuda_stream_protocol"])
def test_explicit_streams_of_every_kind(k, kind):
    x = torch.randn(N, device="cuda")
    y = torch.zeros_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y are written on the current stream
    stream = {"torch": s, "int": s.cuda_stream, "cuda_stream_protocol": CudaStream(s.cuda_stream)}[kind]
    k.launch(grid(N), 256, CAI(x), CAI(y), 5.0, N, stream=stream)
    s.synchronize()
    torch.testing.assert_close(y, x + 5.0)


@pytest.mark.gpu
def test_array_of_the_wrong_dtype_is_refused(k):
    x = torch.zeros(8, device="cuda", dtype=torch.float64)
    for wrap in (CAI, DLPackOnly):
        with pytest.raises(kjit.TypeError) as e:
            k.launch(1, 256, wrap(x), wrap(x), 1.0, 8)
        assert str(e.value) == (
            f"argument 'x' of add_constant<float, 4> points to float32 elements, got a test_arrays.{wrap.__name__} "
            "of float64; convert it with x.astype('float32') or specialize the kernel for its dtype"
        )


@pytest.mark.gpu
def test_host_memory_is_refused(k):
    x = np.zeros(8, np.float32)
    with pytest.raises(
        kjit.ValueError,
        match=r"^argument 'x' of add_constant<float, 4> is a numpy\.ndarray in CPU "
        r"memory; kernels read CUDA device memory",
    ):
        k.launch(1, 256, x, x, 1.0, 8)
    host = CAI(torch.zeros(8, device="cuda"))
    host.__cuda_array_interface__["data"] = (x.ctypes.data, False)
    with pytest.raises(kjit.ValueError, match=r"pointer 0x[0-9a-f]+ is not CUDA memory"):
        k.launch(1, 256, host, host, 1.0, 8)


@pytest.mark.gpu
def test_launcher_specializes_from_arrays(add):
    run = kjit.launcher(add, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), block=256, T=kjit.arg("x").dtype, VEC=4)
    x = torch.randn(N, device="cuda", dtype=torch.float16)
    y = torch.zeros_like(x)
    run(DLPackOnly(x), DLPackOnly(y), 1.0, N)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 1.0)
    s = torch.cuda.Stream()
    run(CAI(x), CAI(y), 2.0, N, stream=s)
    s.synchronize()
    torch.testing.assert_close(y, x + 2.0)


# ---- CuPy and JAX ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cupy_arrays(add):
    cp = pytest.importorskip("cupy")
    x = cp.arange(N, dtype=cp.float32)
    y = cp.empty_like(x)
    k = add.specialize(T=x.dtype, VEC=4)
    k.launch(grid(N), 256, x, y, 5.0, x.size)  # CuPy's current stream (its interface's v3 stream)
    cp.testing.assert_allclose(y, x + 5)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x2 = x * 2
        k.launch(grid(N), 256, x2, y, 1.0, x.size)  # the producer's stream: s
    s.synchronize()
    cp.testing.assert_allclose(y, x * 2 + 1)
    other = cp.cuda.Stream(non_blocking=True)
    k.launch(grid(N), 256, x, y, 3.0, x.size, stream=other)  # an explicit CuPy stream
    other.synchronize()
    cp.testing.assert_allclose(y, x + 3)
    run = kjit.launcher(add, grid=lambda x, y, c, n: kjit.cdiv(n, 1024), T=kjit.arg("x").dtype, VEC=4)
    xh = x.astype(cp.float16)
    yh = cp.empty_like(xh)
    run(xh, yh, 0.5, xh.size)
    cp.testing.assert_allclose(yh, xh + 0.5, rtol=1e-3)


@pytest.mark.gpu
def test_jax_arrays(add):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave torch its memory
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError as e:
        pytest.skip(f"JAX has no GPU here: {e}")
    x = jax.device_put(jnp.arange(N, dtype=jnp.float32), gpu)
    y = jax.device_put(jnp.zeros(N, dtype=jnp.float32), gpu)
    k = add.specialize(T=x.dtype, VEC=4)
    k.launch(grid(N), 256, x, y, 5.0, N)
    torch.cuda.synchronize()  # the launch went to the legacy default stream; JAX reads on its own
    np.testing.assert_allclose(np.asarray(y), np.arange(N, dtype=np.float32) + 5)
    # Through DLPack only (JAX orders its work before the stream it is given).
    z = jax.device_put(jnp.zeros(N, dtype=jnp.float32), gpu)
    s = torch.cuda.Stream()
    k.launch(grid(N), 256, DLPackOnly(x), DLPackOnly(z), 2.0, N, stream=s)
    s.synchronize()
    np.testing.assert_allclose(np.asarray(z), np.arange(N, dtype=np.float32) + 2)


@pytest.mark.gpu
def test_launcher_refuses_non_contiguous_arrays(add):
    run = kjit.launcher(add, grid=1, block=256, T=kjit.arg("x").dtype, VEC=4)
    x = torch.zeros(8, 12, device="cuda").t()  # its interface gives the strides (bytes)
    with pytest.raises(kjit.ValueError) as e:
        run(CAI(x), CAI(torch.zeros(12, 8, device="cuda")), 1.0, 96)
    assert str(e.value) == (
        "add_constant: argument 'x' is not contiguous (shape [12, 8], strides [1, 12] in elements): "
        "pass a C-contiguous copy (e.g. cupy.ascontiguousarray(x))"
    )
