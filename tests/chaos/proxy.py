"""The fault-injecting peer proxy of the chaos harness.

One proxy stands in front of each node's peer port; every other node reaches
that node through it (the proxy's address is the node's advertised peer
address). It relays raftlock's length-delimited peer frames whole, so it can
drop or delay individual messages without corrupting the stream. The sender of
a connection is read from its first frame (`Hello`, whose bincode encoding
ends with the sender's node id).

Rules come from a JSON file that the harness rewrites; each rule applies to
frames travelling from node `from` to node `to`:
    {"rules": [{"from": 1, "to": 2, "drop": 0.3, "delay_ms": 80, "block": false}]}
`block` discards every frame (a partition, used where network namespaces are
not available)."""

import argparse
import asyncio
import json
import os
import random
import struct
import time


class Rules:
    def __init__(self, path, seed):
        self.path = path
        self.mtime = None
        self.rules = {}
        self.rng = random.Random(seed)

    def reload(self):
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            self.rules, self.mtime = {}, None
            return
        if mtime == self.mtime:
            return
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return
        self.mtime = mtime
        self.rules = {(r["from"], r["to"]): r for r in data.get("rules", [])}

    def fate(self, src, dst):
        """(deliver?, delay seconds) for one frame from src to dst."""
        r = self.rules.get((src, dst))
        if not r:
            return True, 0.0
        if r.get("block") or self.rng.random() < r.get("drop", 0.0):
            return False, 0.0
        return True, r.get("delay_ms", 0) / 1000.0


async def read_frame(reader):
    header = await reader.readexactly(4)
    (n,) = struct.unpack(">I", header)
    return header + await reader.readexactly(n)


async def pump(reader, writer, rules, src_of, dst_of):
    """Relays frames in order, each after its own delay."""
    queue = asyncio.Queue()

    async def send():
        while True:
            due, frame = await queue.get()
            if frame is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(frame)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            frame = await read_frame(reader)
            ok, delay = rules.fate(src_of(), dst_of())
            if ok:
                queue.put_nowait((time.monotonic() + delay, frame))
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((0, None))
        try:
            await asyncio.wait_for(sender, 5)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            sender.cancel()
        try:
            writer.close()
        except Exception:
            pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--node", type=int, required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rules = Rules(args.rules, args.seed)
    lhost, lport = args.listen.rsplit(":", 1)
    thost, tport = args.target.rsplit(":", 1)

    async def reload_loop():
        while True:
            rules.reload()
            await asyncio.sleep(0.05)

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cwriter.close()
            return
        peer = {"id": 0}
        try:
            hello = await read_frame(creader)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            cwriter.close()
            swriter.close()
            return
        if len(hello) >= 12:
            peer["id"] = struct.unpack("<Q", hello[-8:])[0]
        ok, delay = rules.fate(peer["id"], args.node)
        if ok:
            if delay:
                await asyncio.sleep(delay)
            swriter.write(hello)
        await asyncio.gather(
            pump(creader, swriter, rules, lambda: peer["id"], lambda: args.node),
            pump(sreader, cwriter, rules, lambda: args.node, lambda: peer["id"]),
        )

    asyncio.create_task(reload_loop())
    server = await asyncio.start_server(handle, lhost, int(lport), reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
