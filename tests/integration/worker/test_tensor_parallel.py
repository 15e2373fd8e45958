"""TP=2 on 2 gloo ranks against plain PyTorch at TP=1: the same logprobs and the same update
(the comparison itself is `tests/integration/worker/tp_parity.py`; the benchmark prints its
figures).
"""

from __future__ import annotations

import pytest

from tests.integration.worker.tp_parity import compare_with_tp1
from tests.support.device import MULTI_RANK_CPU

pytestmark = pytest.mark.cpu_only(reason=MULTI_RANK_CPU)


def test_tp2_matches_plain_pytorch_at_tp1(world1: None) -> None:
    figures = compare_with_tp1()
    assert figures["ranks_agree"] == 1.0, "the TP ranks disagree on logprobs or weights"
    assert figures["logprob_max_abs_diff"] < 1e-5, figures
    assert figures["step_moved_params_by"] > 1e-4, "the step did not move the weights"
    assert figures["param_max_abs_diff"] < 1e-6, figures
