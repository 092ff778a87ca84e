""".ci/test_report.py, what `bash .ci/test.sh` prints: run on real ctest and pytest runs of small projects
made here (a GoogleTest binary registered with gtest_discover_tests as tests/cpp does, skipping with
GTEST_SKIP(); pytest files skipping for two reasons), it must group the skip reasons with counts, print
failures in full, keep the full output in the logs, and end with ctest's then pytest's summary line."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

REPORT = pathlib.Path(__file__).resolve().parents[2] / ".ci" / "test_report.py"

GTEST_CPP = r"""
#include <gtest/gtest.h>
#include <cstdio>
#include <string>
TEST(Report, Passes) { std::printf("a passing test's output\n"); }
TEST(Report, SkipA) { GTEST_SKIP() << "no CUDA device: none in this test"; }
TEST(Report, SkipB) { GTEST_SKIP() << "no CUDA device: none in this test"; }
TEST(Report, SkipOther) { GTEST_SKIP() << "needs two CPUs"; }
TEST(Report, Fails) { EXPECT_EQ(1, 2) << "boom from Report.Fails"; }
// A value-parameterized test's ctest name holds spaces: 'Modes/Param.Skips/on  # GetParam() = "on"'.
class Param : public testing::TestWithParam<std::string> {};
TEST_P(Param, Skips) { GTEST_SKIP() << "needs two CPUs"; }
INSTANTIATE_TEST_SUITE_P(Modes, Param, testing::Values("on"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });
"""

CMAKE_LISTS = """
cmake_minimum_required(VERSION 3.20)
project(report_check CXX)
find_package(GTest)
if(NOT GTest_FOUND)
  message(FATAL_ERROR "report-check: no GoogleTest")
