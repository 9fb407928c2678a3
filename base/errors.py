"""Errors that reach the user as one line naming the file and the problem."""


class FerryError(Exception):
    """A failure the user can act on; the CLI prints it as one line, exit 2."""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class InputError(FerryError):
    """The input file is not something Ferry can rewrite."""
