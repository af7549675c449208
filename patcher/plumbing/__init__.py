"""Plumbing: whether what a capture hook writes reaches the forward that runs, and what to write when
it does not.  gate.py judges a class (`analyze_plumbing`, memoised per class on the run's
TreeClasses); planner.py plans the pieces from a working reference of the tree and proves a plan in
`ast` (the pieces put into copies of the classes' syntax trees, the gate run again); judge.py holds
the run's judgements of fixes that ride on plumbing (learned, inherited, delegated).  The libcst
write of a plan is proven where files are written (rewrite/verify.py: prove_plumbing)."""
