"""The README's examples run as written: each ```python and ```bash block in a fresh process with its own
cache (doc_blocks.py: the runner shared with test_docs.py, and its conventions for GPU-only and
illustrative blocks). Blocks that use a CUDA device are GPU tests (skipped with the reason without one).
And the README stays a front page: at most 12 KiB (issue 41)."""

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


README_MAX_BYTES = 12 * 1024


def test_readme_stays_a_front_page():
    # Issue 41: the README grew back to 13.6 KB, a paragraph per issue's results. It is the front page (the two
    # commands, the pitch, install, one example, links: DESIGN.md); results and measurement detail live on the
    # docs pages, each figure with its GPU and date.
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over its {README_MAX_BYTES} (12 KiB): move results and measurement detail to "
        "docs/performance.md (set-up timings to docs/install.md, deployment to docs/deployment.md, ops to "
        "docs/ops.md) and link to them from the README"
    )
