"""The backend kit as a backend author runs it: pytest on their own test file, in a process of its own.

A backend that declares an operation it lacks fails; one that leaves operations out passes and says so, one line
per operation, without `-rs`; the guide's example backend (tests/plugins/mam-minitmux) passes it installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Workspace, base_env
from mam.plugin.records import LOOKED_FOR, OPERATIONS
from mam.testing.report import TITLE

ROOT = Path(__file__).resolve().parent.parent
MINITMUX = ROOT / "tests" / "plugins" / "mam-minitmux"

BACKEND = '''
from mam.api import BackendSpec, BootstrapResult, CommandResult, ErrorKind, Failure, ServerError, hookimpl

DOWN = "gen: no such server"


class GenBackend:
    """Servers named up* run and host no agent; any other is down."""

    name = "gen"

    def list_agents(self, server, ctx):
        if server.startswith("up"):
            return ()
        return Failure(self.name, server, CommandResult(("gen", server), 1, "", DOWN))

    def classify(self, failure):
        if failure.result.returncode == 1 and failure.result.stderr.strip() == DOWN:
            return ServerError(ErrorKind.SERVER_DOWN, DOWN)
        return None

    def bootstrap(self, server, ctx):
        return BootstrapResult(False, True, "gen servers are always up")

    def version(self, ctx):
        return "gen 1.0"


@hookimpl
def mam_backends():
    return [BackendSpec("gen", "a generated backend", None, GenBackend, markers=("GEN_PANE",),
                        operations=OPERATIONS)]
'''
TEST_FILE = '''
import pytest

from mam.testing import BackendContract
from mam_gen import GenBackend


class TestGen(BackendContract):
    down_samples = [("gen: no such server", 1)]

    @pytest.fixture
    def backend(self):
        return GenBackend()

    @pytest.fixture
    def empty_server(self):
        return "up1"
'''
CONFTEST = 'pytest_plugins = ["mam.testing.pytest_plugin"]\n'


def _install(site: Path, operations: str) -> None:
    """The generated backend, declared by a hand-made dist-info as pip would write it."""
    site.mkdir()
    (site / "mam_gen.py").write_text(textwrap.dedent(BACKEND).replace("operations=OPERATIONS",
                                                                      f"operations={operations}"))
    dist = site / "mam_gen-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mam-gen\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mam.backends]\ngen = mam_gen\n")


def _env(tmp_path: Path, *sites: Path) -> dict[str, str]:
    env = base_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, sites), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _pytest(tests: Path, env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest as an author runs it: no -r option of ours, no configuration file of this repository."""
    return subprocess.run([sys.executable, "-m", "pytest", str(tests), "-p", "no:cacheprovider", "--rootdir",
                           str(tests), "--basetemp", str(tmp_path / "basetemp"), *args], env=env, cwd=tests,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def _author_tests(tmp_path: Path) -> Path:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_gen.py").write_text(textwrap.dedent(TEST_FILE))
    return tests


def _section(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if TITLE in line]
    assert len(starts) == 1, stdout
    section = []
    for line in lines[starts[0] + 1:]:
        if line.startswith("="):
            break
        if line:
            section.append(line)
    return section


def test_a_backend_that_declares_send_without_send_text_fails_the_kit(tmp_path: Path) -> None:
    _install(tmp_path / "site", 'frozenset({"send"})')
    proc = _pytest(_author_tests(tmp_path), _env(tmp_path, tmp_path / "site"), tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1, proc.stdout
    assert "test_send_types_into_a_live_agent_only" in failed[0]
    assert "gen declares send but its backend object has no send_text()" in proc.stdout
    assert "gen: send:" not in proc.stdout  # declared: it is tested (and fails), never reported left out


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one-process", "xdist"])
def test_each_operation_left_out_is_one_line_of_the_report_without_rs(tmp_path: Path, workers: list[str]) -> None:
    _install(tmp_path / "site", "None")  # what its object has: no optional operation
    proc = _pytest(_author_tests(tmp_path), _env(tmp_path, tmp_path / "site"), tmp_path, *workers)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SKIPPED" not in proc.stdout  # pytest itself shows no skip without -rs: the kit's lines must
    section = _section(proc.stdout)
    for operation, (_, without) in OPERATIONS.items():
        assert section.count(f"gen: {operation}: not declared ({without})") == 1, section
    # what peek and attach look for on the object, which it does not have either
    for name, (_, without) in LOOKED_FOR.items():
        assert section.count(f"gen: {name}: not implemented ({without})") == 1, section
    # and the checks its fixtures gave nothing for, one line each
    assert "gen: bootstrap: not checked: the bootstrap_server fixture gives none" in section
    assert "gen: list: not checked: the populated_server fixture gives none" in section
    assert len(section) == len(set(section))


def test_an_unknown_operation_is_a_load_problem(ws: Workspace, tmp_path: Path) -> None:
    _install(tmp_path / "site", 'frozenset({"send", "sned"})')
    env = {**ws.env, "PYTHONPATH": _env(tmp_path, tmp_path / "site")["PYTHONPATH"]}
    entry = next(b for b in ws.mam_json("backends", env=env)["backends"] if b["name"] == "gen")
    assert "declares unknown operations 'sned'" in entry["error"], entry
    proc = ws.mam("--backend", "gen", "status", env=env)
    assert proc.returncode == 4, proc.stderr


def test_a_listing_that_misses_its_agents_names_them_in_the_failure(tmp_path: Path) -> None:
    """The kit's checks are rewritten by pytest: a failure shows the names compared, not a bare AssertionError."""
    _install(tmp_path / "site", "None")
    tests = _author_tests(tmp_path)
    test_file = tests / "test_gen.py"
    test_file.write_text(test_file.read_text() + textwrap.indent(textwrap.dedent('''
        @pytest.fixture
        def populated_server(self):
            return "up1", ["coder-7"]
    '''), "    "))
    proc = _pytest(tests, _env(tmp_path, tmp_path / "site"), tmp_path, "-k", "listing_has_the_contract_shape")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines() if line.startswith("E ")]  # pytest's explanation lines
    assert any("coder-7" in line for line in said), proc.stdout


def test_mam_backends_says_what_peek_and_attach_do_without(ws: Workspace, tmp_path: Path) -> None:
    _install(tmp_path / "site", "None")
    env = {**ws.env, "PYTHONPATH": _env(tmp_path, tmp_path / "site")["PYTHONPATH"]}
    entry = next(b for b in ws.mam_json("backends", env=env)["backends"] if b["name"] == "gen")
    assert entry["left_out"] == [*OPERATIONS, "read_pane", "attach"], entry
    table = ws.mam("backends", env={**env, "COLUMNS": "200"}).stdout
    [row] = [line for line in table.splitlines() if line.startswith("gen ") and "remains" in line]
    assert row.rstrip().endswith("remains, read_pane, attach"), table


@pytest.fixture(scope="module")
def minitmux_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide's example backend, installed with pip into its own folder, as its users would."""
    target = tmp_path_factory.mktemp("minitmux-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(MINITMUX)], check=True, timeout=300, capture_output=True)
    return target


@pytest.mark.slow
@pytest.mark.tmux
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_guides_example_backend_passes_the_kit(minitmux_site: Path, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    shutil.copytree(MINITMUX / "tests", tests)  # its tests alone: the backend comes from the installed copy
    env = _env(tmp_path, minitmux_site)
    proc = _pytest(tests, env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    # it declares every operation but its own state and remains: those are the lines of the report
    assert sorted(_section(proc.stdout)) == sorted(
        [f"minitmux: {op}: not declared ({OPERATIONS[op][1]})" for op in ("remains", "state")]
        + [f"minitmux: {name}: not implemented ({why})" for name, (_, why) in LOOKED_FOR.items()])
    doc = json.loads(subprocess.run([sys.executable, "-m", "mam", "backends", "--json"], env=env,
                                    capture_output=True, text=True, timeout=60, check=True).stdout)
    entry = next(b for b in doc["backends"] if b["name"] == "minitmux")
    assert entry["provider"] == "mam-minitmux 0.1.0" and entry["error"] is None
