"""Package faces: a800lab.core and the labs' packages (workloads.training, .comm, .tiles) export
the names the docs, docstrings and chapters import, lazily: importing one module of a
package does not import the rest."""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FACES = ("a800lab.core", "a800lab.workloads.training", "a800lab.workloads.comm",
         "a800lab.workloads.tiles")
# imported on first use, after TRITON_INTERPRET is set: never through a face
NOT_ON_A_FACE = {"a800lab.workloads.tiles.kernel"}


def _imports_in(text: str):
    """(module, names) of every `from a800lab... import ...` statement written in a text."""
    for match in re.finditer(r"^\s*(from a800lab[\w.]* import (\([^)]*\)|[^\n#]*))", text,
                             re.MULTILINE):
        statement = match.group(1).strip().rstrip("\\")
        try:
            node = ast.parse(statement).body[0]
        except SyntaxError:
            continue
        yield node.module, [a.name for a in node.names]


def _documents():
    """Docstrings of every module of the package, the README, docs/ and the chapters' code."""
    for path in sorted((REPO / "a800lab").rglob("*.py")):
        yield path, ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        yield path, path.read_text(encoding="utf-8")
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        yield path, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _submodules(face: str) -> set[str]:
    folder = REPO / Path(*face.split("."))
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | \
        {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}


@pytest.mark.parametrize("face", FACES)
def test_every_name_a_face_exports_imports(face):
    package = importlib.import_module(face)
    for name in package.__all__:
        assert getattr(package, name) is not None, f"{face}.{name}"
    shadowed = set(package.__all__) & _submodules(face)
    assert not shadowed, f"{face}: {shadowed} are module names; a face cannot export them"
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        package.not_a_name  # noqa: B018


def test_every_documented_import_from_a_face_works():
    """`from a800lab.workloads.training import Trainer, ...` wherever it is written."""
    seen = 0
    for path, text in _documents():
        for module, names in _imports_in(text):
            if module in FACES:
                seen += 1
                package = importlib.import_module(module)
                missing = [n for n in names if not hasattr(package, n)]
                assert not missing, f"{path.relative_to(REPO)}: {module} has no {missing}"
    assert seen >= len(FACES)  # each face's own docstring shows one


def test_the_names_chapters_and_docstrings_take_from_a_labs_modules_are_on_its_face():
    """A name imported from a face's module (`...training.spec import TrainSpec`) in a chapter
    or shown in a module's docstring is also on the face, unless it is a module's own name."""
    missing = []
    for path, text in _documents():
        for module, names in _imports_in(text):
            face = module.rpartition(".")[0]
            if face not in FACES or module in NOT_ON_A_FACE:
                continue
            package = importlib.import_module(face)
            missing += [f"{path.relative_to(REPO)}: {module}.{n}" for n in names
                        if n not in package.__all__ and n not in _submodules(face)]
    assert not missing, "not on the face:\n" + "\n".join(missing)


def test_the_issue_asks_for_these_imports():
    from a800lab.workloads.comm import busbw_gbs, collective_point
    from a800lab.workloads.training import Trainer, TrainSpec, custom_task, train_point

    assert TrainSpec(batch_size=2).batch_size == 2
    assert callable(Trainer) and callable(train_point) and callable(custom_task)
    assert callable(busbw_gbs) and callable(collective_point)


def test_a_face_imports_nothing_until_a_name_is_asked_for():
    """Its __init__ imports only the face helper (a PEP 562 __getattr__ loads each name's
    module on first use), so `import ...training.spec` never loads the profiler, the tuner, a
    rank's worker or the Triton kernel (checked in the source: a fresh interpreter to watch
    sys.modules would cost seconds of torch import)."""
    for face in FACES:
        init = REPO / Path(*face.split(".")) / "__init__.py"
        imports = [node for node in ast.walk(ast.parse(init.read_text(encoding="utf-8")))
                   if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert [(n.module, [a.name for a in n.names]) for n in imports] == \
            [("face" if face == "a800lab.core" else "core.face", ["face"])], face
