#!/usr/bin/env bash
# Builds Argo Workflows' workflow-controller and argoexec (the executor the
# controller puts beside each step's container) from the Go module proxy, at
# the version whose CRDs the control-plane tests install (the same as
# test_pipelines_applied.py's ARGO_MODULE), the executor's image (argoexec
# alone, with buildah), and the artifact repository the sharded template needs:
# Versity's S3 gateway (github.com/versity/versitygw, Apache-2.0), a real S3
# server over a folder. MinIO, the usual choice, is licensed AGPL-3.0, which
# this project does not take in, even for tests.
#
# Argo's repository keeps workflow/executor/osspecific/signal_linux.go as a
# symbolic link to signal_darwin.go; module zips drop symbolic links, so the
# module as the proxy serves it does not build for Linux. The build runs in a
# copy of the module with that file restored, and with the module's own go.sum.
#
# Cached by the module's version and this script:
#   ${OMEGITOPS_ARGO_CACHE:-~/.cache/omegitops/argo}/<key>/bin
# The last line printed is that bin folder. One build at a time on a machine.
set -euo pipefail
module="github.com/argoproj/argo-workflows/v3"
version="v3.7.3"
s3_module="github.com/versity/versitygw"
s3_version="v1.8.0"
here="$(cd "$(dirname "$0")" && pwd)"
cache="${OMEGITOPS_ARGO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/omegitops/argo}"
key="$( (cat "$0"; echo "$module@$version $s3_module@$s3_version") | sha256sum | cut -c1-16)"
bin="$cache/$key/bin"
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
if [ -x "$bin/workflow-controller" ] && [ -x "$bin/argoexec" ] && [ -x "$bin/versitygw" ] \
    && [ -f "$bin/argoexec.tar" ] && [ -f "$bin/images.env" ]; then
  echo "argo: cached in $bin" >&2
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  PATH="/usr/local/go/bin:$PATH"
fi
start=$(date +%s)
echo "argo: building workflow-controller and argoexec $version, versitygw $s3_version; a cold build takes minutes" >&2
# The module's source, through the proxy (any module of ours can download it).
src="$(cd "$here/.." && go mod download -json "$module@$version" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
tmp="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
osspecific="$tmp/src/workflow/executor/osspecific"
[ -e "$osspecific/signal_linux.go" ] || cp "$osspecific/signal_darwin.go" "$osspecific/signal_linux.go"
# Static binaries: argoexec is copied into each step's container and runs there.
(cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/bin/" \
  ./cmd/workflow-controller ./cmd/argoexec)
# The S3 server: its module has no replace directive, so `go install` builds it.
GOBIN="$tmp/bin" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' \
  "$s3_module/cmd/versitygw@$s3_version"
# The executor's image: argoexec alone, and a /tmp for the artifacts it packs.
image="localhost/omegitops-test/argoexec:$version"
ctr="$(buildah from scratch)"
mkdir -m 1777 "$tmp/tmpdir"
buildah copy --quiet "$ctr" "$tmp/bin/argoexec" /bin/argoexec >/dev/null
buildah copy --quiet --chmod 1777 "$ctr" "$tmp/tmpdir" /tmp >/dev/null
buildah config --entrypoint '["/bin/argoexec"]' --env PATH=/bin "$ctr"
buildah commit --quiet --rm "$ctr" "$image" >/dev/null
buildah push --quiet "$image" "docker-archive:$tmp/bin/argoexec.tar:$image" >/dev/null
printf 'EXECUTOR=%s\n' "$image" >"$tmp/bin/images.env"
rm -rf "$bin"
mkdir -p "$cache/$key"
mv "$tmp/bin" "$bin"
echo "argo: built in $(( $(date +%s) - start )) s into $bin" >&2
echo "$bin"
