# An ASGI app for the supervisor's real-program tests (uvicorn --fd 3): answers its pid;
# /slow answers after a second.
import asyncio
import os


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(1)
    body = ("pid %d\n" % os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
