"""A cost model for problems no decision table covers: which arm to serve, and how sure it is.

Plain code over plain numbers, no Inductor. Each table entry (``decision_tables.py``) is an
observation: a problem, ATen's fastest time, the best template's time, and the template's winning
config where it won. A problem is compared only with observations of its *kind* (the same op,
dtypes, ranks, which inputs are contiguous, fp32 precision, returned-ness, static or dynamic),
by distance in log2 of every size (so 512 is as far from 1024 as 1024 from 2048). The model
predicts ATen's and the template's times from the nearest observations (each scaled by the
problem's work over theirs), and so the template's ratio to ATen; its *error* is how far its
leave-one-out predictions of the table's own ratios missed (a high quantile, in log space).

The rule (``Prediction.template_wins``): a template serves only where the predicted ratio, made
worse by the model's error, still beats ATen by the margin. Everywhere else ATen serves, the
safer choice: a wrong template costs speed, a missed one costs only what tuning would have won.
Timing (``autotune="quick"``) is pruned by the other side of the same bound
(``Prediction.template_loses``): where even the ratio made better by the error would not beat
ATen by the margin, no template is timed; elsewhere the configs that won nearby are timed first.

Where ATen serves, which ATen-side choice (``Prediction.aten_pick``): the op itself, unless
another ATen-side choice (a packed, panelled or widened library GEMM, ``lowering/aten_choices.py``)
beat the op by the margin on average over the nearest observations that timed it (weighted as the
ratio is); then that one, where it is offered. The average, not the nearest alone: the packed GEMM
and the op are near ties at most fp32 sizes, and the nearest entry's few percent either way is
timing noise (``bench/cost_model_holdout.py``: with each width held out, the nearest alone served
9 of 480 problems a choice over 5% slower than the op, the average 3). A library GEMM is called
alike whether the graph returns its output and whether its rows are symbolic, so where no
observation of the problem's own kind is near, those of its *library kind* (``library_kind_of``:
the kind less those two) lend their pick: a returned bf16 linear or a dynamic recompile's GEMMs
then get the widened GEMM that won beside them, not ATen's bf16 op (measured on AVX2: several
times slower from 16 rows, ``bench/bf16_gemm.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from inductor_ext.autotune.cache_entry import Entry, ProblemKey

NEIGHBOURS = 4  # observations a prediction averages
RADIUS = 3.0  # farthest neighbour, in summed |log2| of sizes: 8x in one size, or 2x in three
ERROR_QUANTILE = 0.9  # of the leave-one-out misses: the model's error
MIN_OBSERVATIONS = 3  # a kind with fewer has no model (its leave-one-out error is meaningless)
NOT_OFFERED = math.log(2.0)  # where no template config was timed, as if it ran 2x slower than ATen


@dataclass(frozen=True)
class Observation:
    """One table entry as the model reads it."""

    kind: tuple[Any, ...]
    sizes: tuple[float, ...]  # log2 of every size of every input
    work: float  # log2 of the problem's work (``_work``)
    aten_us: float
    template_us: float | None  # the best template config's time; None: none was timed
    family: str | None  # the winner, where a template won
    config: Mapping[str, Any] | None  # its config, where a template won
    aten_gains: Mapping[str, float] = field(default_factory=dict)  # log(op / it) of each other ATen-side choice timed

    @property
    def log_ratio(self) -> float:
        """log(template / ATen): below 0 the template was faster."""
        if self.template_us is None:
            return NOT_OFFERED
        return math.log(self.template_us / self.aten_us)


@dataclass(frozen=True)
class Prediction:
    """What the model says of one problem."""

    log_ratio: float | None  # predicted log(template / ATen); None: no observation near enough
    error: float  # the model's error for this kind (log space); inf without a model
    aten_us: float | None
    template_us: float | None
    configs: tuple[tuple[str, Mapping[str, Any]], ...] = ()  # (family, config) of the nearest wins, nearest first
    neighbours: int = 0
    why_none: str = ""  # why there is no prediction
    aten_choice: tuple[str, float] | None = None  # the ATen-side choice of best mean log gain over the op nearby
    aten_choice_entries: int = 0  # how many of the nearest observations timed it
    aten_choice_from: str = ""  # where those are of the library kind only: how the nearest differs

    def aten_pick(self, margin: float) -> str | None:
        """The ATen-side choice to serve instead of the op itself: the one that beat the op by more
        than ``margin`` on average nearby (``aten_choice``); None: the op."""
        if self.aten_choice is None or not self.aten_choice[1] > math.log1p(margin):
            return None
        return self.aten_choice[0]

    def template_wins(self, margin: float) -> bool:
        """Whether a template beats ATen by ``margin`` even if the model errs by its error."""
        return (self.log_ratio is not None and math.isfinite(self.error) and bool(self.configs)
                and self.log_ratio + self.error < -math.log1p(margin))

    def template_loses(self, margin: float) -> bool:
        """Whether no template would be served even if the model errs by its error in the
        template's favour: timing one is wasted (``autotune="quick"`` then times ATen alone)."""
        return (self.log_ratio is not None and math.isfinite(self.error)
                and self.log_ratio - self.error >= -math.log1p(margin))

    def configs_of(self, family: str) -> tuple[Mapping[str, Any], ...]:
        """The configs of ``family`` that won nearby, nearest first."""
        return tuple(config for name, config in self.configs if name == family)

    def text(self) -> str:
        """One line's worth: ``template 0.62x ATen (+-0.08 in log)`` or why there is none."""
        if self.log_ratio is None:
            return self.why_none
        return (f"template predicted {math.exp(self.log_ratio):.2f}x ATen's time from {self.neighbours} table "
                f"entries, error {self.error:.2f} in log")


