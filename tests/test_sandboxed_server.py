"""OpenSSH's sshd, a server from a Debian package whose pre-authentication
child confines itself (chroot, the privilege-separation user, then
prctl(PR_SET_SECCOMP) with a filter of ~100 instructions): logins through it
work under every profile as natively.  Under fibers, with the shim before
it kept the program's filters (shim/src/sandbox.c), that child was killed
by its own filter and no login got through."""
import os
import shutil
import socket
import subprocess
import time

import pytest

import httpload
from conftest import ALL_PROFILES, FERRY

SSHD = "/usr/sbin/sshd"
LOGINS = 3

pytestmark = [
    pytest.mark.skipif(not os.path.exists(SSHD) or not shutil.which("ssh"),
                       reason="no OpenSSH (apt-get install openssh-server)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="sshd's privilege separation needs root"),
]


@pytest.fixture
def sshd_setup(tmp_path):
    """A configuration of its own (host key, the client's key, a loopback
    port) and the client's command; sshd's chroot directory made if absent."""
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)],
                       check=True)
    shutil.copy(tmp_path / "client.pub", tmp_path / "authorized_keys")
    port = httpload.free_port()
    config = tmp_path / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host'}\n"
                      f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPasswordAuthentication no\n"
                      "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                      f"PermitRootLogin yes\nPidFile {tmp_path / 'sshd.pid'}\n")
    client = ["ssh", "-q", "-i", str(tmp_path / "client"), "-p", str(port), "-F", "/dev/null",
              "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
              "-o", "BatchMode=yes", "root@127.0.0.1", "echo login-$((6*7))"]
    return [SSHD, "-D", "-e", "-f", str(config)], client, port


def logins(server_argv, client, port, tmp_path):
    """What each of LOGINS logins printed, through sshd started by `server_argv`."""
    server = subprocess.Popen(server_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        outs = [subprocess.run(client, capture_output=True, timeout=30).stdout for _ in range(LOGINS)]
    finally:
        os.killpg(server.pid, 15)
        server.communicate(timeout=30)
    return outs


@pytest.mark.parametrize("profile", ALL_PROFILES)
def test_sshd_whose_login_child_sandboxes_itself_serves_logins(sshd_setup, profile, tmp_path):
    server, client, port = sshd_setup
    assert logins(server, client, port, tmp_path) == [b"login-42\n"] * LOGINS
    under = [*FERRY, "run", "--no-learn", "-p", profile, "-o", str(tmp_path / "run"), "--", *server]
    assert logins(under, client, port, tmp_path) == [b"login-42\n"] * LOGINS
