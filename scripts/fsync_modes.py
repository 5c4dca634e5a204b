#!/usr/bin/env python3
"""What one small write followed by fdatasync costs on this disk, three ways.

The Raft log (src/storage/wal.rs) writes its records into segment files
allocated ahead with fallocate, because an fdatasync after a write that grows
the file must also commit the new size through the file system's journal. This
measures the three cases side by side, interleaved, on the directory given
(default /var/tmp: keep it on the disk the data directory uses, not tmpfs):

  append     a file that grows with each write (RocksDB's WAL; Redis's AOF)
  falloc     a file allocated ahead with fallocate(0, size) (the Raft log)
  overwrite  a file whose blocks were written and synced before

Usage: scripts/fsync_modes.py [--dir D] [--writes N] [--bytes B] [--rounds R]
Prints the mean microseconds per write+fdatasync of each case, per round.
"""
import argparse
import ctypes
import os
import tempfile
import time

libc = ctypes.CDLL("libc.so.6", use_errno=True)


def run(directory, mode, writes, size):
    fd, path = tempfile.mkstemp(dir=directory, prefix="fsync-modes-")
    try:
        span = writes * size + 4096
        if mode == "falloc":
            if libc.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(span)) != 0:
                raise OSError(ctypes.get_errno(), "fallocate")
            os.fsync(fd)
        elif mode == "overwrite":
            os.write(fd, b"\0" * span)
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        buf = b"x" * size
        started = time.perf_counter()
        for _ in range(writes):
            os.write(fd, buf)
            os.fdatasync(fd)
        return (time.perf_counter() - started) / writes * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--writes", type=int, default=3000)
    p.add_argument("--bytes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    modes = ("append", "falloc", "overwrite")
    print(f"{a.writes} writes of {a.bytes} bytes, each followed by fdatasync, in {a.dir}; mean us per write")
    print("| round | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    for r in range(1, a.rounds + 1):
        row = [f"{run(a.dir, m, a.writes, a.bytes):.1f}" for m in modes]
        print(f"| {r} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
