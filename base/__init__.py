"""Ferry's base layer, imported as ``ferry.base``: what every other part uses
and that uses nothing of Ferry's.  ``layouts``: the formats shared with the
shim, as its C headers define them.
"""
