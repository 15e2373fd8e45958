"""The model matrix (`model_matrix`): a fixed sample re-measured, the page current, bad input.

The full matrix (every row of docs/models.json, ~6 min on 2 cores) is too slow for each CI
run; the sample below is measured here from scratch, through the same code that wrote the
page: dense GQA (Llama), zero-centered norms and tied embeddings (Gemma: the Megatron-LM
torch-norm patch), MLA with MoE, shared experts and a dense first layer at EP=2 (DeepSeek-V3:
the Megatron-LM attention patch), and gated delta net layers between attention layers
(Qwen3.5: the Megatron-LM local experimental-attention spec and FLA-free GDN patches, and the
worker's transformer_impl='local'), and an attention sink with sliding windows (GPT-OSS: its
export went through Bridge's class-name layout lookup, which the worker's SDPA attention class
missed until `hf_export.register_worker_modules`), and sparse attention on absorbed MLA with
sequence parallelism at TP=2 (GLM-5: the Megatron-LM sparse-attention, MLA latent-norm and
torch-norm patches, Bridge's local-Linear mapping, and `oracle`'s corrections of transformers
5.8.1). Qwen2/Qwen3/Qwen3-MoE have their own tests
(tests/integration/worker/test_hf_bridge.py). The oracle is `transformers` (inside `checks`);
this file adds that the sample rows still pass, and that the committed page is what the
committed measurement renders.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from model_matrix import matrix, page, verdict

from tests.support.device import MULTI_RANK_CPU

# Each covers features the others do not (see the page's features column).
SAMPLE = (
    "LlamaForCausalLM",
    "GemmaForCausalLM",
    "DeepseekV3ForCausalLM",
    "Qwen3_5ForCausalLM",
    "GptOssForCausalLM",
    "NemotronHForCausalLM",
    "GlmMoeDsaForCausalLM",
)


@pytest.mark.slow
@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
@pytest.mark.timeout(1800)
def test_the_sample_rows_pass_every_column_measured_now() -> None:
    rows = matrix.measure(SAMPLE)
    for row in rows:
        print(json.dumps(row))
        assert verdict.passes(row), f"{row['architecture']}: {json.dumps(row)}"
    recorded = {r["architecture"]: r for r in json.loads(matrix.JSON_PATH.read_text())["rows"]}
    for row in rows:  # the page says what a run measures now
        assert verdict.passes(recorded[row["architecture"]]), row["architecture"]


def test_the_committed_page_is_the_rendering_of_the_committed_measurement() -> None:
    assert matrix.check(matrix.JSON_PATH, matrix.MARKDOWN_PATH) == []


def test_a_hand_edit_and_a_moved_bridge_list_are_named(tmp_path: Path) -> None:
    doc = json.loads(matrix.JSON_PATH.read_text())
    dropped = doc["rows"].pop(0)
    doc["rows"].append({"architecture": "Gpt9ForCausalLM", "in_matrix": False, "reason": "x"})
    stale = tmp_path / "models.json"
    stale.write_text(json.dumps(doc))
    md = tmp_path / "models.md"
    md.write_text(page.render(doc) + "edited by hand\n")
    problems = matrix.check(stale, md)
    assert f"{dropped['architecture']}: in Bridge's list, not in docs/models.json" in problems
    assert "Gpt9ForCausalLM: in docs/models.json, no longer in Bridge's list" in problems
    assert any("is not the rendering of" in p for p in problems)


def test_an_architecture_outside_the_matrix_is_refused_naming_the_matrix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert matrix.main(["--arch", "GPT2LMHeadModel"]) == 2
    err = capsys.readouterr().err
    assert "GPT2LMHeadModel is not in the matrix; it has: " in err
    assert "LlamaForCausalLM" in err


def test_a_failure_is_one_line_naming_where() -> None:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    with pytest.raises(AttributeError) as raised:
        WrappedTorchNorm(config=None, hidden_size=4)  # type: ignore[arg-type]
    line = matrix.one_line(raised.value)
    assert "\n" not in line
    assert line.startswith("AttributeError: ")
    assert "(megatron/core/transformer/torch_norm.py:" in line


def test_regressions_name_rows_that_passed_and_no_longer_do() -> None:
    from model_matrix.matrix import regressions

    baseline = json.loads(matrix.JSON_PATH.read_text())
    passing = [row for row in baseline["rows"] if verdict.passes(row)]
    assert passing, "the committed page has passing rows"
    assert regressions(baseline, baseline) == []
    broken = json.loads(matrix.JSON_PATH.read_text())
    first = next(row for row in broken["rows"] if row["architecture"] == passing[0]["architecture"])
    first["layouts"]["TP=1"] = {"error": "RuntimeError: broken (x.py:1)"}
    assert regressions(baseline, broken) == [
        f"{passing[0]['architecture']}: RuntimeError: broken (x.py:1)"
    ]


def test_a_row_never_measured_renders_as_such() -> None:
    """`--arch X --json new.json` keeps every other row unmeasured; the page says so."""
    doc = json.loads(matrix.JSON_PATH.read_text())
    row = next(r for r in doc["rows"] if r["in_matrix"])
    doc["rows"][doc["rows"].index(row)] = {"architecture": row["architecture"], "in_matrix": True}
    assert f"| {row['architecture']} | - |  | not measured | - |" in page.render(doc)


def test_shared_prefix_is_judged_at_every_layout_it_was_measured_at() -> None:
    """A row measured exact at TP=1 and over the bar at TP=2 fails, and its page cell says so."""
    doc = json.loads(matrix.JSON_PATH.read_text())
    row = next(r for r in doc["rows"] if r["architecture"] == "LlamaForCausalLM")
    assert set(row["shared_prefix"]) == {"TP=1", "TP=2"}
    assert verdict.passes(row)
    row["shared_prefix"]["TP=2"] = {"value": {"logprobs": 1e-7, "gradients": 0.5}}
    assert not verdict.passes(row)
    assert "✗ 1e-07 / 5e-01" in page.render(doc)
    row["shared_prefix"]["TP=2"] = {"value": {"off": "a named reason"}}
    assert verdict.passes(row)
