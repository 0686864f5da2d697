"""The results store: one Parquet row per bag, keyed by bag hash + config hash + code version.

Layout: ``DIR/rows/<key>.parquet``, one file per row, each written to a temporary sibling and
renamed (``outpaths.Staged``), so a batch killed at any point leaves only whole rows and a rerun
resumes from them. Every file has the same schema (``SCHEMA``), so the folder reads as one table:
``pyarrow.dataset.dataset("DIR/rows")``, or DuckDB's ``read_parquet('DIR/rows/*.parquet')``.
Nested results (quality, safety, the replay's whole JSON) are JSON strings; per-task results a
list of structs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

ROWS = "rows"


def _schema() -> Any:
    import pyarrow as pa

    task = pa.struct([("name", pa.string()), ("jobs", pa.int64()), ("misses", pa.int64()),
                      ("errors", pa.int64()), ("p50_ms", pa.float64()), ("p99_ms", pa.float64()),
                      ("max_ms", pa.float64()), ("quantiles_ms", pa.list_(pa.float32()))])
    f64, s, b, i64 = pa.float64(), pa.string(), pa.bool_(), pa.int64()
    return pa.schema([
        ("key", s), ("bag", s), ("bag_hash", s), ("config", s), ("config_hash", s), ("code_version", s),
        ("duration_s", f64), ("output_digest", s), ("deterministic", b), ("clean", b), ("misses", i64),
        ("errors", i64), ("faults", s), ("tasks", pa.list_(task)), ("quality", s), ("safety", s),
        ("replay", s), ("passed", b), ("failures", s), ("wall_s", f64), ("replay_wall_s", f64),
        ("worker", s), ("peak_rss_mb", f64), ("started_unix", f64), ("finished_unix", f64), ("error", s),
        ("log", s)])


class StoreError(ValueError):
    """A --results folder that is not a results store, or a row file that cannot be read (one line)."""


class ResultsStore:
    """Rows on disk under ``root``; ``root=None`` keeps them in memory (no resume)."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root) if root is not None else None
        self._mem: dict[str, dict[str, Any]] = {}

    @staticmethod
    def check_folder(root: str | Path) -> None:
        """Refuse an existing folder that holds other things than a store (StoreError, one line)."""
        p = Path(root)
        if p.is_dir() and any(p.iterdir()) and not (p / ROWS).is_dir():
            raise StoreError(f"--results {root}: a folder that is not a results store (no {ROWS}/ in it); "
                             "give a new or empty folder, or an earlier batch's --results")

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / ROWS / f"{key}.parquet"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored row with this key, or None."""
        if self.root is None:
            return self._mem.get(key)
        p = self._path(key)
        if not p.is_file():
            return None
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(p, schema=_schema()).to_pylist()
        except Exception as e:   # noqa: BLE001 - a damaged row file is a row to redo, said once
            raise StoreError(f"--results {self.root}: cannot read {p.name} ({type(e).__name__}: {e}); "
                             "delete it to replay that bag again") from None
        return rows[0] if rows else None

    def put(self, row: dict[str, Any]) -> None:
        """Store (or replace) a row, atomically."""
        if self.root is None:
            self._mem[row["key"]] = row
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..outpaths import Staged

        table = pa.Table.from_pylist([row], schema=_schema())
        with Staged(self._path(row["key"]), replace=True) as tmp:
            pq.write_table(table, tmp)

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The rows with these keys (those stored, in that order), or every row."""
        if keys is not None:
            return [r for r in (self.get(k) for k in keys) if r is not None]
        if self.root is None:
            return list(self._mem.values())
        files = sorted((self.root / ROWS).glob("*.parquet")) if (self.root / ROWS).is_dir() else []
        return [r for r in (self.get(f.stem) for f in files) if r is not None]
