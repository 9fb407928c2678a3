"""python tests/gui_screenshot.py PROJECT PROGRAM OUT.png

Used by test_gui.py under Xvfb (DISPLAY set, QT_QPA_PLATFORM=xcb): makes a project for
PROGRAM, presses Instrument + Run + Report, waits for the run to be shown, and saves what
the X server shows of the main window to OUT.png. Prints one JSON line: platform, ok,
message, size."""
import json
import sys
import time

from PySide6.QtCore import QCoreApplication, QEventLoop

from ferry.gui import app as gui_app

TIMEOUT_S = 150


def wait(condition, seconds):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        QCoreApplication.processEvents(QEventLoop.AllEvents, 50)
        time.sleep(0.01)
    return condition()


def main(project_path, program, out):
    window = gui_app.create_window()
    project = window.new_project(project_path, program)
    done = []
    window.pipeline_finished.connect(lambda ok, text: done.append(ok))
    window.start(("instrument", "run", "report"))
    run_dir = str(project.runs_dir / "1")
    shown = wait(lambda: done and window.run_view.run_dir == run_dir, TIMEOUT_S)
    window.run_view.setCurrentWidget(window.run_view.charts)
    window.raise_()
    window.activateWindow()
    wait(lambda: False, 1.0)           # let the X server draw it all
    screen = window.screen()
    pixmap = screen.grabWindow(window.winId())
    if pixmap.isNull() or pixmap.width() < 10:
        pixmap = window.grab()
    pixmap.save(out, "PNG")
    ok = bool(shown and done and done[0])
    print(json.dumps({"platform": QCoreApplication.instance().platformName(), "ok": ok,
                      "message": window.messages.text(), "size": [pixmap.width(), pixmap.height()]}))
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
