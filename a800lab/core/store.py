"""The lab's small files on disk: the cache folder, JSON read and replaced atomically, and the
store of tuned configs.

    data = read_json(path, what="a tuned-config store"); write_json_atomic(path, data)
    store = TunedStore(tuned_store_path()); store.put(key, grid, result); store.get(key, grid)
"""

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .search import SearchResult, config_key


def cache_path(env_var: str, filename: str) -> Path:
    """$`env_var` if set, else $XDG_CACHE_HOME/a800lab/`filename` (~/.cache/a800lab/...)."""
    if os.environ.get(env_var):
        return Path(os.environ[env_var])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "a800lab" / filename


def tuned_store_path() -> Path:
    """Where the tuners store their winners: $A800LAB_TUNED, else ~/.cache/a800lab/tuned.json."""
    return cache_path("A800LAB_TUNED", "tuned.json")


def read_json(path: str | os.PathLike, *, what: str) -> dict:
    """The JSON object in `path`, {} when there is no file; ValueError naming the file (and
    `what` it should be) when it is not a JSON object."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"{path} is not {what} ({exc}); move it away or pass another "
                         "path") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not {what} (not a JSON object); move it away or pass "
                         "another path")
    return data


def write_json_atomic(path: str | os.PathLike, data: Mapping) -> Path:
    """Replace `path` with `data` as JSON, written beside it and renamed over it (crash-safe)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


def grid_hash(configs: Sequence[Mapping]) -> str:
    """12 hex characters identifying a config grid (order does not matter)."""
    keys = sorted(config_key(c) for c in configs)
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:12]


class TunedStore:
    """Tuned configs in one JSON file, keyed by what was tuned (any fields, see `key`); reused
    only for the same key and grid. A file that is not a store is refused by name, not replaced."""

    WHAT = "a tuned-config store"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @staticmethod
    def key(**fields: Any) -> str:
        """The entry's key: the fields as canonical JSON."""
        return json.dumps(fields, sort_keys=True)

    def _read(self) -> dict:
        data = read_json(self.path, what=self.WHAT)
        if data and not isinstance(data.get("entries"), dict):
            raise ValueError(f"{self.path} is not {self.WHAT} (no 'entries' object); move it "
                             "away or pass another path")
        return data.get("entries", {})

    def get(self, key: str, configs: Sequence[Mapping]) -> dict | None:
        """The stored entry for `key` tuned over the same grid, else None."""
        entry = self._read().get(key)
        if entry is None or entry.get("grid_hash") != grid_hash(configs):
            return None
        return entry

    def put(self, key: str, configs: Sequence[Mapping], result: SearchResult,
            **extra: Any) -> dict:
        """Store the result's winner for `key` (atomically: a crash leaves the old file)."""
        if result.best is None:
            raise ValueError(f"nothing to store: {result.verdict}")
        entries = self._read()
        entry = {"grid_hash": grid_hash(configs), "best": result.best,
                 "best_median_ms": result.best_median_ms, "lead": result.lead,
                 "inside_noise": result.inside_noise, "verdict": result.verdict,
                 "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
        entries[key] = entry
        write_json_atomic(self.path, {"schema_version": 1, "entries": entries})
        return entry
