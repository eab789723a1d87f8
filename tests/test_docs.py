"""The docs own the contract: every hook, command, option, environment variable and error code is documented,
every link in the docs resolves inside the repository, and nothing in the repository points at a file outside
it or at numbered sections of one."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import mam.plugin.spec

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "backends.md").read_text().replace("\\|", "|")
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()


def test_every_hook_is_documented_with_its_signature() -> None:
    hooks = [name for name in dir(mam.plugin.spec) if name.startswith("mam_")]
    assert len(hooks) == 12
    for name in hooks:
        signature = str(inspect.signature(getattr(mam.plugin.spec, name))).replace("'", "")
        assert f"`{name}{signature}`" in DOCS, f"{name}{signature} is not in docs/backends.md"


# Nothing points outside the repository.

# What a reference to a file outside the repository, or to a numbered section of one, looks like. Written so
# that this file does not match itself.
OUTSIDE = [
    re.compile(r"contract (section )?[0-9]", re.IGNORECASE),
    re.compile(r"\bsection [0-9]", re.IGNORECASE),
    re.compile(r"\bshared[/]"),
    re.compile(r"\breference[/][\w-]+[.]md"),
    re.compile(r"\b[\w-]+[.]md section\b"),
    re.compile(r"\bcontract[.]md\b"),
]
# A Markdown file named anywhere must be one of the repository's; these are files tests make themselves.
MADE_BY_TESTS = {"notes.md"}
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".json"}
SKIPPED_DIRS = {"__pycache__", "build", "dist", "node_modules"}


def repository_files() -> list[Path]:
    """The repository's text files: source, docs, tests, scripts (a file without a suffix is read when it
    starts with `#!`), without caches, build output and .git."""
    found = []
    for path in sorted(ROOT.rglob("*")):
        parts = path.relative_to(ROOT).parts
        if any((p.startswith(".") and p != ".ci") or p in SKIPPED_DIRS or p.endswith(".egg-info") for p in parts):
            continue
        if not path.is_file() or path.is_symlink():
            continue
        if path.suffix in TEXT_SUFFIXES or (path.suffix == "" and path.read_bytes()[:2] == b"#!"):
            found.append(path)
    return found


def test_nothing_refers_to_a_file_outside_the_repository() -> None:
    files = repository_files()
    assert ROOT / "mam" / "cli" / "__init__.py" in files and ROOT / "tests" / "fakes" / "herdr" in files
    ours = {p.name for p in files if p.suffix == ".md"} | MADE_BY_TESTS
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            named = set(re.findall(r"(?<![\w.-])([\w-]+[.]md)\b", line)) - ours
            if named or any(pattern.search(line) for pattern in OUTSIDE):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "references outside the repository:\n" + "\n".join(found)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def test_every_link_in_the_docs_resolves_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address, not a file
            file_part, _, anchor = target.partition("#")
            linked = (doc.parent / file_part).resolve() if file_part else doc
            assert linked.is_relative_to(ROOT) and linked.exists(), f"{doc.name}: {target} is not in the repository"
            if anchor:
                assert anchor in _anchors(linked), f"{doc.name}: {target}: no such heading in {linked.name}"


# docs/cli.md documents the whole command line.

@cache
def help_of(*words: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "mam", *words, "--help"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert proc.returncode == 0, (words, proc.stderr)
    return proc.stdout


def _is_command(*words: str) -> bool:
    proc = subprocess.run([sys.executable, "-m", "mam", *words, "--help"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=ROOT)
    return proc.returncode == 0


def commands(*parent: str) -> list[str]:
    """The (sub)commands a help page lists: a word at the start of a line, then a gap and its summary, that
    mam takes as a command. Read from the help text, whatever formats it."""
    words = re.findall(r"^[\s│|]*([a-z][a-z-]*)\s{2,}\S", help_of(*parent), flags=re.MULTILINE)
    return [w for w in dict.fromkeys(words) if _is_command(*parent, w)]


def test_docs_cli_has_every_command_and_option() -> None:
    top = commands()
    assert {"status", "reconcile", "spawn", "stop", "forget", "prune", "demo", "shim", "version"} <= set(top)
    every = [(c,) for c in top]
    for group in ("shim", "skills", "hooks"):
        every += [(group, sub) for sub in commands(group)]
    assert ("shim", "install") in every and ("skills", "install") in every
    for words in [(), *every]:
        if words in (("shim",), ("skills",), ("hooks",)):
            continue  # groups: documented with their subcommands
        name = " ".join(words)
        section = CLI_DOC  # the global options: anywhere
        if words:
            heading = f"\n### `mam {name}`\n"
            assert heading in CLI_DOC, f"docs/cli.md has no section for mam {name}"
            section = re.split(r"\n##+ ", CLI_DOC.split(heading, 1)[1], maxsplit=1)[0]
        for option in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", help_of(*words))) - {"--help"}):
            assert re.search(rf"(?<![\w-]){option}(?![\w-])", section), f"docs/cli.md lacks {option} of mam {name}"


def test_docs_cli_has_every_environment_variable_and_exit_code() -> None:
    from mam.util import errors

    used = set()
    for path in [*(ROOT / "mam").rglob("*.py"), *(ROOT / "backends").rglob("*.py")]:
        if "testing" in path.parts:
            continue  # the kit for backend authors, with its own sample environments
        used |= set(re.findall(r"\bMAM_[A-Z][A-Z_]*\b", path.read_text()))
    assert {"MAM_BACKEND", "MAM_TIMEOUT", "MAM_NO_AUTOSTART"} <= used
    for variable in sorted(used):
        assert f"`{variable}" in CLI_DOC, f"docs/cli.md does not document ${variable}"
    for code in (0, 1, 2, 3, 4):
        assert f"\n| {code} |" in CLI_DOC
    json_doc = (ROOT / "docs" / "json.md").read_text()
    for code in errors._EXIT_BY_CODE:
        assert f"`{code}`" in CLI_DOC and f"`{code}`" in json_doc, f"error code {code} is not documented"


def test_every_rule_id_the_docs_quote_is_in_the_shipped_library() -> None:
    """`claude.input` in an example row is a rule a user can look up in mam/kinds/agents.yaml (`mam kinds`):
    every `<shipped kind>.<name>` in README.md and docs/ (a file name such as `claude.json` aside) exists."""
    from mam.kinds.library import load_library

    library = load_library(None)
    ids = {rule.id for kind in library.kinds.values() for rule in kind.rules}
    kinds = "|".join(sorted(map(re.escape, library.kinds), key=len, reverse=True))
    files = r"(?:json|md|yaml|yml|toml|sh|py|txt|log|lock)\b"
    quoted = re.compile(rf"(?<![\w./-])(?:{kinds})\.(?!{files})[a-z][a-z0-9_]*\b(?![./-]\w)")
    missing = [f"{path.relative_to(ROOT)}: {found}"
               for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
               for found in quoted.findall(path.read_text()) if found not in ids]
    assert not missing, missing


def test_no_doc_has_the_same_section_twice() -> None:
    """Two branches that each document a command leave two sections of one name after a merge (`mam audit` was
    twice in cli.md and json.md, the second stale); a link to it then reaches only the first."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        headings, fenced = [], False
        for line in doc.read_text().splitlines():
            fenced ^= line.startswith("```")  # a shell comment in a code block is no heading
            if not fenced and re.match(r"#+ ", line):
                headings.append(line)
        twice = sorted({h for h in headings if headings.count(h) > 1})
        assert not twice, f"{doc.name}: sections of the same name: {twice}"

