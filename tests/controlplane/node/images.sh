#!/usr/bin/env bash
# Builds the images the test node runs, from Debian's packages and this repository,
# with buildah (nothing is pulled from a container registry):
#
#   base       Debian's release by debootstrap (minbase) with python3 and pip: what
#              the Dockerfile's FROM stands for (the official python image is
#              Debian with Python and pip), given to the build as BASE_IMAGE;
#   pause      the pod sandbox (pause/main.go, a static Go binary, alone);
#   omegitops  the project's image, built from the Dockerfile as a user builds it.
#
# Each is cached by its content: the base by this script and the Debian release's
# InRelease file, the pause by its source, the project's image by its build context
# (what .dockerignore lets through) and the base. One build at a time on a machine.
# The last line printed is a folder with pause.tar and omegitops.tar (docker
# archives, for `ctr images import`) and images.env naming them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cache="${OMEGITOPS_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/omegitops/node}"
suite=bookworm
mirror="${OMEGITOPS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH="/usr/local/go/bin:$PATH"
fi
for tool in buildah debootstrap go; do
  command -v "$tool" >/dev/null || { echo "images: $tool is not on PATH" >&2; exit 1; }
done
hash16() { sha256sum | cut -c1-16; }
has_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# -- base ------------------------------------------------------------------------------
# The Release's signature file changes with every point release and security update
# of the suite: a new one makes a new base. Offline, the last base built is kept.
release="$(curl -fsS --max-time 20 "$mirror/dists/$suite/InRelease" 2>/dev/null | hash16 || true)"
if [ -z "$release" ] || [ "$release" = "$(printf '' | hash16)" ]; then
  release="$(cat "$cache/base.release" 2>/dev/null || echo offline)"
fi
base_key="$( (cat "$0"; echo "$suite $release") | hash16)"
base="localhost/omegitops-test/python:$suite-$base_key"
if ! has_image "$base"; then
  start=$(date +%s)
  echo "images: building $base with debootstrap (about a minute)" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
    "$suite" "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -30 "$tmp/debootstrap.log" >&2; exit 1; }
  # The machine's own extra certificate authorities, so that pip and apt inside a
  # build reach the registries as the machine itself does.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$tmp/rootfs/usr/local/share/ca-certificates/"
    chroot "$tmp/rootfs" update-ca-certificates >/dev/null 2>&1
  fi
  # The official python image's pip installs system-wide; Debian marks its Python
  # as managed by apt (PEP 668). Unmark it, and drop what an image does not keep.
  rm -f "$tmp/rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  rm -rf "$tmp/rootfs"/var/lib/apt/lists/* "$tmp/rootfs"/var/cache/apt/*.bin \
    "$tmp/rootfs"/var/cache/apt/archives/*.deb "$tmp/rootfs"/var/log/*
  ctr="$(buildah from scratch)"
  mnt="$(buildah mount "$ctr")"
  cp -a "$tmp/rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  buildah commit --quiet --rm "$ctr" "$base" >/dev/null
  echo "$release" >"$cache/base.release"
  rm -rf "$tmp"
  trap - EXIT
  echo "images: base built in $(( $(date +%s) - start )) s" >&2
fi

# -- pause -----------------------------------------------------------------------------
pause_key="$(cat "$here/pause/go.mod" "$here/pause/main.go" | hash16)"
pause="localhost/omegitops-test/pause:$pause_key"
if ! has_image "$pause"; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/pause" .)
  ctr="$(buildah from scratch)"
  buildah copy --quiet "$ctr" "$tmp/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
  buildah commit --quiet --rm "$ctr" "$pause" >/dev/null
  rm -rf "$tmp"
  trap - EXIT
fi

# -- the project's image -------------------------------------------------------------
# Its name is the one the pipelines run: the registry's, at the package's version.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -1)"
image="ghcr.io/omegitops/omegitops:$version"
context_key="$(cd "$repo" && python3 - <<'EOF'
import hashlib, os
from pathlib import Path
from docker.utils.build import exclude_paths
patterns = [p.strip() for p in Path(".dockerignore").read_text().splitlines()
            if p.strip() and not p.startswith("#")]
digest = hashlib.sha256()
for rel in sorted(exclude_paths(".", patterns, dockerfile="Dockerfile")):
    if os.path.isfile(rel) and not os.path.islink(rel):
        digest.update(rel.encode() + b"\0" + Path(rel).read_bytes())
    elif os.path.islink(rel):
        digest.update(rel.encode() + b"\0link\0" + os.readlink(rel).encode())
print(digest.hexdigest()[:16])
EOF
)"
key="$( (echo "$context_key $base $pause $image") | hash16)"
out="$cache/images/$key"
if [ ! -f "$out/images.env" ]; then
  start=$(date +%s)
  echo "images: building $image from the Dockerfile" >&2
  tmp="$(mktemp -d "$cache/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # The build's RUN steps use the machine's network (apt-get, pip), as a build
  # on a developer's machine does.
  buildah bud --quiet --pull=false --network=host --layers \
    --build-arg "BASE_IMAGE=$base" -t "$image" -f "$repo/Dockerfile" "$repo" >"$tmp/build.log" 2>&1 \
    || { tail -40 "$tmp/build.log" >&2; exit 1; }
  buildah push --quiet "$image" "docker-archive:$tmp/omegitops.tar:$image" >/dev/null
  buildah push --quiet "$pause" "docker-archive:$tmp/pause.tar:$pause" >/dev/null
  printf 'IMAGE=%s\nPAUSE=%s\nBASE=%s\n' "$image" "$pause" "$base" >"$tmp/images.env"
  rm -f "$tmp/build.log"
  rm -rf "$out"
  mkdir -p "$(dirname "$out")"
  mv "$tmp" "$out"
  trap - EXIT
  echo "images: $image built in $(( $(date +%s) - start )) s" >&2
fi
echo "$out"