def kind_of(key: ProblemKey) -> tuple[Any, ...]:
    """What a problem must share with an observation to be compared with it."""
    contiguous = tuple(_is_contiguous(shape, strides) for shape, strides in zip(key.shapes, key.strides))
    return (key.op, key.dtypes, tuple(len(s) for s in key.shapes), contiguous, key.fp32_precision,
            key.returned, bool(key.dynamic), key.arch, key.preset, key.device_name)


_RETURNED, _DYNAMIC = 5, 6  # where ``kind_of`` holds them


def library_kind_of(kind: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a problem must share with an observation to borrow its ATen-side pick: its kind less
    whether its output is returned and whether its sizes are symbolic (a library GEMM is called
    the same way for either)."""
    return kind[:_RETURNED] + kind[_DYNAMIC + 1:]


def _kind_difference(problem: tuple[Any, ...], observed: tuple[Any, ...]) -> str:
    """How an observation of the problem's library kind differs from it, in words."""
    said = []
    if problem[_RETURNED] != observed[_RETURNED]:
        said.append("a returned output" if observed[_RETURNED] else "an output not returned")
    if problem[_DYNAMIC] != observed[_DYNAMIC]:
        said.append("symbolic sizes" if observed[_DYNAMIC] else "static sizes")
    return " and ".join(said)


def _is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _log_sizes(key: ProblemKey) -> tuple[float, ...]:
    return tuple(math.log2(max(1, d)) for shape in key.shapes for d in shape)


def _work(key: ProblemKey) -> float:
    """log2 of the work the problem does: for a GEMM (its last two inputs M x K by K x N, batched
    or not) its multiply-adds; otherwise the root of the product of its inputs' sizes."""
    if "mm" in key.op and len(key.shapes) >= 2:
        a, b = key.shapes[-2:]
        if len(a) == len(b) and len(a) in (2, 3) and a[-1] == b[-2]:
            batch = a[0] if len(a) == 3 else 1
            return math.log2(max(1, batch * a[-2] * a[-1] * b[-1]))
    return 0.5 * sum(math.log2(max(1, math.prod(s))) for s in key.shapes)


def observe(entry: Entry) -> Observation | None:
    """``entry`` as an observation, or None when it holds no ATen time to compare with."""
    aten = entry.aten_time_us
    if aten is None or not aten > 0:
        return None
    timed = [c["time_us"] for c in entry.candidates if c.get("policy") is not None and c.get("time_us")]
    won = entry.winner != "aten"
    return Observation(kind=kind_of(entry.key), sizes=_log_sizes(entry.key), work=_work(entry.key), aten_us=aten,
                       template_us=min(timed) if timed else None,
                       family=entry.winner if won else None, config=dict(entry.config) if won else None,
                       aten_gains=_aten_gains(entry))


def _aten_gains(entry: Entry) -> dict[str, float]:
    """log(the op's time / its time) of each ATen-side candidate (no template policy) but the op,
    where both were timed."""
    times = {c["name"]: c["time_us"] for c in entry.candidates if c.get("policy") is None and c.get("time_us")}
    own = times.get(entry.key.op)
    if own is None:
        return {}
    return {name: math.log(own / t) for name, t in times.items() if name != entry.key.op}


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b))


