"""Tournament: five drafts, judged pairwise in a bracket; the bracket's winner commits."""

import os

from _demo import project, show

from arbor.patterns import Tournament

DRAFTS = ["ok", "good enough", "short", "the longest and best draft", "fine"]


def draft(a):
    with open(os.path.join(a, "draft.txt"), "w") as f:
        f.write(DRAFTS[a.index])


def judge(a, b):
    la, lb = (len(open(os.path.join(x, "draft.txt")).read()) for x in (a, b))
    return 1 if lb > la else 0


with project({"draft.txt": ""}) as (tree, base):
    show(Tournament([draft] * len(DRAFTS), judge=judge)(tree), base, "draft.txt")
