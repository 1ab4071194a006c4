"""The real appliance: supervisor + writer + dispatcher + flusher processes, producers in their
own processes, checked through the store files afterwards."""
import os
import resource

import psutil
import pytest

from rocketbox.appliance.check import check
from rocketbox.appliance.process import process_name
from rocketbox.appliance.roles import roles_for
from rocketbox.remoting.codes import RequestCode as R
from rocketbox.remoting.codes import ResponseCode as RC
from rocketbox.store.consumequeue import ConsumeQueue, file_size_for
from tests.integration.harness import read_acks, start_producer, stored_keys
from tests.integration.wire import Wire


def test_concurrent_producers_every_message_once_dense_offsets_and_index(appliance_factory):
    app = appliance_factory().start()
    sh = app.shared()
    from rocketbox.shm.ringclient import RingClient
    admin = RingClient(app.cfg, sh).open()
    assert admin.create_topic("Orders", 8) == 0
    assert admin.create_topic("Audit", 3) == 0
    admin.close()
    sh.close()
    acks = [os.path.join(app.dir, f"acks{i}") for i in range(4)]
    procs = [start_producer(app, f"p{i}", "Orders" if i % 2 == 0 else "Audit", 1500, 8 if i % 2 == 0 else 3,
                            acks[i], batch=1 + i * 7) for i in range(4)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    assert app.stop() == 0
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))
    assert not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]
    acked = [k for f in acks for k in read_acks(f)]
    assert len(acked) == 6000
    stored = stored_keys(app.cfg)
    assert all(stored[k] == 1 for k in acked) and sum(stored.values()) == 6000
    rep = check(app.cfg)
    # two producers each spread 1500 messages as i % 8: queues 0-3 get 188, 4-7 get 187 from each
    assert {k[1]: len(v) for k, v in rep.queues.items() if k[0] == "Orders"} == {q: 376 if q < 4 else 374 for q in range(8)}
    assert sorted(len(v) for k, v in rep.queues.items() if k[0] == "Audit") == [1000] * 3
    assert len(os.listdir(app.cfg.commitlog_dir)) >= 2      # rolled over 1 MiB files


def test_restart_continues_queue_offsets_and_status(appliance_factory):
    app = appliance_factory().start()
    st = app.cmd("status")
    assert st.returncode == 0
    roles = roles_for(app.cfg)
    assert [line.split()[:2] for line in st.stdout.splitlines()[:len(roles) + 1]] == \
        [[r, "up"] for r in ["supervisor", *roles]]
    lock = os.path.join(app.cfg.root, "lock")
    for role in roles:                     # forked from the supervisor: named after their role, and
        p = psutil.Process(app.role_pid(role))     # without the store lock, which stays the supervisor's
        assert (p.name(), p.ppid()) == (process_name(role), app.proc.pid)
        assert lock not in {f.path for f in p.open_files()}, role
    assert lock in {f.path for f in psutil.Process(app.proc.pid).open_files()}
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "a", "TBW102", 300, 2, ack)
    assert p.wait(60) == 0, p.stderr.read()
    assert app.stop() == 0
    st = app.cmd("status")
    assert st.returncode == 1 and "down" in st.stdout
    app.start()
    assert "normal exit" in app.log_text()
    p = start_producer(app, "b", "TBW102", 300, 2, ack)
    assert p.wait(60) == 0, p.stderr.read()
    assert app.stop() == 0
    rep = check(app.cfg)
    assert rep.clean, rep.problems[:5]
    assert [q for q, _p, _b in rep.queues[("TBW102", 0)]] == list(range(300))
    cq = ConsumeQueue(app.cfg.root, "TBW102", 1, file_size_for(app.cfg.mappedFileSizeConsumeQueue), False).load()
    assert cq.max_offset == 300 and cq.files.files and len(cq.files.files) == 1
    cq.close()
    assert app.cmd("check").returncode == 0


def test_bad_config_stops_start_with_file_line_key_value(tmp_path):
    import subprocess
    import sys

    from tests.integration.harness import ROOT
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=x\n# comment\nflushDiskType=SOMETIMES\n")
    r = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "start", "-c", str(conf)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert f"{conf}:3" in r.stderr and "flushDiskType" in r.stderr and "SOMETIMES" in r.stderr
    conf.write_text("brokerNmae=x\n")
    r = subprocess.run([sys.executable, "-m", "rocketbox.appliance", "status", "-c", str(conf)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown key 'brokerNmae'" in r.stderr and f"{conf}:1" in r.stderr


def test_a_sigterm_to_the_whole_process_group_stops_cleanly(appliance_factory):
    """What timeout(1), kill -TERM -PGID or a service manager's control-group stop sends: every
    role gets SIGTERM, then the supervisor's own; a role already on its way out must not die of
    the second one (it used to: "haproxy exited with -15", a stop reported not clean)."""
    import signal
    app = appliance_factory().start()
    os.killpg(app.proc.pid, signal.SIGTERM)
    rc = app.proc.wait(60)
    app.proc = None
    log = app.log_text()
    assert rc == 0 and "rocketbox stopped cleanly" in log, log[-2000:]
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))


