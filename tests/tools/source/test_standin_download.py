"""The stand-in's download (`pip_download`): only the package itself is taken as an sdist.

Why it matters: pip prepares an sdist's metadata, and `--no-binary :all:` made it build every
build dependency from source too (49 s for megatron-core 0.19.2 cold on 2 cores, against 4 s
with `--no-binary megatron-core`: docs/environment.md, "Only the package index")."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.patchtool.model.manifest import Standin
from tools.patchtool.source import standin


def _standin(kind: str, package: str) -> Standin:
    return Standin(
        kind=kind, package=package, tag_format="v{version}", version="1.2.3", proxy=True, paths={}
    )


@pytest.mark.parametrize(
    ("kind", "binary", "archive"),
    [
        ("sdist", ["--no-binary", "megatron-core"], "megatron_core-1.2.3.tar.gz"),
        ("wheel", ["--only-binary", ":all:"], "megatron_core-1.2.3-py3-none-any.whl"),
    ],
)
def test_only_the_package_is_asked_for_as_source(
    kind: str, binary: list[str], archive: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if cmd[1:3] == ["-m", "pip"] and "download" in cmd:
            seen.append(cmd)
            (tmp_path / archive).write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(standin.subprocess, "run", fake_run)
    found = standin.pip_download(_standin(kind, "megatron-core"), tmp_path)
    assert found == tmp_path / archive
    (cmd,) = seen
    at = cmd.index(binary[0])
    assert cmd[at : at + 2] == binary
    assert ":all:" not in cmd or kind == "wheel"
    assert "megatron-core==1.2.3" in cmd and "--no-deps" in cmd
