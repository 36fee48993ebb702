# A WSGI app for the supervisor's real-program tests (gunicorn): answers its pid; /slow
# answers after a second, to show that a stop lets a request in flight finish.
import os
import time


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/slow":
        time.sleep(1)
    body = ("pid %d\n" % os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
