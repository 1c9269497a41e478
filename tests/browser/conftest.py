"""Fixtures for the browser tests: a private JupyterLab server and headless Debian Chromium.

    python -m pytest tests/browser -m browser        # screenshots and the server log go to
                                                     # artifacts/browser/

`lab` (session) starts `jupyter lab` on 127.0.0.1, a free port and a random token, with its own
config, data, runtime, settings and workspace directories under a temp dir, so nothing from
~/.jupyter leaks in and nothing is written there. Its root is a temp dir holding copies of
notebooks/ and of the fixture notebooks here. The lab settings are seeded with
`autoStartDefaultKernel: true` (notebook tracker) so opening a notebook starts its kernel
without a "Select Kernel" dialog, and `fetchNews: "false"` (notifications) so no news prompt
covers the page. At the end every kernel is shut down through the REST API and the server is
stopped by its PID (SIGTERM, then SIGKILL).

`page` gives each test a fresh browser context and a page whose default timeout suits a slow
box; a "Select Kernel" dialog, should one appear anyway, is accepted automatically.

Everything skips (never fails) when /usr/bin/chromium or the playwright package is missing.
Playwright's own browser download is never used (`playwright install` is not needed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ARTIFACTS = REPO / "artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
SERVER_START_TIMEOUT_S = 90  # a cold JupyterLab on a 2-core box takes 5-20 s
ACTION_TIMEOUT_MS = 30_000  # default for every locator action and expect() in the tests

# Lab settings seeded into JUPYTERLAB_SETTINGS_DIR: <plugin id> -> settings (JupyterLab 4 ids;
# see share/jupyter/lab/schemas/@jupyterlab/*/ for the schemas).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                     "checkForUpdates": False},
}


def _missing_prerequisite() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    return None


@pytest.fixture(scope="session")
def browser_prerequisites() -> None:
    reason = _missing_prerequisite()
    if reason:
        pytest.skip(f"browser tests need Chromium and playwright: {reason}")


@dataclass
class Lab:
    """A running JupyterLab: where it is and how to reach it."""

    base_url: str
    token: str
    root: Path
    pid: int
    log: Path

    def url(self, path: str) -> str:
        """A lab URL with the token; `?reset` starts from an empty workspace (no restored
        tabs from an earlier test)."""
        return f"{self.base_url}{path}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET", timeout_s: float = 10):
        request = urllib.request.Request(f"{self.base_url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Shut down every kernel (frees the CPU for the next test; nothing is orphaned)."""
        for kernel in self.api("/api/kernels"):
            try:
                self.api(f"/api/kernels/{kernel['id']}", method="DELETE", timeout_s=30)
            except (urllib.error.URLError, OSError):
                pass  # already gone


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _seed_settings(settings_dir: Path) -> None:
    for plugin_id, values in LAB_SETTINGS.items():
        package, plugin = plugin_id.split(":")
        path = settings_dir / package / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


def _copy_notebooks(root: Path) -> None:
    if (REPO / "notebooks").is_dir():
        shutil.copytree(REPO / "notebooks", root / "notebooks",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.jsonl", "runs"))
    if (REPO / "data").is_dir():  # recorded runs, as `../data` from a chapter
        (root / "data").symlink_to(REPO / "data", target_is_directory=True)
    (root / "browser").mkdir()
    for notebook in HERE.glob("*.ipynb"):
        shutil.copy2(notebook, root / "browser" / notebook.name)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def lab(browser_prerequisites, tmp_path_factory) -> Lab:
    base = tmp_path_factory.mktemp("jupyterlab")
    root, home = base / "root", base / "home"
    root.mkdir()
    _copy_notebooks(root)
    dirs = {name: home / name for name in ("config", "data", "runtime", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True)
    _seed_settings(dirs["settings"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / "jupyter-server.log"

    port, token = _free_port(), uuid.uuid4().hex
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
               JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
               JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
               JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1",
               # kernels import this checkout's a800lab even without `pip install -e .`
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("JUPYTER_TOKEN", None)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--allow-root",
           "--LabApp.extension_manager=readonly"]  # no PyPI look-ups from the lab
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    lab = Lab(base_url=f"http://127.0.0.1:{port}", token=token, root=root, pid=proc.pid,
              log=log_path)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with code {proc.returncode}:\n{_tail(log_path)}")
            try:
                lab.api("/api/status", timeout_s=5)
                break
            except (urllib.error.URLError, OSError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer /api/status within "
                                f"{SERVER_START_TIMEOUT_S} s:\n{_tail(log_path)}")
                time.sleep(0.25)
        for plugin_id, values in LAB_SETTINGS.items():  # a typo in an id or key shows here
            applied = lab.api(f"/lab/api/settings/{plugin_id}")["settings"]
            wrong = {k: applied.get(k) for k, v in values.items() if applied.get(k) != v}
            assert not wrong, f"lab settings not applied for {plugin_id}: {wrong}"
        yield lab
    finally:
        try:
            if proc.poll() is None:
                lab.shutdown_kernels()
        except (urllib.error.URLError, OSError, ValueError):
            pass
        _stop(proc)


@pytest.fixture(scope="session")
def browser(browser_prerequisites):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, lab, request):
    """A fresh page per test; a screenshot of its last state lands in artifacts/browser/."""
    from playwright.sync_api import expect

    expect.set_options(timeout=ACTION_TIMEOUT_MS)
    context = browser.new_context(viewport={"width": 1400, "height": 1300})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    # autoStartDefaultKernel should prevent it, but if a kernel picker shows up anyway, take
    # the proposed kernel instead of hanging on the dialog.
    page.add_locator_handler(
        page.locator(".jp-Dialog").filter(has_text="Select Kernel"),
        lambda dialog: dialog.locator(".jp-Dialog-button.jp-mod-accept").click())
    console = []
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    page.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
    try:
        yield page
    finally:
        name = request.node.name.replace("/", "_")
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}-last.png"), full_page=True)
        except Exception:  # a screenshot must not hide the test's own outcome
            pass
        (ARTIFACTS / f"{name}-console.log").write_text("\n".join(console))
        context.close()
        try:
            lab.shutdown_kernels()
        except (urllib.error.URLError, OSError, ValueError):
            pass
