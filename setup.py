"""Build glue that pyproject.toml cannot express: the one import name over three places.

``runner/`` is the package ``ratchet_runner``; its sub-folders are its subpackages;
``adapters/`` is ``ratchet_runner.adapters``; the root ``cli.py`` is the module
``ratchet_runner.cli``. setuptools maps packages to folders (``package-dir`` in
pyproject.toml) but not a single file, so :class:`BuildPy` adds ``cli.py`` to the package's
modules; wheels and strict editable installs both take their files from it.
"""

from __future__ import annotations

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

NAME = "ratchet_runner"


class BuildPy(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        if package == NAME:
            modules.append((NAME, "cli", "cli.py"))
        return modules


setup(
    packages=[NAME, *(f"{NAME}.{p}" for p in find_packages("runner")), f"{NAME}.adapters"],
    cmdclass={"build_py": BuildPy},
)
