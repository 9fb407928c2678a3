"""`ferry gui [PROJECT]`: the desktop project manager (PySide6)."""
import click


@click.command("gui")
@click.argument("project", required=False, type=click.Path(dir_okay=False, path_type=str))
def command(project):
    """Open the desktop project manager, with PROJECT (a *.ferryproj file) if given.

    A project is a program with its arguments, working directory, environment and
    profile; its runs are kept next to it in runs/<n>."""
    from ..base.errors import FerryError
    try:
        import PySide6.QtWidgets  # noqa: F401 - fails here if a system library is missing

        from ..gui import app
    except ImportError as e:  # PySide6 or a system library it needs is missing
        raise FerryError("gui", f"cannot start: {e}") from None
    app.check_display()
    raise SystemExit(app.main(project))
