"""The documentation site builds, and what it and the README say is what the code and tests do.

`mkdocs build --strict` runs once per module into a temporary directory: a broken link, a missing
page, a page left out of the nav, a snippet of examples/ that is gone or a generated part the hook
does not know fails it. Then the built pages are checked against the code (every `kittiwake broker`
option on the operations page, every error code and op in the reference), and the README against
the files the tests run (its two commands, its three examples, its headline figures).

Code in the pages is included, never copied: a ```python block of docs/*.md holds one line,
`--8<-- "examples/NAME.py"` (the whole file) or `--8<-- "examples/NAME.py:SECTION"` (the lines between
`# --8<-- [start:SECTION]` and `# --8<-- [end:SECTION]` in the file, dedented), and a test runs that
example. A block that is no program (a signature, a line naming an API; three lines at most) says so
on the line just before it, `<!-- fragment: why -->`, which the site does not show.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from kittiwake import errors
from kittiwake.cli.main import cli
from kittiwake.protocol.messages import REQUEST_TYPES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"
README_EXAMPLES = ("client.py", "hello.py", "sales.py")
FIRST_LINES = [
    "# Kittiwake",
    "",
    "```sh",
    "make demo    # the main job: starts a broker on the embedded store and runs a real pipeline end to end",
    "make test    # the tests: the whole suite",
    "```",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return out


def page_text(site: Path, page: str) -> str:
    """A built page's text: tags dropped, entities decoded."""
    raw = (site / page / "index.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        built = site / "index.html" if page.stem == "index" else site / page.stem / "index.html"
        assert built.exists(), f"docs/{page.name} was not built"


def test_every_broker_option_is_on_the_operations_page(site: Path) -> None:
    text = page_text(site, "operations")
    context = click.Context(cli, info_name="kittiwake")
    broker = cli.get_command(context, "broker")
    assert broker is not None
    missing = [opt for param in broker.params if isinstance(param, click.Option) and not param.hidden
               for opt in (*param.opts, *param.secondary_opts) if opt not in text]
    assert not missing, f"kittiwake broker options missing from docs/operations.md: {missing}"


def test_every_error_code_and_op_is_in_the_reference(site: Path) -> None:
    text = page_text(site, "reference")
    assert not [code for code in sorted(errors.ALL_CODES) if code not in text]
    assert not [op for op in REQUEST_TYPES if f"{op}" not in text]


def test_every_command_is_on_the_command_line_page(site: Path) -> None:
    text = page_text(site, "cli")
    context = click.Context(cli, info_name="kittiwake")
    assert not [name for name in cli.list_commands(context) if f"kittiwake {name}" not in text]


SECTION_MARKER = re.compile(r"^\s*# --8<-- \[(start|end):[a-z][-_0-9a-z]*\]$")
INCLUDE = re.compile(r'^--8<-- "examples/([^":]+)(?::([a-z][-_0-9a-z]*))?"$')
FRAGMENT = re.compile(r"^<!-- fragment: .+ -->$")
PYTHON_FENCE = re.compile(r"^```\s*\{?\s*\.?(python3?|py)\b")  # ```python, ```py, ``` {.python title=...}
FRAGMENT_LINES_MAX = 3  # more is a program: an example that a test runs


def test_code_in_the_pages_comes_from_the_examples(site: Path) -> None:
    for page, example in [("tasks", "shop.py"), ("pipelines", "sales.py"), ("client", "client.py")]:
        text = page_text(site, page)
        for line in (EXAMPLES / example).read_text().splitlines():
            if not SECTION_MARKER.match(line):  # the markers of sections cut for other pages are left out
                assert line.strip() in text, f"{example}: {line!r} is not on {page}"


def python_blocks(page: Path) -> list[tuple[int, str, list[str]]]:
    """Each ```python block of a page: its line number, the line before it, and its lines."""
    lines = page.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if PYTHON_FENCE.match(lines[index].strip()):
            end = next(at for at in range(index + 1, len(lines)) if lines[at].strip() == "```")
            blocks.append((index + 1, lines[index - 1] if index else "", lines[index + 1 : end]))
            index = end
        index += 1
    return blocks


def test_every_python_block_of_the_pages_is_an_included_example_or_a_marked_fragment() -> None:
    copied = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for line_number, before, body in python_blocks(page):
            if len(body) == 1 and INCLUDE.match(body[0]):
                continue
            if not FRAGMENT.match(before.strip()) or len(body) > FRAGMENT_LINES_MAX:
                copied.append(f"docs/{page.name}:{line_number}")
    assert not copied, (f"python blocks copied into the pages: {copied}; include the example that a test runs "
                        '(--8<-- "examples/NAME.py" or "examples/NAME.py:SECTION"), or mark a non-program '
                        f"of at most {FRAGMENT_LINES_MAX} lines with <!-- fragment: why --> on the line before")


def readme_code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)\n```$", README.read_text(), re.MULTILINE | re.DOTALL)


def test_the_readme_starts_with_the_two_commands() -> None:
    assert README.read_text().splitlines()[: len(FIRST_LINES)] == FIRST_LINES
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE) and re.search(r"^test:", makefile, re.MULTILINE)


def test_the_readme_is_a_landing_page() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_examples_are_the_files_the_tests_run() -> None:
    blocks = readme_code_blocks("python")
    assert blocks == [(EXAMPLES / name).read_text().rstrip("\n") for name in README_EXAMPLES]
    tests = [path.read_text() for path in (ROOT / "tests").rglob("test_*.py") if path.name != "test_docs.py"]
    for name in README_EXAMPLES:
        assert any(f'"{name}"' in source for source in tests), f"no test runs examples/{name}"


def test_the_readme_headline_figures_are_the_performance_pages() -> None:
    sys.path.insert(0, str(ROOT / "docs" / "gen"))
    try:
        import figures
    finally:
        sys.path.remove(str(ROOT / "docs" / "gen"))
    readme = README.read_text()
    rows = figures.headline_rows()
    assert len(rows) == 5
    assert all(row in readme for row in rows)
    assert "docs/performance.md" in readme


def test_the_readmes_links_lead_to_pages() -> None:
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (ROOT / target).exists(), target


def test_every_example_the_pages_include_is_run_by_a_test() -> None:
    included = set()
    for page in (ROOT / "docs").glob("*.md"):
        included |= {match.group(1) for line in page.read_text().splitlines() if (match := INCLUDE.match(line.strip()))}
    assert included, "no page includes an example"
    tests = [path.read_text() for path in (ROOT / "tests").rglob("test_*.py") if path.name != "test_docs.py"]
    for name in sorted(included):
        assert (EXAMPLES / name).exists(), name
        assert any(name in source for source in tests), f"no test runs examples/{name}"
