"""``autotune="background"``: a compile serves every decision untimed and queues its GEMMs; the
machine's one worker (lowest priority) times them into the user's cache, which the next process
reads. The queue is data: a job is validated when read, a queue file with SQL of its own is
refused, never run."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inductor_ext import background_tuning, cli
from inductor_ext.autotune import tune_queue
from inductor_ext.autotune.cache_entry import BadRow, ProblemKey
from inductor_ext.autotune.tune_queue import BadQueue, Job, TuneQueue
from inductor_ext.lowering import decision_record

OPTIONS = {"preset": "cpu", "templates": ["cpp.gemm"], "template_margin": 0.05, "freezing": True}


def _key(op: str = "mm", shapes=((16, 64), (64, 96)), strides=((64, 1), (1, 64))) -> ProblemKey:
    return ProblemKey(op=op, shapes=shapes, strides=strides, dtypes=("float32",) * len(shapes), device_name="cpu x",
                      arch="cpu", preset="cpu", fp32_precision="ieee")


def _job(**kw) -> Job:
    key = _key(**kw)
    return Job(key, tuple(i == len(key.shapes) - 1 for i in range(len(key.shapes))), 2, dict(OPTIONS))


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("INDUCTOR_EXT_BACKGROUND_WORKER", "0")  # each test runs the worker itself
    return tmp_path / "ext"


# ------------------------------------------------------------------ jobs and the queue are data


def test_a_job_reads_back_and_anything_else_is_refused() -> None:
    job = _job()
    assert Job.from_json(job.to_json()) == job
    for threads in (1, 4096):  # the bounds are threads a machine can have
        assert Job.from_json(json.dumps({**json.loads(job.to_json()), "threads": threads})).threads == threads
    attention = json.loads(job.to_json())
    attention["key"].update(op="prefill_attention_causal")
    assert Job.from_json(json.dumps(attention)).key.op == "prefill_attention_causal"
    for spoil, why in ((lambda d: d["key"].update(op="softmax"), "op 'softmax' is not one of"),
                       (lambda d: d.update(constants=[True]), "one bool per input"),
                       (lambda d: d.update(threads=0), "threads"),
                       (lambda d: d.update(threads=4097), "threads"),
                       (lambda d: d.update(threads=2.0), "threads"),
                       (lambda d: d["options"].update(autotune_cache="/etc/x"), "options may hold only"),
                       (lambda d: d.pop("options"), "exactly")):
        d = json.loads(job.to_json())
        spoil(d)
        with pytest.raises(BadRow, match=why):
            Job.from_json(json.dumps(d))


def test_the_queue_keeps_one_job_per_problem_in_order(own_cache: Path) -> None:
    queue = TuneQueue()
    first, second = _job(), _job(shapes=((1, 64), (64, 96)))
    assert queue.add(first) and not queue.add(first) and queue.add(second)
    digest, taken = queue.take()
    assert taken == first and [r["state"] for r in queue.rows()] == ["running", "pending"]
    assert queue.requeue_running() == 1  # a worker that died leaves its job to the next one
    queue.finish(queue.take()[0], "done", "cpp.gemm (benchmark)")
    assert [(r["problem"], r["state"], r["note"]) for r in queue.rows()] == [
        ("mm 16x96x64 fp32", "done", "cpp.gemm (benchmark)"), ("mm 1x96x64 fp32", "pending", "")]


def test_an_unreadable_job_is_failed_not_run(own_cache: Path) -> None:
    queue = TuneQueue()
    queue.add(_job())
    with sqlite3.connect(queue.path) as conn:
        conn.execute("UPDATE jobs SET job_json = ?", ('{"key": 1}',))
    assert queue.take() is None
    assert queue.rows()[0]["state"] == "failed" and "unreadable job" in queue.rows()[0]["note"]


def test_a_queue_file_with_sql_of_its_own_is_refused_never_run(own_cache: Path) -> None:
    queue = TuneQueue()
    queue.add(_job())
    with sqlite3.connect(queue.path) as conn:
        conn.execute("CREATE TRIGGER planted AFTER UPDATE ON jobs BEGIN INSERT INTO jobs VALUES ('pwned', '{}', 'pending', 0, ''); END")
    with pytest.raises(BadQueue, match="more than ext's jobs table"):
        queue.take()
    with sqlite3.connect(queue.path) as conn:
        assert conn.execute("SELECT digest, state FROM jobs").fetchall() == [(_job().key.digest(), "pending")]


def test_a_folder_others_may_write_queues_nothing(own_cache: Path, caplog) -> None:
    own_cache.mkdir(mode=0o700)
    own_cache.chmod(0o777)
    queue = TuneQueue()
    with caplog.at_level(logging.INFO, logger="inductor_ext.autotune"):
        assert "writable by other users" in queue.usable() and not queue.add(_job())
    assert not queue.path.exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"ext: background tuning queues nothing: {own_cache} is writable by other users (mode 777)"]


def test_a_worker_that_cannot_start_is_one_line_saying_what_to_run(own_cache: Path, monkeypatch, caplog) -> None:
    def refuse(*args, **kwargs):
        raise OSError("no processes left")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(tune_queue, "_started", set())
    monkeypatch.setenv("INDUCTOR_EXT_BACKGROUND_WORKER", "1")
    queue = TuneQueue()
    queue.usable()
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        tune_queue.start_worker(queue)
    assert [r.getMessage() for r in caplog.records] == [
        "ext: could not start the background tuning worker (no processes left); run `inductor-ext tune work`"]


def test_one_worker_per_machine(own_cache: Path) -> None:
    queue = TuneQueue()
    queue.add(_job())
    with background_tuning.worker_lock(queue) as mine:
        assert mine
        assert background_tuning.run(queue) == []  # another worker (this one) holds the lock
    assert queue.rows()[0]["state"] == "pending"


def test_a_compile_starts_the_worker_once_detached_unless_told_not_to(own_cache: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: started.append((cmd, kw)))
    monkeypatch.setattr(tune_queue, "_started", set())
    monkeypatch.setenv("INDUCTOR_EXT_BACKGROUND_WORKER", "1")
    queue = TuneQueue()
    queue.usable()
    tune_queue.start_worker(queue)
    tune_queue.start_worker(queue)
    assert len(started) == 1
    cmd, kw = started[0]
    assert cmd[1:] == ["-m", "inductor_ext.background_tuning"] and kw["start_new_session"]
    # nothing of the compiling process leaks into the worker: no open files, no terminal input
    assert kw["close_fds"] is True and kw["stdin"] is subprocess.DEVNULL
    assert kw["stdout"].name == kw["stderr"].name == str(queue.path.with_name("background.log"))
    monkeypatch.setattr(tune_queue, "_started", set())
    monkeypatch.setenv("INDUCTOR_EXT_BACKGROUND_WORKER", "0")
    tune_queue.start_worker(queue)
    assert len(started) == 1


@pytest.mark.parametrize("shape, strides", [
    ((16, 64), (64, 1)),
    ((64, 96), (1, 64)),  # a linear's weight, transposed
    ((16, 96), (0, 1)),  # a bias broadcast over the rows
    ((4, 16, 64), (1024, 64, 1)),
    ((4, 64, 16), (1024, 1, 64)),
    ((16, 64), (128, 1)),  # every other row of a larger tensor: not rebuilt
    ((16, 64), (1, 32)),  # overlapping: not rebuilt
])
def test_layouts_rebuild_as_permuted_dense_tensors(shape, strides) -> None:
    rebuilt = background_tuning._dense(shape, strides)
    dense = strides in ((64, 1), (1, 64), (0, 1), (1024, 64, 1), (1024, 1, 64))
    assert (rebuilt is not None) == dense
    if rebuilt is not None:
        base, perm = rebuilt
        view = torch.empty(base).permute(perm).expand(shape)
        assert tuple(view.shape) == shape and view.stride() == strides


def test_a_problem_that_cannot_be_rebuilt_fails_with_the_reason(own_cache: Path) -> None:
    job = Job(_key(strides=((128, 1), (1, 64))), (False, True), 2, dict(OPTIONS))
    assert background_tuning.tune_one(job) == ("failed", "input layout (16, 64) strides (128, 1) is no permuted "
                                                         "dense tensor")


# ------------------------------------------------------------------ served now, tuned for the next process

MODEL = """
import torch

