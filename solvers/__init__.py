"""Solvers and demo simulations on decomposed domains (the block-parallel eikonal solver, issue 3).

Empty until the eikonal solver lands; the package exists so the layering is in place.
"""
