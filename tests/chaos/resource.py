"""The protected resource of the chaos harness (DESIGN.md §1): a separate
process that keeps the highest fencing token accepted per resource, rejects
writes with a lower one, and logs every decision to resource.jsonl.

Protocol, one line each way: `WRITE <resource> <token> <owner>` ->
`OK` or `STALE <highest>`. `--no-check` plants the bug of a resource that
accepts every token."""

import argparse
import json
import socketserver
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    highest = {}
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for raw in self.rfile:
                parts = raw.decode(errors="replace").split()
                if len(parts) != 4 or parts[0] != "WRITE":
                    self.wfile.write(b"ERR bad request\n")
                    continue
                _, res, token, owner = parts
                token = int(token)
                with lock:
                    before = highest.get(res)
                    ok = args.no_check or before is None or token >= before
                    if ok:
                        highest[res] = token if before is None else max(before, token)
                    log.write(json.dumps({"t": time.monotonic(), "resource": res, "token": token,
                                          "owner": owner, "accepted": ok, "highest": before}) + "\n")
                self.wfile.write(b"OK\n" if ok else b"STALE %d\n" % before)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server(("127.0.0.1", args.port), Handler) as srv:
        print("ready", flush=True)
        srv.serve_forever()


if __name__ == "__main__":
    main()
