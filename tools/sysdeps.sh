#!/bin/sh
# Install the Debian packages Ferry needs when they are missing.  As root this
# installs them; otherwise it names them and stops.
set -e
need=""
command -v gcc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v make >/dev/null 2>&1 || need="$need make"
command -v strace >/dev/null 2>&1 || need="$need strace"
[ -e /usr/include/x86_64-linux-gnu/asm/unistd_64.h ] || need="$need linux-libc-dev"
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need="$need python3-venv"
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "installing:$need"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
else
    echo "missing Debian packages:$need" >&2
    echo "install them with: sudo apt-get install$need" >&2
    exit 1
fi