class TwoLinears(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 96)
        self.b = torch.nn.Linear(96, 48, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))
"""


def test_served_untimed_now_tuned_by_the_worker_and_cached_for_the_next_process(own_cache: Path, tmp_path: Path,
                                                                                  monkeypatch, capsys) -> None:
    (tmp_path / "two_linears.py").write_text(MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    TwoLinears = importlib.import_module("two_linears").TwoLinears  # the same module the next process imports

    torch.manual_seed(0)
    model, x = TwoLinears().eval(), torch.randn(16, 64)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with torch.no_grad():
        out = torch.compile(model, backend="ext", options={"autotune": "background"})(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    served = decision_record.decisions[first:]
    assert len(served) == 2 and all(d.reason.startswith("model:") for d in served)
    assert all(c["time_us"] is None for d in served for c in d.candidates)  # nothing timed in the compile
    assert [r["state"] for r in TuneQueue().rows()] == ["pending", "pending"]

    assert cli.main(["tune", "status"]) == 0
    assert "2 pending" in capsys.readouterr().out
    assert cli.main(["tune", "work"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 problem(s) tuned" and all(": done " in line for line in lines[:-1]), lines
    assert [r["state"] for r in TuneQueue().rows()] == ["done", "done"]

    script = ("import sys, json, torch\n"
              "from two_linears import TwoLinears\n"
              "from inductor_ext.lowering import decision_record\n"
              "torch.manual_seed(0)\n"
              "m, x = TwoLinears().eval(), torch.randn(16, 64)\n"
              "with torch.no_grad():\n"
              "    torch.compile(m, backend='ext')(x)\n"
              "print(json.dumps([d.reason for d in decision_record.decisions]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["cache", "cache"]


class TwoAttentions(torch.nn.Module):
    """A decode step's attention over a masked cache, and a causal prefill's."""

    def forward(self, q1, k, v, mask, q):
        decode = torch.nn.functional.scaled_dot_product_attention(q1, k, v, attn_mask=mask)
        prefill = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return decode.sum() + prefill.sum()


def test_attention_served_untimed_is_queued_tuned_by_the_worker_and_then_served_from_the_cache(own_cache: Path) -> None:
    torch.manual_seed(0)
    q1, k, v, q = torch.randn(1, 4, 1, 32), torch.randn(1, 4, 65, 32), torch.randn(1, 4, 65, 32), torch.randn(1, 4, 65, 32)
    mask = torch.arange(65).view(1, 1, 1, 65) < 50  # a static cache's unwritten slots
    model, args = TwoAttentions(), (q1, k, v, mask, q)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with torch.no_grad():
        out = torch.compile(model, backend="ext", options={"autotune": "background"})(*args)
    torch.testing.assert_close(out, model(*args), rtol=1e-4, atol=1e-4)
    queued = {r["problem"].split()[0]: r["state"] for r in TuneQueue().rows()}
    assert queued == {"decode_attention": "pending", "prefill_attention_causal": "pending"}, queued
    assert all(c["time_us"] is None for d in decision_record.decisions[first:] for c in d.candidates)

    done = background_tuning.run()
    assert [state for _, state, _ in done] == ["done", "done"], done
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with torch.no_grad():
        torch.compile(model, backend="ext", options={"autotune": "background"})(*args)
    served = {d.op: d.reason for d in decision_record.decisions[first:]}
    assert served == {"decode_attention": "cache", "prefill_attention_causal": "cache"}, served
    assert [r["state"] for r in TuneQueue().rows()] == ["done", "done"]  # nothing queued again
