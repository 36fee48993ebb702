#!/usr/bin/env bash
# bench/ceiling-device-pack.sh: prepares here, in .device/ (git-ignored), everything the bare
# 16-core device machine needs for bench/ceiling-device.sh, which has no Go, no apt and no
# network there: one xz tarball, .device/payload.tar.xz, holding
#
#   bin/         ceiling, supervisor, worker, autocannon (static: CGO_ENABLED=0, -s -w),
#                wrk and nginx (this machine's, apt-get installed when missing)
#   bin/lib/     their shared libraries and node's, from ldd, less glibc's own (libc, libm,
#                libpthread, libdl, librt, the loader: they must match the device's loader,
#                and every machine has them)
#   nodebin/node this machine's node
#   peerheavy/   the Fastify heavy PATCH peer: heavy.js with node_modules (fastify, pm2)
#
# The repository itself (configs/, bench/mix.lua, internal/shop/static) travels as the
# working tree; .device/ is carried beside it (the lead's `carry`). The two together must
# stay under 60 MiB: the script says the sizes and fails when over.
#
# Usage: PEER_HEAVY=DIR bench/ceiling-device-pack.sh [DEST]   (DEST default .device)
#   PEER_HEAVY: the heavy peer's source (heavy.js and package.json); it is copied and
#   `npm install`ed (fastify and pm2) unless it already holds node_modules/fastify.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.device}
: "${PEER_HEAVY:?set PEER_HEAVY to the heavy peer source directory: heavy.js, package.json}"
LIMIT_MIB=${LIMIT_MIB:-60}
ST=$(mktemp -d); trap 'rm -rf "$ST"' EXIT
mkdir -p "$ST/bin/lib" "$ST/nodebin" "$DEST"

echo "pack: Go binaries (static)"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ST/bin/" ./cmd/ceiling ./cmd/supervisor ./cmd/worker ./bench/autocannon

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -gt 0 ]; then
  echo "pack: installing ${need[*]} with apt-get"
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
WRK=$(command -v wrk); NGINX=$(command -v nginx || echo /usr/sbin/nginx); NODE=$(command -v node)
cp -L "$WRK" "$NGINX" "$ST/bin/"
cp -L "$NODE" "$ST/nodebin/node"
# Libraries: everything ldd resolves, less glibc's core (see the top).
for b in "$WRK" "$NGINX" "$NODE"; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
    esac
    cp -Ln "$lib" "$ST/bin/lib/"
  done
done

echo "pack: heavy peer from $PEER_HEAVY"
mkdir -p "$ST/peerheavy"
cp -r "$PEER_HEAVY"/. "$ST/peerheavy/"
if [ ! -d "$ST/peerheavy/node_modules/fastify" ] || [ ! -e "$ST/peerheavy/node_modules/.bin/pm2" ]; then
  (cd "$ST/peerheavy" && npm install --no-audit --no-fund --loglevel=error && npm install --no-audit --no-fund --loglevel=error --no-save pm2)
fi
[ -f "$ST/peerheavy/heavy.js" ] || { echo "pack: $PEER_HEAVY has no heavy.js" >&2; exit 1; }

# Each carried program must run with only bin/lib beside the system's glibc.
for p in "bin/wrk -v:^wrk " "bin/nginx -v:^nginx version" "nodebin/node --version:^v[0-9]"; do
  cmd=${p%%:*} want=${p#*:}
  v=$(cd "$ST" && env -i LD_LIBRARY_PATH="$ST/bin/lib" ./$cmd 2>&1 | head -1 || true)
  grep -q "$want" <<<"$v" || { echo "pack: $cmd does not run with LD_LIBRARY_PATH=bin/lib: $v" >&2; exit 1; }
  echo "pack: $cmd: $v"
done
(cd "$ST" && env -i PATH="$ST/nodebin:/usr/bin:/bin" LD_LIBRARY_PATH="$ST/bin/lib" peerheavy/node_modules/.bin/pm2 --version >/dev/null 2>&1) \
  || echo "pack: warning: pm2 --version failed here" >&2

echo "pack: compressing (xz)"
tar -C "$ST" -cf - bin nodebin peerheavy | xz -T0 -6 >"$DEST/payload.tar.xz.tmp"
mv "$DEST/payload.tar.xz.tmp" "$DEST/payload.tar.xz"
carried=$(du -sb "$DEST" | cut -f1)
repo=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$(( (carried + repo) / 1048576 ))
echo "pack: $DEST $(( carried / 1048576 )) MiB + repository $(( repo / 1048576 )) MiB = ${total} MiB (limit ${LIMIT_MIB})"
[ "$total" -lt "$LIMIT_MIB" ] || { echo "pack: over ${LIMIT_MIB} MiB" >&2; exit 1; }
