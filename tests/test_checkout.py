"""Running chapters leaves the checkout clean: they run as copies (`a800lab chapters`), and with
the README's git filter the outputs of a chapter run in notebooks/ never reach git."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_autosaved_outputs_never_reach_git(tmp_path):
    pytest.importorskip("nbstripout")
    for name in (".gitattributes", ".gitconfig"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    chapter = tmp_path / "notebooks" / "00-start-here.ipynb"
    shutil.copy(REPO / "notebooks" / "00-start-here.ipynb", chapter)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "include.path", "../.gitconfig")  # the README's one step
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "chapters")
    assert _git(tmp_path, "status", "--porcelain") == ""  # the committed chapter is stripped
    nb = json.loads(chapter.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["execution_count"] = 3  # what JupyterLab's autosave writes after a run
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["device : CPU\n"]},
                       {"output_type": "display_data", "metadata": {}, "data": {
                           "application/vnd.jupyter.widget-view+json": {"model_id": "abc"},
                           "text/plain": "VBox(...)"}}]
    chapter.write_text(json.dumps(nb, indent=1))
    assert _git(tmp_path, "diff") == ""
    _git(tmp_path, "add", ".")
    assert _git(tmp_path, "status", "--porcelain") == ""  # what is staged has no outputs
    assert "device : CPU" not in _git(tmp_path, "show", ":notebooks/00-start-here.ipynb")
    code["source"] = ["print('edited')\n"]  # a real edit still shows
    chapter.write_text(json.dumps(nb, indent=1))
    assert "00-start-here.ipynb" in _git(tmp_path, "status", "--porcelain")


def test_chapters_run_as_copies_that_keep_your_edits(tmp_path, capsys):
    from a800lab.cli import main

    folder = tmp_path / "mine"
    assert main(["chapters", "--to", str(folder)]) == 0
    copies = sorted(p.name for p in folder.glob("*.ipynb"))
    assert copies == sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]-*.ipynb"))
    assert f"open them with: jupyter lab {folder}" in capsys.readouterr().err
    edited = folder / copies[0]
    edited.write_text(edited.read_text().replace("Start here", "Start here (my notes)"))
    assert main(["chapters", "--to", str(folder)]) == 0
    assert f"0 chapter(s) copied to {folder}; {len(copies)} kept" in capsys.readouterr().out
    assert "my notes" in edited.read_text()
    assert main(["chapters", "--to", str(folder), "--refresh"]) == 0
    assert "my notes" not in edited.read_text()
    assert main(["chapters", "--to", str(REPO / "notebooks")]) == 2
    assert "is the chapters' own folder" in capsys.readouterr().err
