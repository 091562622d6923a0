"""A real HTTP server on 127.0.0.1 for download tests (never any other address).

Every server is shut down and its thread joined, and clients use short
timeouts, so no test can hang.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time

TIMEOUT = 5.0


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.routes[path]``, which is one of

    - ``bytes``: the body, with a correct Content-Length;
    - ``("truncated", body, announced)``: sends ``body`` but announces ``announced`` bytes;
    - ``("no-length", body)``: no Content-Length, the body ends when the connection closes;
    - ``("redirect", location)``: a 302 to ``location``;
    - ``("status", code)``: an error status;
    - ``("slow", seconds)``: waits before answering;
    - ``("broken-chunked", body)``: a chunked body cut off inside a chunk;
    - ``("trickle", seconds, body)``: headers at once, then the body one byte
      every ``seconds``;
    - ``("trickle-headers", seconds)``: the status line itself one byte every
      ``seconds``.
    """

    def do_GET(self):
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        if isinstance(route, bytes):
            route = ("truncated", route, len(route))
        kind = route[0]
        if kind == "status":
            self.send_error(route[1])
            return
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", route[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if kind == "slow":
            time.sleep(route[1])
            return
        if kind.startswith("trickle"):
            self._trickle(route)
            return
        self.close_connection = True
        self.send_response(200)
        if kind == "broken-chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % (2 * len(route[1])) + route[1])
            return
        if kind == "truncated":
            self.send_header("Content-Length", str(route[2]))
        self.end_headers()
        self.wfile.write(route[1])

    def _trickle(self, route):
        self.close_connection = True
        if route[0] == "trickle-headers":
            data = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(route[2])))
            self.end_headers()
            data = route[2]
        try:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(route[1])
        except OSError:  # the client gave up: what the tests expect
            pass

    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve(routes: dict):
    """Runs an HTTP server on 127.0.0.1 (free port) in a thread; yields ``(server, base_url)``.

    ``server.requests`` records the paths asked for. The server is shut down
    and its thread joined on exit.
    """
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.routes = routes
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=TIMEOUT)
        assert not thread.is_alive(), "HTTP server thread did not stop"


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())
