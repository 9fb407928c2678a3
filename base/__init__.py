"""Ferry's base layer, imported as ``ferry.base``: what every other part uses
and that imports nothing else of Ferry's.  ``errors`` (the one-line errors a
user sees), ``atomic`` (writes a reader never sees half of), ``syscall_table``
(x86-64 Linux system call numbers and names), ``layouts`` (the formats shared
with the shim, as its C headers define them).
"""
