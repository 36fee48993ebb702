#!/usr/bin/env bash
# configs/nginx/nginx.sh: render one of the templates in this directory and run Debian's
# nginx with it on a private prefix directory (pid file, logs, temp files, cache), in the
# background. `make nginx` and `make nginx-stop` call it; bench/ scripts too.
#
#   nginx.sh render NAME    write $NGINX_PREFIX/NAME.conf from NAME.conf here, print its path
#   nginx.sh start NAME     render, check (nginx -t), start; NAME: front | cache | static
#   nginx.sh stop           graceful stop (SIGQUIT) of the nginx started from $NGINX_PREFIX
#
# Environment (defaults in brackets):
#   NGINX_PREFIX        private directory [REPO/.cache/nginx]
#   NGINX_LISTEN        address nginx listens on [127.0.0.1:$NGINX_PORT, NGINX_PORT 8080]
#   UPSTREAM            the cluster [127.0.0.1:3000]
#   STATIC_ROOT         served at /static/ by static.conf [REPO/internal/shop/static]
#   WORKER_PROCESSES    [auto]
#   WORKER_CONNECTIONS  [16384]
#   RLIMIT_NOFILE       worker_rlimit_nofile [65535, lowered to the hard limit when that is
#                       lower and this shell may not raise it]
#   NGINX               the nginx binary [nginx on PATH, else /usr/sbin/nginx]
#   NGINX_FOREGROUND=1  start runs nginx in the foreground (daemon off) instead
#
# The Go renderer (internal/frontproxy.Render) does the same substitution; its tests check
# that both give the same bytes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

NGINX_PREFIX=${NGINX_PREFIX:-$repo/.cache/nginx}
NGINX_PORT=${NGINX_PORT:-8080}
NGINX_LISTEN=${NGINX_LISTEN:-127.0.0.1:$NGINX_PORT}
UPSTREAM=${UPSTREAM:-127.0.0.1:3000}
STATIC_ROOT=${STATIC_ROOT:-$repo/internal/shop/static}
WORKER_PROCESSES=${WORKER_PROCESSES:-auto}
WORKER_CONNECTIONS=${WORKER_CONNECTIONS:-16384}

die() { echo "nginx.sh: $*" >&2; exit 1; }

find_nginx() {
  if [ -n "${NGINX:-}" ]; then echo "$NGINX"; return; fi
  if command -v nginx >/dev/null 2>&1; then command -v nginx; return; fi
  if [ -x /usr/sbin/nginx ]; then echo /usr/sbin/nginx; return; fi
  die "nginx is not installed: apt-get install nginx-light (or nginx), then run this again"
}

rlimit_nofile() {
  if [ -n "${RLIMIT_NOFILE:-}" ]; then echo "$RLIMIT_NOFILE"; return; fi
  local want=65535 hard
  hard=$(ulimit -Hn)
  # Root with CAP_SYS_RESOURCE may raise its hard limit (nginx does, in each worker); a
  # container often may not. Ask prlimit on a throwaway process rather than guess.
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ] &&
     ! prlimit --nofile="$want:$want" true 2>/dev/null; then
    echo "nginx.sh: descriptor hard limit is $hard and cannot be raised here: worker_rlimit_nofile $hard (raise LimitNOFILE / ulimit -Hn for $want)" >&2
    want=$hard
  fi
  echo "$want"
}

render() { # $1 = template name; prints the rendered file's path
  local name=$1 src="$here/$1.conf" out
  [ -f "$src" ] || die "no template $src (front, cache or static)"
  case $STATIC_ROOT in /*) ;; *) die "STATIC_ROOT must be absolute: $STATIC_ROOT" ;; esac
  mkdir -p "$NGINX_PREFIX/tmp"
  out="$NGINX_PREFIX/$name.conf"
  sed -e "s|@LISTEN@|$NGINX_LISTEN|g" -e "s|@UPSTREAM@|$UPSTREAM|g" \
      -e "s|@STATIC_ROOT@|$STATIC_ROOT|g" -e "s|@WORKER_PROCESSES@|$WORKER_PROCESSES|g" \
      -e "s|@WORKER_CONNECTIONS@|$WORKER_CONNECTIONS|g" -e "s|@RLIMIT_NOFILE@|$(rlimit_nofile)|g" \
      "$src" >"$out.tmp"
  if grep -n '@[A-Z_]*@' "$out.tmp" >&2; then die "unfilled placeholder in $src"; fi
  mv "$out.tmp" "$out"
  echo "$out"
}

# globals: the -g directives. A root master would drop its workers to `nobody`, who cannot
# enter the private prefix (or a 0700 temp dir) nor read the checkout; this is a local
# measurement harness, so its workers stay root. A non-root master keeps its own uid.
globals() {
  local g=""
  [ "$(id -u)" = 0 ] && g="user root;"
  [ "${NGINX_FOREGROUND:-}" = 1 ] && g="$g daemon off;"
  echo "$g"
}

running_pid() {
  local pid
  pid=$(cat "$NGINX_PREFIX/nginx.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

cmd=${1:-}
case $cmd in
  render)
    [ $# -eq 2 ] || die "usage: nginx.sh render NAME"
    render "$2" ;;
  start)
    [ $# -eq 2 ] || die "usage: nginx.sh start NAME"
    bin=$(find_nginx)
    if pid=$(running_pid); then die "nginx already running from $NGINX_PREFIX (pid $pid): make nginx-stop"; fi
    conf=$(render "$2")
    args=(-p "$NGINX_PREFIX/" -c "$conf" -e "$NGINX_PREFIX/error.log")
    g=$(globals)
    [ -n "$g" ] && args+=(-g "$g")
    "$bin" "${args[@]}" -t -q || die "configuration check failed: $conf (log: $NGINX_PREFIX/error.log)"
    if [ "${NGINX_FOREGROUND:-}" = 1 ]; then exec "$bin" "${args[@]}"; fi
    "$bin" "${args[@]}"
    for _ in $(seq 50); do running_pid >/dev/null && break; sleep 0.1; done
    pid=$(running_pid) || die "nginx did not start; $NGINX_PREFIX/error.log says: $(tail -n 5 "$NGINX_PREFIX/error.log" 2>/dev/null)"
    echo "nginx $2 on http://$NGINX_LISTEN -> $UPSTREAM (pid $pid, prefix $NGINX_PREFIX; make nginx-stop)" ;;
  stop)
    pid=$(running_pid) || { echo "nginx.sh: no nginx running from $NGINX_PREFIX"; exit 0; }
    kill -QUIT "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { echo "nginx (pid $pid) stopped"; exit 0; }; sleep 0.1; done
    die "nginx (pid $pid) still running 10 s after SIGQUIT" ;;
  *)
    die "usage: nginx.sh render|start|stop NAME" ;;
esac
