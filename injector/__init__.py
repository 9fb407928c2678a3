"""The injector: what makes every process of a run carry the shim.

The exec hook and load-time patching live in the shim (shim/src/exec.c,
shim/src/plan.c) because they run inside the program; their plans are made by
the rewriter (rewriter/plan.py). What runs outside the program lives here.
"""
