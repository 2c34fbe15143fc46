"""Cascaded: waves of 1, 2, then 4 attempts; each failure's error is feedback for the
next waves, and the first success in a wave commits."""

import os

from _demo import project, show

from arbor.patterns import Cascaded


def task(a, feedback):
    tried = {int(e.split()[1]) for e in feedback}
    pick = min(v for v in range(100) if v not in tried) + a.index
    with open(os.path.join(a, "value.txt"), "w") as f:
        f.write(str(pick))
    return (pick == 3, f"value {pick} is wrong")


with project({"value.txt": ""}) as (tree, base):
    show(Cascaded(task, fan_out=(1, 2, 4))(tree), base, "value.txt")
