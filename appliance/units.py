"""The systemd units (``systemd/``), rendered from one table: a unit per role, the readers as
instances of ``rocketbox-reader@.service``, the store's keeper, the stop marker and the target.
``appliance units [--prefix P] [--conf C] [--out DIR]`` renders them (``install.sh`` writes them
to /etc/systemd/system); the files in ``systemd/`` are this rendering with the defaults, and a test
keeps them equal.

Who owns what under systemd:
- ``rocketbox-store.service`` (``appliance run store``, Type=notify) takes the store lock,
  creates the shared memory and recovers, then says READY=1; every role is bound to it and starts
  after it. Stopped last, it unlinks the shared memory.
- ``rocketbox-stopping.service`` starts after every role, so a stop of the target stops it
  first. Its ExecStop (``appliance stopping``) marks the stop as the whole appliance's, so the
  roles systemd stops next finish it (final flush, checkpoint, abort marker removed). A single
  role's restart does not pass through it.
- Not set, on purpose: ``RemoveIPC`` (it would unlink the shared memory when any one role's unit
  stops) and ``PrivateDevices`` (a private /dev would give each unit its own /dev/shm).
- Each role starts after the roles before it in ``appliance start``'s order, so systemd stops them
  in the reverse order, as the supervisor does. ``Restart=on-failure`` brings a dead role back, and
  it attaches again.
- No role runs without the keeper: each is ``BindsTo=`` it, so a keeper that dies (its lock gone
  with it) takes every role down; the target ``Upholds=`` the keeper and the roles, so systemd
  starts the keeper again (recovery, as after any crash) and then the roles. Upholds also means
  a role stopped by hand comes back while the target is active: stop the target instead.
"""
from __future__ import annotations

import argparse
import os
import sys

from rocketbox.appliance.roles import roles_for

PREFIX = "/opt/rocketbox"
CONF = "/etc/rocketbox/broker.conf"
STORE = "/var/lib/rocketbox"
ORDER = ("nameserver", "flusher", "dispatcher", "writer", "replicator", "cleaner", "scheduler", "reader", "haproxy",
         "grpc", "metrics")
WHAT = {
    "nameserver": "name server: topic routes",
    "flusher": "flusher: SYNC_FLUSH group commit, ASYNC_FLUSH periods, the checkpoint",
    "dispatcher": "dispatcher: consume queues and the IndexFile",
    "writer": "writer: the one process that appends to the CommitLog",
    "cleaner": "cleaner: retention, disk watch, scrub",
    "replicator": "replicator: master/slave replication (RocketMQ's HA protocol on listenPort + 1)",
    "scheduler": "scheduler: delay levels, timers and transaction checks",
    "reader": "reader %i: sends, pulls and admin requests behind HAProxy",
    "haproxy": "HAProxy: the client-facing listeners",
    "grpc": "gRPC front: RocketMQ 5.x clients on grpcListenPort",
    "metrics": "metrics: Prometheus' /metrics on metricsPort",
}
HARDENING = """NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={store}
PrivateTmp=yes
ProtectHome=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
ProtectClock=yes
ProtectKernelLogs=yes
ProtectHostname=yes
PrivateMounts=yes
UMask=0027
CapabilityBoundingSet=
AmbientCapabilities=
LimitNOFILE=655350
LimitMEMLOCK=infinity
"""


def unit_name(role: str) -> str:
    return "rocketbox-reader@.service" if role == "reader" else f"rocketbox-{role}.service"


def _after(role: str) -> list[str]:
    """The store's keeper and the roles before ``role`` in the start order (readers aside: no
    role waits for them, and HAProxy's checks find them when they come)."""
    return ["rocketbox-store.service"] + [unit_name(r) for r in ORDER[:ORDER.index(role)] if r != "reader"]


def _service_type(role: str) -> str:
    """HAProxy's unit is ready once a request through it is answered (a reader behind it is up),
    so ``systemctl start rocketbox.target`` returns when clients can be served; the other roles
    are ready when they run."""
    if role == "haproxy":
        return "Type=notify\nNotifyAccess=main\nTimeoutStartSec=120"
    return "Type=simple"


