"""The optimiser: from a frequency table to a PRAM matrix of minimal loss under C1.

Folders follow the pipeline (see ARCHITECTURE.md):

* :mod:`.problem` -- :class:`~.problem.DesignProblem`, what one design is about;
* :mod:`.constraints` -- the risk constraints as linear rows (C1: :mod:`.constraints.c1`);
* :mod:`.objectives` -- what is minimised (the exact L2 loss: :mod:`.objectives.l2`);
* :mod:`.support`, :mod:`.program`, :mod:`.pricing` -- the support of P, the linear programs
  built over it, and column generation;
* :mod:`.backends` -- the LP solvers behind one interface;
* :mod:`.strategies` -- the general design, phase one, block designs, the refinement;
* :mod:`.designer` -- :func:`~.designer.design`, which validates, retries and finishes.

Nothing is imported here, so that importing one stage does not import the others.
"""
