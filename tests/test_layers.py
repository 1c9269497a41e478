"""Layering: core/ and workloads/ import with ipywidgets, IPython and matplotlib blocked."""

import subprocess
import sys
import textwrap

BLOCKED_IMPORT = textwrap.dedent("""
    import importlib, pkgutil, sys

    BLOCKED = ("ipywidgets", "IPython", "matplotlib")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: core/ must not import UI modules")
            return None

    sys.meta_path.insert(0, Block())
    imported = []
    for package in ("a800lab.core", "a800lab.workloads"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__, package + "."):
            importlib.import_module(info.name)
            imported.append(info.name)
    leaked = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
    assert not leaked, leaked
    print(len(imported))
""")


def test_core_and_workloads_import_without_ui_modules():
    proc = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 8  # every core module was really imported
