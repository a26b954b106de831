"""The one import name over one folder: ``runner/`` is the package ``ratchet_runner`` and its
sub-folders its subpackages (the command line, ``runner/cli/``, and the adapters,
``runner/adapters/``, among them; ``package-dir`` in pyproject.toml maps it). pyproject.toml
cannot list the subpackages of a mapped folder by itself; this file does, and nothing else: every
module lives in a folder of the package, so a wheel, a plain editable and a strict editable
install are the same package.
"""

from __future__ import annotations

from setuptools import find_packages, setup

NAME = "ratchet_runner"

setup(packages=[NAME, *(f"{NAME}.{p}" for p in find_packages("runner"))])
