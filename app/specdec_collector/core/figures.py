"""A target's result over a window, engine by engine: figures, exactness and notes.

`core.arithmetic` computes per-series increases; here each engine's increases become its result
through the function its schema row names (`core.engine_figures`). The contract
(docs/engines.md): every result says its `engine`; `exact` is true only when every figure
follows from counters with the seed formulas; `notes` says in a sentence why not; a figure the
counters cannot give is null, never guessed; an engine whose metrics cannot give a window at
all is `na` with a reason that says what to do. A target serving several engines gets one
result per engine under `engines`; its own figures are their sum when they mean the same, else
the first engine's (and a note says so). Pure functions.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from specdec_collector.core.arithmetic import (
    NO_METRICS,
    Totals,
    absolute_totals,
    has_spec_decoding,
    interval_increases,
    reading_error,
)
from specdec_collector.core.counters import (
    LIFETIME,
    SCHEMA_OF,
    WITNESSES,
    Role,
    ServingEngine,
)
from specdec_collector.core.engine_figures import (
    RESULT_OF,
    EngineIncreases,
    counted_result,
    unrecognised_result,
)
from specdec_collector.core.exposition import Series
from specdec_collector.core.notes import (
    MINDIE_REASON,
    MIXED_NOTE,
    RESTARTED,
    RESTARTED_SAMPLED,
    SUM_NOTE,
    UNSEEN_RESTART,
    VERIFICATION_NOTES,
)
from specdec_collector.core.readings import Failure, Reading
from specdec_collector.core.results import (
    Bounds,
    Counts,
    EngineResult,
    LifetimeRatios,
    Raw,
    SampleCount,
    TargetResult,
    Throughput,
)
from specdec_collector.core.targets import EngineHints
from specdec_collector.core.throughput import throughput_of
from specdec_collector.core.trust import confidence_of, flags_of


def _summable(engine: ServingEngine) -> bool:
    schema = SCHEMA_OF.get(engine)
    return schema is not None and schema.summable


def _appears_late(engine: ServingEngine) -> bool:
    schema = SCHEMA_OF.get(engine)
    return schema is not None and schema.appears_late


def _split_by_engine(series: Series) -> dict[ServingEngine, Series]:
    found: dict[ServingEngine, Series] = {}
    for key, value in series.items():
        found.setdefault(key.engine, {})[key] = value
    return found


def _roles(series: Series) -> set[Role]:
    return {key.role for key in series}


def _lifetime(after: Series) -> list[LifetimeRatios]:
    ratios: dict[tuple[tuple[str, str], ...], LifetimeRatios] = {}
    for key, value in after.items():
        if key.role in LIFETIME and value.value is not None:
            entry = ratios.setdefault(key.labels, LifetimeRatios(labels=dict(key.labels)))
            setattr(entry, _LIFETIME_FIELDS[key.role], value.value)
    return list(ratios.values())


#: The `LifetimeRatios` field of each gauge role.
_LIFETIME_FIELDS = {
    Role.LIFETIME_ACCEPTANCE_RATE: "draft_acceptance_rate",
    Role.LIFETIME_EFFICIENCY: "efficiency",
    Role.LIFETIME_ACCEPTANCE_LENGTH: "acceptance_length",
    Role.LIFETIME_POSITION_RATE: "position_acceptance_rate",
}


@dataclass(frozen=True, slots=True)
class _EngineWindow:
    engine: ServingEngine
    totals: Totals
    result: EngineResult
    roles: frozenset[Role] = frozenset()  # of its series at the end of the window


@dataclass(slots=True)
class _Chain:
    """What every engine of a target's chain gave: the windows of those that drafted, the
    throughput of those that showed only their witnesses (no spec decoding), and the resets
    and restarts of every series."""

    windows: list[_EngineWindow] = field(default_factory=list)
    plain: list[Throughput] = field(default_factory=list)
    everything: Totals = field(default_factory=Totals)


def _without_spec_decoding(engine: ServingEngine, roles: set[Role]) -> bool:
    """Whether an engine's series at the end of a window are its witnesses alone."""
    if engine is ServingEngine.SGLANG:  # its generated tokens and requests are in its figures
        return Role.VERIFY_CALLS not in roles
    return roles <= WITNESSES


