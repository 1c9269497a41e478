"""The points a panel holds, their results frame and which file holds which. Thread-safe: the
measuring thread adds while the drawing thread reads. A record's identity is its measurement
key, so Save then Load adds nothing twice.
"""

import threading
from pathlib import Path

import pandas as pd

from ..core.results import Record, append_record, read_records, records_to_frame


class PanelRecords:
    def __init__(self) -> None:
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a frame of the old points must not be reused
        self._cache: tuple[int, int, pd.DataFrame | None] = (0, 0, None)
        self._saved: dict[str, set] = {}  # resolved path -> keys of records already there

    def add(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[Record]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def clear(self) -> tuple[int, int]:
        """Drop every record; returns (how many, how many of them were in no saved file)."""
        with self._lock:
            removed, self._records = self._records, []
            self._generation += 1
        saved = set().union(*self._saved.values()) if self._saved else set()
        return len(removed), sum(r.measurement_key() not in saved for r in removed)

    def frame(self) -> pd.DataFrame:
        """Every record as a results frame, converting only those added since last time."""
        with self._lock:
            records, generation = list(self._records), self._generation
        count, cached_generation, frame = self._cache
        if cached_generation != generation or count > len(records):
            count, frame = 0, None
        if count < len(records):
            new = records_to_frame(records[count:])
            frame = new if frame is None else pd.concat([frame, new], ignore_index=True)
            self._cache = (len(records), generation, frame)
        return frame if frame is not None else pd.DataFrame()

    def _saved_in(self, path: str | Path) -> set:
        return self._saved.setdefault(str(Path(path).resolve()), set())

    def save(self, path: str | Path) -> tuple[int, int]:
        """Append the records not yet in that JSON Lines file; returns (written, held there)."""
        saved = self._saved_in(path)
        new = [r for r in self.records if r.measurement_key() not in saved]
        for record in new:
            append_record(path, record)
            saved.add(record.measurement_key())
        return len(new), len(saved)

    def load(self, path: str | Path) -> tuple[int, int]:
        """Add the file's records the panel does not hold yet; returns (added, skipped)."""
        loaded = read_records(path)
        with self._lock:
            held = {r.measurement_key() for r in self._records}
            new = [r for r in loaded if r.measurement_key() not in held]
            self._records.extend(new)
        self._saved_in(path).update(r.measurement_key() for r in loaded)
        return len(new), len(loaded) - len(new)
