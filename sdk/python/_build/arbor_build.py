"""A PEP 517 / PEP 660 build backend for the arbor package, standard library only.

The package is pure Python with no dependencies, so a wheel is a zip of
arbor/ with its .dist-info: nothing here needs setuptools or any download,
which is what lets `pip install ./sdk/python` work on a machine without an
index (pip's build isolation would otherwise fetch setuptools).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "arbor"


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
        return tomllib.loads(raw.decode())["project"]
    except ImportError:  # Python 3.10: the few flat keys this file uses
        text = raw.decode()
        proj = text.split("[project]", 1)[1].split("\n[", 1)[0]
        out: dict = {k: v for k, v in re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', proj, re.M)}
        scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0] if "[project.scripts]" in text else ""
        out["scripts"] = dict(re.findall(r'^([\w.-]+)\s*=\s*"([^"]*)"', scripts, re.M))
        return out


def _version() -> str:
    with open(os.path.join(ROOT, PKG, "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("arbor/__init__.py has no __version__")
    return m.group(1)


def _dist() -> tuple[str, str]:
    return _project()["name"].replace("-", "_"), _version()


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {_version()}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '>=3.10')}"]
    readme = os.path.join(ROOT, "README.md")
    if os.path.exists(readme):
        with open(readme) as f:
            lines += ["Description-Content-Type: text/markdown", "", f.read()]
    return "\n".join(lines) + "\n"


def _files() -> list[str]:
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, PKG)):
        for n in sorted(names):
            if n.endswith((".py", ".typed")):
                out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(wheel_directory: str, entries: dict[str, bytes]) -> str:
    name, version = _dist()
    info = f"{name}-{version}.dist-info"
    entries = dict(entries)
    entries[f"{info}/METADATA"] = _metadata().encode()
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: arbor_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    scripts = _project().get("scripts") or {}
    if scripts:
        entries[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in scripts.items())).encode()
    entries[f"{info}/top_level.txt"] = f"{PKG}\n".encode()
    record = "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in entries.items()) + f"{info}/RECORD,,\n"
    entries[f"{info}/RECORD"] = record.encode()
    fn = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, fn), "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in entries.items():
            z.writestr(zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0)), d)
    return fn


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = {}
    for rel in _files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            entries[rel.replace(os.sep, "/")] = f.read()
    return _wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a .pth that puts the checkout on sys.path."""
    name, _ = _dist()
    return _wheel(wheel_directory, {f"__editable__.{name}.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    name, version = _dist()
    base = f"{name}-{version}"
    fn = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fn), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/arbor_build.py"] + _files():
            if os.path.exists(os.path.join(ROOT, rel)):
                t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return fn
