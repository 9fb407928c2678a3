"""One wine prefix and one persistent wineserver for a benchmark's runs."""
import contextlib
import os
import subprocess
from pathlib import Path


@contextlib.contextmanager
def wine_session(tmp):
    """The environment of wine commands against a new prefix in `tmp` (wineboot done,
    its wineserver up until the block ends); Ferry's data in `tmp` too."""
    tmp = Path(tmp)
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
