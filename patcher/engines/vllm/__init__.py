"""The vLLM engine profile: its tree, its `SupportsEagle3` protocol, its wrappers and plans,
the base-class fix and its revert."""

VLLM_MODELS = "model_executor/models"  # below the vllm package folder
VLLM_MARKER = f"{VLLM_MODELS}/interfaces.py"  # what makes a folder a vllm package, for eaglepatch
