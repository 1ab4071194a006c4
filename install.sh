#!/usr/bin/env bash
# install.sh — set up rocketbox on this box.
#
#   sudo ./install.sh    the appliance system-wide, run by systemd (root): the Debian packages it needs
#                        (python3-venv, haproxy), the user rocketbox, this checkout as a release with a
#                        pinned venv under /opt/rocketbox, /etc/rocketbox/broker.conf (written once),
#                        the store in /var/lib/rocketbox, the units, the host's tuning; then
#                        rocketbox.target enabled and started. Again later: only what changed (an upgrade
#                        stops the target cleanly, switches the code and starts it). Options:
#                        --spark (pyspark too), --no-start, --uninstall (keeps the store), --purge.
#   ./install.sh --dev   make ./.venv with rocketbox (editable) and its test tools; no root needed
#                        unless Debian packages are missing, in which case apt-get is used.
#   ./install.sh --check print the host's tuning for the store (sysctls, the store disk's I/O
#                        scheduler and read-ahead): wanted, actual, whether it holds; exit 1 if not.
#
# Idempotent: running it again only fills in what is missing, and says what it changed.
# --dev's Debian packages: python3-venv, python3-dev, gcc, haproxy, tmux, redis-server and valgrind (the
# benchmarks: the comparison, and counting instructions; redis is not started by the install), and
# systemd-container and debootstrap (the test that boots the units in a systemd-nspawn container);
# prometheus without its recommends (a test scrapes the metrics role with it and runs promtool; the
# service Debian starts with it is stopped and disabled again).
# With npm on the box it also installs the Node client ali-ons into .venv/node (a test drives it).
set -euo pipefail
cd "$(dirname "$0")"

mode=system
system_args=()
for arg in "$@"; do
  case "$arg" in
    --dev) mode=dev ;;
    --check) mode=check ;;
    --spark|--no-start|--uninstall|--purge) system_args+=("$arg") ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
if [ "$mode" = check ]; then
  appliance=/opt/rocketbox/venv/bin/appliance; [ -x "$appliance" ] || appliance=.venv/bin/appliance
  [ -x "$appliance" ] || { echo "install.sh: nothing installed yet: run sudo ./install.sh (or ./install.sh --dev) first" >&2; exit 2; }
  conf=(); [ -f /etc/rocketbox/broker.conf ] && conf=(-c /etc/rocketbox/broker.conf)
  exec "$appliance" host "${conf[@]}"
fi
if [ "$mode" = system ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: the system-wide install needs root: it installs Debian packages, creates the user rocketbox" \
         "and writes /opt/rocketbox, /etc/rocketbox, /var/lib/rocketbox, /etc/systemd/system, /etc/sysctl.d and" \
         "/etc/udev/rules.d. Run: sudo ./install.sh   (or ./install.sh --dev: a venv in this checkout, no root)" >&2
    exit 2
  fi
  need_apt=()
  case " ${system_args[*]-} " in *" --uninstall "*|*" --purge "*) ;; *)
    command -v python3 >/dev/null || need_apt+=(python3)
    python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy) ;;
  esac
  if [ ${#need_apt[@]} -gt 0 ]; then
    echo "install.sh: installing Debian packages: ${need_apt[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
  fi
  exec python3 -m rocketbox.appliance.install "${system_args[@]}"
fi

need_apt=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)   # the client-facing listener
command -v redis-server >/dev/null || need_apt+=(redis-server)                     # bench.e2e compares with it
command -v valgrind >/dev/null || need_apt+=(valgrind)                             # bench.paths counts instructions
command -v systemd-nspawn >/dev/null || need_apt+=(systemd-container)               # tests/system boots the units
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need_apt+=(debootstrap)
command -v tmux >/dev/null || need_apt+=(tmux)                                     # a test drives appliance top in it
python3 -c 'import sysconfig,os,sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")) else 1)' || need_apt+=(python3-dev)
sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
if [ ${#need_apt[@]} -gt 0 ]; then
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need_apt[@]}"
fi
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then   # tests/integration/test_metrics.py
  [ ${#need_apt[@]} -gt 0 ] || $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends prometheus
  # the test runs a Prometheus of its own: the service the package starts (under systemd) is not wanted
  if [ -d /run/systemd/system ]; then $sudo_cmd systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[dev]'
.venv/bin/python -c 'from rocketbox.appliance.install import write_launcher, install_protocol; write_launcher(".venv"); install_protocol(".venv", client=True)'
# a real client in another language for tests/integration/test_nodeclient.py, when Node is on the box
if command -v npm >/dev/null && [ ! -d .venv/node/node_modules/ali-ons ]; then
  npm install --prefix .venv/node --no-audit --no-fund --silent ali-ons@3.12.0 urllib@2.44.1 >/dev/null 2>&1 \
    || echo "install.sh: npm could not install ali-ons; the Node client test will be skipped" >&2
fi
echo "install.sh: ready — .venv/bin/appliance start  |  .venv/bin/pytest"
