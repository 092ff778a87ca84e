"""Arrays of other frameworks launched through kjit kernels on a GPU: CuPy and JAX (skipped where they are
not installed), and both protocols driven by producers built on torch tensors (always there): results,
the producer's stream (CUDA Array Interface v3), DLPack's consumer stream, explicit streams of every
kind, and the launch-time refusals."""

import os

import numpy as np
import pytest
import torch

import kjit

pytestmark = pytest.mark.gpu

N = 4097
SLEEP = 50_000_000  # cycles of torch.cuda._sleep: long enough that an unordered launch reads stale data


def grid(n, vec=4):
    return max(1, kjit.cdiv(n, 256 * vec))


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


@pytest.mark.parametrize("wrap", [CAI, DLPackOnly, OldDLPack], ids=["cai", "dlpack", "dlpack-no-stream"])
def test_protocol_arrays_give_their_pointers(add, wrap):
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    k = add.specialize(T="float32", VEC=4)
    k.launch(grid(N), 256, wrap(x), wrap(y), 5.0, N)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 5.0)


def test_dlpack_is_exported_for_the_launch_stream(add):
    x, y = torch.randn(N, device="cuda"), torch.zeros(N, device="cuda")
    k = add.specialize(T=torch.float32, VEC=4)
    s = torch.cuda.Stream()
    wx, wy = DLPackOnly(x), DLPackOnly(y)
    k.launch(grid(N), 256, wx, wy, 1.0, N, stream=s)
    assert wx.streams == [s.cuda_stream] and wy.streams == [s.cuda_stream]
    # No stream and no tensor: the legacy default stream, which DLPack spells 1 (0 is forbidden there).
    k.launch(grid(N), 256, wx, wy, 1.0, N)
    assert wx.streams[-1] == 1
    torch.cuda.synchronize()


def test_dlpack_producer_orders_its_work_before_the_launch_stream(add):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    k = add.specialize(T=torch.float32, VEC=4)
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):  # torch's current stream: where the producer's work is
        torch.cuda._sleep(SLEEP)
        x.fill_(2.0)
        k.launch(grid(N), 256, DLPackOnly(x), DLPackOnly(y), 5.0, N, stream=consumer)
    consumer.synchronize()
    assert torch.all(y == 7.0)


def test_cai_v3_producer_stream_is_the_launch_stream(add):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    k = add.specialize(T=torch.float32, VEC=4)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP)
        x.fill_(2.0)
    # No tensor among the arguments and no stream=: the kernel goes to the producer's stream s.
    k.launch(grid(N), 256, CAI(x, stream=s.cuda_stream), CAI(y, stream=s.cuda_stream), 5.0, N)
    s.synchronize()
    assert torch.all(y == 7.0)


def test_explicit_stream_waits_for_cai_producer_stream(add):
    x, y = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    k = add.specialize(T=torch.float32, VEC=4)
    producer, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP)
        x.fill_(3.0)
    k.launch(grid(N), 256, CAI(x, stream=producer.cuda_stream), CAI(y), 1.0, N, stream=CudaStream(other.cuda_stream))
    other.synchronize()
    assert torch.all(y == 4.0)


@pytest.mark.parametrize("kind", ["torch", "int", "cuda_stream_protocol"])
def test_explicit_streams_of_every_kind(add, kind):
    x = torch.randn(N, device="cuda")
    y = torch.zeros_like(x)
    k = add.specialize(T=torch.float32, VEC=4)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y are written on the current stream
    stream = {"torch": s, "int": s.cuda_stream, "cuda_stream_protocol": CudaStream(s.cuda_stream)}[kind]
    k.launch(grid(N), 256, CAI(x), CAI(y), 5.0, N, stream=stream)
    s.synchronize()
    torch.testing.assert_close(y, x + 5.0)


def test_array_of_the_wrong_dtype_is_refused(add):
    k = add.specialize(T=torch.float32, VEC=4)
    x = torch.zeros(8, device="cuda", dtype=torch.float64)
    for wrap in (CAI, DLPackOnly):
        with pytest.raises(kjit.TypeError) as e:
            k.launch(1, 256, wrap(x), wrap(x), 1.0, 8)
        assert str(e.value) == (
            f"argument 'x' of add_constant<float, 4> points to float32 elements, got a test_arrays_gpu.{wrap.__name__} "
            "of float64; convert it with x.astype('float32') or specialize the kernel for its dtype"
        )


def test_host_memory_is_refused(add):
    k = add.specialize(T=torch.float32, VEC=4)
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


def test_launcher_refuses_non_contiguous_arrays(add):
    run = kjit.launcher(add, grid=1, block=256, T=kjit.arg("x").dtype, VEC=4)
    x = torch.zeros(8, 12, device="cuda").t()  # its interface gives the strides (bytes)
    with pytest.raises(kjit.ValueError) as e:
        run(CAI(x), CAI(torch.zeros(12, 8, device="cuda")), 1.0, 96)
    assert str(e.value) == (
        "add_constant: argument 'x' is not contiguous (shape [12, 8], strides [1, 12] in elements): "
        "pass a C-contiguous copy (e.g. cupy.ascontiguousarray(x))"
    )
