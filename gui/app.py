"""Starting the GUI: `ferry gui [PROJECT]` calls main(); tests and tools call
create_window()."""
import os
import sys
import traceback

from ..base.errors import FerryError


def check_display():
    """FerryError unless Qt has somewhere to draw (Qt would abort the process otherwise)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    raise FerryError("gui", "no display: set DISPLAY (an X server, or Xvfb) or WAYLAND_DISPLAY, "
                            "or QT_QPA_PLATFORM=offscreen")


def application(argv=None):
    """The QApplication (made once)."""
    from PySide6.QtWidgets import QApplication
    app = QApplication.instance()
    if app is None:
        app = QApplication(list(argv or [sys.argv[0]]))
        app.setApplicationName("Ferry")
        app.setOrganizationName("Ferry")
        app.setApplicationDisplayName("Ferry")
    return app


def create_window(project=None):
    """The main window, with `project` (a *.ferryproj path) opened if given; shown."""
    application()
    from .main_window import MainWindow
    window = MainWindow()
    if project:
        window.open_project(project)
    window.show()
    return window


def _excepthook(window_ref):
    """Unexpected errors go into the window, never as a traceback on the terminal
    (FERRY_DEBUG=1 prints it too)."""
    def hook(kind, value, tb):
        if os.environ.get("FERRY_DEBUG"):
            traceback.print_exception(kind, value, tb)
        text = str(value) if isinstance(value, FerryError) else \
            f"internal error: {kind.__name__}: {value} (set FERRY_DEBUG=1 for the traceback)"
        window = window_ref()
        if window is not None:
            window.show_message("error", text)
    return hook


def main(project=None):
    """Run the GUI until its window closes; the exit status."""
    check_display()
    app = application([sys.argv[0]])
    window = create_window(project)
    import weakref
    sys.excepthook = _excepthook(weakref.ref(window))
    return app.exec()
