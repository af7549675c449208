"""The EAGLE-3 stages: the protocol from the consumers, the classes and the models they hold,
the roles, the hooks learned from the tree, and the plan (what is missing, what a fix writes)."""
