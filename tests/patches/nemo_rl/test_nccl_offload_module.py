"""Tripwire of patches/NeMo-RL/megatron-nccl-offload.patch: NeMo-RL's own module, for real.

Imports `nemo_rl.models.megatron.nccl_offload` from 3rdparty/NeMo-RL (unpatched: the module
does not exist) in ONE subprocess, with the installed megatron-core, and runs two
destroy -> reload cycles at world size 1 over gloo (gloo standing in for NCCL: every group
except Megatron's `*_GLOO` helpers is treated as NCCL-like). The world-size-2 behaviour is
covered against the identical copy in tests/integration/worker/memory/test_nccl_offload.py, the layout
check at world size 4 in tests/integration/worker/memory/test_nccl_offload_layout.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.python_process import python_c

pytestmark = pytest.mark.nemo_rl

_SCRIPT = r"""
import json, os, sys
import torch.distributed as dist
from megatron.core import parallel_state as ps
import nemo_rl.models.megatron.nccl_offload as mod

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
not_gloo_helper = lambda name, group: not name.endswith("_GLOO")
ps.initialize_model_parallel(tensor_model_parallel_size=1)
cycles = []
for mode in ("manual", "official"):
    result = mod.destroy_megatron_nccl_groups(mode, is_nccl_like=not_gloo_helper)
    down = ps.model_parallel_is_initialized()
    mod.reload_megatron_nccl_groups(result.snapshot, expected_layout=result.rank_layout)
    cycles.append({"mode": mode, "destroyed": result.groups_destroyed,
                   "snapshot": result.snapshot, "layout": result.rank_layout,
                   "down": down, "up": ps.model_parallel_is_initialized()})
print(json.dumps({"file": mod.__file__, "cycles": cycles}), flush=True)
# Tear down before exit: gloo threads alive at interpreter exit can abort the process.
ps.destroy_model_parallel()
dist.destroy_process_group()
"""


def test_nemo_rl_nccl_offload_module_cycles(nemo_rl_on_path: Path) -> None:
    script = f"import sys; sys.path.insert(0, {str(nemo_rl_on_path)!r})\n" + _SCRIPT
    proc = python_c(script, str(free_port()))
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"NeMo-RL nccl_offload run failed:\n{stderr[-4000:]}"
    out = json.loads(stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(nemo_rl_on_path), out["file"]
    manual, official = out["cycles"]
    assert "_TENSOR_MODEL_PARALLEL_GROUP" in manual["destroyed"]
    assert not [n for n in manual["destroyed"] if n.endswith("_GLOO")]
    assert official["destroyed"] == []
    for cycle in out["cycles"]:
        assert (cycle["down"], cycle["up"]) == (False, True)
        assert cycle["snapshot"]["tensor_model_parallel_size"] == 1
        assert cycle["layout"]["tensor_model_parallel"] == [0]
