"""`python -m a800lab chapters`: copies of the guided chapters to run (default my-chapters/, which
git ignores), so running one never touches the checkout's notebooks/; a copy already there is
kept unless --refresh. The chapters ship with the source checkout, not inside the package."""

import shutil
import sys
from pathlib import Path

from ..core.results import check_folder
from .options import FLAG

CHECKOUT = Path(__file__).resolve().parents[2]


def add_parsers(commands) -> None:
    commands.add("chapters", run=chapters_command, options="to refresh",
                 help="copy the guided chapters to a folder git ignores, to run them there",
                 to="folder for the copies (default my-chapters/ in the checkout)",
                 refresh={**FLAG, "help": "replace copies already there with the current chapters"})


def chapters_command(args) -> int:
    source = CHECKOUT / "notebooks"
    chapters = sorted(source.glob("[0-9][0-9]-*.ipynb")) if source.is_dir() else []
    if not chapters:
        raise ValueError(f"no chapters in {source}: they ship with the source checkout; clone "
                         "the repository and `pip install -e .` there")
    folder = Path(args.to).expanduser() if args.to is not None else CHECKOUT / "my-chapters"
    if folder.resolve() == source.resolve():
        raise ValueError(f"--to {folder} is the chapters' own folder; copy them elsewhere")
    check_folder(folder, "--to")
    folder.mkdir(parents=True, exist_ok=True)
    kept = [c.name for c in chapters if (folder / c.name).exists() and not args.refresh]
    for chapter in chapters:
        if chapter.name not in kept:
            shutil.copyfile(chapter, folder / chapter.name)
    print(f"{len(chapters) - len(kept)} chapter(s) copied to {folder}" + (
        f"; {len(kept)} kept as they were (--refresh replaces them)" if kept else ""))
    print(f"open them with: jupyter lab {folder}   (as root: add --allow-root)", file=sys.stderr)
    return 0
