"""The README and docs/ say what the code has: every command and option (generated from the
parser table), every panel, the layers in their import order, and only paths that exist. The
claim register's table is checked in tests/test_report_register.py."""

import ast
import re
from pathlib import Path

from a800lab.cli.main import _commands, build_parser, commands_markdown

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
TEST_COMMAND = "python -m pytest --nbval-lax tests notebooks"


def _block(path: Path, name: str) -> str:
    text = path.read_text(encoding="utf-8")
    return text.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0].strip()


def test_the_readme_is_a_front_page_with_the_test_command_ci_runs():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; move detail into docs/"
    # .ci/run runs the first README line that starts with `python -m pytest`
    assert next(line for line in lines if line.startswith("python -m pytest")) == TEST_COMMAND


def test_the_command_reference_is_the_parser_table():
    assert _block(REPO / "docs" / "commands.md", "commands") == commands_markdown(), (
        "docs/commands.md is stale: paste the output of python -c \"from a800lab.cli.main "
        "import commands_markdown; print(commands_markdown())\" between its markers")


def test_every_command_has_its_prose_in_docs_commands():
    """The family headings (`## The machine: `doctor`, `peak`, ...`) name every command."""
    text = (REPO / "docs" / "commands.md").read_text(encoding="utf-8").split("## Reference")[0]
    named = {word for heading in re.findall(r"^## .*$", text, re.MULTILINE)
             for word in re.findall(r"`([a-z][a-z -]*)`", heading)}
    assert named == {" ".join(words) for words, _ in _commands(build_parser())}


def test_docs_panels_lists_every_panel_the_widgets_package_exports():
    tree = ast.parse((REPO / "a800lab" / "widgets" / "__init__.py").read_text())
    exported = next(ast.literal_eval(node.value) for node in tree.body
                    if isinstance(node, ast.Assign) and node.targets[0].id == "__all__")
    params = {"Range", "Choice", "Fixed"}  # what an Explorer's params are made of
    rows = _block(REPO / "docs" / "panels.md", "panels").splitlines()[2:]
    listed = {re.match(r"\| `(\w+)", row).group(1) for row in rows}
    assert listed == set(exported) - params
    assert all(f"`{name}`" in rows[0] for name in params)


def test_docs_layout_lists_the_layers_in_their_import_order():
    tree = ast.parse((REPO / "tests" / "test_layers.py").read_text())
    rank = next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RANK")
    listed = re.findall(r"^a800lab/(\w+)/", _block(REPO / "docs" / "layout.md", "layers"),
                        re.MULTILINE)
    packages = {p.name for p in (REPO / "a800lab").iterdir() if (p / "__init__.py").exists()}
    assert set(listed) == packages == set(rank)
    assert [rank[name] for name in listed] == sorted((rank[n] for n in listed), reverse=True)


def test_paths_and_links_in_the_readme_and_docs_exist():
    roots = ("a800lab/", "notebooks/", "tests/", "docs/", "scripts/", "benchmarks/", "data/",
             "deploy/", ".ci/")
    missing = []
    for doc in [README, *DOCS]:
        text = doc.read_text(encoding="utf-8")
        for path in re.findall(r"`([\w./-]+)`", text):
            if path.startswith(roots) and not (REPO / path.rstrip("/")).exists():
                missing.append(f"{doc.name}: `{path}`")
        for link in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", text):
            if not (doc.parent / link).exists():
                missing.append(f"{doc.name}: link {link}")
    assert not missing, missing
