#!/usr/bin/env python3
"""amp-train --json prints each number so that it reads back to the same bits: an f32 value (a
loss, a learning rate, a loss scale) as %.9g and a double (an average over batches or steps) as
%.17g, so that two runs compare exactly from their logs. Checks every occurrence of the named
keys in the JSON lines of FILE, as printed (before a JSON parser turns them into doubles):

    json_floats.py FILE f32=loss,lr f64=val_loss

An f32 key's text must be what %.9g prints for the f32 it reads as (so "%.6f" fails: 2.302585
reads as the f32 2.30258489); a double key's must be what %.17g prints for its double (a short
decimal passes that too: the digits a log left out cannot be seen in it, so for doubles this
guards the form, and the f32 keys the digits). Exits 1 naming the first few that are not, or
when a key never occurs."""
import re
import struct
import sys


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    path, kinds = sys.argv[1], {}
    for arg in sys.argv[2:]:
        kind, keys = arg.split("=", 1)
        for k in keys.split(","):
            kinds[k] = kind
    number = re.compile(r'"([A-Za-z_]+)": (-?[0-9][0-9.eE+-]*)')
    seen, bad = {k: 0 for k in kinds}, []
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            for key, text in number.findall(line):
                if key not in kinds:
                    continue
                seen[key] += 1
                v = float(text)
                want = "%.9g" % f32(v) if kinds[key] == "f32" else "%.17g" % v
                if text != want:
                    bad.append(f"{key} {text} (reads back as {want})")
    missing = [k for k, n in seen.items() if n == 0]
    for m in missing:
        print(f"json_floats: {path}: no '{m}' in any JSON line")
    for b in bad[:5]:
        print(f"json_floats: {path}: {b}")
    sys.exit(1 if bad or missing else 0)


if __name__ == "__main__":
    main()
