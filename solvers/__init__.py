"""Solvers on decomposed domains, written on the runtime (:mod:`insitu`).

- :mod:`solvers.eikonal`: the block-parallel, halo-synchronized eikonal solver
  (``EikonalSolver``, ``solve``, ``update_block``, which the runtime runs as the kernel
  ``eikonal.update``) and its MPI demo simulation (``python -m solvers.eikonal``).
"""
