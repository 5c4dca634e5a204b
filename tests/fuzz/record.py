"""A TCP proxy that records what clients send, for the fuzzers' seed corpus.

    python3 record.py LISTEN_PORT TARGET_PORT OUT_DIR

Forwards 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT both ways, and writes
the bytes each client connection sent (its first 16 KiB) to OUT_DIR/conn-N.
tests/interop/run.sh starts it in front of its one-node target when
INTEROP_RECORD=OUT_DIR is set (scripts/fuzz.sh --record).
"""

import asyncio
import os
import sys

KEEP = 16 * 1024
MOST_FILES = 5000


async def main():
    listen, target, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.makedirs(out, exist_ok=True)
    count = 0

    async def pump(reader, writer, record):
        kept = bytearray()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if record is not None and len(kept) < KEEP:
                    kept.extend(data[: KEEP - len(kept)])
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass
            if record is not None and kept:
                with open(record, "wb") as f:
                    f.write(kept)

    async def handle(client_r, client_w):
        nonlocal count
        count += 1
        record = os.path.join(out, "conn-%d" % count) if count <= MOST_FILES else None
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pump(client_r, server_w, record), pump(server_r, client_w, None))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