def _engine_windows(chain: Sequence[Series], hints: EngineHints, seconds: float | None) -> _Chain:
    """Each engine's window, and the resets and restarts of every series of the chain.

    Each series' increases are computed once, per engine: the engines' series are disjoint,
    so the whole chain's resets and restarts are the sum of every engine's (one found
    restarted is an instance of one engine), skipped engines included. `seconds` is the
    time the chain spans, for the throughput.
    """
    by_engine = [_split_by_engine(snapshot) for snapshot in chain]
    found = _Chain()
    everything = found.everything
    last = {engine: _roles(series) for engine, series in by_engine[-1].items()}
    for engine in sorted({e for split in by_engine for e in split}, key=list(ServingEngine).index):
        own = [split.get(engine, {}) for split in by_engine]
        # Each step's increases once: the window's sum, its intervals and its flags use them.
        steps = interval_increases(own)
        totals = Totals()
        for step in steps:
            totals.absorb(step)
        everything.series_resets += totals.series_resets
        everything.restarts += totals.restarts
        if not own[-1]:
            continue  # gone by the end of the window: nothing to measure
        roles = last[engine]
        if _without_spec_decoding(engine, roles):
            plain = throughput_of(engine, totals, roles, seconds)
            if plain is not None:
                found.plain.append(plain)
            continue
        if engine is ServingEngine.UNRECOGNISED:
            others = [e for e in last if e is not engine]
            if all(_without_spec_decoding(e, last[e]) for e in others):
                # Nothing else at the end but witnesses: say what was there.
                found.windows.append(_EngineWindow(engine, totals, unrecognised_result(own[-1])))
            continue
        ended = frozenset(roles)
        increases = EngineIncreases(engine, totals, Role.DRAFTS in roles, steps, own, hints, ended)
        result = RESULT_OF[engine](increases)
        kind = ServingEngine(result.engine)  # vLLM's V0 is told from V1 by its counters
        result = _restart_notes(result, totals.restarts, own)
        confidence = confidence_of(kind, steps, result)
        flags = flags_of(steps, result)
        throughput = throughput_of(kind, totals, roles, seconds, result.data)
        if confidence is not None or flags or throughput is not None:
            result = result.model_copy(
                update={"confidence": confidence, "flags": flags or None, "throughput": throughput}
            )
        found.windows.append(_EngineWindow(kind, totals, result, ended))
    return found


def _restart_notes(result: EngineResult, restarts: int, chain: Sequence[Series]) -> EngineResult:
    """What a restart inside the window, seen or not, does to the figures: a restart loses
    what was counted since the snapshot before it; without samples, one that no counter shows
    (no `_created`, every counter higher at the end) cannot be seen at all."""
    sampled = len(chain) > 2
    notes = list(result.notes)
    if restarts:
        notes.append((RESTARTED_SAMPLED if sampled else RESTARTED).format(n=restarts))
    elif not sampled and not any(v.created is not None for s in chain for v in s.values()):
        notes.append(UNSEEN_RESTART.format(engine=result.engine))
    if notes == result.notes:
        return result
    return result.model_copy(update={"notes": notes, "exact": result.exact and not restarts})


def _appear_late(after: Reading) -> bool:
    """Whether `after` holds only series of engines that show none before their first use."""
    return (
        not isinstance(after, Failure)
        and has_spec_decoding(after)
        and all(_appears_late(key.engine) for key in after)
    )


def _counts(phase: Reading) -> Counts | None:
    """The `raw` counters of a phase; None where its scrape failed or found no spec-decode
    series."""
    if isinstance(phase, Failure) or not has_spec_decoding(phase):
        return None
    return absolute_totals(phase).raw()


