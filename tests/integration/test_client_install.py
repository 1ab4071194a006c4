"""``pip install '<checkout>[client]'`` in a fresh venv outside the checkout: one top-level name
(``rocketbox``), no numpy and no appliance code, and a client that sends to and consumes from a
real appliance."""
import json
import os
import shutil
import subprocess
import sys

from tests.integration.harness import ROOT

# run by the client venv's python (-I: nothing of the checkout or the environment on its path)
CLIENT = r"""
import asyncio, json, sys
from rocketbox import Message, Producer, PushConsumer

async def main(namesrv):
    got, done = [], asyncio.Event()
    consumer = PushConsumer("installed-consumer", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe("Installed", "*")
    def listener(msgs):
        got.extend(m.body.decode() for m in msgs)
        if len(got) >= 3:
            done.set()
        return True
    await consumer.register(listener).start()
    producer = await Producer("installed-producer", namesrv).start()
    sent = [(await producer.send(Message("Installed", f"m{i}".encode(), tags="T"))).status for i in range(3)]
    await asyncio.wait_for(done.wait(), 60)
    await producer.shutdown()
    await consumer.shutdown()
    import rocketbox
    print(json.dumps({"sent": sent, "got": sorted(got), "file": rocketbox.__file__,
                      "numpy": "numpy" in sys.modules}))

asyncio.run(main(sys.argv[1]))
"""


def _copy_of_checkout(dest) -> str:
    """The checkout's files as git sees them (tracked and new, links kept as links)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for name in names:
        src, out = os.path.join(ROOT, name), os.path.join(dest, name)
        if not os.path.lexists(src):
            continue                                      # deleted, not yet committed
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), out)
        else:
            shutil.copy2(src, out)
    return str(dest)


def test_client_only_install_has_one_name_no_numpy_and_works(appliance_factory, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    src = _copy_of_checkout(tmp_path / "src")              # pip builds in the tree: not in the checkout's
    r = subprocess.run([*pip, "install", "-q", f"{src}[client]"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    listing = subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, check=True).stdout
    installed = {p["name"].lower() for p in json.loads(listing)} - {"pip", "setuptools"}
    assert installed == {"rocketbox", "orjson", "isal"}, installed       # no numpy, pyspark, posix_ipc, uvloop
    files = subprocess.run([*pip, "show", "-f", "rocketbox"], capture_output=True, text=True, check=True).stdout
    listed = [line.strip() for line in files.split("Files:", 1)[1].splitlines() if line.strip()]
    assert {f.split("/")[0] for f in listed} == {"rocketbox", "rocketbox-0.1.0.dist-info"}, listed
    modules = {f for f in listed if f.endswith(".py")}
    assert "rocketbox/client/producer.py" in modules and "rocketbox/store/message.py" in modules
    for appliance_code in ("rocketbox/appliance/", "rocketbox/writer/", "rocketbox/store/mappedfile.py",
                           "rocketbox/net/server.py", "rocketbox/readers/", "rocketbox/spark/"):
        assert not any(f.startswith(appliance_code) for f in modules), appliance_code

    app = appliance_factory(namesrv=True).start()
    r = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", CLIENT, app.namesrv], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["sent"] == ["SEND_OK"] * 3 and out["got"] == ["m0", "m1", "m2"]
    assert out["file"].startswith(str(venv)) and not out["numpy"]
