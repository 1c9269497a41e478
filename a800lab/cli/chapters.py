"""`python -m a800lab chapters`: copies of the guided chapters to run, so that running one (and
JupyterLab's autosave of its outputs) never touches the checkout's notebooks/.

    python -m a800lab chapters              # notebooks/*.ipynb -> my-chapters/ (git ignores it)
    python -m a800lab chapters --to ~/lab   # somewhere else
    python -m a800lab chapters --refresh    # replace your copies with the current chapters

A copy already there is kept (it may hold your edits and outputs) unless --refresh is given.
The chapters ship with the source checkout (`pip install -e .`), not inside the package.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ..core.results import check_folder

CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_FOLDER = CHECKOUT / "my-chapters"


def add_parsers(commands) -> None:
    chapters = commands.add("chapters", run=chapters_command,
                            help="copy the guided chapters to a folder git ignores, to run them "
                                 "there")
    chapters.add_argument("--to", default=None,
                          help="folder for the copies (default my-chapters/ in the checkout)")
    chapters.add_argument("--refresh", action="store_true",
                          help="replace copies already there with the current chapters")


def copy_chapters(to: str | Path | None = None, *, refresh: bool = False,
                  source: Path = CHECKOUT / "notebooks") -> tuple[Path, list[str], list[str]]:
    """Copy every chapter into `to`; returns (folder, copied names, kept names)."""
    chapters = sorted(source.glob("[0-9][0-9]-*.ipynb")) if source.is_dir() else []
    if not chapters:
        raise ValueError(f"no chapters in {source}: they ship with the source checkout; clone "
                         "the repository and `pip install -e .` there")
    folder = Path(to).expanduser() if to is not None else DEFAULT_FOLDER
    if folder.resolve() == source.resolve():
        raise ValueError(f"--to {folder} is the chapters' own folder; copy them elsewhere")
    check_folder(folder, "--to")
    folder.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for chapter in chapters:
        target = folder / chapter.name
        if target.exists() and not refresh:
            kept.append(chapter.name)
            continue
        shutil.copyfile(chapter, target)
        copied.append(chapter.name)
    return folder, copied, kept


def chapters_command(args) -> int:
    folder, copied, kept = copy_chapters(args.to, refresh=args.refresh)
    print(f"{len(copied)} chapter(s) copied to {folder}" + (
        f"; {len(kept)} kept as they were (--refresh replaces them)" if kept else ""))
    print(f"open them with: jupyter lab {folder}   (as root: add --allow-root)", file=sys.stderr)
    return 0
