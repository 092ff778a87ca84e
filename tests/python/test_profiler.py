"""kjit's compiles and disk loads as named ranges in torch.profiler traces ("kjit compile <name
expression>", "kjit load <name expression>"), in prof.events() and in an exported chrome trace, on the
CPU (compile-only for a named architecture). NVTX ranges (nsys): tests/cpp/test_trace.cpp."""

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import kjit
from support import unique_family


# torch.profiler.profile warns that it "clears events at the end of each cycle" (the events of the one cycle
# this test records are all it reads): expected here, filtered here (":" cannot be written in the filter).
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle:UserWarning")
def test_compile_and_load_are_ranges_in_a_torch_profiler_trace(tmp_path):
    fam = unique_family("prof_k", body="{ x[0] = T(1); }", params="T* x")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        k = fam.specialize(T=torch.float32, arch="sm_80")
        kjit.clear_memory()
        again = fam.specialize(T=torch.float32, arch="sm_80")
    assert (k.origin, again.origin) == ("compiled", "disk")
    names = [e.name for e in prof.events()]
    assert names.count("kjit compile prof_k<float>") == 1, names
    # The first call looked on disk before compiling; the second one loaded from disk.
    assert names.count("kjit load prof_k<float>") == 2, names
    compile_event = next(e for e in prof.events() if e.name == "kjit compile prof_k<float>")
    assert compile_event.cpu_time_total > 0

    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    traced = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"kjit compile prof_k<float>", "kjit load prof_k<float>"} <= traced
