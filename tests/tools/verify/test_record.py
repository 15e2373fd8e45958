"""`verify --record` for some upstreams keeps the others' figures (a `verify --on main --record
Megatron-LM` had erased Megatron-Bridge's and NeMo-RL's proofs on main from the record)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.patchtool.model.test_suites import MAIN_RECORD_PATH
from tools.patchtool.verify.record import write_main_record


def _write(root: Path, data: dict[str, object]) -> None:
    path = root / MAIN_RECORD_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_a_record_of_one_upstream_keeps_the_others(tmp_path: Path) -> None:
    _write(tmp_path, {"ref": "main", "upstreams": {"A": {"commit": "a1"}, "B": {"commit": "b1"}}})
    write_main_record(tmp_path, {"ref": "main", "upstreams": {"B": {"commit": "b2"}}})
    written = json.loads((tmp_path / MAIN_RECORD_PATH).read_text())
    assert written["upstreams"] == {"A": {"commit": "a1"}, "B": {"commit": "b2"}}


def test_a_record_on_another_ref_replaces_the_file(tmp_path: Path) -> None:
    _write(tmp_path, {"ref": "dev", "upstreams": {"A": {"commit": "a1"}}})
    write_main_record(tmp_path, {"ref": "main", "upstreams": {"B": {"commit": "b2"}}})
    written = json.loads((tmp_path / MAIN_RECORD_PATH).read_text())
    assert written == {"ref": "main", "upstreams": {"B": {"commit": "b2"}}}
