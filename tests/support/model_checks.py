"""A model check of the matrix (`model_matrix.checks`) for tests and tripwires: in a child
process, or (`shared_prefix_figures`) in a test that holds a one-rank world.

Why a child: each check initialises torch.distributed and megatron-core's parallel state,
which the test process must not keep; `python_c` forks it cheaply under verify.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.ports import free_port
from tests.support.python_process import python_c

# max |megatron - transformers| logits of a checkpoint (argv: port, checkpoint) at TP=1.
LOGITS_DIFFERENCE = """
import os, sys
from pathlib import Path
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
from model_matrix import checks, families
print("DIFF", checks.logits_difference(Path(sys.argv[2]), 1, 1, families.TINY_SIZES["vocab_size"]))
"""


# Script text for a child: `prompts` and `mask`, row i the first n ids of row i of
# `checks.tokens(vocab)` for the i-th n of `lengths`, left-padded to the longest (`width`).
# Needs `checks`, `torch`, `vocab` and `lengths` defined before it.
LEFT_PADDED_PROMPTS = """
ids = checks.tokens(vocab)
width = max(lengths)
prompts = torch.zeros(len(lengths), width, dtype=ids.dtype)
mask = torch.zeros(len(lengths), width, dtype=torch.long)
for row, n in enumerate(lengths):
    prompts[row, width - n:] = ids[row, :n]
    mask[row, width - n:] = 1
"""

# Set by a Bridge provider's finalize() in the process that built one; a child that inherits
# them refuses the attention backend it picks itself.
NVTE_BACKEND_VARS = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")


def without_backend_vars(script: str) -> str:
    """`script`, starting without this process's NVTE attention-backend variables."""
    prelude = f"import os\nfor _name in {NVTE_BACKEND_VARS!r}:\n    os.environ.pop(_name, None)\n"
    return prelude + script


def child_run(script: str, *args: str, timeout: float = 600) -> str:
    """Run `script` with a free port and `args` as its argv; its stdout (it must exit 0).
    The child starts without this process's NVTE attention-backend variables."""
    proc = python_c(without_backend_vars(script), str(free_port()), *args)
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr[-4000:]
    return stdout


def child_figure(script: str, *args: str, timeout: float = 600) -> float:
    """`child_run`, and the number after the last "DIFF" the script printed."""
    return float(child_run(script, *args, timeout=timeout).split("DIFF")[-1])


def shared_prefix_figures(tmp_path: Path, arch: str) -> dict[str, float]:
    """The matrix's shared-prefix check (`checks.shared_prefix_difference`, TP=1, EP=1) on
    `arch`'s tiny checkpoint, written under `tmp_path`, in this process (its caller holds a
    one-rank world: the `world1` fixture). Fails the test where the worker would not share."""
    from model_matrix import checks, families

    checkpoint = tmp_path / arch
    families.write_checkpoint(checkpoint, arch)
    figures = checks.shared_prefix_difference(checkpoint, 1, 1, families.TINY_SIZES["vocab_size"])
    assert "off" not in figures, figures
    return figures
