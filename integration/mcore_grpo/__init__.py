"""GRPO on a patched Megatron-Core tree: the glue policy worker and its pieces."""
