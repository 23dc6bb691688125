"""The queue of ``autotune="background"``: GEMM and attention problems a compile served untimed
(from a decision table, the cost model or ATen's default), waiting for the background worker to
time them.

One SQLite file, ``background.db``, beside the user's own autotune cache and private to the user
like it (a folder others may write to is not used: nothing is queued then). A job is data: the
problem's key, which of its inputs were graph constants (a frozen weight), the intra-op threads
and the compile's options; it is validated when read, and the worker builds nothing from it but
tensors of those sizes and an ext compile with those options (``background_tuning.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from inductor_ext.autotune.cache import default_cache_path, folder_problem, make_private_folder
from inductor_ext.autotune.cache_entry import BadRow, ProblemKey, bounded_json

__all__ = ["ATTENTION_OPS", "BadQueue", "GEMM_OPS", "Job", "QUEUED_OPS", "STATES", "TuneQueue", "queue_path"]

log = logging.getLogger("inductor_ext.autotune")

# what the worker can rebuild from a key alone: ATen's GEMMs, and ext's attention ops (their scale
# decides no kernel, so no key holds it; a flag such as is_causal is in the op's name)
GEMM_OPS = ("mm", "addmm", "bmm")
ATTENTION_OPS = ("decode_attention", "prefill_attention", "prefill_attention_causal")
QUEUED_OPS = GEMM_OPS + ATTENTION_OPS
STATES = ("pending", "running", "done", "failed")
# compile options a job carries (the rest are the preset's): plain values ext's validator checks again
JOB_OPTIONS = ("preset", "templates", "template_margin", "freezing")
_DDL = ("CREATE TABLE IF NOT EXISTS jobs (digest TEXT PRIMARY KEY, job_json TEXT NOT NULL, state TEXT NOT NULL,"
        " created REAL NOT NULL, note TEXT NOT NULL)")
MAX_JOB_JSON = 64 * 1024


class BadQueue(Exception):
    """The queue file is not ext's; the message is one line."""


@dataclass(frozen=True)
class Job:
    """One problem to time: ``key`` as the compile looked it up, ``constants`` per input."""

    key: ProblemKey
    constants: tuple[bool, ...]
    threads: int
    options: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"key": self.key.to_dict(), "constants": list(self.constants), "threads": self.threads,
                           "options": self.options}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Job:
        """``BadRow`` for anything but a job this module wrote."""
        d = bounded_json(text, "job", MAX_JOB_JSON)
        if not isinstance(d, dict) or set(d) != {"key", "constants", "threads", "options"}:
            raise BadRow("a job has exactly key, constants, threads, options")
        key = ProblemKey.from_dict(d["key"])
        constants, threads, options = d["constants"], d["threads"], d["options"]
        if key.op not in QUEUED_OPS:
            raise BadRow(f"op {key.op!r} is not one of {QUEUED_OPS}")
        if not isinstance(constants, list) or len(constants) != len(key.shapes) or \
                not all(isinstance(c, bool) for c in constants):
            raise BadRow("constants must hold one bool per input")
        if type(threads) is not int or not 1 <= threads <= 4096:
            raise BadRow(f"threads must be an int in [1, 4096], got {threads!r}")
        if not isinstance(options, dict) or set(options) - set(JOB_OPTIONS):
            raise BadRow(f"options may hold only {', '.join(JOB_OPTIONS)}")
        return cls(key, tuple(constants), threads, options)


def queue_path() -> Path:
    """``background.db`` beside the user's own autotune cache."""
    return default_cache_path().with_name("background.db")


