"""Giving device memory back between phases and taking it again.

`offload` (`Offloader`: weights, gradient buffers, optimizer state to the host and back;
process-group destroy/reload around it), `nccl_offload` (free and rebuild megatron's NCCL
groups; byte-identical to the module the NeMo-RL patch adds), `process_group_rebind`
(re-point the DDP buffers and optimizer at rebuilt groups).
"""
