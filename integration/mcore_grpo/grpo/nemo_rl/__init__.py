"""NeMo-RL as this environment installs it: where its checkout is, one clear line where it is
absent (`source`), and what its Automodel import needs here (`automodel_compat`). The engine's
NeMo-RL task pieces and the NeMo-RL driver both start from it."""