def _plain_throughput(chain: Sequence[Series], seconds: float | None) -> Throughput | None:
    """The throughput of a server without spec decoding (its witnesses at both ends), the
    other side of a speedup; None where there is not one such engine."""
    if not chain[0] or not chain[-1]:
        return None  # nothing at one end: no increase to count
    plain = _engine_windows(chain, EngineHints(), seconds).plain
    return plain[0] if len(plain) == 1 else None


def build_result(
    url: str,
    before: Reading,
    after: Reading,
    samples: Sequence[Reading] = (),
    hints: EngineHints = EngineHints(),
    seconds: float | None = None,
) -> TargetResult:
    """The AISBench `spec_decode_<host>_<port>.json` result of one target over one window.

    `samples` are the background scrapes between the two, in time order; failed ones are
    skipped, so the chain continues from the last good snapshot. `hints` are what the start
    body told of the target's engine; its verification mode is kept on the result, with what
    it does to the acceptance in the notes. `seconds` is the time between `before` and
    `after` were scraped, for the throughput (none per second without it).
    """
    result = _result(url, before, after, samples, hints, seconds)
    models = _models(after)
    if models:
        result = result.model_copy(update={"models": models})
    if hints.verification is None:
        return result
    note = VERIFICATION_NOTES.get(hints.verification)
    notes = result.notes if note is None else [*(result.notes or []), note]
    return result.model_copy(update={"verification": hints.verification, "notes": notes})


#: The labels that name a model, over the engines (vLLM, SGLang, LMDeploy: `model_name`).
MODEL_LABELS = ("model_name",)


def _models(after: Reading) -> list[str]:
    """The models `after`'s series name, sorted."""
    if isinstance(after, Failure):
        return []
    return sorted({value for key in after for name, value in key.labels if name in MODEL_LABELS})


def _result(
    url: str,
    before: Reading,
    after: Reading,
    samples: Sequence[Reading],
    hints: EngineHints,
    seconds: float | None,
) -> TargetResult:
    if hints.engine == "mindie":
        return TargetResult(status="na", url=url, error=MINDIE_REASON, engine="mindie", exact=False)
    errors = {name: reading_error(phase) for name, phase in (("before", before), ("after", after))}
    if errors["before"] == NO_METRICS and _appear_late(after):
        # Some engines show their series only after their first use (`appears_late` of their
        # schema): a server that had none at the start counts from 0, as a series absent
        # earlier does.
        errors["before"] = None
    raw = Raw(before=_counts(before), after=_counts(after))
    taken = SampleCount(taken=len(samples), failed=sum(isinstance(s, Failure) for s in samples))
    failed = [f"[{name}] {error}" for name, error in errors.items() if error]
    good = [sample for sample in samples if not isinstance(sample, Failure)]
    if failed:
        throughput = None
        if not isinstance(before, Failure) and not isinstance(after, Failure):
            throughput = _plain_throughput([before, *good, after], seconds)
        return TargetResult(
            status="na",
            url=url,
            error="; ".join(failed),
            raw=raw,
            samples=taken,
            throughput=throughput,
        )
    assert not isinstance(before, Failure) and not isinstance(after, Failure)
    chain = [before, *good, after]
    found = _engine_windows(chain, hints, seconds)
    windows, everything = found.windows, found.everything
    common = {
        "url": url,
        "raw": raw,
        "samples": taken,
        "restarts": everything.restarts,
        "series_resets": everything.series_resets,
    }
    if not windows:
        # A server without spec decoding: its throughput, the other side of a speedup.
        plain = found.plain[0] if len(found.plain) == 1 else None
        return TargetResult(status="na", error=NO_METRICS, throughput=plain, **common)
    lifetime = _lifetime(after) or None
    if len(windows) == 1:
        (only,) = windows
        throughput = only.result.throughput
        if throughput is None and len(found.plain) == 1:  # spec-like names beside witnesses
            throughput = found.plain[0]
        return TargetResult(
            status=only.result.status,
            error=only.result.error,
            data=only.result.data,
            engine=only.engine,
            exact=only.result.exact,
            notes=only.result.notes,
            lifetime=lifetime,
            diffusion=only.result.diffusion,
            confidence=only.result.confidence,
            flags=only.result.flags,
            throughput=throughput,
            accepted_distribution=only.result.accepted_distribution,
            per_drafted_position_acceptance_rates=only.result.per_drafted_position_acceptance_rates,
            **common,
        )
    return _combined(windows, lifetime, common, seconds)


