"""Engines read from payloads written from their own code (`tests/fixtures/written`): each is
recognised, and its window's figures equal the ones computed here from the counts."""

from pathlib import Path

from specdec_collector.core.counters import SCHEMAS
from specdec_collector.core.exposition import Series, SeriesKey, extract_spec_decode
from specdec_collector.core.figures import build_result
from specdec_collector.store.tables import TABLES
from specdec_collector.windows.catalogue import family_of

WRITTEN = Path(__file__).parent / "fixtures" / "written"

# The counts the LMDeploy payloads hold, per DP rank: (drafts, draft tokens, accepted, per pos).
LMDEPLOY_BEFORE = {"0": (400, 1200, 700, [320, 230, 150]), "1": (380, 1140, 610, [300, 190, 120])}
LMDEPLOY_AFTER = {
    "0": (1000, 3000, 1840, [820, 610, 410]),
    "1": (1010, 3030, 1580, [770, 500, 310]),
}


def _read(name: str) -> Series:
    return extract_spec_decode((WRITTEN / name).read_text())


def test_an_lmdeploy_window_is_its_counters_increase_not_its_lifetime_gauges() -> None:
    result = build_result(
        "http://lmdeploy:23333/metrics",
        _read("lmdeploy_0.18_mtp_k3_before.txt"),
        _read("lmdeploy_0.18_mtp_k3_after.txt"),
    )
    drafts = sum(LMDEPLOY_AFTER[e][0] - LMDEPLOY_BEFORE[e][0] for e in LMDEPLOY_AFTER)
    draft_tokens = sum(LMDEPLOY_AFTER[e][1] - LMDEPLOY_BEFORE[e][1] for e in LMDEPLOY_AFTER)
    accepted = sum(LMDEPLOY_AFTER[e][2] - LMDEPLOY_BEFORE[e][2] for e in LMDEPLOY_AFTER)
    per_position = [
        sum(LMDEPLOY_AFTER[e][3][p] - LMDEPLOY_BEFORE[e][3][p] for e in LMDEPLOY_AFTER)
        for p in range(3)
    ]
    assert result.status == "ok" and result.engine == "lmdeploy" and result.exact is True
    assert result.data is not None
    assert result.data.num_drafts == drafts == 1230
    assert result.data.draft_tokens == draft_tokens == 3690
    assert result.data.accepted_tokens == accepted == 2110
    assert result.data.acceptance_rate == accepted / draft_tokens * 100
    assert result.data.acceptance_length == 1 + accepted / drafts
    assert result.data.per_position_acceptance_rates == {
        str(p): n / drafts for p, n in enumerate(per_position)
    }
    # The gauges are the lifetime ratios (engine 0: 1840 / 3000), shown as such, not the window's.
    assert result.lifetime is not None
    engine0 = next(
        r for r in result.lifetime if r.labels == {"engine": "0", "model_name": "Qwen3-8B"}
    )
    assert engine0.draft_acceptance_rate == 1840 / 3000
    assert engine0.acceptance_length == 1 + 1840 / 1000
    assert result.data.acceptance_rate != engine0.draft_acceptance_rate * 100


def test_every_stored_family_name_fits_its_column() -> None:
    """A series' stored family (`engine:role`) of every schema fits `endpoint_series.family`
    (PostgreSQL refuses a longer one: a 500 at the start)."""
    width = TABLES["endpoint_series"].c.family.type.length  # type: ignore[attr-defined]
    for schema in SCHEMAS:
        for role in {*schema.families.values(), *schema.gauges.values()}:
            assert len(family_of(SeriesKey(role, (), schema.engine))) <= width, (schema, role)
