"""The build's one addition to pyproject.toml: the bundled profiles and sample corpus travel
inside the package (``tokenpcap/_bundled/profiles``, ``tokenpcap/_bundled/samples``), so that a
non-editable install (``pip install .``, a wheel, pipx) runs ``tokenpcap run`` as a checkout does.
In a checkout the package reads them where they are (``tokenpcap.config.profiles``)."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: the repository's directories that ride in the wheel, with their relative layout kept (a
#: scenario names its corpus as ``../../samples/...``)
BUNDLED = ("profiles", "samples")


class BuildWithBundledData(build_py):
    """``build_py``, then a copy of :data:`BUNDLED` under ``tokenpcap/_bundled/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        root = Path(__file__).resolve().parent
        for name in BUNDLED:
            dst = Path(self.build_lib) / "tokenpcap" / "_bundled" / name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(root / name, dst)


setup(cmdclass={"build_py": BuildWithBundledData})
