"""openYuanrong's own Python client tests, run against a kiloRL worker.

Takes a directory of openYuanrong test files (``tests/python/`` of the openYuanrong
datasystem repository; fetch them yourself, they are not part of this repository),
rewrites only their imports (``yr.datasystem`` and ``datasystem`` -> ``kilorl.store.yuanrong``)
into a temporary directory, starts a kiloRL worker, writes the ``worker_config.json`` the
tests read (``<root>/output/[datasystem/]service/worker_config.json``), runs pytest and
reports pass / fail / skip per test.

    python benchmarks/yuanrong_conformance.py /tmp/yrtests [--json out.json] [-k expr]
    python benchmarks/yuanrong_conformance.py /tmp/yrtests --openyuanrong-python /tmp/yrvenv/bin/python \
        --address 127.0.0.1:31601        # the same tests against openYuanrong itself
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TOKEN = "yuanrong-conformance"
_IMPORT = re.compile(r"^(\s*)(from|import)\s+(yr\.datasystem|datasystem)(\b)", re.MULTILINE)


def rewrite_imports(source: str, target: str = "kilorl.store.yuanrong") -> tuple[str, int]:
    """``from yr.datasystem.x import y`` -> ``from <target>.x import y`` (import lines only)."""
    return _IMPORT.subn(lambda m: f"{m.group(1)}{m.group(2)} {target}{m.group(4)}", source)


def start_worker(run_dir: Path, shm: str) -> tuple[subprocess.Popen, int]:
    run_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
           "--run-dir", str(run_dir), "--token", TOKEN, "--shm-size", shm, "--l2-dir", str(run_dir / "l2")]
    log = open(run_dir / "worker.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    info = run_dir / "worker.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited: {(run_dir / 'worker.log').read_text()[-2000:]}")
        if info.exists():
            data = json.loads(info.read_text())
            if data.get("pid") == proc.pid:
                return proc, int(data["port"])
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("worker did not start within 60 s")


def parse_junit(path: Path) -> list[dict[str, str]]:
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, detail = "failed", (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                outcome, detail = "skipped", (child.get("message") or "")[:300]
        rows.append({"test": f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}",
                     "file": case.get("classname", "").split(".")[0], "outcome": outcome, "detail": detail})
    return rows


def report(rows: list[dict[str, str]], rewritten: int, elapsed: float, json_path: Path | None) -> None:
    ran = [r for r in rows if r["outcome"] != "skipped"]
    passed = [r for r in ran if r["outcome"] == "passed"]
    print(f"\n{'test':<78} outcome")
    for r in rows:
        print(f"{r['file'] + '::' + r['test'].split('::')[-1]:<78} {r['outcome']}"
              + (f"  ({r['detail'][:120]})" if r["outcome"] != "passed" else ""))
    print(f"\nimports rewritten: {rewritten}; passed {len(passed)} of {len(ran)} run "
          f"({100 * len(passed) / max(1, len(ran)):.1f}%), {len(rows) - len(ran)} skipped by the tests "
          f"themselves; {elapsed:.0f} s")
    if json_path:
        json_path.write_text(json.dumps({"passed": len(passed), "ran": len(ran), "rows": rows}, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", type=Path, help="directory holding openYuanrong's test_*.py files")
    ap.add_argument("--json", type=Path, help="write the per-test results here")
    ap.add_argument("-k", default="", help="pytest -k expression")
    ap.add_argument("--shm-size", default="1GiB", help="arena of the worker")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the whole pytest run")
    ap.add_argument("--openyuanrong-python", help="instead: run the tests unchanged (bare `datasystem` imports "
                    "made `yr.datasystem`) with this python against an openYuanrong worker at --address")
    ap.add_argument("--address", default="127.0.0.1:31601", help="the openYuanrong worker (dscli start)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="yr-conformance-"))
    suite = tmp / "tests" / "python"  # cwd: dirname(abspath('..')) is tmp, as the tests expect
    suite.mkdir(parents=True)
    rewritten = 0
    target = "yr.datasystem" if args.openyuanrong_python else "kilorl.store.yuanrong"
    for src in sorted(args.tests.glob("test_*.py")):
        text, n = rewrite_imports(src.read_text(), target)
        rewritten += n
        (suite / src.name).write_text(text)
    python = args.openyuanrong_python or sys.executable
    if args.openyuanrong_python:
        proc, address = None, args.address
    else:
        proc, port = start_worker(tmp / "worker", args.shm_size)
        address = f"127.0.0.1:{port}"
    try:
        for sub in ("output/datasystem/service", "output/service"):
            (tmp / sub).mkdir(parents=True, exist_ok=True)
            (tmp / sub / "worker_config.json").write_text(json.dumps({"worker_address": {"value": address}}))
        env = dict(os.environ, KILORL_STORE_TOKEN=TOKEN)
        repo = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
        junit = tmp / "junit.xml"
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
               "--junitxml", str(junit), "-o", "junit_family=xunit1", *(["-k", args.k] if args.k else []),
               *sorted(p.name for p in suite.glob("test_*.py"))]
        started = time.monotonic()
        subprocess.run(cmd, cwd=suite, env=env, timeout=args.timeout)
        elapsed = time.monotonic() - started
        rows = parse_junit(junit)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    report(rows, rewritten, elapsed, args.json)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
