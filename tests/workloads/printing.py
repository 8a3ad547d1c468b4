"""A workload that writes to stdout everywhere it can: at import, when made, per item."""
import os
import sys

import tiny

print("printing.py imported")
os.write(1, b"raw write to fd 1 at import\n")


class Chatty(tiny.Points):
    def __getitem__(self, i):
        print("item", i)
        return super().__getitem__(i)


def make():
    print('{"id": 2, "ok": true, "result": {"fake": "a protocol-looking line on stdout"}}')
    sys.stdout.flush()
    wl = tiny.make()
    wl["dataset"] = Chatty(128)
    return wl
