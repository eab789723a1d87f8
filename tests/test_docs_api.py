"""docs/backends.md against the plugin API, name by name (as datasette's tests/test_docs.py): one failure per
name of `mam.api.__all__` or hook that is missing, the hook list in that one place only, and the guide's
example being the tested plugin under tests/plugins."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import mam.api
import mam.plugin.spec

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "backends.md"
HOOKS = sorted(name for name in dir(mam.plugin.spec) if name.startswith("mam_"))


def _rows(heading: str) -> dict[str, str]:
    """The table rows under `heading` (up to the next heading): first cell -> the row, `\\|` read as `|`."""
    text = GUIDE.read_text()
    start = text.index(heading)
    end = re.search(r"^#+ ", text[start + len(heading):], flags=re.MULTILINE)
    section = text[start:start + len(heading) + end.start()] if end else text[start:]
    rows = {}
    for line in section.replace("\\|", "\u0000").splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1].strip().replace("\u0000", "|")
            rows[first] = line
    return rows


@pytest.mark.parametrize("name", sorted(mam.api.__all__))
def test_every_name_of_the_api_is_in_the_guide(name: str) -> None:
    assert f"`{name}`" in _rows("### Everything `mam.api` holds"), f"{name} is not in docs/backends.md"


def test_the_guide_lists_no_name_the_api_does_not_hold() -> None:
    listed = {cell.strip("`") for cell in _rows("### Everything `mam.api` holds")}
    assert listed == set(mam.api.__all__)


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_is_in_the_guide_with_its_signature(name: str) -> None:
    signature = str(inspect.signature(getattr(mam.plugin.spec, name))).replace("'", "")
    assert f"`{name}{signature}`" in _rows("## 2. The hooks"), f"{name}{signature} is not in docs/backends.md"


def test_the_hooks_are_listed_in_the_guide_only() -> None:
    """One home for the hook list: any other page points at docs/backends.md instead of keeping its own."""
    hook = re.compile(r"`(" + "|".join(HOOKS) + r")\(")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in pages if page != GUIDE
             for line in page.read_text().splitlines() if hook.search(line)]
    assert not found, "hook signatures outside docs/backends.md:\n" + "\n".join(found)


def test_the_guide_points_at_the_tested_examples() -> None:
    text = GUIDE.read_text()
    for example in ("tests/plugins/mam-echo", "tests/plugins/mam-wrap", "tests/plugins/mam-minitmux"):
        assert f"]({Path('..') / example})" in text, example
        assert (ROOT / example / "pyproject.toml").is_file()


EXAMPLE = ROOT / "tests" / "plugins" / "mam-minitmux"


def test_the_guides_complete_backend_is_the_tested_example() -> None:
    """The guide's complete backend is every file of tests/plugins/mam-minitmux, each exactly as it is
    (tests/test_kit.py runs them through the kit)."""
    text = GUIDE.read_text()
    section = text[text.index("## 6. A complete minimal backend"):]
    shown = dict(re.findall(r"^\*\*`([^`]+)`\*\*\n\n```\w*\n(.*?)^```$", section, flags=re.DOTALL | re.MULTILINE))
    files = {str(path.relative_to(EXAMPLE)): path.read_text() for path in sorted(EXAMPLE.rglob("*"))
             if path.is_file() and "__pycache__" not in path.parts}
    assert sorted(shown) == sorted(files)
    for name, content in files.items():
        assert shown[name] == content, f"docs/backends.md shows another {name} than tests/plugins/mam-minitmux"


def test_every_fixture_and_setting_of_the_kit_is_in_the_guide() -> None:
    from mam.testing import BackendContract

    fixtures = {name for name, value in vars(BackendContract).items()
                if not name.startswith("_") and getattr(value, "_fixture_function_marker", None) is not None}
    settings = set(BackendContract.__annotations__)
    assert {"backend", "spawn_request", "live_agent"} <= fixtures and "down_samples" in settings
    documented = {cell.strip("`") for cell in _rows("**The fixtures**")}
    assert fixtures | settings | {"fake_runner"} == documented


def test_the_readme_kit_snippet_runs_as_shown() -> None:
    """The README's example of the kit is a whole test module: its imports included."""
    readme = (ROOT / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
                   if "BackendContract" in block)
    assert "import pytest" in snippet
    compile(snippet, "README.md", "exec")
