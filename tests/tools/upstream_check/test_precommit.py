"""upstream_check/precommit.py and config.py: reading hooks files into the checks that run."""

from __future__ import annotations

from tests.tools.upstream_check.hooks import BLACK_HOOKS, BLACK_SPEC, RUFF_SPEC
from tools.patchtool.upstream_check.config import checks_from_hooks
from tools.patchtool.upstream_check.model import BLACK, RUFF, RUFF_FORMAT
from tools.patchtool.upstream_check.precommit import read_hooks, tag_version


def test_hooks_reader_handles_block_scalars_lists_and_comments() -> None:
    text = (
        "repos:\n  - repo: https://github.com/astral-sh/ruff-pre-commit\n"
        '    rev: "v0.9.9" # use this\n    hooks:\n    - id: ruff\n'
        '      args: ["check", "--select", "I", "--fix"]\n'
        "      types_or: [python, pyi]\n    - id: ruff-format\n"
        "  - repo: local\n    hooks:\n      - id: script\n        entry: |\n"
        "          bash -c 'echo - id: fake'\n        files: '.*\\/x_[^/]*\\.md$'\n"
        "        args:\n          - -lc\n          - |\n            echo hi\n"
        "      - id: last\n"
    )
    hooks = read_hooks(text, "cfg")
    assert [(h.id, h.line) for h in hooks] == [
        ("ruff", 5),
        ("ruff-format", 8),
        ("script", 11),
        ("last", 19),
    ]
    assert hooks[0].args == ("check", "--select", "I", "--fix")
    assert hooks[0].types == ("python", "pyi") and tag_version(hooks[0].rev) == "0.9.9"
    assert hooks[2].files == ".*\\/x_[^/]*\\.md$" and hooks[2].args == ("-lc", "<block>")
    checks, not_run = checks_from_hooks(hooks, "cfg")
    assert [(c.kind, c.spec, c.args) for c in checks] == [
        (RUFF, RUFF_SPEC, ("--select", "I")),
        (RUFF_FORMAT, RUFF_SPEC, ()),
    ]
    assert not_run == ["script (cfg:11)", "last (cfg:19)"]
    assert tag_version("refs/tags/24.4.2:refs/tags/24.4.2") == "24.4.2"


def test_hook_file_filters_follow_pre_commit() -> None:
    (black,), _ = checks_from_hooks(read_hooks(BLACK_HOOKS, "cfg"), "cfg")
    assert black.kind == BLACK and black.spec == BLACK_SPEC
    assert black.applies("megatron/core/a.py", b"x\n")
    assert not black.applies("megatron/training/a.py", b"x\n")
    assert not black.applies("megatron/core/README.md", b"x\n")
