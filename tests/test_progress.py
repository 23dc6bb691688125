"""Autotuning in ext's own commands shows one progress line (decisions done / total, the problem
just decided), and Inductor's ``Autotune Choices Stats`` JSON stays off stderr unless asked for
(issue 29, item 6: a595f81 printed a stats block after every choice, breaking the line up)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from typing import Iterator

import pytest
import torch

from inductor_ext import demo, progress


def _progress_lines(stderr: str, desc: str) -> list[str]:
    """The lines of ``stderr`` a terminal would show holding the ``desc`` progress bar: tqdm
    redraws it in place with carriage returns, so what stays of each line is its last part."""
    shown = [line.split("\r")[-1] for line in stderr.split("\n")]
    # a log record of torch's (a one-time warning such as "No CUDA runtime is found") may land on
    # the line too: that is a log line, not Inductor's stats
    return [line for line in shown if line.startswith(f"{desc}: ") and not LOG_RECORD.search(line)]


LOG_RECORD = re.compile(r"[WIEDC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")


@contextlib.contextmanager
def _stderr() -> Iterator[io.StringIO]:
    """What ext, tqdm and Inductor write to sys.stderr while inside (the log flags off)."""
    env = {k: os.environ.pop(k) for k in (progress.STATS_ENV,) if k in os.environ}
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            yield err
    finally:
        os.environ.update(env)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[list[str], str]:
    """The demo's report and stderr, on a one-GEMM model instead of the demo block (same code path)."""
    lines: list[str] = []
    original = demo.make_model
    demo.make_model = lambda device="cpu", **size: (torch.nn.Linear(16, 8).eval(), torch.randn(2, 16))
    try:
        with _stderr() as err:
            demo.run("cpu", str(tmp_path_factory.mktemp("demo")), reps=2, out=lines.append)
    finally:
        demo.make_model = original
    return lines, err.getvalue()


def test_demo_shows_one_progress_line_and_no_inductor_stats(demo_run):
    lines, err = demo_run
    assert "Autotune Choices Stats" not in err
    bars = _progress_lines(err, "autotune")
    assert len(bars) == 1, err[-3000:]
    final = bars[0]
    decided = [line for line in lines if line.startswith("gemm") and "every GEMM went to ATen" not in line]
    assert len(decided) == 1 and "1/1" in final and "addmm 8 2x16 16x8" in final, (final, lines)


def test_stats_come_back_under_the_log_flag(monkeypatch):
    from torch._inductor import config, select_algorithm

    monkeypatch.delenv(progress.STATS_ENV, raising=False)
    with progress.quiet_inductor_stats():
        assert not config.max_autotune_report_choices_stats and not select_algorithm.PRINT_AUTOTUNE
    assert config.max_autotune_report_choices_stats and select_algorithm.PRINT_AUTOTUNE
    level = progress.autotune_log.level
    progress.autotune_log.setLevel(logging.DEBUG)  # what TORCH_LOGS=ext_autotune sets
    try:
        with progress.quiet_inductor_stats():
            assert config.max_autotune_report_choices_stats
    finally:
        progress.autotune_log.setLevel(level)
    monkeypatch.setenv(progress.STATS_ENV, "1")
    with progress.quiet_inductor_stats():
        assert config.max_autotune_report_choices_stats
