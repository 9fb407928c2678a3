"""The three actions, Instrument -> Run -> Report, as a sequence of command lines run off the
UI thread (QProcess), with live output, progress and Cancel:

- Instrument: `python -m ferry.gui.instrument_job APP` (ferry.runner.prepare, with progress);
- Run: `ferry run --profile P -o <project>/runs/<n> -- APP ARGS` in the project's working
  directory with its environment additions, recorded and indexed as from the command line;
- Report: `ferry report RUN_DIR` (the text report, into the console), then the window
  shows the run (report_ready).
"""
import json
import sys

from PySide6.QtCore import QObject, Signal

from ..rundata import is_run_dir, read_info
from ..report.rows import exit_text
from ..base.errors import FerryError
from .jobs import ProcessJob, ferry_command

STEPS = ("instrument", "run", "report")
TITLES = {"instrument": "Instrument", "run": "Run", "report": "Report"}
LEVELS = {"info": 0, "warning": 1, "error": 2}


class Pipeline(QObject):
    """Runs `steps` (a sequence of STEPS, in that order) for `project`.

    Signals: step_started(step, index, count); progress(value, maximum, text), maximum 0
    meaning busy; output(text, stream) with stream "out", "err" or "info"; message(level,
    text) for the window's message area; run_recorded(dir); report_ready(dir);
    finished(ok, text)."""
    step_started = Signal(str, int, int)
    progress = Signal(int, int, str)
    output = Signal(str, str)
    message = Signal(str, str)
    run_recorded = Signal(str)
    report_ready = Signal(str)
    finished = Signal(bool, str)

    def __init__(self, project, steps, report_dir=None, parent=None):
        super().__init__(parent)
        self.project = project
        self.steps = [s for s in STEPS if s in steps]
        self.run_dir = report_dir
        self.job = None
        self.cancelled = False
        self.ok = True
        self.summary = []
        self._index = -1
        self._done = False
        self._modules = 0
        self._total = 0

    # --- driving ---------------------------------------------------------------------

    def start(self):
        self._next()

    def cancel(self):
        self.cancelled = True
        if self.job is not None:
            self.job.cancel()
        else:
            self._finish(False, "cancelled")

    def running(self):
        return not self._done

    def _next(self):
        if self.cancelled:
            return self._finish(False, "cancelled")
        self._index += 1
        if self._index >= len(self.steps):
            return self._finish(self.ok, "; ".join(self.summary) or "done")
        step = self.steps[self._index]
        self.step_started.emit(step, self._index + 1, len(self.steps))
        try:
            getattr(self, f"_start_{step}")()
        except FerryError as e:
            self._fail(step, str(e))
        except OSError as e:
            self._fail(step, f"{e.filename}: {(e.strerror or str(e)).lower()}" if e.filename
                       else str(e))

    def _launch(self, argv, on_finished, lines=False, env=None):
        """Start `argv` in the project's working directory; `env` is added to the
        environment (the project's own additions are for the program: the run only)."""
        self.job = ProcessJob(argv, cwd=self.project.cwd(), env=env, lines=lines, parent=self)
        self.job.output.connect(self.output)
        if lines:
            self.job.line.connect(self._instrument_line)
        self.job.finished.connect(on_finished)
        self.output.emit("$ " + " ".join(_shown(a) for a in argv) + "\n", "info")
        self.job.start()

    def _fail(self, step, problem):
        self.ok = False
        self.message.emit("error", f"{TITLES[step]} failed: {problem}")
        self.output.emit(f"{TITLES[step]} failed: {problem}\n", "err")
        self._finish(False, f"{TITLES[step].lower()} failed")

    def _finish(self, ok, text):
        if self._done:
            return
        self._done = True
        self.job = None
        if self.cancelled:
            self.message.emit("warning", "Cancelled" + (f": {text}" if text != "cancelled" else ""))
            ok, text = False, "cancelled"
        self.progress.emit(1, 1, text)
        self.finished.emit(ok, text)

    def _stopped(self, result, step):
        """True (after reporting) if the step's process did not do its job."""
        if self.cancelled:
            self._finish(False, "cancelled")
            return True
        if result.error:
            self._fail(step, result.error)
            return True
        return False

    # --- Instrument --------------------------------------------------------------------

    def _check_application(self):
        if not self.project.application.strip():
            raise FerryError("application", "none chosen: pick the program to run")

    def _start_instrument(self):
        self._check_application()
        self._modules = 0
        self.progress.emit(0, 0, f"instrument {self.project.application}")
        self._launch([sys.executable, "-m", "ferry.gui.instrument_job", self.project.application],
                     self._instrument_done, lines=True)

    def _instrument_line(self, line):
        try:
            msg = json.loads(line)
        except ValueError:
            self.output.emit(line + "\n", "out")
            return
        if "progress" in msg:
            stage, name = msg["progress"], msg.get("name")
            if stage == "start":
                self._total = msg.get("total") or 0
                self._modules = 0
                self.progress.emit(0, self._total, "instrument")
            elif stage == "advance":
                self._modules += 1
                self.progress.emit(self._modules, max(self._total, self._modules), f"done {name}")
            elif stage in ("analyze", "rewrite", "cached"):
                self.progress.emit(self._modules, self._total, f"{stage} {name}")
        elif "result" in msg:
            self._show_instrumented(msg["result"])

    def _show_instrumented(self, r):
        lines = [f"{r['original']} -> {r['executable']}"]
        patched = total = 0
        for m in r["modules"]:
            if m["sites_total"] is None:
                lines.append(f"  {m['name']:<28} {m['role']:<12} not rewritten (runs before the shim)")
                continue
            total += m["sites_total"]
            patched += m["sites_patched"] or 0
            lines.append(f"  {m['name']:<28} {m['role']:<12} {m['sites_patched']}/{m['sites_total']}"
                         " syscall sites patched")
        self.output.emit("\n".join(lines) + "\n", "info")
        if not r["enabled"]:
            self.message.emit("warning", f"{r['original']} will run without the shim: {r['reason']}")
            self.summary.append("not instrumented")
        else:
            self.summary.append(f"instrumented ({patched}/{total} sites)")

    def _instrument_done(self, result):
        if self._stopped(result, "instrument"):
            return
        if result.exit_code != 0:
            return self._fail("instrument", result.ferry_error()
                              or f"exited with status {result.exit_code}")
        self._next()

    # --- Run -------------------------------------------------------------------------

    def _start_run(self):
        self._check_application()
        self.run_dir = str(self.project.next_run_dir())
        self.project.runs_dir.mkdir(parents=True, exist_ok=True)
        self.progress.emit(0, 0, f"run {self.project.application}")
        argv = ferry_command() + ["run", "--profile", self.project.profile_argument(),
                                  "-o", self.run_dir, "--"] + self.project.argv()
        self._launch(argv, self._run_done, env=self.project.environment)

    def _run_done(self, result):
        if result.error:
            return self._fail("run", result.error)
        run_dir = self.run_dir
        info = None
        if is_run_dir(run_dir):
            try:
                info = read_info(run_dir)
            except FerryError as e:
                return self._fail("run", str(e))
        if info is None or info.get("state") != "finished":
            if info is not None:
                self.run_recorded.emit(run_dir)
            if self.cancelled:
                return self._finish(False, "cancelled")
            if info is not None:
                return self._fail("run", "ferry run was stopped before the program ended; "
                                         "the run's figures may be incomplete")
            return self._fail("run", result.ferry_error() or
                              f"ferry run ended with status {result.exit_code}")
        self.run_recorded.emit(run_dir)
        exit_ = info.get("exit") or {}
        name = f"run {self.project.runs_dir.name}/{_name(run_dir)}"
        how = exit_text(exit_)
        self.output.emit(f"[{name}: exit {how} after {info.get('duration_s') or 0:.3f} s]\n", "info")
        if exit_.get("signal"):
            if self.cancelled:
                self.summary.append(f"{name} stopped by {exit_['signal']}")
            else:
                self.ok = False
                self.message.emit("error", f"The program crashed: killed by {exit_['signal']} "
                                           f"({name}; its figures up to the crash are kept)")
                self.summary.append(f"{name} crashed ({exit_['signal']})")
        elif exit_.get("code"):
            self.message.emit("warning", f"The program exited with status {exit_['code']} ({name})")
            self.summary.append(f"{name} exited with status {exit_['code']}")
        else:
            self.summary.append(f"{name} finished")
        if self.cancelled:
            return self._finish(False, "cancelled")
        self._next()

    # --- Report ----------------------------------------------------------------------

    def _start_report(self):
        if not self.run_dir:
            dirs = self.project.run_dirs()
            if not dirs:
                raise FerryError(self.project.name, "no run yet: press Run first")
            self.run_dir = str(dirs[-1])
        self.progress.emit(0, 0, f"report {self.run_dir}")
        self._launch(ferry_command() + ["report", self.run_dir], self._report_done,
                     env={"COLUMNS": "150"})

    def _report_done(self, result):
        if self._stopped(result, "report"):
            return
        if result.exit_code != 0:
            return self._fail("report", result.ferry_error()
                              or f"ferry report ended with status {result.exit_code}")
        self.summary.append("reported")
        self.report_ready.emit(self.run_dir)
        self._next()


def _name(path):
    return str(path).rstrip("/").rsplit("/", 1)[-1]


def _shown(arg):
    import shlex
    return shlex.quote(str(arg))