@dataclass
class CostModel:
    """The model over one set of table entries (``decision_tables.TableSet.entries``)."""

    observations: Sequence[Observation]
    _by_kind: dict[tuple[Any, ...], list[Observation]] = field(default_factory=dict, init=False, repr=False)
    _errors: dict[tuple[Any, ...], float] = field(default_factory=dict, init=False, repr=False)
    _by_library_kind: dict[tuple[Any, ...], list[Observation]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for o in self.observations:
            self._by_kind.setdefault(o.kind, []).append(o)
            self._by_library_kind.setdefault(library_kind_of(o.kind), []).append(o)

    @classmethod
    def from_entries(cls, entries: Sequence[Entry]) -> CostModel:
        return cls([o for o in map(observe, entries) if o is not None])

    def error(self, kind: tuple[Any, ...]) -> float:
        """The ``ERROR_QUANTILE`` of |predicted - measured| log ratio over the kind's observations,
        each predicted from the others; inf for a kind with too few to say."""
        if kind not in self._errors:
            group = self._by_kind.get(kind, [])
            misses = []
            for i, o in enumerate(group):
                ratio, _, _, _ = _nearest(group[:i] + group[i + 1:], o.sizes, o.work)
                if ratio is not None:
                    misses.append(abs(ratio - o.log_ratio))
            if len(group) < MIN_OBSERVATIONS or not misses:
                self._errors[kind] = math.inf
            else:
                misses.sort()
                self._errors[kind] = misses[min(len(misses) - 1, int(ERROR_QUANTILE * len(misses)))]
        return self._errors[kind]

    def predict(self, key: ProblemKey) -> Prediction:
        kind, sizes = kind_of(key), _log_sizes(key)
        group = self._by_kind.get(kind, [])
        if not group:
            return self._borrowed(Prediction(None, math.inf, None, None,
                                             why_none="no table entry of this kind of problem"), kind, sizes)
        nearby = _near(group, sizes)
        ratio, aten_us, template_us, near = _predicted(nearby, _work(key))
        if ratio is None:
            return self._borrowed(Prediction(None, math.inf, None, None,
                                             why_none=f"no table entry within {RADIUS:g} (log2 sizes) of this problem"),
                                  kind, sizes)
        wins = sorted((o for o in group if o.family is not None and _distance(o.sizes, sizes) <= RADIUS),
                      key=lambda o: _distance(o.sizes, sizes))
        configs = tuple(dict.fromkeys((o.family, _frozen(o.config)) for o in wins if o.family and o.config))
        choice, entries = _aten_choice(nearby)
        return Prediction(ratio, self.error(kind), aten_us, template_us,
                          tuple((f, dict(c)) for f, c in configs), near, aten_choice=choice,
                          aten_choice_entries=entries)

    def _borrowed(self, prediction: Prediction, kind: tuple[Any, ...], sizes: Sequence[float]) -> Prediction:
        """``prediction`` (none of the problem's kind near) with the ATen-side pick of the nearest
        observations of its library kind within ``RADIUS``, where there are some."""
        near = _near(self._by_library_kind.get(library_kind_of(kind), []), sizes)
        if not near:
            return prediction
        choice, entries = _aten_choice(near)
        return replace(prediction, aten_choice=choice, aten_choice_entries=entries,
                       aten_choice_from=_kind_difference(kind, near[0][1].kind))


def _frozen(config: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in (config or {}).items()))


def _nearest(group: Sequence[Observation], sizes: Sequence[float],
             work: float) -> tuple[float | None, float | None, float | None, int]:
    """The weighted log ratio, and ATen's and the template's times (scaled by work), of the
    ``NEIGHBOURS`` observations nearest ``sizes`` within ``RADIUS``, and how many there were."""
    return _predicted(_near(group, sizes), work)


def _predicted(near: Sequence[tuple[float, Observation]],
               work: float) -> tuple[float | None, float | None, float | None, int]:
    """``_nearest``'s figures from the neighbours ``_near`` found."""
    if not near:
        return None, None, None, 0
    weights = [_weight(d) for d, _ in near]
    total = sum(weights)
    ratio = sum(w * o.log_ratio for w, (_, o) in zip(weights, near)) / total
    log_aten = sum(w * (math.log(o.aten_us) + (work - o.work) * math.log(2)) for w, (_, o) in zip(weights, near)) / total
    aten_us = math.exp(log_aten)
    return ratio, aten_us, aten_us * math.exp(ratio), len(near)


def _near(group: Sequence[Observation], sizes: Sequence[float]) -> list[tuple[float, Observation]]:
    """The ``NEIGHBOURS`` observations nearest ``sizes`` within ``RADIUS``, nearest first, with
    their distances."""
    ranked = sorted(((_distance(o.sizes, sizes), o) for o in group), key=lambda p: p[0])
    return [(d, o) for d, o in ranked[:NEIGHBOURS] if d <= RADIUS]


def _weight(distance: float) -> float:
    return 1.0 / (1.0 + distance) ** 2


def _aten_choice(near: Sequence[tuple[float, Observation]]) -> tuple[tuple[str, float] | None, int]:
    """The ATen-side choice whose log gain over the op, averaged over the observations in ``near``
    that timed it (weighted by distance), is the largest and above 0, with that mean; and how many
    timed it. (None, 0) where none beat the op on average."""
    best: tuple[str, float] | None = None
    entries = 0
    for name in dict.fromkeys(n for _, o in near for n in o.aten_gains):
        timed = [(_weight(d), o.aten_gains[name]) for d, o in near if name in o.aten_gains]
        gain = sum(w * g for w, g in timed) / sum(w for w, _ in timed)
        if gain > 0 and (best is None or gain > best[1]):
            best, entries = (name, gain), len(timed)
    return best, entries
