#!/usr/bin/env bash
# Builds semel's container image with podman, with no network inside the build (`make image`).
#
#   1. the wheelhouse: `pip wheel . -w docker/wheelhouse` (semel and every dependency, for this
#      machine's Python, which must be the base image's: CPython 3.11 on x86_64 Linux);
#   2. the base image, when BASE_IMAGE is the debootstrap one (localhost/semel-base:bookworm,
#      the default) and podman does not have it yet: Debian bookworm's minbase with python3,
#      python3-venv and python3-pip, made with debootstrap from the Debian mirror apt uses here
#      (root only), its root file system cached as .cache/semel-base/bookworm-minbase.tar.gz so
#      that it is made once per machine, then `podman import`;
#   3. `podman build --network none --format docker` of docker/Dockerfile (docker format keeps
#      the HEALTHCHECK).
#
# Environment: IMAGE (default localhost/semel:dev), BASE_IMAGE (default
# localhost/semel-base:bookworm; docker.io/library/python:3.11-slim or any CPython 3.11 image
# works where a registry is reachable), PYTHON (the Python that builds the wheelhouse; default
# .venv/bin/python), DEBIAN_MIRROR (default: the first bookworm mirror in
# /etc/apt/sources.list*). podman runs through docker/podman (settings for root without
# systemd; see that file).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEBOOTSTRAP_IMAGE=localhost/semel-base:bookworm
IMAGE=${IMAGE:-localhost/semel:dev}
BASE_IMAGE=${BASE_IMAGE:-$DEBOOTSTRAP_IMAGE}
if [[ -z ${PYTHON:-} ]]; then
    PYTHON=python3
    [[ -x .venv/bin/python ]] && PYTHON=.venv/bin/python
fi
# podman, without the build lock's descriptor (nothing it starts keeps the lock)
PODMAN=podman_
podman_() { docker/podman "$@" 9>&-; }
CACHE=.cache/semel-base
ROOTFS_TAR=$CACHE/bookworm-minbase.tar.gz

START=$SECONDS
step() { printf '==> %s  [%ss]\n' "$1" "$((SECONDS - START))"; }

# The first http(s) mirror serving bookworm (not bookworm-security) in apt's sources.
debian_mirror() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list; do
        [[ -r $file ]] || continue
        if [[ $file == *.sources ]]; then
            # deb822 stanzas: the URIs of a stanza whose Suites include bookworm
            awk 'BEGIN { RS = ""; FS = "\n" }
                 {
                   uri = ""; ok = 0
                   for (i = 1; i <= NF; i++) {
                     if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uri = a[2] }
                     if ($i ~ /^Suites:/ && $i ~ /[ \t]bookworm([ \t]|$)/) ok = 1
                   }
                   if (ok && uri ~ /^https?:/) { print uri; exit }
                 }' "$file"
        else
            awk '$1 == "deb" && $3 == "bookworm" && $2 ~ /^https?:/ { print $2; exit }' "$file"
        fi
    done | head -n 1
}

make_rootfs_tarball() {
    local mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
    mirror=${mirror:-http://deb.debian.org/debian}
    if [[ $(id -u) -ne 0 ]]; then
        echo "build_image.sh: making the base image needs root (debootstrap); run as root, or" \
            "set BASE_IMAGE to a CPython 3.11 image (docker.io/library/python:3.11-slim)" >&2
        exit 1
    fi
    command -v debootstrap >/dev/null || {
        echo "build_image.sh: debootstrap is not installed (apt-get install debootstrap)" >&2
        exit 1
    }
    mkdir -p "$CACHE"
    ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    ROOTFS=$(cd "$ROOTFS" && pwd)
    # on any exit: unmount what debootstrap may have left mounted, then remove, staying on
    # this file system
    trap 'findmnt -rn -o TARGET | grep -F "$ROOTFS/" | sort -r | xargs -r -n1 umount -l;
          rm -rf --one-file-system "$ROOTFS"' EXIT
    step "debootstrap bookworm (minbase, python3) from $mirror"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip \
        bookworm "$ROOTFS" "$mirror" >"$CACHE/debootstrap.log" 2>&1 || {
        tail -n 20 "$CACHE/debootstrap.log" >&2
        exit 1
    }
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    step "packing $ROOTFS_TAR"
    tar --numeric-owner -C "$ROOTFS" -cf - . | gzip -1 >"$ROOTFS_TAR.tmp"
    mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf --one-file-system "$ROOTFS"
    trap - EXIT
}

# one build at a time on this machine: the wheelhouse and the base image are shared
mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9

step "wheelhouse: pip wheel . -w docker/wheelhouse ($PYTHON)"
rm -rf docker/wheelhouse
"$PYTHON" -m pip wheel -q --disable-pip-version-check . -w docker/wheelhouse

if [[ $BASE_IMAGE == "$DEBOOTSTRAP_IMAGE" ]] && ! $PODMAN image exists "$BASE_IMAGE"; then
    [[ -s $ROOTFS_TAR ]] || make_rootfs_tarball
    step "podman import $ROOTFS_TAR as $BASE_IMAGE"
    $PODMAN import -q \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
        "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null
fi

step "podman build $IMAGE from $BASE_IMAGE (no network)"
previous=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
# --layers=false: no intermediate images left behind (the wheelhouse changes on every build,
# so their cache would not be used anyway)
$PODMAN build -q --layers=false --network none --format docker \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" -f docker/Dockerfile -t "$IMAGE" . >/dev/null
current=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE")
if [[ -n $previous && $previous != "$current" ]]; then
    # the image this tag named before, unless a container still uses it
    $PODMAN rmi "$previous" >/dev/null 2>&1 || true
fi
step "built $IMAGE"