def role_unit(role: str, prefix: str = PREFIX, conf: str = CONF, store: str = STORE) -> str:
    name = "reader-%i" if role == "reader" else role
    return f"""# rocketbox {WHAT[role]} (appliance/units.py renders this file)
[Unit]
Description=rocketbox {WHAT[role]}
PartOf=rocketbox.target
BindsTo=rocketbox-store.service
After={' '.join(_after(role))}

[Service]
{_service_type(role)}
User=rocketbox
Group=rocketbox
ExecStart={prefix}/venv/bin/appliance run {name} -c {conf}
Restart=on-failure
RestartSec=1
TimeoutStopSec=60
{HARDENING.format(store=store)}"""


def store_unit(prefix: str = PREFIX, conf: str = CONF, store: str = STORE) -> str:
    return f"""# rocketbox: the store's keeper (appliance/units.py renders this file)
[Unit]
Description=rocketbox store keeper (lock, shared memory, recovery)
PartOf=rocketbox.target

[Service]
Type=notify
NotifyAccess=main
User=rocketbox
Group=rocketbox
ExecStart={prefix}/venv/bin/appliance run store -c {conf}
TimeoutStartSec=600
TimeoutStopSec=60
{HARDENING.format(store=store)}"""


def stopping_unit(prefix: str = PREFIX, conf: str = CONF, store: str = STORE) -> str:
    after = " ".join(unit_name(r) for r in ORDER if r != "reader")
    return f"""# rocketbox: marks a stop of the target as the whole appliance's (appliance/units.py renders this file)
[Unit]
Description=rocketbox stop marker (the roles stopped after it finish the stop)
PartOf=rocketbox.target
Requires=rocketbox-store.service
After=rocketbox-store.service {after}

[Service]
Type=oneshot
RemainAfterExit=yes
User=rocketbox
Group=rocketbox
ExecStart=/bin/true
ExecStop={prefix}/venv/bin/appliance stopping -c {conf}
{HARDENING.format(store=store)}"""


def target_unit(cfg) -> str:
    wants = ["rocketbox-store.service"] + [
        f"rocketbox-reader@{r.split('-')[1]}.service" if r.startswith("reader-") else unit_name(r)
        for r in roles_for(cfg)] + ["rocketbox-stopping.service"]
    return f"""# rocketbox: the appliance (appliance/units.py renders this file from broker.conf's roles)
[Unit]
Description=rocketbox, a RocketMQ-compatible broker appliance
Wants={' '.join(wants)}
Upholds={' '.join(wants[:-1])}
After=network-online.target

[Install]
WantedBy=multi-user.target
"""


def render(cfg, prefix: str = PREFIX, conf: str = CONF, store: str = STORE) -> dict[str, str]:
    """File name -> text of every unit."""
    out = {unit_name(r): role_unit(r, prefix, conf, store) for r in ORDER}
    out["rocketbox-store.service"] = store_unit(prefix, conf, store)
    out["rocketbox-stopping.service"] = stopping_unit(prefix, conf, store)
    out["rocketbox.target"] = target_unit(cfg)
    return out


def main(argv=None) -> int:
    from rocketbox.appliance import config
    ap = argparse.ArgumentParser(prog="appliance units", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", help="broker.conf (its roles make the target's Wants)")
    ap.add_argument("--prefix", default=PREFIX)
    ap.add_argument("--conf", default=CONF, help="the broker.conf path the units run with")
    ap.add_argument("--out", help="write the files here (default: print their names)")
    args = ap.parse_args(argv)
    try:
        cfg = config.load(args.config)
    except config.ConfigError as e:
        print(f"appliance units: configuration error: {e}", file=sys.stderr)
        return 2
    files = render(cfg, args.prefix, args.conf, " ".join(cfg.data_dirs) if args.config else STORE)
    for name, text in files.items():
        if args.out:
            with open(os.path.join(args.out, name), "w") as f:
                f.write(text)
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
