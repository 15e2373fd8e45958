"""The GRPO maths, NeMo-RL's semantics: the clipped policy-gradient loss and group-normalised
advantages."""
