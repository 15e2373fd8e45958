"""Run-config presets (YAML) for `mcore-grpo --preset NAME`; see docs/grpo.md."""
