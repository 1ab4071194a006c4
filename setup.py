"""What ``pip install <checkout>`` builds: the client library, and nothing of the appliance.

Everything importable lives under ``rocketbox``: its folder holds the public client API
(``rocketbox/__init__.py``) and a link to each top-level code folder (``rocketbox/store`` ->
``store``), so the tree keeps the customer's layout and ``rocketbox.store`` is the same file from
the checkout, from an editable install and from a wheel. The wheel takes only the modules a
client imports (``CLIENT`` below: the codec, the record format, the client, and the compiled hot
paths with their selection, ``native``); the appliance runs
from its tree (``install.sh``: an editable install, whose ``.pth`` puts the tree on the path).
``docs/decisions/2026-11-29-one-name-to-import.md`` says why.
"""
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

# package -> the modules of it a client imports (None: all of them)
CLIENT: dict[str, set[str] | None] = {
    "rocketbox": None,
    "rocketbox.client": None,
    "rocketbox.remoting": None,
    "rocketbox.net": {"__init__", "client", "pending"},
    "rocketbox.store": {"__init__", "message", "errors", "configfile", "javahash"},
    "rocketbox.native": None,
}
# The compiled hot paths (docs/decisions/2026-11-29-compiled-hot-paths.md): optional, so a box
# without a compiler still installs, and everything then runs on their Python twins.
NATIVE = Extension("rocketbox.native._native", ["native/_native.c", "native/remoting.c", "native/records.c"], optional=True,
                   depends=["native/native.h"],
                   extra_compile_args=["-O2", "-Wall", "-Werror"])


class ClientModules(build_py):
    """build_py that copies into the wheel only the modules ``CLIENT`` names."""

    def find_package_modules(self, package, package_dir):
        keep = CLIENT[package]
        found = super().find_package_modules(package, package_dir)
        return found if keep is None else [m for m in found if m[1] in keep]


setup(packages=list(CLIENT), package_dir={"": "."}, package_data={"rocketbox": ["py.typed"]},
      ext_modules=[NATIVE], cmdclass={"build_py": ClientModules})
