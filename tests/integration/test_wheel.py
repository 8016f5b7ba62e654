"""Issue 14, item 4: what ``pipx install .`` / ``uv tool install .`` install is the wheel, and the wheel
carries the owner page (``connectd/edges/http/static``: HTML, CSS, JS, the icons) and the ``connectd`` script."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_the_built_wheel_holds_the_static_page_and_the_entry_point(tmp_path: Path) -> None:
    tree = tmp_path / "tree"  # a clean copy: a stale build/ in the checkout cannot hide a missing file
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=170,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("connect-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = sorted(p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "connectd" / "edges" / "http" / "static").rglob("*") if p.is_file())
    assert static and set(static) <= names, sorted(set(static) - names)
    assert {"connectd/edges/http/static/index.html", "connectd/edges/http/static/app.js", "connectd/edges/http/static/icons/LICENSE"} <= names
    assert {"connectd/py.typed", "connectcore/py.typed", "connectd/cli/main.py", "connectcore/hub/__init__.py"} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "connectd = connectd.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # What an installed copy sees: unpacked alone on the path, it finds its page and runs its CLI.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    probe = subprocess.run(
        [sys.executable, "-c", "import connectd, connectd.edges.http.page as p; print(connectd.__file__); print((p.STATIC_DIR / 'index.html').is_file())"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    where, found = probe.stdout.split()
    assert where.startswith(str(site)) and found == "True"
    help_text = subprocess.run([sys.executable, "-m", "connectd.cli", "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert help_text.returncode == 0 and "doctor" in help_text.stdout and "service" in help_text.stdout
