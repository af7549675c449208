"""libcst transformers used by eaglepatch, one per job:

- `add_delegations.AddDelegations`: append delegating members to wrapper classes;
- `normalize_imports.NormalizeAddedImports`: give merged imports black's layout;
- `remove_delegations.RemoveDelegations`: take out what `AddDelegations` wrote.

Nothing is imported here: `check` needs none of them (and libcst.codemod costs ~0.2 s to import).
"""
