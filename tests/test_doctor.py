"""`ferry doctor` reports what the machine offers, and sees what is taken away.

What is taken away is taken for real: tests/programs/deny_syscalls runs ferry
under a seccomp filter that fails io_uring_setup as a kernel without io_uring
does (ENOSYS) and prctl(PR_SET_SYSCALL_USER_DISPATCH) as one without Syscall
User Dispatch does (EINVAL)."""
import errno
import json
import os
import subprocess

from conftest import FERRY, ferry

NAMES = ["kernel", "shim", "io_uring", "Syscall User Dispatch", "FSGSBASE", "ptrace scope",
         "image cache", "wine / mingw-w64"]
SYS_IO_URING_SETUP, SYS_PRCTL, PR_SET_SYSCALL_USER_DISPATCH = 425, 157, 59


def doctor(*prefix, env=None):
    """{name: check} of `ferry doctor --json`, run under the command `prefix`."""
    r = subprocess.run([*map(str, prefix), *FERRY, "doctor", "--json"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return {c["name"]: c for c in json.loads(r.stdout)}


def test_every_check_is_reported_with_what_it_enables():
    checks = doctor()
    assert list(checks) == NAMES
    for c in checks.values():
        assert c["status"] in ("yes", "limited", "no") and c["found"] and c["enables"]
        assert bool(c["fix"]) == (c["status"] != "yes"), c
    r = ferry("doctor", check=True)
    for name in NAMES:
        assert name in r.stdout


def test_this_machine_has_what_the_test_suite_uses():
    # the aggregation and catch-all tests run here, so the kernel has both
    checks = doctor()
    assert checks["kernel"]["found"].endswith(os.uname().release + " x86_64")
    assert checks["io_uring"]["status"] == "yes"
    assert checks["Syscall User Dispatch"]["status"] == "yes"
    assert checks["shim"]["status"] == "yes"


def test_missing_kernel_features_are_seen_with_a_fix(test_programs):
    deny = [test_programs / "deny_syscalls", f"{SYS_IO_URING_SETUP}={errno.ENOSYS}",
            f"{SYS_PRCTL}/{PR_SET_SYSCALL_USER_DISPATCH}={errno.EINVAL}", "--"]
    checks = doctor(*deny)
    uring, sud = checks["io_uring"], checks["Syscall User Dispatch"]
    assert uring["status"] == "no" and "ENOSYS" in uring["found"] and "io_uring" in uring["fix"]
    assert sud["status"] == "no" and "EINVAL" in sud["found"] and "5.11" in sud["fix"]
    assert checks["kernel"]["status"] == "yes"


def test_fsgsbase_follows_the_cpu_flags():
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    assert (doctor()["FSGSBASE"]["status"] == "yes") == ("fsgsbase" in flags)


def test_ptrace_scope_is_the_kernel_setting():
    path = "/proc/sys/kernel/yama/ptrace_scope"
    c = doctor()["ptrace scope"]
    if os.path.exists(path):
        with open(path) as f:
            assert f"ptrace_scope = {int(f.read())}" in c["found"]
    else:
        assert c["status"] == "yes"


def test_an_unusable_cache_or_missing_shim_is_reported(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    env = dict(os.environ, FERRY_CACHE=str(a_file), FERRY_SHIM=str(tmp_path / "no.so"))
    checks = doctor(env=env)
    assert checks["image cache"]["status"] == "no" and "FERRY_CACHE" in checks["image cache"]["fix"]
    assert checks["shim"]["status"] == "no" and "no.so" in checks["shim"]["found"]
    env = dict(os.environ, FERRY_CACHE=str(tmp_path / "cache"))
    assert doctor(env=env)["image cache"]["status"] == "yes"
