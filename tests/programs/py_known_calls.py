"""A script that makes known system calls, for comparing `ferry run` with
`strace -f -c`; it uses built-in modules only, so nothing is loaded by the
dynamic loader (whose calls the shim does not see) while it runs."""
import os
import sys

d = sys.argv[1]
for i in range(50):
    p = os.path.join(d, f"f{i}")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * i)
    os.close(fd)
for i in range(50):
    st = os.stat(os.path.join(d, f"f{i}"))
    assert st.st_size == i
for i in range(200):
    os.getppid()
try:
    os.stat(os.path.join(d, "missing"))
except FileNotFoundError:
    pass
print(sorted(os.listdir(d))[:3])
