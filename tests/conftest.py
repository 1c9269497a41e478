"""Shared test set-up: tests marked `gpu` skip, with the reason, where CUDA is unusable; tests
marked `slow` (torch.compile's first compile, ~20-60 s on 2 cores) run only by hand:
`python -m pytest --run-slow ...` or `-m slow`; where ipywidgets is missing (a lent GPU
machine's stack) the test modules that import a panel at their top are left out of collection,
said in the report header, and a test that imports one in its body is skipped with the reason,
so the rest (the GPU tests too) still runs; the compile cache of the tile facts is the
session's own (a config compiles once per run, never into the user's cache); the
`one_torch_thread` fixture runs a module's tests on one torch thread (use it with
`pytestmark = pytest.mark.usefixtures("one_torch_thread")`); `quiet_cpu` judges points on their
timing spread alone (for tests whose subject is not contention).
"""

import importlib
import inspect
import os
from pathlib import Path

import pytest
import torch

from a800lab.core.backends import HAS_CUDA, why_unavailable
from tests.panel_imports import imports_panels


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


HAS_IPYWIDGETS = _importable("ipywidgets")
collect_ignore = [] if HAS_IPYWIDGETS else sorted(
    path.name for path in Path(__file__).parent.glob("test_*.py")
    if imports_panels(path.read_text(encoding="utf-8"), top_level=True))


def pytest_report_header(config):
    if collect_ignore:
        return (f"ipywidgets is not installed: {len(collect_ignore)} panel test modules left "
                f"out ({', '.join(collect_ignore)})")
    return None


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="also run the tests marked slow (run by hand, not in the README "
                          "command)")


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--run-slow") or "slow" in (config.getoption("-m") or "")
    skip_slow = pytest.mark.skip(reason="slow: run by hand with --run-slow")
    skip_gpu = pytest.mark.skip(reason=f"needs a CUDA GPU: {why_unavailable('cuda')}")
    skip_panel = pytest.mark.skip(reason="opens a panel: ipywidgets is not installed")
    for item in items:
        function = getattr(item, "function", None)  # None for a notebook's cell
        if not HAS_IPYWIDGETS and function and imports_panels(inspect.getsource(function),
                                                              top_level=False):
            item.add_marker(skip_panel)
        if item.get_closest_marker("slow") and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session", autouse=True)
def session_compile_cache(tmp_path_factory):
    """$A800LAB_COMPILE_CACHE for the whole session (subprocesses inherit it)."""
    path = tmp_path_factory.mktemp("compile-cache") / "compiled_tiles.json"
    saved = os.environ.get("A800LAB_COMPILE_CACHE")
    os.environ["A800LAB_COMPILE_CACHE"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("A800LAB_COMPILE_CACHE", None)
    else:
        os.environ["A800LAB_COMPILE_CACHE"] = saved


@pytest.fixture
def one_torch_thread():
    """torch on one CPU thread for the test (training loops on a shared 2-core box), restored
    after."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture
def quiet_cpu(monkeypatch):
    """Points judged on their spread alone: another job's load on a shared machine must not
    decide, e.g., whether a test's tuned winner is stored (contention has its own tests)."""
    from a800lab.core import noise, sweep

    monkeypatch.setattr(sweep, "assess", lambda samples, conditions=None, *, on_cpu=False,
                        **own: noise.assess(samples, **own))


@pytest.fixture(scope="session")
def quick_cpu_report(tmp_path_factory):
    """The quick CPU battery, run once for the whole session (it takes seconds, and 2 gloo
    ranks): (report dict, its folder). Tests read its real records; none may change it."""
    from a800lab.report.run import run_report

    folder = tmp_path_factory.mktemp("quick-cpu-report")
    return run_report("quick", folder, torch_threads=1), folder
