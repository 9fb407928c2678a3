"""Print what a program can see of how it was started, one item a line:
its environment, argv, executable, the descriptors it has and the signal
dispositions and mask it inherited.  Run natively and under `ferry run`,
the output must be the same."""
import os
import sys

print("argv", sys.argv)
print("env", sorted(f"{k}={v}" for k, v in os.environ.items()))
print("exe", os.readlink("/proc/self/exe"))
print("executable", sys.executable)
with open("/proc/self/environ", "rb") as f:
    raw = [e for e in f.read().split(b"\0") if e]
print("proc-environ-ferry", [e for e in raw if e.startswith((b"FERRY_", b"LD_PRELOAD", b"LD_LIBRARY_PATH"))])
print("fds", sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
print("sigign", status["SigIgn"].strip(), "sigblk", status["SigBlk"].strip())
