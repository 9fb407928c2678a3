"""Work off the UI thread: a command line in a QProcess (live output, Cancel), or a Python
function in the thread pool (loading a run, drawing charts)."""
import codecs
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QRunnable, QThreadPool, QTimer, Signal

from ..base.errors import FerryError

KILL_AFTER_MS = 3000   # Cancel: SIGTERM first, SIGKILL if still running after this


def ferry_command():
    """The `ferry` command line of this installation, as an argv prefix."""
    exe = Path(sys.executable).parent / "ferry"
    if exe.is_file() and os.access(exe, os.X_OK):
        return [str(exe)]
    return [sys.executable, "-c", "from ferry.cli import main; main()"]


@dataclass
class ProcessResult:
    exit_code: int | None      # None if it did not end normally
    crashed: bool              # killed by a signal (QProcess.CrashExit)
    cancelled: bool
    error: str | None          # it could not be started, or similar
    stderr_tail: str           # the last lines it wrote on stderr

    def ferry_error(self):
        """The one-line error `ferry` printed ("ferry: X: problem" -> "X: problem"), or None."""
        for line in reversed(self.stderr_tail.splitlines()):
            if line.startswith("ferry: "):
                return line[len("ferry: "):]
        return None


class ProcessJob(QObject):
    """One command run as a QProcess. Signals: output(text, stream) as it comes, with
    stream "out" or "err"; line(text) per stdout line when `lines` is set (the text is then
    not also sent as output); finished(ProcessResult)."""
    output = Signal(str, str)
    line = Signal(str)
    finished = Signal(object)

    def __init__(self, argv, cwd=None, env=None, lines=False, parent=None):
        super().__init__(parent)
        self.argv = [str(a) for a in argv]
        self.lines = lines
        self.cancelled = False
        self._done = False
        self._partial = ""
        self._err_tail = ""
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("out", "err")}
        self.proc = QProcess(self)
        if cwd is not None:
            self.proc.setWorkingDirectory(str(cwd))
        environment = QProcessEnvironment.systemEnvironment()
        for k, v in (env or {}).items():
            environment.insert(k, v)
        self.proc.setProcessEnvironment(environment)
        self.proc.setStandardInputFile(QProcess.nullDevice())
        self.proc.readyReadStandardOutput.connect(self._read_out)
        self.proc.readyReadStandardError.connect(self._read_err)
        self.proc.finished.connect(self._finished)
        self.proc.errorOccurred.connect(self._error)
        self._killer = QTimer(self)
        self._killer.setSingleShot(True)
        self._killer.timeout.connect(self._kill)

    def start(self):
        self.proc.start(self.argv[0], self.argv[1:])

    def running(self):
        return self.proc.state() != QProcess.NotRunning

    def cancel(self):
        """SIGTERM now (ferry run passes it on to the program), SIGKILL a little later."""
        if self._done:
            return
        self.cancelled = True
        if self.running():
            self.proc.terminate()
            self._killer.start(KILL_AFTER_MS)

    def _kill(self):
        if self.running():
            self.proc.kill()

    def _decode(self, stream, data):
        return self._decoders[stream].decode(bytes(data))

    def _read_out(self):
        text = self._decode("out", self.proc.readAllStandardOutput())
        if not self.lines:
            if text:
                self.output.emit(text, "out")
            return
        self._partial += text
        *whole, self._partial = self._partial.split("\n")
        for line in whole:
            self.line.emit(line)

    def _read_err(self):
        text = self._decode("err", self.proc.readAllStandardError())
        if text:
            self._err_tail = (self._err_tail + text)[-4000:]
            self.output.emit(text, "err")

    def _finished(self, code, status):
        self._read_out()
        self._read_err()
        if self.lines and self._partial:
            self.line.emit(self._partial)
            self._partial = ""
        crashed = status == QProcess.CrashExit
        self._end(ProcessResult(None if crashed else code, crashed, self.cancelled, None,
                                self._err_tail))

    def _error(self, err):
        if err == QProcess.FailedToStart:
            self._end(ProcessResult(None, False, self.cancelled,
                                    f"{self.argv[0]}: cannot start: {self.proc.errorString()}",
                                    self._err_tail))

    def _end(self, result):
        if self._done:
            return
        self._done = True
        self._killer.stop()
        self.finished.emit(result)


class _Signals(QObject):
    done = Signal(object)
    failed = Signal(str)


class _Keeper(QObject):
    """Holds running ThreadJobs until their result has arrived in the UI thread."""

    def __init__(self):
        super().__init__()
        self.jobs = {}

    def hold(self, job):
        self.jobs[id(job.signals)] = job
        job.signals.done.connect(self._release)
        job.signals.failed.connect(self._release)

    def _release(self, _result=None):
        self.jobs.pop(id(self.sender()), None)


_keeper = None


class ThreadJob(QRunnable):
    """fn() in the thread pool; `signals.done(result)` or `signals.failed(one line)` arrive
    in the thread of the receiver (the UI thread for widgets: connect them to methods of
    widgets). Create and start jobs in the UI thread."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.signals = _Signals()
        self.setAutoDelete(False)

    def run(self):
        try:
            result = self.fn()
        except FerryError as e:
            self.signals.failed.emit(str(e))
        except Exception as e:  # noqa: BLE001 - shown in the window, never a traceback
            self.signals.failed.emit(f"internal error: {type(e).__name__}: {e}")
        else:
            self.signals.done.emit(result)

    def start(self):
        global _keeper
        if _keeper is None:
            _keeper = _Keeper()
        _keeper.hold(self)
        QThreadPool.globalInstance().start(self)
        return self
