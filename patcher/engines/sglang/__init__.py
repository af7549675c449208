"""The SGLang engine: its tree, and the stages wired together for it (pipeline.py)."""
