#!/usr/bin/env bash
# install.sh — set up rocketbox on this box.
#
#   ./install.sh --dev   make ./.venv with rocketbox (editable) and its test tools; no root needed
#                        unless Debian packages are missing, in which case apt-get is used.
#   ./install.sh --check print the host's tuning for the store (sysctls, the store disk's I/O
#                        scheduler and read-ahead): wanted, actual, whether it holds; exit 1 if not.
#
# Idempotent: running it again only fills in what is missing.
# Debian packages it may install: python3-venv, python3-dev, gcc, haproxy, redis-server and valgrind (the
# benchmarks: the comparison, and counting instructions; redis is not started by the install).
# With npm on the box it also installs the Node client ali-ons into .venv/node (a test drives it).
# (The system-wide install with systemd units arrives with a later issue.)
set -euo pipefail
cd "$(dirname "$0")"

mode=""
for arg in "$@"; do
  case "$arg" in
    --dev) mode=dev ;;
    --check) mode=check ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
if [ "$mode" = check ]; then
  appliance=/opt/rocketbox/venv/bin/appliance; [ -x "$appliance" ] || appliance=.venv/bin/appliance
  [ -x "$appliance" ] || { echo "install.sh: nothing installed yet: run ./install.sh --dev first" >&2; exit 2; }
  conf=(); [ -f /etc/rocketbox/broker.conf ] && conf=(-c /etc/rocketbox/broker.conf)
  exec "$appliance" host "${conf[@]}"
fi
if [ "$mode" != dev ]; then
  echo "install.sh: only --dev is supported so far (system-wide install comes with the systemd units)" >&2
  exit 2
fi

need_apt=()
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)   # the client-facing listener
command -v redis-server >/dev/null || need_apt+=(redis-server)                     # bench.e2e compares with it
command -v valgrind >/dev/null || need_apt+=(valgrind)                             # bench.paths counts instructions
python3 -c 'import sysconfig,os,sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")) else 1)' || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need_apt[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[dev]'
# a real client in another language for tests/integration/test_nodeclient.py, when Node is on the box
if command -v npm >/dev/null && [ ! -d .venv/node/node_modules/ali-ons ]; then
  npm install --prefix .venv/node --no-audit --no-fund --silent ali-ons@3.12.0 urllib@2.44.1 >/dev/null 2>&1 \
    || echo "install.sh: npm could not install ali-ons; the Node client test will be skipped" >&2
fi
echo "install.sh: ready — .venv/bin/appliance start  |  .venv/bin/pytest"
