"""Rendering a run: text tables, JSON, CSV, HTML with plots, Chrome trace, diffs."""
