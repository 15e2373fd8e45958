"""Tripwire for patches/Megatron-Bridge/peft-import-without-transformer-engine.patch.

At the pin, `import megatron.bridge` fails on any machine without Transformer Engine:
`megatron/bridge/__init__.py` -> models -> conversion -> peft ->
`megatron/bridge/peft/lora_layers.py:20 import transformer_engine.pytorch as te` ->
`ModuleNotFoundError`. With the patch it imports, and only the TE-only class,
`TEFusedLoRALinear`, fails, when constructed, with an error naming Transformer Engine.

Run in a subprocess so the import starts from nothing, from the tree under test
(`upstream_tree`: the checkout, or the scratch tree `tools/patches verify` names).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.support.upstream_tree import upstream_tree

BRIDGE_SRC = upstream_tree("Megatron-Bridge") / "src"

pytestmark = [
    pytest.mark.skipif(
        not (BRIDGE_SRC / "megatron/bridge/__init__.py").is_file(),
        reason=f"{BRIDGE_SRC} holds no megatron.bridge: run tools/apply_patches.sh",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("transformer_engine") is not None,
        reason="Transformer Engine is installed here: the import cannot fail for lack of it",
    ),
]


SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import megatron.bridge
from megatron.bridge import AutoBridge
from megatron.bridge.peft.lora import LoRA
print("imported", AutoBridge.__name__, LoRA.__name__)
import torch
from megatron.bridge.peft.lora_layers import TEFusedLoRALinear
try:
    TEFusedLoRALinear(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
except ImportError as err:
    print("refused:", err)
"""


@pytest.fixture(scope="module")
def fresh_import() -> subprocess.CompletedProcess[str]:
    """One interpreter importing Bridge from nothing (an import costs ~30-100 s here)."""
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(BRIDGE_SRC)],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.timeout(600)
def test_bridge_imports_without_transformer_engine(
    fresh_import: subprocess.CompletedProcess[str],
) -> None:
    assert "imported AutoBridge LoRA" in fresh_import.stdout, fresh_import.stderr[-3000:]


@pytest.mark.timeout(600)
def test_te_fused_lora_names_transformer_engine_when_constructed(
    fresh_import: subprocess.CompletedProcess[str],
) -> None:
    assert fresh_import.returncode == 0, fresh_import.stderr[-3000:]
    assert "refused: TEFusedLoRALinear needs Transformer Engine" in fresh_import.stdout
