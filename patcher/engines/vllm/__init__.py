"""The vLLM engine profile: its tree, its `SupportsEagle3` protocol, its wrappers and plans,
the base-class fix and its revert."""
