"""NeMo-RL's checkout as the editable distribution nemo-rl (../upstream_dist.py)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from upstream_dist import setup_upstream  # noqa: E402

setup_upstream(HERE, "NeMo-RL", ".", "nemo_rl")
