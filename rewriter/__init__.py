"""The ELF rewriter: find syscall sites, plan patch windows, write trampolines.

Imported as ``ferry.rewriter``.  The pieces, in the order data flows through
them: ``elfload`` (open and validate with LIEF), ``ehframe`` and ``code`` (function
ranges, decoding, branch targets), ``planner`` (sites and windows),
``trampoline`` (the code each site jumps to), ``patcher`` (new segments and the
patched file), ``modules`` (the DT_NEEDED closure), ``cache`` and ``instrument``
(the whole job, with the image cache).
"""
