"""`ferry gui`: a desktop project manager over the same library code as the command line
(PySide6). See gui/README.md."""
