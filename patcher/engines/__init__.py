"""The engines eaglepatch reads: one package each (sglang/, vllm/)."""