endif()
include(GoogleTest)
enable_testing()
add_executable(report_gtest report_gtest.cpp)
target_link_libraries(report_gtest GTest::gtest_main)
gtest_discover_tests(report_gtest)
add_test(NAME exit_code_skip COMMAND "{py}" -c "print('redis-server not found'); raise SystemExit(4)")
set_tests_properties(exit_code_skip PROPERTIES SKIP_RETURN_CODE 4)
add_test(NAME slow COMMAND "{py}" -c "import time; time.sleep(2.5)")
"""

PYTEST_FILES = {
    "test_one.py": """
        import pytest

        def test_passes():
            pass

        @pytest.mark.skip(reason="no CUDA device: none here")
        def test_marked():
            pass

        def test_fails():
            assert 1 == 2, "boom from test_fails"

        @pytest.mark.xfail(reason="a known bug")
        def test_known_bug():
            assert False
        """,
    "test_two.py": """
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_each(i):
            pytest.skip("no CUDA device: none here")

        def test_redis():
            pytest.skip("redis-server not found")
        """,
}


def report(*args, cwd=None):
    # The inner pytest loads no plugin the machine happens to have (pytest-benchmark, say, warns on stderr
    # before the progress line when it sees xdist's variables from this worker): only what the test names.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, str(REPORT), *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


@pytest.fixture(scope="module")
def ctest_build(tmp_path_factory):
    for tool in ("cmake", "ctest"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH (the set-up installs it)")
    src = tmp_path_factory.mktemp("ctest_src")
    (src / "report_gtest.cpp").write_text(GTEST_CPP)
    (src / "CMakeLists.txt").write_text(CMAKE_LISTS.format(py=sys.executable))
    build = src / "build"
    conf = subprocess.run(["cmake", "-S", src, "-B", build], capture_output=True, text=True, timeout=300)
    if "report-check: no GoogleTest" in conf.stdout + conf.stderr:
        pytest.skip("GoogleTest is not installed (the set-up of .ci/test.sh installs libgtest-dev)")
    assert conf.returncode == 0, conf.stdout + conf.stderr
    done = subprocess.run(["cmake", "--build", build], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return build


def run_ctest(build, logs, *ctest_args):
    log, junit = logs / "ctest.log", logs / "ctest-junit.xml"
    cmd = ["ctest", "--test-dir", build, "--output-on-failure", "-j2", "--output-junit", junit, *ctest_args]
    return report("ctest", "--log", log, "--junit", junit, "--every", 1, "--", *cmd), log


@pytest.fixture(scope="module")
def ctest_run(ctest_build, tmp_path_factory):
    return run_ctest(ctest_build, tmp_path_factory.mktemp("ctest_logs"))


def run_pytest(tmp_path, *pytest_args):
    for name, text in PYTEST_FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this folder is the root: no conftest from elsewhere
    log = tmp_path / "pytest.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEsxX", *pytest_args, "."]
    return report("pytest", "--log", log, "--cwd", tmp_path, "--", *cmd), log


@pytest.fixture(scope="module")
def pytest_run(tmp_path_factory):
    return run_pytest(tmp_path_factory.mktemp("pytest_run"))


def test_ctest_skip_reasons_are_grouped_with_counts(ctest_run):
    res, _ = ctest_run
    out = res.stdout
    assert "ctest skipped 5 tests, by reason:" in out, out
    assert "  2 x no CUDA device: none in this test  [2 tests, e.g. Report.SkipA]" in out, out
    # gtest_discover_tests names it 'Modes/Param.Skips/on  # GetParam() = "on"' (spaces in a ctest name) with
    # some CMake / GoogleTest versions, 'Modes/Param.Skips/on' with others.
    assert re.search(
        r'^  2 x needs two CPUs  \[2 tests, e.g. Modes/Param\.Skips/on(  # GetParam\(\) = "on")?\]$', out, re.M
    ), out
    # A test that is not GoogleTest: its last line, and how ctest saw the skip.
    assert "  1 x redis-server not found (SKIP_RETURN_CODE=4)  [exit_code_skip]" in out, out


def test_ctest_failures_in_full_and_the_rest_in_the_log(ctest_run):
    res, log = ctest_run
    out = res.stdout
    assert res.returncode != 0, out
    assert "ctest: FAILED Report.Fails" in out, out
    assert "boom from Report.Fails" in out, out
    # No per-test lines or dot padding on the terminal; the log has all of it.
    assert "Test #" not in out and "....." not in out, out
    assert "a passing test's output" not in out, out
    text = log.read_text()
    assert "Report.Passes ...." in text and "***Skipped" in text
    assert "tests failed out of 8" in text


def test_ctest_progress_while_a_test_runs(ctest_run):
    res, _ = ctest_run
    lines = [line for line in res.stdout.splitlines() if line.startswith("ctest: ") and " done, " in line]
    assert any("running slow for " in line for line in lines), res.stdout
    assert lines[-1].startswith("ctest: 8/8 done, 1 failed, 5 skipped ("), res.stdout


def test_pytest_skip_reasons_collapsed_across_files_and_lines(pytest_run):
    res, log = pytest_run
    out = res.stdout
    assert res.returncode == 1, out
    assert "pytest skipped 5 tests, by reason:" in out, out
    assert "  4 x no CUDA device: none here  [2 locations, e.g. test_one.py:7]" in out, out
    assert "  1 x redis-server not found  [test_two.py:9]" in out, out
    assert "SKIPPED [" not in out, out
    # Failures, xfail as pytest says them; its progress line.
    assert "boom from test_fails" in out and "FAILED test_one.py::test_fails" in out, out
    assert "XFAIL test_one.py::test_known_bug - a known bug" in out, out
    assert out.splitlines()[0].startswith(".sFx"), out
    # The summary line is kept for `summary`; the log has everything.
    assert " skipped in " not in out, out
    text = log.read_text()
    assert "SKIPPED [3] test_two.py:6: no CUDA device: none here" in text
    assert text.rstrip().splitlines()[-1].startswith("1 failed, 1 passed, 5 skipped, 1 xfailed in ")


def test_summary_prints_ctest_then_pytest_last_and_fails_when_either_failed(ctest_run, pytest_run, tmp_path):
    (ctest_res, ctest_log), (pytest_res, pytest_log) = ctest_run, pytest_run
    res = report(
        "summary",
        *("--ctest-log", ctest_log, "--ctest-status", ctest_res.returncode),
        *("--pytest-log", pytest_log, "--pytest-status", pytest_res.returncode),
    )
    assert res.returncode == 1, res.stdout
    ctest_line, pytest_line = res.stdout.splitlines()[-2:]
    assert ctest_line == "88% tests passed, 1 tests failed out of 8", res.stdout
    assert pytest_line.startswith("1 failed, 1 passed, 5 skipped, 1 xfailed in "), res.stdout


def test_summary_passes_only_when_both_passed(ctest_build, tmp_path):
    ctest_res, ctest_log = run_ctest(ctest_build, tmp_path, "-R", "Passes|Skip")
    assert ctest_res.returncode == 0, ctest_res.stdout
    pytest_res, pytest_log = run_pytest(tmp_path, "-k", "not fails")
    assert pytest_res.returncode == 0, pytest_res.stdout
    args = ["--ctest-log", ctest_log, "--pytest-log", pytest_log]
    res = report("summary", *args, "--ctest-status", 0, "--pytest-status", 0)
    assert res.returncode == 0, res.stdout
    # CMake 3: "100% tests passed, 0 tests failed out of 5"; CMake 4 leaves out the failed count at 0.
    assert res.stdout.splitlines()[-2] in (
        "100% tests passed, 0 tests failed out of 5",
        "100% tests passed out of 5",
    ), res.stdout
    assert res.stdout.splitlines()[-1].startswith("1 passed, 5 skipped, 1 deselected, 1 xfailed in "), res.stdout
    # A failure the summary lines do not show (a status without a line, or no log) still fails.
    res = report("summary", *args, "--ctest-status", 0, "--pytest-status", 3)
    assert res.returncode == 1 and res.stdout.splitlines()[-1].endswith("(pytest exit status 3)"), res.stdout
    res = report("summary", "--ctest-log", tmp_path / "none.log", "--ctest-status", 0, *args[2:], "--pytest-status", 0)
    assert res.returncode == 1, res.stdout
    assert res.stdout.splitlines()[-2].startswith("ctest: no summary line (exit status 0; see "), res.stdout


def test_pytest_says_it_is_still_running_when_a_test_is_quiet(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(2.5)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."]
    res = report("pytest", "--log", tmp_path / "pytest.log", "--cwd", tmp_path, "--every", 1, "--", *cmd)
    assert res.returncode == 0, res.stdout
    assert "pytest: still running, no output for 1s (" in res.stdout, res.stdout


def test_summary_reads_cmake_4s_summary_line(tmp_path, pytest_run):
    """CMake 4's ctest (4.4.3 on the GPU machine, 2026-11-27) writes "100% tests passed out of 5" when none
    failed: its last lines, as it wrote them, are a summary line too."""
    log = tmp_path / "ctest.log"
    log.write_text(
        "5/5 Test #6: Modes/Param.Skips/on .............***Skipped   0.00 sec\n\n"
        "100% tests passed out of 5\n\nTotal Test time (real) =   0.01 sec\n\n"
        "The following tests did not run:\n\t  2 - Report.SkipA (Skipped)\n"
    )
    _, pytest_log = pytest_run
    res = report("summary", "--ctest-log", log, "--ctest-status", 0, "--pytest-log", pytest_log, "--pytest-status", 1)
    assert res.stdout.splitlines()[-2] == "100% tests passed out of 5", res.stdout
    assert res.returncode == 1, res.stdout  # the pytest run failed
