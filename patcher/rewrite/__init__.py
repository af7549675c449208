"""From plans to bytes: the codemods run per file, the proof that a patched module imports and
means what the inner code meant, the diff preview, and the atomic write."""
