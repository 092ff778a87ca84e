"""The README's examples run as written: each ```python and ```bash block in a fresh process with its own
cache (doc_blocks.py: the runner shared with test_docs.py, and its conventions for GPU-only and
illustrative blocks). Blocks that use a CUDA device are GPU tests (skipped with the reason without one)."""

import pytest

from doc_blocks import REPO, params, run_block, runnable_blocks

README = REPO / "README.md"


def test_readme_keeps_its_examples():
    langs = [b.lang for b in runnable_blocks(README)]
    assert langs.count("python") >= 2, "the README lost its Python examples"
    assert langs.count("bash") >= 2, "the README lost its set-up commands or the warm-deployment recipe"


def test_readme_starts_with_the_setup_commands():
    # .ci/nonroot.sh and .ci/run run "the README's test command": it must stay the README's first block.
    first = runnable_blocks(README)[0]
    assert first.lang == "bash"
    assert first.code.splitlines()[0].startswith("bash .ci/demo.sh")
    assert first.code.splitlines()[1].startswith("bash .ci/test.sh")


@pytest.mark.parametrize("block", params([README]))
def test_readme_example_runs(block, tmp_path):
    run_block(block, tmp_path)
