#!/bin/sh
# Install the Debian packages Ferry needs when they are missing.  As root this
# installs them; otherwise it names them and stops.
set -e
need=""
command -v gcc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v make >/dev/null 2>&1 || need="$need make"
# make check builds the shim with clang as well as gcc
command -v clang >/dev/null 2>&1 || need="$need clang"
command -v strace >/dev/null 2>&1 || need="$need strace"
# setcap: a test gives a program file capabilities (never enabled, as set-ID)
[ -x /usr/sbin/setcap ] || command -v setcap >/dev/null 2>&1 || need="$need libcap2-bin"
# bench/spawn.py times a real ./configure, generated with autoconf
command -v autoconf >/dev/null 2>&1 || need="$need autoconf"
[ -e /usr/include/x86_64-linux-gnu/asm/unistd_64.h ] || need="$need linux-libc-dev"
# the shim's aggregation runs on io_uring; wrk drives the network benchmarks
[ -e /usr/include/liburing.h ] || need="$need liburing-dev"
command -v wrk >/dev/null 2>&1 || need="$need wrk"
# apache2 with mpm_worker: the threaded server the fiber tests run unmodified
[ -x /usr/sbin/apache2 ] || need="$need apache2-bin"
# musl-gcc: the tests build a musl program to check that Ferry says why it
# cannot serve it
command -v musl-gcc >/dev/null 2>&1 || need="$need musl-tools"
# static test programs (tests/programs/static): Go's own toolchain (Debian's
# golang-go puts it in /usr/lib/go/bin)
command -v go >/dev/null 2>&1 || [ -x /usr/lib/go/bin/go ] || need="$need golang-go"
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need="$need python3-venv"
# ferry gui (PySide6): the system libraries Qt's xcb and offscreen platforms load,
# a font, and Xvfb for the GUI tests.
lib=/usr/lib/x86_64-linux-gnu
for pair in libEGL.so.1:libegl1 libGL.so.1:libgl1 libglib-2.0.so.0:libglib2.0-0 \
        libfontconfig.so.1:libfontconfig1 libdbus-1.so.3:libdbus-1-3 \
        libxkbcommon.so.0:libxkbcommon0 libxkbcommon-x11.so.0:libxkbcommon-x11-0 \
        libX11-xcb.so.1:libx11-xcb1 libxcb-cursor.so.0:libxcb-cursor0 \
        libxcb-icccm.so.4:libxcb-icccm4 libxcb-keysyms.so.1:libxcb-keysyms1 \
        libxcb-shape.so.0:libxcb-shape0 libxcb-randr.so.0:libxcb-randr0 \
        libxcb-render-util.so.0:libxcb-render-util0 libxcb-xinerama.so.0:libxcb-xinerama0 \
        libxcb-image.so.0:libxcb-image0 libxcb-xkb.so.1:libxcb-xkb1; do
    [ -e "$lib/${pair%%:*}" ] || need="$need ${pair#*:}"
done
[ -d /usr/share/fonts/truetype/dejavu ] || need="$need fonts-dejavu-core"
command -v Xvfb >/dev/null 2>&1 || need="$need xvfb"
command -v xauth >/dev/null 2>&1 || need="$need xauth"
# Windows PE programs (issue 12): wine runs them in the tests, mingw-w64 builds
# ferry.dll and the test programs, gendef (mingw-w64-tools) an import library.
# Installed without recommends: wine's pull in a desktop's worth of packages.
winneed=""
command -v wine >/dev/null 2>&1 || winneed="$winneed wine wine64"
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || winneed="$winneed gcc-mingw-w64-x86-64"
command -v gendef >/dev/null 2>&1 || winneed="$winneed mingw-w64-tools"
# UPX packs a Go program for the bad-input test; not every Debian release has it
# (bookworm does not), and the test says so when it is missing
if ! command -v upx >/dev/null 2>&1 && ! command -v upx-ucl >/dev/null 2>&1 &&
        apt-cache show upx-ucl >/dev/null 2>&1; then
    need="$need upx-ucl"
fi
# sshd: a server whose login child confines itself with seccomp
# (tests/test_sandboxed_server.py); its service is neither started nor left
# enabled by this install: the tests start sshd on a loopback port of their own
sshneed=""
[ -x /usr/sbin/sshd ] || sshneed="openssh-server"
[ -z "$need$winneed$sshneed" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "installing:$need$winneed $sshneed"
    apt-get update -qq
    [ -z "$need" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
    [ -z "$winneed" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends $winneed >/dev/null
    if [ -n "$sshneed" ]; then
        # policy-rc.d 101: no package script starts a service meanwhile
        had_policy=0
        [ -e /usr/sbin/policy-rc.d ] && had_policy=1
        [ "$had_policy" = 1 ] || printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $sshneed >/dev/null
        [ "$had_policy" = 1 ] || rm -f /usr/sbin/policy-rc.d
        if command -v systemctl >/dev/null 2>&1; then
            systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
        fi
    fi
else
    echo "missing Debian packages:$need$winneed $sshneed" >&2
    echo "install them with: sudo apt-get install$need$winneed $sshneed" >&2
    exit 1
fi
