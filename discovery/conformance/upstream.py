"""An upstream for the gateway's conformance run (gateway.py): an HTTP/1.1 server on a free
loopback port, in a process of its own so that it can be killed like a crashed instance.
Prints its port, then serves. Each answer says which port answered, the method and the path;
`/slow...` answers after 3 s (past the gateway's route timeout).

Usage: python upstream.py
"""

import http.server
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the gateway's pool expects

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path.startswith("/slow"):
            time.sleep(3)
        body = f"port={self.server.server_port}\n{self.command} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = answer

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_port, flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    sys.exit(0)
