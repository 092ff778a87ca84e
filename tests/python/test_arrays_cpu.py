"""Arrays of other frameworks without a GPU: reading the CUDA Array Interface and DLPack (kjit._core.array_info),
every refusal (CPU memory, malformed interfaces, masks, no protocol), and numpy / JAX-style dtypes as
template arguments (compile-only specialization).

A Python class exposing __cuda_array_interface__ is a legitimate producer; numpy arrays give CPU DLPack."""

import numpy as np
import pytest

import kjit
from support import error_of, no_device_reason
from kjit import _core


class CAI:
    """A producer of the CUDA Array Interface: exactly the dict it is given."""

    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


def empty(typestr="<f4", **extra):
    """A well-formed interface of an empty array with a null pointer (no driver is asked about it)."""
    return CAI(shape=(0,), typestr=typestr, data=(0, False), version=3, **extra)


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
    a = CAI(shape=(0, 3), typestr="<f4", data=(0, False), strides=(12, 4), version=3, stream=7)
    info = _core.array_info(a)
    assert info["stream"] == 7 and info["strides"] == (12, 4) and info["data"] == 0
    # Before version 3 there is no stream in the interface: a 'stream' key is not read.
    assert _core.array_info(CAI(shape=(0,), typestr="<f4", data=(0, False), version=2, stream=7))["stream"] is None


MALFORMED = [
    (CAI(typestr="<f4", data=(0, False), version=3), "it has no 'shape'"),
    (CAI(shape=(0,), data=(0, False), version=3), "it has no 'typestr'"),
    (CAI(shape=(0,), typestr="<f4", version=3), "it has no 'data'"),
    (CAI(shape=[0], typestr="<f4", data=(0, False), version=3), "'shape' must be a tuple of ints, got a list"),
    (CAI(shape=(0,), typestr=4, data=(0, False), version=3), "'typestr' must be a str, got the int 4"),
    (
        CAI(shape=(0,), typestr="<f4", data=0, version=3),
        "'data' must be a tuple (pointer: int, read_only: bool), got the int 0",
    ),
    (CAI(shape=(0,), typestr="<f4", data=(0, False), version=4), "'version' is 4; kjit reads versions 0 to 3"),
    (CAI(shape=(-1,), typestr="<f4", data=(0, False), version=3), "'shape' has a negative extent -1"),
    (
        CAI(shape=(0, 2), typestr="<f4", data=(0, False), strides=(4,), version=3),
        "'strides' has 1 entries for 2 dimensions",
    ),
    (
        CAI(shape=(0,), typestr="<f4", data=(0, False), version=3, stream=0),
        "'stream' is 0, which the interface forbids (1: the legacy default stream)",
    ),
]


@pytest.mark.parametrize("array,detail", MALFORMED, ids=[d for _, d in MALFORMED])
def test_malformed_interface_is_refused(array, detail):
    msg = error_of(kjit.ValueError, lambda: _core.array_info(array, "argument 'x' of k"))
    assert msg.startswith(
        "argument 'x' of k is a test_arrays_cpu.CAI whose __cuda_array_interface__ is malformed: " + detail
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
    assert msg.startswith("argument 'x' of k is a masked test_arrays_cpu.CAI")
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
