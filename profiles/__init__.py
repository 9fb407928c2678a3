"""Profiles: TOML files saying what the shim does for one application.

    load("trace") / load("./mine.toml") -> Profile      shipped() -> [Profile]
    Profile.shim_env() -> {"FERRY_MODE": ..., ...}      Profile.to_toml() -> str

The format is declared in schema.py (SECTIONS) and documented in README.md.
"""
from .loader import (SHIPPED_DIR, Profile, given_keys, load, load_file, loads, read_text,
                     resolve, shipped, shipped_paths)
from .schema import MODES, SECTIONS

__all__ = ["Profile", "load", "load_file", "loads", "shipped", "shipped_paths", "resolve",
           "read_text", "given_keys", "SHIPPED_DIR", "MODES", "SECTIONS"]
