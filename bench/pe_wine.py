"""The wine session of the PE benches (pe_overhead, pe_cluster): one prefix
and one persistent wineserver for every run of a bench, killed at the end."""
import os
import subprocess
from contextlib import contextmanager


@contextmanager
def session(tmp):
    """The environment of `wine` in a new prefix under `tmp` (a Path), headless and quiet."""
    prefix = tmp / "prefix"
    prefix.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    env.update(WINEPREFIX=str(prefix), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=",
               FERRY_DATA=str(tmp / "ferry-data"))
    server = subprocess.Popen(["wineserver", "-p", "-f"], env=env)
    try:
        with open(tmp / "wineboot.log", "wb") as log:
            subprocess.run(["wine", "wineboot", "-u"], env=env, stdout=log, stderr=log, check=True)
        yield env
    finally:
        subprocess.run(["wineserver", "-k"], env=env)
        server.wait(timeout=60)
