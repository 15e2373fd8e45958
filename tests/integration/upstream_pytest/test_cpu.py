"""upstream_pytest.cpu, the pytest plugin for running the upstreams' own test suites without
CUDA: pytest runs in a subprocess with `-p upstream_pytest.cpu` on small synthetic test
files (no megatron import), and each test's outcome and skip reason is read from its JUnit XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.cpu_only(
    reason="the plugin is a no-op where CUDA is available (test_no_op_where_cuda_is_available "
    "covers that with CUDA faked)"
)

SYNTHETIC = """
import sys

import pytest
import torch
import torch.distributed as dist


def _init(backend):
    # As Megatron-LM's Utils.initialize_distributed does (tests/unit_tests/test_utilities.py).
    torch.cuda.set_device(0 % torch.cuda.device_count())
    dist.init_process_group(backend=backend, init_method="env://", rank=0, world_size=1)


def test_nccl_world_size_1_runs_on_gloo():
    _init("nccl")
    try:
        assert dist.get_backend() == "gloo"
        assert dist.get_backend(dist.new_group(ranks=[0], backend="nccl")) == "gloo"
        assert dist.get_backend(dist.new_group([0], None, "nccl")) == "gloo"  # positional
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        assert t.device.type == "cpu" and t.tolist() == [1.0, 1.0]
        assert torch.cuda.current_device() == torch.device("cpu")
        torch.cuda.current_stream().wait_stream(torch.cuda.current_stream())
        torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()


def test_device_backend_string_keeps_gloo():
    _init("cpu:gloo,cuda:nccl")
    try:
        assert dist.get_backend() == "cpu:gloo"
    finally:
        dist.destroy_process_group()


def test_cuda_rng_state_round_trip():
    torch.cuda.manual_seed(1)
    first = torch.cuda.get_rng_state()
    torch.cuda.manual_seed(2)
    assert not torch.equal(torch.cuda.get_rng_state(), first)
    torch.cuda.set_rng_state(first)
    assert torch.equal(torch.cuda.get_rng_state(), first)


def test_cuda_stream():
    torch.cuda.Stream()


@pytest.fixture
def device_properties():
    return torch.cuda.get_device_properties(0)


def test_setup_needs_cuda(device_properties):
    pass


def test_transformer_engine_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    import transformer_engine  # noqa: F401


def test_raised_from_apex_import():
    try:
        import apex  # noqa: F401
    except ImportError as e:
        raise RuntimeError("fused kernels unavailable") from e
    raise RuntimeError("fused kernels unavailable")


def test_plain_assertion():
    assert 1 == 2


def test_other_runtime_error():
    raise RuntimeError("CUDA is mentioned here but nothing is missing")


@pytest.mark.xfail(reason="expected", strict=True)
def test_xfail_needs_cuda():
    torch.cuda.Stream()
"""

PLACEHOLDERS = """
HAVE_TE = False
TESpecProvider = None


def test_te_placeholder_called():
    TESpecProvider()


def test_other_none_called():
    not_a_placeholder = None
    not_a_placeholder()
"""

NEEDS_TE_AT_IMPORT = """
import sys

sys.modules["transformer_engine"] = None
import transformer_engine  # noqa: E402, F401


def test_never_collected():
    pass
"""

MODULE_LEVEL_SKIP = """
import pytest

pytest.skip("skipped by the module itself", allow_module_level=True)
"""

FAKE_CUDA = """
import torch

torch.cuda.is_available = lambda: True
"""


def _outcomes(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, str]]:
    """Run pytest in a subprocess; {test name: "passed" | "failed" | "skipped: <reason>"}."""
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml=report.xml", "-o", "addopts=", *args
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(pytester.path / "report.xml").getroot().iter("testcase"):
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[case.get("name", "")] = "failed"
        elif skipped is not None:
            reason = skipped.get("message")
            if reason == "collection skipped":  # a module: the text is pytest's longrepr
                reason = skipped.text
            outcomes[case.get("name", "")] = f"skipped: {reason}"
        else:
            outcomes[case.get("name", "")] = "passed"
    return result, outcomes


def test_runs_what_cpu_can_and_skips_what_needs_cuda(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rendezvous port is the plugin's (a free one), not one this process may hold.
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    pytester.makepyfile(
        test_synthetic=SYNTHETIC,
        test_placeholders=PLACEHOLDERS,
        test_needs_te_at_import=NEEDS_TE_AT_IMPORT,
        test_module_level_skip=MODULE_LEVEL_SKIP,
    )
    result, outcomes = _outcomes(pytester, "-p", "upstream_pytest.cpu", "-rs")

    result.stdout.fnmatch_lines(["upstream-cpu: no CUDA: CPU compatibility layer active*"])
    # A module whose import needs a CUDA-only package is skipped, not a collection error.
    result.stdout.fnmatch_lines(
        ["SKIPPED * test_needs_te_at_import.py:*: upstream-cpu: needs transformer_engine (*"]
    )
    assert "needs transformer_engine" in outcomes["test_needs_te_at_import"]
    assert "skipped by the module itself" in outcomes["test_module_level_skip"]
    assert outcomes["test_nccl_world_size_1_runs_on_gloo"] == "passed"
    assert outcomes["test_device_backend_string_keeps_gloo"] == "passed"
    assert outcomes["test_cuda_rng_state_round_trip"] == "passed"
    for name in ("test_cuda_stream", "test_setup_needs_cuda"):
        assert outcomes[name].startswith("skipped: upstream-cpu: needs CUDA ("), outcomes[name]
    assert outcomes["test_transformer_engine_import"] == (
        "skipped: upstream-cpu: needs transformer_engine "
        "(import of transformer_engine halted; None in sys.modules)"
    )
    assert outcomes["test_raised_from_apex_import"].startswith(
        "skipped: upstream-cpu: needs apex (No module named 'apex')"
    )
    assert outcomes["test_te_placeholder_called"] == (
        "skipped: upstream-cpu: needs transformer_engine ('NoneType' object is not callable)"
    )
    # Failures that say nothing about missing hardware or packages stay failures.
    for name in ("test_plain_assertion", "test_other_runtime_error", "test_other_none_called"):
        assert outcomes[name] == "failed", name
    # An expected failure is pytest's business: still an xfail, not a hardware skip.
    assert outcomes["test_xfail_needs_cuda"] == "skipped: expected"
    assert len(outcomes) == 14


def test_no_op_where_cuda_is_available(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        fake_cuda=FAKE_CUDA,
        test_noop="""
import torch

def test_set_device_untouched():
    assert torch.cuda.set_device.__module__ == "torch.cuda"

def test_cuda_stream():
    torch.cuda.Stream()
""",
    )
    # fake_cuda is registered first, so the plugin sees CUDA "available" when it installs.
    result, outcomes = _outcomes(pytester, "-p", "fake_cuda", "-p", "upstream_pytest.cpu")

    result.stdout.fnmatch_lines(["upstream-cpu: CUDA is available; *layer is off (no-op)"])
    assert outcomes == {"test_set_device_untouched": "passed", "test_cuda_stream": "failed"}
