"""ONE implementation: mcore_grpo/worker/memory/nccl_offload.py is the module the NeMo-RL patch adds.

Compared against the file as it stands in patches/NeMo-RL/megatron-nccl-offload.patch, so
this runs everywhere (no NeMo-RL checkout needed). Only the leading comment header (NVIDIA's
license header there, a pointer here) may differ.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PATCH = REPO_ROOT / "patches" / "NeMo-RL" / "megatron-nccl-offload.patch"
NEMO_RL_PATH = "nemo_rl/models/megatron/nccl_offload.py"
OURS = REPO_ROOT / "integration" / "mcore_grpo" / "worker" / "memory" / "nccl_offload.py"


def _new_file_from_patch(patch: Path, path: str) -> str:
    """The content of `path`, a file the patch creates (all `+` lines of its one hunk)."""
    lines = patch.read_text().splitlines()
    start = lines.index(f"+++ b/{path}")
    assert lines[start - 1] == "--- /dev/null", f"{patch.name}: {path} is not a new file"
    body: list[str] = []
    for line in lines[start + 2 :]:  # skip the @@ line
        if not line.startswith("+"):
            break
        body.append(line[1:])
    return "\n".join(body) + "\n"


def _without_leading_comments(text: str) -> str:
    lines = text.splitlines(keepends=True)
    index = 0
    while index < len(lines) and lines[index].startswith("#"):
        index += 1
    return "".join(lines[index:])


def test_integration_copy_matches_nemo_rl_patch() -> None:
    theirs = _without_leading_comments(_new_file_from_patch(PATCH, NEMO_RL_PATH))
    ours = _without_leading_comments(OURS.read_text())
    assert theirs.startswith('"""'), "the patched module must start with its docstring"
    assert ours == theirs, (
        f"{OURS.relative_to(REPO_ROOT)} drifted from {NEMO_RL_PATH} in "
        f"{PATCH.relative_to(REPO_ROOT)}: edit both, re-export the patch"
    )
