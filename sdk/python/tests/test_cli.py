"""arbor-py run / speculate / best-of-n and the tree-search recipe, as a user runs them
(python3 -m arbor in a subprocess), against a real arbord."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import unittest

from tests.daemon import SDK, D, read, setUpModule, tearDownModule  # noqa: F401

import arbor




class CLI(unittest.TestCase):
    def setUp(self) -> None:
        self.base = D.base({"n": "1\n"})

    def arbor_py(self, *args: str, cwd: str | None = None, env: dict[str, str] | None = None,
                 ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "arbor", *args], cwd=cwd or self.base,
                              env={**D.env(), **(env or {})}, capture_output=True, text=True, timeout=120)

    def tearDown(self) -> None:
        with D.client("socket") as c:
            for t in c.trees():
                if t.base == self.base:
                    c.call("tree_delete", tree_id=t.id)

    def test_run_commits_on_success_aborts_on_failure(self) -> None:
        p = self.arbor_py("run", "--", "sh", "-c", "echo 2 > n; echo out; echo err >&2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("made tree", p.stderr)  # none was over this directory yet
        self.assertIn("committed", p.stderr)
        self.assertEqual(p.stdout, "out\n")
        self.assertEqual(read(os.path.join(self.base, "n")), "2\n")
        p = self.arbor_py("run", "--", "sh", "-c", "echo 3 > n; exit 7")
        self.assertEqual(p.returncode, 7)
        self.assertIn("aborted", p.stderr)
        self.assertEqual(read(os.path.join(self.base, "n")), "2\n")
        with D.client("socket") as c:  # the same tree both times, and nothing left in it
            (t,) = [t for t in c.trees() if t.base == self.base]
            self.assertEqual(t.usage.total_nodes, 1)

    def test_run_in_a_subdirectory_over_http(self) -> None:
        sub = os.path.join(self.base, "sub")
        os.mkdir(sub)
        with D.client("socket") as c:
            t = c.create_tree(self.base)
        p = self.arbor_py("--url", D.url, "run", "--tree", t.id, "--", "sh", "-c", "pwd > here; echo x > f",
                          cwd=sub, env={"ARBOR_TOKEN": D.token})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(read(os.path.join(sub, "f")), "x\n")
        self.assertTrue(read(os.path.join(sub, "here")).strip().endswith("/sub"))

    def test_run_timeout_kills(self) -> None:
        t0 = time.monotonic()
        p = self.arbor_py("run", "--timeout", "0.5", "--", "sh", "-c", "echo 5 > n; sleep 30")
        self.assertLess(time.monotonic() - t0, 20)
        self.assertEqual(p.returncode, 137)
        self.assertEqual(read(os.path.join(self.base, "n")), "1\n")

    def test_speculate(self) -> None:
        p = self.arbor_py("speculate", "--json", "-c", "sleep 30; echo slow > n", "-c", "echo fast > n",
                          "-c", "exit 1")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual((out["winner"], out["committed"]), (1, True))
        self.assertTrue(out["results"][0]["killed"])
        self.assertEqual(read(os.path.join(self.base, "n")), "fast\n")
        p = self.arbor_py("speculate", "-c", "exit 1", "-c", "exit 2")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no attempt succeeded", p.stderr)

    def test_best_of_n(self) -> None:
        p = self.arbor_py("best-of-n", "-n", "5", "--score", "cat n", "--",
                          "sh", "-c", "echo $(( (ARBOR_ATTEMPT * 7) % 5 )) > n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(read(os.path.join(self.base, "n")), "4\n")  # attempt 2: 14 % 5
        self.assertIn("[2] won score 4", p.stderr)

    def test_usage_errors(self) -> None:
        p = self.arbor_py("run")
        self.assertEqual(p.returncode, 2)
        p = self.arbor_py("run", "--tree", "no-such-tree", "--", "true")
        self.assertEqual(p.returncode, 1)
        self.assertIn("not_found", p.stderr)


class Recipe(unittest.TestCase):
    def test_tree_search_recipe(self) -> None:
        report, base = os.path.join(D.tmp, "report.json"), D.base()
        p = subprocess.run([sys.executable, os.path.join(SDK, "examples", "tree-search", "run.py"),
                            "--branches", "3", "--generations", "4", "--scale", "2", "--report", report,
                            "--base", base],
                           env=D.env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        for gen in range(4):
            self.assertRegex(p.stdout, rf"gen {gen}: fork +[\d.]+ ms  scores( +-?[\d.]+){{3}}  (forward|rollback)")
        r = json.loads(read(report))
        self.assertEqual(len(r["generations"]), 4)
        best = [g["best"] for g in r["generations"]]
        self.assertEqual(best, sorted(best))  # the best so far never gets worse
        for g in r["generations"]:
            self.assertLessEqual(g["live_nodes"], g["max_live_nodes"])
            self.assertEqual(len(g["scores"]), 3)
            self.assertGreater(g["fork_daemon_ms"], 0)
        with D.client("socket") as c:
            self.assertEqual([t for t in c.trees() if t.base == base], [])  # deleted after
        p = subprocess.run([sys.executable, os.path.join(SDK, "examples", "tree-search", "run.py"),
                            "--backend", "no-such-backend", "--generations", "1", "--report", report,
                            "--base", base],
                           env=D.env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not served by this daemon", p.stderr)


class Install(unittest.TestCase):
    def test_pip_installs_offline(self) -> None:
        """pip install ./sdk/python needs no index: the build backend is in the tree."""
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
            self.skipTest(f"no pip for {sys.executable}")
        target = os.path.join(D.tmp, "site")
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--target", target, SDK], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(target, "arbor", "py.typed")))
        env = {**D.env(), "PYTHONPATH": target}
        p = subprocess.run([sys.executable, "-c", "import arbor, arbor.aio, arbor.patterns; "
                            "print(arbor.__file__, arbor.Client().ping())"],
                           env=env, capture_output=True, text=True, cwd=D.tmp, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith(target))
        self.assertTrue(p.stdout.strip().endswith(arbor.__version__))


class Typed(unittest.TestCase):
    def test_mypy_strict(self) -> None:
        """The package type-checks strictly for every Python it supports (Debian's python3-mypy)."""
        for py in ("/usr/bin/python3", sys.executable):
            if subprocess.run([py, "-m", "mypy", "--version"], capture_output=True).returncode == 0:
                break
        else:
            self.skipTest("no mypy (apt-get install python3-mypy)")
        for version in ("3.10", "3.11", "3.12"):
            p = subprocess.run([py, "-m", "mypy", "--strict", "--no-incremental", "--python-version", version,
                                os.path.join(SDK, "arbor")], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class Version(unittest.TestCase):
    def test_sdk_is_versioned_with_the_daemon(self) -> None:
        import re
        with open(os.path.join(SDK, "..", "..", "internal", "daemon", "daemon.go")) as f:
            go = re.search(r'const Version = "([^"]+)"', f.read()).group(1)
        self.assertEqual(arbor.__version__, go)
        with D.client("socket") as c:
            self.assertEqual(c.ping(), go)


if __name__ == "__main__":
    unittest.main()
