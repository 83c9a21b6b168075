"""A webhook receiver for examples/aws/catalog.toml: prints each delivery
(the webhook-id header and the event) and answers 200, which completes it.

    python3 examples/aws/receiver.py [port]     # default 9000
"""

import http.server
import sys


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        print(self.headers.get("webhook-id"), body.decode(), flush=True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
