"""The specialization policy against recompilation storms (no GPU): a kernel specializes on at most
KJIT_MAX_SPECIALIZATIONS distinct values of a shape parameter; later values get 0 (its generic variant,
the size as a runtime argument), a KjitWarning says so once, and kjit.stats() shows it."""

import warnings

import pytest

import kjit
from support import unique_kernel


def entry_of(kernel: str, param: str):
    found = [e for e in kjit.stats()["specializations"] if e["kernel"] == kernel and e["param"] == param]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_admits_up_to_the_limit_then_generic_with_one_warning():
    kernel = unique_kernel()
    n = kjit.stats()["max_specializations"]
    assert isinstance(n, int) and n >= 1
    for v in range(1, n + 1):
        assert kjit._core.admit_shape(kernel, "D", v * 32) == v * 32
    with pytest.warns(kjit.KjitWarning) as record:
        assert kjit._core.admit_shape(kernel, "D", 7) == 0
    (w,) = record
    assert str(w.message) == (
        f"kernel '{kernel}' has been specialized on {n} distinct values of D "
        f"(KJIT_MAX_SPECIALIZATIONS={n}); further values run its generic variant (D as a runtime "
        "argument). Raise KJIT_MAX_SPECIALIZATIONS to specialize more."
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise
        assert kjit._core.admit_shape(kernel, "D", 9) == 0
        assert kjit._core.admit_shape(kernel, "D", 7) == 0
        assert kjit._core.admit_shape(kernel, "D", 32) == 32  # admitted before: still specialized
        assert kjit._core.admit_shape(kernel, "D", 0) == 0  # generic asked for: counts nothing
    assert entry_of(kernel, "D") == {
        "kernel": kernel,
        "param": "D",
        "specialized_values": n,
        "generic_values": 2,
        "saturated": True,
    }


def test_stats_lists_each_kernel_and_parameter():
    kernel = unique_kernel()
    assert entry_of(kernel, "H") is None
    assert kjit._core.admit_shape(kernel, "H", 1080) == 1080
    assert kjit._core.admit_shape(kernel, "W", 1920) == 1920
    assert kjit._core.admit_shape(kernel, "W", 1920) == 1920
    assert kjit._core.admit_shape(kernel=kernel, param="W", value=0) == 0
    s = kjit.stats()
    assert {"specializations", "max_specializations"} <= set(s)
    mine = [e for e in s["specializations"] if e["kernel"] == kernel]
    assert mine == [
        {"kernel": kernel, "param": "H", "specialized_values": 1, "generic_values": 0, "saturated": False},
        {"kernel": kernel, "param": "W", "specialized_values": 1, "generic_values": 0, "saturated": False},
    ]
    keys = [(e["kernel"], e["param"]) for e in s["specializations"]]
    assert keys == sorted(keys)


def test_reset_stats_keeps_the_policy_and_reset_shape_policy_forgets_it():
    kernel = unique_kernel()
    kjit._core.admit_shape(kernel, "N", 5)
    kjit.reset_stats()
    assert entry_of(kernel, "N")["specialized_values"] == 1
    kjit._core.reset_shape_policy()
    assert entry_of(kernel, "N") is None
    assert kjit.stats()["specializations"] == []


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        kjit._core.admit_shape("k", "N", "16")
    with pytest.raises(TypeError):
        kjit._core.admit_shape("k", "N", 1 << 64)


def test_limit_comes_from_the_environment(run_py):
    r = run_py(
        """
        import warnings, kjit
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            print('admit', [kjit._core.admit_shape('softmax', 'D', v) for v in (256, 512, 1024, 256, 2048, 512)])
        print('warnings', len(w), w[0].category.__name__)
        print('message', w[0].message)
        s = kjit.stats()
        print('max', s['max_specializations'])
        print('entries', s['specializations'])
    """,
        env={"KJIT_MAX_SPECIALIZATIONS": "2"},
    )
    out = r.stdout
    assert "admit [256, 512, 0, 256, 0, 512]" in out, r
    assert "warnings 1 KjitWarning" in out, r
    assert (
        "message kernel 'softmax' has been specialized on 2 distinct values of D "
        "(KJIT_MAX_SPECIALIZATIONS=2); further values run its generic variant"
    ) in out, r
    assert "max 2" in out, r
    assert (
        "entries [{'kernel': 'softmax', 'param': 'D', 'specialized_values': 2, 'generic_values': 2, 'saturated': True}]"
    ) in out, r


def test_bad_limit_names_the_variable(run_py):
    r = run_py(
        """
        import kjit
        try:
            kjit._core.admit_shape('k', 'N', 4)
        except kjit.ValueError as e:
            print('ValueError:', e)
    """,
        env={"KJIT_MAX_SPECIALIZATIONS": "0"},
    )
    assert "ValueError: KJIT_MAX_SPECIALIZATIONS='0' is not valid: allowed an integer >= 1." in r.stdout, r
