"""pytest plugins for running the upstreams' own test suites here (`tools/patches verify`):
test support, not part of the product (`mcore_grpo`), which they import and never the reverse.

- `upstream_pytest.cpu`: the CPU compatibility layer every upstream run loads;
- `upstream_pytest.nemo_rl`: the Ray cluster NeMo-RL's own tests get.
"""
