"""Layering: every import in the package (lazy ones inside functions included) points down
core < workloads < figures < report < widgets, cli; UI modules stay out of the lower layers."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "a800lab"
RANK = {"core": 0, "workloads": 1, "figures": 2, "report": 3, "widgets": 4, "cli": 4}
UI = ("ipywidgets", "IPython")
# report/ judges and writes JSON without drawing: only its figures and html modules draw
DRAWING_REPORT_MODULES = ("a800lab.report.figures", "a800lab.report.html")


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package_root: Path = PACKAGE):
    """(imported module, names, line) for every import statement in the file, anywhere."""
    name = _module_name(path, package_root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [a.name for a in node.names]
            if node.level and not node.module:  # from . import x: x are modules
                for n in names:
                    yield f"{module}.{n}", [], node.lineno
            else:
                yield module, names, node.lineno


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "a800lab" and parts[1] in RANK else None


def _violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module_name(path)
        layer = _layer(me)
        for target, names, line in _imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
            theirs = _layer(target)
            if layer and theirs and theirs != layer:
                if RANK[theirs] > RANK[layer] or RANK[theirs] == RANK[layer]:
                    bad.append(f"{where} ({layer} must not import {theirs})")
            if layer in ("core", "workloads", "figures", "report") and \
                    target.split(".")[0] in UI:
                bad.append(f"{where} (a UI module below widgets/)")
            if layer in ("core", "workloads") and target.split(".")[0] == "matplotlib":
                bad.append(f"{where} (matplotlib below figures/)")
            if layer == "report" and me not in DRAWING_REPORT_MODULES and (
                    target.split(".")[0] == "matplotlib" or theirs == "figures"
                    or target in DRAWING_REPORT_MODULES):
                bad.append(f"{where} (only report.figures and report.html draw)")
            if target.startswith("a800lab") and any(
                    n.startswith("_") and not n.startswith("__") for n in names):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                bad.append(f"{where} private names {private} (make them public where they "
                           "are shared)")
    return bad


def test_every_import_points_down_the_layers():
    assert _violations() == []


def test_the_check_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    # the walker must catch an upward import inside a function body, relative form
    fake = PACKAGE / "core" / "_layer_probe.py"
    fake.write_text("def f():\n    from ..widgets import Explorer\n    return Explorer\n")
    try:
        assert any("_layer_probe.py:2 imports a800lab.widgets" in v for v in _violations())
    finally:
        fake.unlink()


BLOCKED_IMPORT = textwrap.dedent("""
    import importlib, pkgutil, sys

    BLOCKED = ("ipywidgets", "IPython", "matplotlib")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked below figures/")
            return None

    sys.meta_path.insert(0, Block())
    imported = []
    for package in ("a800lab.core", "a800lab.workloads", "a800lab.report", "a800lab.cli"):
        pkg = importlib.import_module(package)
        for info in pkgutil.walk_packages(pkg.__path__, package + "."):
            if info.name in ("a800lab.report.figures", "a800lab.report.html"):
                continue
            importlib.import_module(info.name)
            imported.append(info.name)
    leaked = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
    assert not leaked, leaked
    print(len(imported))
""")


def test_lower_layers_and_the_cli_import_without_ui_modules():
    proc = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 40  # every module really imported


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the a800lab modules it imports (module- and function-level, relative ones
    resolved; `from pkg import name` counts as importing pkg.name when that is a module)."""
    modules = {_module_name(path, package): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target, names, _ in _imports(path, package):
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            edges |= set(subs) if subs else {target} & set(modules)
        graph[name] = edges - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    """No two modules import each other, directly or around a loop, at module or function
    level (a package importing its own submodules is no circle unless one imports it back)."""
    assert _cycles(_graph()) == []


def test_the_circle_check_sees_a_lazy_loop(tmp_path):
    pkg = tmp_path / "a800lab"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from . import b\n")
    (pkg / "core" / "b.py").write_text("def f():\n    from .a import g\n")
    assert _cycles(_graph(pkg)) == [["a800lab.core.a", "a800lab.core.b"]]
