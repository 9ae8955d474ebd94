"""The package list (everything else is in pyproject.toml): ``store`` and its subpackages, plus
``store.migrations``, which lives in the repository's top-level ``migrations/`` folder
(``package-dir``) so that the wheel installs exactly one top-level import name, ``store``."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["store", "store.*"]), "store.migrations"])