def test_ctrl_c_stops_role_by_role_and_roles_never_outlive_the_supervisor(appliance_factory):
    import signal

    import psutil
    app = appliance_factory().start()
    ack = os.path.join(app.dir, "acks")
    p = start_producer(app, "a", "TBW102", 200, 2, ack)
    assert p.wait(60) == 0, p.stderr.read()
    assert app.ctrl_c() == 0                       # every process of the group got SIGINT
    log = app.log_text()
    assert "finish the stop" not in log and "ERROR" not in log, log[-2000:]
    assert not os.path.exists(os.path.join(app.cfg.root, "abort"))
    assert not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]
    assert check(app.cfg).clean and sum(stored_keys(app.cfg).values()) == 200

    app.start()                                    # now the supervisor alone dies
    assert len(psutil.Process(app.proc.pid).children()) == len(roles_for(app.cfg)) == 10     # scheduler, replicator, metrics
    roles = psutil.Process(app.proc.pid).children(recursive=True)        # haproxy itself too
    os.kill(app.proc.pid, signal.SIGKILL)
    app.proc.wait()
    app.proc = None
    gone, alive = psutil.wait_procs(roles, timeout=20)
    assert not alive                               # each was told (SIGTERM) and stopped
    app.start()                                    # and the next start recovers
    assert app.log_text().count("recovered (") == 3
    assert app.stop() == 0
    assert check(app.cfg).clean and sum(stored_keys(app.cfg).values()) == 200


def test_a_busy_port_stops_start_naming_it_and_its_holder_unless_freed_in_time(appliance_factory):
    import socket
    import threading

    from rocketbox.appliance.supervisor import PORT_GRACE_S
    app = appliance_factory()

    def hold(port: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # a TIME_WAIT left on the port is no holder
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return s

    for port, what in ((app.cfg.listenPort, "HAProxy, listenPort"),
                       (app.cfg.listenPort - 2, "HAProxy's VIP port, listenPort - 2"),
                       (app.cfg.reader_port(1), "reader-1, readerPortBase (0: listenPort + 20) + 1")):
        with hold(port):
            r = app.cmd("start")
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert f"appliance: port {port} ({what}) is in use by pid {os.getpid()} (" in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr and "started " not in r.stderr, r.stderr[-2000:]   # no role ran
        assert not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]
        assert not os.path.exists(os.path.join(app.cfg.run_dir, "supervisor.pid"))

    held = hold(app.cfg.listenPort)                # freed within the grace (a previous run still exiting)
    threading.Timer(PORT_GRACE_S / 4, held.close).start()
    app.start(timeout=30)
    assert app.stop() == 0


def test_start_without_a_usable_haproxy_says_so_and_starts_nothing(appliance_factory):
    app = appliance_factory(haproxyBinary="/nonexistent/haproxy")
    r = app.cmd("start")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert ("appliance: haproxy binary '/nonexistent/haproxy' not found: install Debian's haproxy package "
            "(./install.sh does) or set haproxyBinary in broker.conf") in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "started " not in r.stderr, r.stderr[-2000:]
    assert not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]
    r = app.cmd("run", "haproxy")                  # the role alone, as its systemd unit runs it
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    assert "ERROR haproxy binary '/nonexistent/haproxy' not found" in r.stderr, r.stderr[-2000:]


def test_a_store_directory_that_cannot_be_made_is_named_with_its_setting(appliance_factory):
    for key, path in (("storePathRootDir", "/dev/null/store"), ("storePathCommitLog", "/dev/null/commitlog")):
        app = appliance_factory(**{key: path})
        r = app.cmd("start")
        assert r.returncode == 2, (key, r.returncode, r.stderr[-2000:])
        assert f"appliance: cannot make the store directory {path} ({key}): Not a directory" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not [n for n in os.listdir("/dev/shm") if app.cfg.shmPrefix[1:] in n]


def test_roles_serve_more_clients_than_the_soft_open_files_limit_they_were_started_under(appliance_factory):
    """Started from a shell whose soft limit is 256 open files (Debian's login shells have 1024):
    600 clients through HAProxy are all served, since every role raises its soft limit to the hard
    one (before, each reader stopped accepting near the soft limit, silently)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip(f"this box's hard limit of open files is {hard}")
    app = appliance_factory()
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))            # what the appliance inherits
    try:
        app.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert psutil.Process(app.role_pid("reader-0")).rlimit(psutil.RLIMIT_NOFILE) == (hard, hard)
    wires = [Wire("127.0.0.1", app.cfg.listenPort, timeout=3) for _ in range(600)]
    try:
        for i, w in enumerate(wires):
            assert w.call(R.GET_BROKER_RUNTIME_INFO).code == RC.SUCCESS, f"client {i} not served"
    finally:
        for w in wires:
            w.close()
