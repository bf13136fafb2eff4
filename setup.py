"""The one compiled part of the package: the server's loop over queued calls (cuwire/server/records_build.py).
Everything else is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["cuwire/server/records_build.py:ffibuilder"])
