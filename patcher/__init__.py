"""eaglepatch: find and write the EAGLE-3 delegations an SGLang model wrapper is missing.

The pipeline, one module per stage:
locate -> source (read + slice + parse) -> protocol -> resolve -> plan -> report / preview / write.
"""

__version__ = "0.1.0"
