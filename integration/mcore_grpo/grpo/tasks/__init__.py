"""What the policy is trained on and graded by: the built-in CPU tasks, real math problems under
NeMo-RL's prompt and verifier, and held-out evaluation."""
