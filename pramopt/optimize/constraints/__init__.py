"""Risk constraints as linear rows over the support of P.

Each constraint module gives its rows for a linear program (:mod:`..program`), what those rows
charge a transition outside the support (for column generation), and how to find the rows a
matrix violates (for lazy row generation).  Today: C1 (:mod:`.c1`).  A new risk constraint
is one file here with the same three pieces, and its rows added in :mod:`..program`.
"""
