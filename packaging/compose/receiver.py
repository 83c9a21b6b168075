"""The webhook receiver of packaging/compose.yaml: checks each delivery's
Standard Webhooks signature with the Python client (clients/python) and
the secret in POSTBOX_WEBHOOK_SECRET, prints the verified event as one JSON
line, and answers 200 (which completes the delivery); a delivery whose
signature does not check is answered 401 and retried by Postbox.

    POSTBOX_WEBHOOK_SECRET=whsec_... PYTHONPATH=clients/python/src \\
        python3 packaging/compose/receiver.py [port]      # default 8080
"""

import http.server
import json
import os
import sys

from postbox_client import WebhookVerificationError, verify_webhook

SECRET = os.environ["POSTBOX_WEBHOOK_SECRET"]


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            delivery = verify_webhook(SECRET, dict(self.headers.items()), body)
        except WebhookVerificationError as e:
            print(json.dumps({"refused": str(e)}), flush=True)
            self.send_response(401)
            self.end_headers()
            return
        print(json.dumps({"verified": delivery}), flush=True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
print(f"receiver: listening on {port}", flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", port), Receiver).serve_forever()
