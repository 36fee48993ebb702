# A program for the supervisor's process-tree tests that knows nothing of it: serves HTTP on
# the socket at fd 3 (answering its pid) and says nothing to the supervisor.
#
# FORK=1: it first forks a child that keeps the socket, as a pre-forking server's workers
# do, and only sleeps. TERM_MODE=ignore: both ignore SIGTERM; TERM_MODE=child: only the child
# does (the parent exits on it and leaves the child behind). PID_DIR: it writes the child's
# pid (0: none) to PID_DIR/<its own pid>.
import http.server
import os
import signal
import socket
import time

term = os.environ.get("TERM_MODE", "")
if term in ("ignore", "child"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = 0
if os.environ.get("FORK") == "1":
    child = os.fork()
    if child == 0:
        while True:
            time.sleep(60)
    if term == "child":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
if os.environ.get("PID_DIR"):
    path = os.path.join(os.environ["PID_DIR"], str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        f.write(str(child))
    os.rename(path + ".tmp", path)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("pid %d\n" % os.getpid()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
srv.socket.close()
srv.socket = socket.socket(fileno=3)
srv.serve_forever()
