"""Ferry: rewrite the syscall sites of compiled programs and run them through the shim.

The command line and run/report code live here; the rewriter is
``ferry.rewriter`` (source folder ``rewriter/``).
"""
__version__ = "0.1.0"
