#!/usr/bin/env bash
# Builds the real Kubernetes control plane that the control-plane tests run on:
# kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes),
# etcd (go.etcd.io/etcd/server/v3) and KWOK (sigs.k8s.io/kwok), and the real
# node's kubelet and kube-proxy (the same k8s.io/kubernetes), all from the Go
# module proxy, at the versions go.mod and go.sum beside this script pin; and
# kubectl from the same k8s.io/kubernetes, for the `kubectl ome` plugin's tests.
#
# `build.sh helm` builds only Helm (helm.sh/helm/v4/cmd/helm), for the chart's
# tests, from the module in helm/ beside this script: Helm brings k8s.io modules
# of its own versions, which would fight the control plane's in one module. Its
# binary goes to the same cache, keyed by helm/go.mod and helm/go.sum.
#
# The binaries go to a cache keyed by go.sum, so a machine builds them once:
#   ${OMEGITOPS_CONTROLPLANE_CACHE:-~/.cache/omegitops/controlplane}/<go.sum hash>/bin
# The last line printed is that bin folder (`build.sh where` prints it without
# building). Nothing is rebuilt when it is complete;
# kubectl, added later, is built on its own into the same folder when it alone is
# missing, so a cache made before it is kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${OMEGITOPS_CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/omegitops/controlplane}"
# The version stamp (below) is part of the key: binaries built before it said
# v0.0.0-master, which a chart's kubeVersion refuses.
key="$( (cat "$here/go.mod" "$here/go.sum"; echo "version-stamped") | sha256sum | cut -c1-16)"
bin="$cache/$key/bin"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok kubelet kube-proxy)

# `build.sh where` and `build.sh where helm` print the bin folder a build would fill,
# building nothing: the tests ask here rather than compute the key a second time.
helm_key() { cat "$here/helm/go.mod" "$here/helm/go.sum" | sha256sum | cut -c1-16; }
if [ "${1:-}" = where ]; then
  if [ "${2:-}" = helm ]; then echo "$cache/helm-$(helm_key)/bin"; else echo "$bin"; fi
  exit 0
fi

# One build at a time on a machine: a second caller (another test session, a
# benchmark) waits here for the first to finish, then finds the cache complete.
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9

# Helm from its own module (see the top), on its own key; prints its bin folder.
build_helm() {
  local module="$here/helm" key bin tmp start
  key="$(helm_key)"
  bin="$cache/helm-$key/bin"
  if [ ! -x "$bin/helm" ]; then
    need_go
    mkdir -p "$bin"
    tmp="$(mktemp -d "$cache/helm-$key/build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    start=$(date +%s)
    echo "helm: building helm.sh/helm/v4/cmd/helm ($(go version | cut -d' ' -f3))" >&2
    # `helm version` says the module's version, as a released helm does.
    (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X \
      helm.sh/helm/v4/internal/version.version=$(go list -m -f '{{.Version}}' helm.sh/helm/v4)" \
      -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
    mv "$tmp/helm" "$bin/helm"
    rm -rf "$tmp"
    trap - EXIT
    echo "helm: built in $(( $(date +%s) - start )) s into $bin" >&2
  fi
  echo "$bin"
}

complete() {
  for name in "${binaries[@]}"; do [ -x "$bin/$name" ] || return 1; done
}

# The machine's Go, also where a non-login shell has not put it on PATH.
need_go() {
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
    PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null || { echo "control plane: go is not on PATH" >&2; exit 1; }
}

# kubectl (k8s.io/kubernetes/cmd/kubectl) needs modules the control plane does not
# (k8s.io/cli-runtime, heredoc, ...), whose go.sum lines are not in the pinned go.sum:
# they are resolved in a scratch copy of the module, from the same requirements and
# replacements, so go.mod and go.sum (the cache's key) stay as they are.
build_kubectl() {
  need_go
  local scratch
  scratch="$(mktemp -d "$cache/$key/kubectl.XXXXXX")"
  trap 'rm -rf "$scratch"' EXIT
  cp "$here/go.mod" "$here/go.sum" "$scratch/"
  echo "control plane: building kubectl ($(go version | cut -d' ' -f3))" >&2
  (cd "$scratch" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags="-s -w $(version_stamp)" \
    -o "$scratch/kubectl" k8s.io/kubernetes/cmd/kubectl)
  mv "$scratch/kubectl" "$bin/kubectl"
  rm -rf "$scratch"
  trap - EXIT
}

# The release a released binary reports (`kubectl version`, the API server's /version):
# k8s.io/kubernetes's version in go.mod, as the release's build scripts stamp it. A
# build from the module proxy otherwise says v0.0.0-master, and Helm refuses to install
# a chart whose kubeVersion that fails (every chart that sets one).
version_stamp() {
  local version major minor
  version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  major="${version#v}"; major="${major%%.*}"
  minor="${version#v*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$version" "$pkg" "$major" "$pkg" "$minor" "$pkg"
  done
}

if [ "${1:-}" = helm ]; then
  build_helm
  exit 0
fi

if complete; then
  [ -x "$bin/kubectl" ] || build_kubectl
  echo "control plane: cached in $bin" >&2
  echo "$bin"
  exit 0
fi

need_go
mkdir -p "$cache/$key"
tmp="$(mktemp -d "$cache/$key/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "control plane: building ${binaries[*]} ($(go version | cut -d' ' -f3)); a cold build takes several minutes" >&2
cd "$here"
# -trimpath and no debug information: smaller binaries, the same behaviour.
# The etcd main package is the module root of go.etcd.io/etcd/server/v3.
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $(version_stamp)" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy \
  sigs.k8s.io/kwok/cmd/kwok
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/etcd" go.etcd.io/etcd/server/v3
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
build_kubectl
echo "control plane: built in $(( $(date +%s) - start )) s into $bin" >&2
echo "$bin"
