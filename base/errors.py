"""Errors that reach the user as one line naming the file and the problem."""


def one_line(text):
    """text with what would break or garble its line (a newline, a form feed, an
    escape) written as Python writes it in a string: file names and the names a
    damaged file holds may contain anything."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class FerryError(Exception):
    """A failure the user can act on; the CLI prints it as one line, exit 2."""

    def __init__(self, path, problem):
        super().__init__(one_line(f"{path}: {problem}"))
        self.path = str(path)
        self.problem = problem


class InputError(FerryError):
    """The input file is not something Ferry can rewrite."""
