#!/usr/bin/env bash
# The Debian packages the real node and its images need, installed when missing:
# containerd and runc (the runtime), containernetworking-plugins (the pods' bridge),
# iptables (kube-proxy's rules), buildah and debootstrap (the images), curl (the
# Debian release's fingerprint). Needs root, as apt-get does.
set -euo pipefail
packages=(containerd runc containernetworking-plugins iptables buildah debootstrap curl)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" = 0 ] || { echo "node: root is needed to install ${missing[*]}" >&2; exit 1; }
# One apt-get at a time on a machine.
exec 9>/var/lock/omegitops-node-apt.lock
flock 9
echo "node: installing ${missing[*]} from Debian" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
