"""Packaging hook: the wheel carries libferry.so and libferry-static.so, built
from shim/ by its Makefile, and ferry/base/_layouts.py, the shared formats
generated from the shim's headers.

Everything else about the package is declared in setup.cfg.  The shim is built
in setuptools' temporary directory, so a `pip install .` never touches the
developer's shim/build, and the wheel is tagged for this platform because it
holds native code.  An editable install (`make setup`) builds no shim:
development uses shim/build directly (rewriter/shimlib.py); it generates the
layouts in the source tree, as `make shim` does.
"""
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
PACKAGED = Path("ferry") / "_shim" / "libferry.so"  # rewriter/shimlib.py looks here


class BuildPyWithShim(build_py):
    def run(self):
        super().run()
        layouts = HERE / "base" if self.editable_mode else Path(self.build_lib) / "ferry" / "base"
        subprocess.run([sys.executable, str(HERE / "tools" / "gen_layouts.py"), str(layouts / "_layouts.py")],
                       check=True)
        if self.editable_mode:
            return
        temp = Path(self.get_finalized_command("build").build_temp).resolve() / "shim"
        subprocess.run(["make", "-s", "-C", str(HERE / "shim"), f"BUILD={temp}"], check=True)
        dest = Path(self.build_lib) / PACKAGED
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(temp / "libferry.so", dest)
        # the shim static programs carry inside them (rewriter/static_embed.py)
        shutil.copy2(temp / "libferry-static.so", dest.with_name("libferry-static.so"))


class NativeDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithShim}, distclass=NativeDistribution)
