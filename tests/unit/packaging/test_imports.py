"""Everything importable lives under ``rocketbox``, and importing it changes nothing in the process."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# every module of the tree, imported in a fresh interpreter: the environment and the threads stay
# as they were, and no module of the tree is loaded under a name outside rocketbox
IMPORT_ALL = r"""
import importlib, json, os, pkgutil, sys, threading
env = dict(os.environ)
import rocketbox
folders = {os.path.basename(p) for p in rocketbox.__path__ and os.scandir(rocketbox.__path__[0]) if p.is_symlink()}
names = [m.name for m in pkgutil.walk_packages(rocketbox.__path__, "rocketbox.")
         if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": len(names), "env": sorted(set(os.environ.items()) ^ set(env.items())),
                  "threads": threading.active_count(), "outside": sorted(
                      n for n, m in sys.modules.items() if getattr(m, "__file__", None) and not n.startswith("rocketbox")
                      and os.path.relpath(os.path.realpath(m.__file__), sys.argv[1]).split(os.sep)[0] in folders)}))
"""


def test_importing_every_module_changes_nothing_and_everything_is_under_rocketbox():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL, ROOT], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["modules"] > 100                     # the walk went through every folder
    assert got["env"] == [] and got["threads"] == 1
    # no module of the tree was loaded under a name of its own (store.message beside rocketbox.store.message)
    assert got["outside"] == [], got["outside"]


def test_no_module_imports_a_folder_by_its_bare_name():
    """``from store.x import`` would load a second copy of the module beside ``rocketbox.store.x``."""
    folders = sorted(os.path.basename(p) for p in os.scandir(os.path.join(ROOT, "rocketbox")) if p.is_symlink())
    out = subprocess.run(["git", "grep", "-nE", rf"^\s*(from|import) ({'|'.join(folders)})(\.| |$)", "--", "*.py"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout == "", out.stdout
    assert len(folders) >= 15


ROLES = {"writer", "dispatcher", "flusher", "cleaner", "scheduler", "readers", "nameserver", "haproxy", "replicator",
         "grpcfront"}
SHARED = {"shm", "store", "net", "remoting"}      # what roles share; they import no role and no appliance


def _imports(folder: str):
    """(file, imported rocketbox folder) for every ``rocketbox.<folder>`` import of a folder's modules."""
    import ast
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path) as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                    for mod in mods:
                        parts = mod.split(".")
                        if parts[0] == "rocketbox" and len(parts) > 1:
                            yield os.path.relpath(path, ROOT), parts[1]


def test_roles_talk_only_through_shm_and_store():
    """A role imports no other role's package (what two roles share lives in shm/ or store/), and
    the shared folders import no role and not the appliance, which imports them all."""
    wrong = [(path, folder) for role in ROLES for path, folder in _imports(role) if folder in ROLES - {role}
             or folder == "appliance"]
    wrong += [(path, folder) for shared in SHARED for path, folder in _imports(shared)
              if folder in ROLES | {"appliance", "client", "spark"}]
    assert wrong == []


def test_every_public_name_and_method_of_the_client_has_a_docstring():
    import inspect

    import rocketbox
    missing = []
    for name in rocketbox.__all__:
        obj = getattr(rocketbox, name)
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
            if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            if not (member.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == []
