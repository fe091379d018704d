"""Whether `sagd debias` runs on other thread counts gave the same replications and summary as on
one thread (wall times aside). Usage: same_bits.py DIR_1_THREAD DIR_2 [DIR_3 ...] (output folders)."""
import json
import sys


def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if not k.endswith("time_s")}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


def load(folder):
    r = json.load(open(f"{folder}/result.json"))
    return strip([r["replications"], r["summary"]])


first = load(sys.argv[1])
for other in sys.argv[2:]:
    print(f"{other}: replications and summary identical to {sys.argv[1]} (times aside): {load(other) == first}")
