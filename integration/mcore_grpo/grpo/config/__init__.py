"""The GRPO run config: its schema (NeMo-RL's key names and defaults), how presets, files and
``key=value`` overrides make one, and the NeMo-RL keys read specially."""
