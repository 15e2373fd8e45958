"""The run's settings, the layer below the worker and the GRPO engine: one dataclass per section
of the run config, each field with its default (NeMo-RL's key names and, where NeMo-RL has one,
its default), the loader of presets, files and overrides, and the checks of a whole config."""
