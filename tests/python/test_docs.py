"""The docs/ pages hold: every ```python and ```bash block of docs/*.md runs as written (the README's
runner and conventions: doc_blocks.py), every relative link of README.md and docs/*.md leads to a file
and heading that exist, and the settings table of docs/cache.md matches the settings registry (the one
`kjit info` prints) both ways, with the defaults."""

import json
import re

import pytest

from support import run_python
from doc_blocks import REPO, fenced_blocks, params, run_block, runnable_blocks

DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS, REPO / "bench" / "results" / "README.md"]
SETTINGS_PAGE = REPO / "docs" / "cache.md"


@pytest.mark.parametrize("block", params(DOCS))
def test_docs_example_runs(block, tmp_path):
    run_block(block, tmp_path)


def test_docs_have_examples_that_run_without_a_gpu():
    # The runner finds the pages' blocks, and most of them run here (not every one needs a device).
    blocks = [b for page in DOCS for b in runnable_blocks(page)]
    assert len(blocks) >= 10, [b.where for b in blocks]
    assert sum(b.marker is None and '"cuda"' not in b.code for b in blocks) >= 5


# --- links ---------------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page):
    text = page.read_text()
    # Headings outside code blocks only.
    for b in fenced_blocks(page):
        text = text.replace(b.code, "")
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_slug_follows_github():
    assert slug("A cluster-wide cache (Redis)") == "a-cluster-wide-cache-redis"
    assert slug("`kjit warm` scaling") == "kjit-warm-scaling"
    assert slug("The C++ core alone") == "the-c-core-alone"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page):
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '#{anchor}' in {dest.relative_to(REPO)}")
    assert not bad, f"{page.relative_to(REPO)}: broken links:\n" + "\n".join(bad)


# --- the settings table ----------------------------------------------------------------------------------


def docs_settings():
    """{name: (allowed, default)} from the table of docs/cache.md (cells without backticks, `\\|` as |)."""
    rows = {}
    for line in SETTINGS_PAGE.read_text().splitlines():
        if not line.startswith("| `KJIT_"):
            continue
        cells = [c.strip().replace("\\|", "|").replace("`", "") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 4, f"a settings row needs 4 cells (variable, allowed, default, meaning): {line}"
        assert cells[0] not in rows, f"{cells[0]} is in the table twice"
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def registry_default(description: str):
    """The default a registry description states: '(default X)' or 'X (default)'; None when it states none."""
    m = re.search(r"\(default ([^)]+)\)", description)
    if m:
        return m.group(1).strip()
    m = re.search(r"(?:^|[\s(.:;])([^\s(]+) \(default\)", description)
    return m.group(1) if m else None


def test_registry_default_reads_both_forms():
    assert registry_default("how long (default 300); more") == "300"
    assert registry_default("root (default $X/kjit, else ~/.cache/kjit); created") == "$X/kjit, else ~/.cache/kjit"
    assert registry_default("header. auto (default): for templates") == "auto"
    assert registry_default("1: do it; 2: more") is None


@pytest.fixture(scope="module")
def info(tmp_path_factory):
    """`kjit info --json` with no KJIT_* variable set but the cache dir: the registry and the defaults."""
    import os

    env = {k: None for k in os.environ if k.startswith("KJIT_")}
    env["KJIT_CACHE_DIR"] = tmp_path_factory.mktemp("cache")
    return json.loads(run_python(["-m", "kjit", "info", "--json"], env=env).stdout)


def test_settings_table_lists_exactly_the_registry(info):
    documented, registry = set(docs_settings()), set(info["settings"])
    assert not registry - documented, (
        f"settings missing from {SETTINGS_PAGE.name}'s table: {sorted(registry - documented)}"
    )
    assert not documented - registry, (
        f"{SETTINGS_PAGE.name} documents settings kjit does not read: {sorted(documented - registry)}"
    )


def test_settings_table_allowed_and_defaults_match_the_registry(info):
    rows, problems = docs_settings(), []
    for name, facts in info["settings"].items():
        if name not in rows:
            continue  # reported by the test above
        allowed, default = rows[name]
        if allowed != facts["allowed"]:
            problems.append(f"{name}: allowed is '{allowed}' in the docs, '{facts['allowed']}' in the registry")
        stated = registry_default(facts["description"])
        if stated is not None:
            if default != stated:
                problems.append(f"{name}: default '{default}' in the docs, '{stated}' in the registry")
        elif not (default.startswith("unset") or default in [a.strip() for a in facts["allowed"].split("|")]):
            problems.append(
                f"{name}: default '{default}' is neither 'unset' nor one of the allowed values '{facts['allowed']}'"
            )
    assert not problems, "\n".join(problems)


def test_settings_table_defaults_match_what_kjit_reports(info):
    # The defaults the registry's text does not state, where `kjit info` shows the value in force.
    rows = docs_settings()
    assert rows["KJIT_CACHE_MODE"][1] == info["cache"]["mode"]
    assert rows["KJIT_CACHE_PATH"][1].startswith("unset") and info["cache"]["layers"] == []
    assert rows["KJIT_CACHE_MAX_BYTES"][1].startswith("unset") and info["cache"]["max_bytes"] is None
    assert rows["KJIT_REMOTE_CACHE"][1].startswith("unset") and info["remote_cache"]["configured"] is False


def _setup_table_row(label: str) -> tuple[set[str], set[str]]:
    """The demo and test cells of a row of docs/install.md's table of what each set-up installs."""
    text = (REPO / "docs" / "install.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
    demo, test = (cell.strip() for cell in row.strip("|").split("|")[1:3])
    demo_set = {w.strip() for w in demo.split(",")}
    extra = test.removeprefix("the demo's, and ")
    assert extra != test, f"the test cell of '{label}' should start with \"the demo's, and \": {test!r}"
    return demo_set, demo_set | {w.strip() for w in re.split(r",| and ", extra) if w.strip()}


@pytest.mark.parametrize("profile", ["demo", "test"])
def test_install_page_lists_the_debian_packages_each_set_up_installs(profile):
    import subprocess

    listed = subprocess.run(
        ["bash", str(REPO / ".ci" / "system_packages.sh"), "--list", profile],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    demo, test = _setup_table_row("Debian packages")
    assert {"demo": demo, "test": test}[profile] == set(listed)
    assert "redis-server" not in demo and "libgtest-dev" not in demo


@pytest.mark.parametrize("profile", ["demo", "test"])
def test_install_page_lists_the_pip_tools_each_set_up_installs(profile):
    import subprocess

    script = 'source .ci/python_env.sh; printf "%s\\n" "torch" "${KJIT_BUILD_TOOLS[@]}"'
    if profile == "test":
        script += '; printf "%s\\n" "${KJIT_TEST_TOOLS[@]}"'
    out = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = {re.split(r"[<>=]", spec)[0] for spec in out.split()}
    demo, test = _setup_table_row("pip, into the environment")
    assert {"demo": demo, "test": test}[profile] == names
