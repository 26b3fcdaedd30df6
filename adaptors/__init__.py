"""What simulations link: the Catalyst-style Python adaptor, pipeline configuration, C ABI and Fortran module.

Empty until the adaptor lands (issue 7); the package exists so the layering is in place.
"""
