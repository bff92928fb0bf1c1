"""Start-up time of es-rag commands, as a ratio to ``python -c pass`` measured side by side in one run.

Commands that need no model must stay close to the interpreter's own start (no torch / transformers import);
``search`` on an embedded index pays for the model load, shown for comparison.

    .venv/bin/python benchmarks/startup_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "es-rag --help": ["-m", "es_rag.cli", "--help"],
    "setup --dry-run": ["-m", "es_rag.cli", "setup", "--dry-run"],
    "explain --no-vector": ["-m", "es_rag.cli", "explain", "password reset", "--tenant", "acme", "--no-vector"],
    "doctor": ["-m", "es_rag.cli", "doctor"],
    "search '' (usage error)": ["-m", "es_rag.cli", "search", "", "--tenant", "acme"],
    "ingest (nothing to ingest)": ["-m", "es_rag.cli", "ingest", "{empty}", "--tenant", "acme"],
    "delete-source (embedded)": ["-m", "es_rag.cli", "delete-source", "x", "--tenant", "acme", "--index-dir", "{idx}"],
    "search (loads the model)": ["-m", "es_rag.cli", "search", "password", "--tenant", "acme", "--index-dir", "{idx}"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "empty").mkdir()
        doc = root / "guide.md"
        doc.write_text("# Guide\n\nReset a password from the account page.\n")
        idx = root / "idx"
        subprocess.run([sys.executable, "-m", "es_rag.cli", "ingest", str(doc), "--tenant", "acme",
                        "--index-dir", str(idx)], check=True, capture_output=True)  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.repeat):  # interleaved, so a noisy moment hits every command alike
            for name, argv in COMMANDS.items():
                argv = [a.replace("{empty}", str(root / "empty")).replace("{idx}", str(idx)) for a in argv]
                t0 = time.perf_counter()
                subprocess.run([sys.executable, *argv], capture_output=True, check=False, cwd=tmp)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<28} {'median s':>9} {'x python':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<28} {med:>9.2f} {med / base:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
