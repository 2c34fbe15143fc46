"""BeamSearch: keep the two best partial solutions per level, grow each in nested
branches, commit the best chain."""

import os

from _demo import project, show

from arbor.patterns import BeamSearch


def append(digit):
    def strategy(a):
        with open(os.path.join(a, "number.txt"), "a") as f:
            f.write(digit)
    return strategy


def evaluate(a):
    with open(os.path.join(a, "number.txt")) as f:
        return float(f.read() or 0)


with project({"number.txt": ""}) as (tree, base):
    o = BeamSearch([append(d) for d in "153"], expand=lambda a, depth: [append(d) for d in "27"],
                   evaluate=evaluate, beam_width=2, max_depth=3)(tree)
    show(o, base, "number.txt")
