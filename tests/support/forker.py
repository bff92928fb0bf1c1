"""Run a crash harness's kill points as forks of one process that imported everything once.

A kill point needs a process of its own (it ends with ``os._exit``), and starting Python with NumPy, the
Elasticsearch client and es_rag costs about a second: forty kill points were a minute of the suite. The
:class:`Forker` starts ``python -m tests.support.forker MODULE`` once; that process imports MODULE and then, for each
request, forks a child that runs ``MODULE.main(argv)`` (its stdout and stderr go to files) and reports the child's
exit status. Nothing in the parent holds a thread or a lock when it forks (POSIX only).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]


class Forker:
    """The parent side: ``run(argv)`` returns ``(returncode, stdout, stderr)`` of one forked run.

    Args:
        module: The harness module (with a ``main(argv) -> int``), e.g. ``tests.support.crash``.
    """

    def __init__(self, module: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forker", module],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[str] = self.proc.stdin
        self._out: IO[str] = self.proc.stdout
        ready = self._out.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"forker for {module} did not start: {ready!r}")

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        self._in.write(json.dumps(argv) + "\n")
        self._in.flush()
        answer: dict[str, Any] = json.loads(self._out.readline())
        return int(answer["rc"]), str(answer["stdout"]), str(answer["stderr"])

    def close(self) -> None:
        self._in.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Forker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(module_name: str) -> None:
    module = importlib.import_module(module_name)
    out = sys.stdout
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        argv = json.loads(line)
        with tempfile.TemporaryDirectory() as tmp:
            so, se = Path(tmp) / "stdout", Path(tmp) / "stderr"
            pid = os.fork()
            if pid == 0:  # the child: run the harness with its own output files, then leave without cleanup
                code = 1
                try:
                    fo, fe = os.open(so, os.O_WRONLY | os.O_CREAT), os.open(se, os.O_WRONLY | os.O_CREAT)
                    os.dup2(fo, 1)
                    os.dup2(fe, 2)
                    sys.stdout = open(1, "w", closefd=False)
                    sys.stderr = open(2, "w", closefd=False)
                    code = int(module.main(argv))
                except SystemExit as exc:
                    code = int(exc.code or 0)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            rc = os.waitstatus_to_exitcode(status)
            answer = {
                "rc": rc,
                "stdout": so.read_text() if so.exists() else "",
                "stderr": se.read_text() if se.exists() else "",
            }
        print(json.dumps(answer), file=out, flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1])