def _combined(
    windows: list[_EngineWindow],
    lifetime: list[LifetimeRatios] | None,
    common: dict[str, object],
    seconds: float | None,
) -> TargetResult:
    """A target serving several engines: each one's result, and their sum or the first's."""
    results = [window.result for window in windows]
    names = "+".join(window.engine.value for window in windows)
    ok = [window for window in windows if window.result.status == "ok"]
    if not ok:
        error = "; ".join(f"[{r.engine}] {r.error}" for r in results)
        return TargetResult(
            status="na",
            error=error,
            engine=names,
            exact=False,
            notes=[],
            engines=results,
            lifetime=lifetime,
            **common,
        )
    if all(_summable(window.engine) for window in windows):
        total = Totals()
        for window in windows:
            total.absorb(window.totals)
        has_drafts = all(w.result.data and w.result.data.num_drafts is not None for w in ok)
        summed = counted_result(EngineIncreases(ServingEngine.VLLM, total, has_drafts))
        notes = [SUM_NOTE.format(names=", ".join(w.engine.value for w in windows))]
        notes += [note for r in results for note in r.notes if note not in notes]
        # Witnesses every engine shows (the others' would count some requests only), but the
        # latency: the engines time their decoding differently (`core.throughput`).
        roles = frozenset.intersection(*(window.roles for window in windows))
        roles -= {Role.DECODE_SECONDS, Role.FIRST_TOKENS}
        throughput = throughput_of(ServingEngine.VLLM, total, set(roles), seconds, summed.data)
        return TargetResult(
            status=summed.status,
            error=summed.error,
            data=summed.data,
            engine=names,
            exact=all(r.exact for r in results),
            notes=notes,
            engines=results,
            lifetime=lifetime,
            throughput=throughput,
            **common,
        )
    first = ok[0].result
    return TargetResult(
        status="ok",
        data=first.data,
        engine=names,
        exact=False,
        notes=[MIXED_NOTE.format(first=first.engine), *first.notes],
        engines=results,
        lifetime=lifetime,
        **common,
    )


def bounded_result(
    url: str,
    points: Sequence[tuple[datetime, str, Reading]],
    start: datetime,
    end: datetime,
    hints: EngineHints = EngineHints(),
) -> TargetResult:
    """The result of the part of a window between `start` and `end` (a benchmark's own phase).

    `points` are the window's snapshots in chain order (`before`, samples, `after`). The chain
    runs from the last good snapshot at or before `start` (else the first good one) to the first
    good one at or after `end` (else the last good one): the smallest stretch of snapshots that
    encloses the phase. `bounds` says which snapshots were used.
    """
    good = [(at, phase, r) for at, phase, r in points if not isinstance(r, Failure) and r]
    if not good:  # nothing to bound: the whole window's reasons
        no_metrics: Series = {}  # an empty reading: NO_METRICS
        first_reading = points[0][2] if points else no_metrics
        return build_result(url, first_reading, points[-1][2] if points else no_metrics, (), hints)
    first = max((i for i, (at, _, _) in enumerate(good) if at <= start), default=0)
    last = min((i for i, (at, _, _) in enumerate(good) if at >= end), default=len(good) - 1)
    last = max(first, last)
    chosen = good[first : last + 1]
    middle = [r for _, _, r in chosen[1:-1]]
    seconds = (chosen[-1][0] - chosen[0][0]).total_seconds()
    result = build_result(url, chosen[0][2], chosen[-1][2], middle, hints, seconds)
    bounds = Bounds(
        requested_start=start,
        requested_end=end,
        start=chosen[0][0],
        start_phase=chosen[0][1],
        end=chosen[-1][0],
        end_phase=chosen[-1][1],
    )
    return result.model_copy(update={"bounds": bounds})
