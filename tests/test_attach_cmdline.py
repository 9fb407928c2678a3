"""`ferry attach` records the command line a process shows: a title set over the
arguments (nginx, postgres, setproctitle) without the NUL padding after it."""
import subprocess

from ferry.commands.attach import _cmdline


def started(argv):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"ready\n"
    return p


def test_a_process_title_is_recorded_without_its_padding(test_programs):
    p = started([str(test_programs / "proctitle"), *map(str, range(40))])
    try:
        raw = open(f"/proc/{p.pid}/cmdline", "rb").read()
        assert raw.count(b"\0") > 40                     # the padding is there
        assert _cmdline(p.pid) == ["proctitle: worker process"]
    finally:
        p.stdin.close()
        p.wait(timeout=30)


def test_an_ordinary_command_line_is_kept_whole():
    argv = ["/bin/sh", "-c", "echo ready; read x", "name", "", "a b"]
    p = started(argv)
    try:
        assert _cmdline(p.pid) == argv                   # an empty argument inside stays
    finally:
        p.stdin.close()
        p.wait(timeout=30)
