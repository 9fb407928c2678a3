"""Process creation from the Python interpreter: subprocess.run of /bin/echo
and of the interpreter itself (sys.executable; _posixsubprocess uses vfork),
a shell with stdin/stdout/stderr pipes, a Popen pipeline, os.fork, and a child
killed by a signal.  Prints deterministic results (never pids)."""
import os
import signal
import subprocess
import sys

r = subprocess.run(["/bin/echo", "hello", "from", "echo"], capture_output=True)
print("echo:", r.returncode, r.stdout, r.stderr)

r = subprocess.run([sys.executable, "-c",
                    "import sys; print('child python says', sum(range(100))); sys.exit(4)"],
                   capture_output=True, text=True)
print("python child:", r.returncode, repr(r.stdout), repr(r.stderr))

r = subprocess.run(["/bin/sh", "-c", "cat; echo to-stderr >&2; exit 2"],
                   input=b"piped input\n" * 3, capture_output=True)
print("sh:", r.returncode, r.stdout, r.stderr)

p1 = subprocess.Popen(["/usr/bin/printf", "cherry\\napple\\nbanana\\n"], stdout=subprocess.PIPE)
p2 = subprocess.Popen(["/usr/bin/sort"], stdin=p1.stdout, stdout=subprocess.PIPE)
p1.stdout.close()
out, _ = p2.communicate(timeout=30)
print("pipeline:", p1.wait(), p2.returncode, out)

out = subprocess.check_output("echo $((6 * 7))", shell=True, timeout=30)
print("check_output:", out)

sys.stdout.flush()
pid = os.fork()
if pid == 0:
    os._exit(9)
_, status = os.waitpid(pid, 0)
print("os.fork child exit:", os.waitstatus_to_exitcode(status))

r = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
print("killed child:", r.returncode, r.returncode == -signal.SIGKILL)

try:
    subprocess.run(["/nonexistent/ferry-test-binary"])
except FileNotFoundError as e:
    print("missing binary:", type(e).__name__, e.errno)
