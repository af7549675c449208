"""Reading a tree: where it is, its files as text and outlines, what each name of a file binds,
the scopes of a def, the tree's formatter settings. Nothing here knows about EAGLE-3."""