class TuneQueue:
    """The queue file; every call opens, does its work and closes (processes share it)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or queue_path()

    def usable(self) -> str | None:
        """Why nothing can be queued here (the folder is not private to the user), or None."""
        make_private_folder(self.path.parent)
        return folder_problem(self.path.parent)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """The queue, its schema checked first: a file holding anything but the jobs table (a
        trigger, a view: SQL of its own) is refused whole (``BadQueue``), never run."""
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            schema = set(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
            if schema - {("table", "jobs", _DDL.replace(" IF NOT EXISTS", "")), ("index", "sqlite_autoindex_jobs_1", None)}:
                raise BadQueue(f"{self.path} holds more than ext's jobs table: not read (delete it to start anew)")
            conn.execute(_DDL)
            yield conn
        except sqlite3.DatabaseError as e:
            raise BadQueue(f"{self.path}: {e}") from None
        finally:
            conn.close()

    def add(self, job: Job) -> bool:
        """Queue ``job`` unless its problem is queued or tuned already; whether it was added."""
        if (why := self.usable()) is not None:
            log.info("ext: background tuning queues nothing: %s", why)
            return False
        with self._connect() as conn:
            done = conn.execute("INSERT OR IGNORE INTO jobs VALUES (?, ?, 'pending', ?, '')",
                                (job.key.digest(), job.to_json(), time.time()))
            return done.rowcount == 1

    def take(self) -> tuple[str, Job] | None:
        """The oldest pending job, marked running; a job that no longer reads is marked failed."""
        if not self.path.exists():
            return None
        with self._connect() as conn:
            while True:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute("SELECT digest, job_json FROM jobs WHERE state = 'pending' "
                                   "ORDER BY created LIMIT 1").fetchone()
                if row is None:
                    conn.execute("COMMIT")
                    return None
                digest, text = row
                try:
                    job = Job.from_json(text)
                except BadRow as e:
                    conn.execute("UPDATE jobs SET state = 'failed', note = ? WHERE digest = ?",
                                 (f"unreadable job: {e}"[:500], digest))
                    conn.execute("COMMIT")
                    continue
                conn.execute("UPDATE jobs SET state = 'running' WHERE digest = ?", (digest,))
                conn.execute("COMMIT")
                return digest, job

    def finish(self, digest: str, state: str, note: str = "") -> None:
        assert state in STATES
        with self._connect() as conn:
            conn.execute("UPDATE jobs SET state = ?, note = ? WHERE digest = ?", (state, note[:500], digest))

    def requeue_running(self) -> int:
        """Jobs left running by a worker that died: pending again (the lock says none runs now)."""
        if not self.path.exists():
            return 0
        with self._connect() as conn:
            return conn.execute("UPDATE jobs SET state = 'pending' WHERE state = 'running'").rowcount

    def rows(self) -> list[dict[str, Any]]:
        """Every job as ``tune status`` shows it, oldest first."""
        if not self.path.exists():
            return []
        with self._connect() as conn:
            found = conn.execute("SELECT job_json, state, created, note FROM jobs ORDER BY created").fetchall()
        rows = []
        for text, state, created, note in found:
            try:
                problem = Job.from_json(text).key.describe()
            except BadRow as e:
                problem = f"(unreadable: {e})"
            rows.append({"problem": problem, "state": state, "queued": created, "note": note})
        return rows


_started: set[str] = set()  # queue files this process started a worker for


def start_worker(queue: TuneQueue) -> None:
    """Start the machine's background worker for ``queue`` (detached, lowest priority; it exits at
    once where another one runs), once per process. ``INDUCTOR_EXT_BACKGROUND_WORKER=0`` leaves it
    to you (``inductor-ext tune work``, e.g. from cron)."""
    if os.environ.get("INDUCTOR_EXT_BACKGROUND_WORKER") == "0" or str(queue.path) in _started:
        return
    _started.add(str(queue.path))
    try:
        with open(queue.path.with_name("background.log"), "ab") as out:
            subprocess.Popen([sys.executable, "-m", "inductor_ext.background_tuning"], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, start_new_session=True, close_fds=True)
    except OSError as e:
        log.warning("ext: could not start the background tuning worker (%s); run `inductor-ext tune work`", e)
