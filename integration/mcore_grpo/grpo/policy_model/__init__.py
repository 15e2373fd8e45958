"""`policy.model_name` made a local checkpoint the worker loads: a Hugging Face model or a real
pretrained one converted offline."""
