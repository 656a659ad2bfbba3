"""Controlled re-training, embeddings and Grad-CAM from local checkpoints (METHODS §5.11,
§2.4, §5.10); the ``[torch]`` extra. Torch is imported inside the functions that need it, so
that importing this package (and the audit that discovers its layer) stays torch-free."""
