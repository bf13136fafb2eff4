"""The compiled parts of the package: the server's loop over queued calls (cuwire/server/records_build.py),
and the client library, built with the package and shipped in it (cuwire/client/lib/libcuwire.so), so that
`pip install` then `cuwire run` needs no compiler where it runs. Everything else is in pyproject.toml."""

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithClient(build_py):
    """build_py, then the client library into the build's package (not for an editable install: a checkout
    builds its own into build/client, `make client`)."""

    def run(self) -> None:
        import shutil
        import sys
        from pathlib import Path

        if not getattr(self, "editable_mode", False):  # a file moved or removed since the last build must not ship
            shutil.rmtree(Path(self.build_lib) / "cuwire", ignore_errors=True)
        super().run()
        if getattr(self, "editable_mode", False):
            return

        sys.path.insert(0, str(Path(__file__).resolve().parent))  # the source tree's cuwire/, in an isolated build
        from cuwire.client import build

        build.build(Path(self.build_lib) / "cuwire" / "client" / "lib", names=False)


setup(cffi_modules=["cuwire/server/records_build.py:ffibuilder"], cmdclass={"build_py": BuildWithClient})
