"""`python -m a800lab chapters`: copies of the guided chapters to run (default my-chapters/, which
git ignores), so running one never touches the checkout's notebooks/; a copy already there is
kept unless --refresh. The chapters ship with the source checkout, not inside the package."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ..core.results import check_folder
from .options import add_options

CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_FOLDER = CHECKOUT / "my-chapters"


def add_parsers(commands) -> None:
    chapters = commands.add("chapters", run=chapters_command,
                            help="copy the guided chapters to a folder git ignores, to run them "
                                 "there")
    add_options(chapters, "to refresh",
                to="folder for the copies (default my-chapters/ in the checkout)",
                refresh={"action": "store_true",
                         "help": "replace copies already there with the current chapters"})


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
