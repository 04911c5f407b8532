#!/usr/bin/env bash
# The MaxText engine environment for the offline checks.
#
#   scripts/engine.sh build          create it (once; again only when the lock changes)
#   scripts/engine.sh run CMD ARGS   run CMD in the repository root inside it
#
# MaxText needs Python >= 3.12. Where the host has python3.13 or python3.12,
# the environment is a venv at .engine/venv. Otherwise (Debian 12 has 3.11)
# it lives in a Debian 13 (trixie) root at .engine/root made by debootstrap
# from the mirror apt is configured with; `run` enters it in a private mount
# namespace with proc, sys, dev, /dev/shm and the repository (at its own path)
# mounted, so the mounts vanish with the command even if it is killed.
# Both install exactly workloads/trainer/requirements-maxtext.lock, as the
# trainer image does.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
ENGINE_DIR=$REPO/.engine
ROOT=$ENGINE_DIR/root
LOCK=workloads/trainer/requirements-maxtext.lock
UV_VERSION=${UV_VERSION:?set UV_VERSION (the Makefile passes it)}
SUITE=trixie

phase() {  # phase MESSAGE: what `make engine` is doing now, with the seconds since it started
    echo "engine: $1 (${SECONDS} s)" >&2
}

host_python() {
    local py
    for py in python3.13 python3.12; do
        # A pyenv shim exists for versions it does not activate: ask the interpreter itself.
        if "$py" -c 'import sys, venv' >/dev/null 2>&1; then
            "$py" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}

# The Debian mirror apt uses on this machine (deb822 or one-line sources).
debian_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
        if [ -n "$uri" ] && [[ $uri != *security* ]]; then
            echo "$uri"
            return 0
        fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$f")
        if [ -n "$uri" ]; then
            echo "$uri"
            return 0
        fi
    done
    echo "engine: no Debian mirror found in apt's sources" >&2
    return 1
}

make_root() {
    if [ -x "$ROOT/usr/bin/python3" ] && [ ! -d "$ROOT/debootstrap" ]; then
        return 0
    fi
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
    rm -rf "$ROOT"
    mkdir -p "$ENGINE_DIR"
    local mirror
    mirror=$(debian_mirror)
    phase "debootstrap $SUITE from $mirror into $ROOT"
    debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,python3-dev,ca-certificates,build-essential \
        "$SUITE" "$ROOT" "$mirror" >"$ENGINE_DIR/debootstrap.log" 2>&1 \
        || { tail -20 "$ENGINE_DIR/debootstrap.log" >&2; exit 1; }
}

# Inside the private mount namespace: mount, chroot, run, unmount.
MOUNTED=()
enter_root() {
    cleanup() {
        local i
        for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
            umount -l "${MOUNTED[i]}" 2>/dev/null || true
        done
    }
    trap cleanup EXIT
    mount_once() {  # mount_once TARGET MOUNT-ARGS...: skip a target that is already a mount point
        local target=$1
        shift
        [ -e "$target" ] || mkdir -p "$target"
        if ! mountpoint -q "$target"; then
            mount "$@" "$target"
            MOUNTED+=("$target")
        fi
    }
    mount_once "$ROOT/proc" -t proc proc
    mount_once "$ROOT/sys" --rbind /sys
    mount_once "$ROOT/dev" --rbind /dev
    mount_once "$ROOT/dev/shm" -t tmpfs -o size=50% shm
    mount_once "$ROOT$REPO" --bind "$REPO"
    # This machine's trust store: package downloads may pass a TLS proxy whose CA only the host knows.
    mount_once "$ROOT/etc/ssl/certs/ca-certificates.crt" --bind -o ro /etc/ssl/certs/ca-certificates.crt
    # Name resolution as on the host (Ray finds its own address through the hostname).
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
    cp -L /etc/hosts "$ROOT/etc/hosts" 2>/dev/null || true
    local status=0
    chroot "$ROOT" /usr/bin/env -C "$REPO" PATH="/opt/engine/bin:/usr/local/bin:/usr/bin:/bin" HOME=/root PYTHONPATH="$REPO" \
        SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$@" || status=$?
    return "$status"
}

in_engine() {  # in_engine CMD...: CMD with the engine's python first on PATH, in the repository root
    if host_python >/dev/null; then
        (cd "$REPO" && PATH="$ENGINE_DIR/venv/bin:$PATH" PYTHONPATH="$REPO" "$@")
    else
        unshare --mount --propagation private "$0" __enter "$@"
    fi
}

build() {
    local python venv stamp want
    want="$(sha256sum "$REPO/$LOCK" | cut -d' ' -f1) uv==$UV_VERSION"
    if python=$(host_python); then
        venv=$ENGINE_DIR/venv
        stamp=$venv/.installed
        [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
        phase "venv on $python, installing $LOCK"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
        "$venv/bin/uv" pip sync --quiet --compile-bytecode --python "$venv/bin/python" "$REPO/$LOCK"
    else
        make_root
        stamp=$ROOT/opt/engine/.installed
        [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
        phase "venv in the Debian root, installing $LOCK"
        in_engine sh -c "python3 -m venv /opt/engine \
            && /opt/engine/bin/pip install --quiet --disable-pip-version-check uv==$UV_VERSION \
            && /opt/engine/bin/uv pip sync --quiet --compile-bytecode --python /opt/engine/bin/python $LOCK"
    fi
    echo "$want" >"$stamp"
    phase "ready"
}

case "${1:-}" in
    build) build ;;
    run)
        shift
        in_engine "$@"
        ;;
    __enter)
        shift
        enter_root "$@"
        ;;
    *)
        echo "usage: $0 build | run CMD [ARGS...]" >&2
        exit 2
        ;;
esac
