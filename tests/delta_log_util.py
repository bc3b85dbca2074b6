"""What a reader outside sparkwave sees of the relations' Delta logs, and the check that each holds
exactly the log files the catalog holds (none missing, none twice, none retired)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from deltalake import DeltaTable

from sparkwave.core.catalog import Catalog
from sparkwave.storage.warehouse import Warehouse


def delta_files(log_dir: Path) -> list[str]:
    """The file names of the Delta log's current version."""
    return sorted(os.path.basename(p) for p in DeltaTable(str(log_dir)).file_uris())


def delta_epochs(log_dir: Path) -> set[int]:
    """The epochs whose rows the Delta log's current version holds."""
    return set(DeltaTable(str(log_dir)).to_pyarrow_table(columns=["_epoch"])["_epoch"].to_pylist())


def added_twice(log_dir: Path) -> list[str]:
    """Files an add action of the Delta log's history names more often than a remove follows it."""
    live: Counter[str] = Counter()
    for name in sorted(os.listdir(log_dir / "_delta_log")):
        if not name.endswith(".json"):
            continue
        for line in (log_dir / "_delta_log" / name).read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] += 1
            elif "remove" in action:
                live[action["remove"]["path"]] -= 1
    return sorted(p for p, n in live.items() if n > 1)


def removed_unadded(log_dir: Path) -> list[str]:
    """Files a remove action of the Delta log's history names before any add did."""
    added: set[str] = set()
    out = []
    for name in sorted(os.listdir(log_dir / "_delta_log")):
        if not name.endswith(".json"):
            continue
        for line in (log_dir / "_delta_log" / name).read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(action["add"]["path"])
            elif "remove" in action and action["remove"]["path"] not in added:
                out.append(action["remove"]["path"])
    return out


def delta_commits(log_dir: Path) -> int:
    """The Delta log's versions that added files."""
    return sum(1 for name in os.listdir(log_dir / "_delta_log") if name.endswith(".json")
               and '"add"' in (log_dir / "_delta_log" / name).read_text())


def assert_delta_follows_catalog(catalog: Catalog, warehouse: Warehouse) -> None:
    """Every created relation's Delta log holds exactly its log files in the catalog, each once, and
    the catalog records each as in Delta."""
    for rel in catalog.relations(internal=True):
        if rel.kind == "source":
            continue
        log_dir = warehouse.relation_dir(rel.name) / "log"
        expected = sorted(os.path.basename(p) for _, p in catalog.log_files(rel.name, -1, 2 ** 62))
        assert delta_files(log_dir) == expected, rel.name
        assert added_twice(log_dir) == [], rel.name
        assert removed_unadded(log_dir) == [], rel.name
    assert catalog.delta_backlog() == [], "the catalog still records files as not in Delta"
