"""A window's start and stop rehearsed at start-up, in a transaction that is rolled back.

SQLAlchemy compiles a statement the first time a database runs it, and keeps it: rehearsed,
the first start a client sends does not pay for compiling the statements that write its
window and its baselines. Each process rehearses once, before it takes requests, on its own
database: nothing is kept but what each database keeps of the statements.
"""

import uuid

from sqlalchemy.engine import Engine

from specdec_collector.core.exposition import extract_spec_decode
from specdec_collector.core.readings import SnapshotPhase, TargetReading
from specdec_collector.schemas import WindowCreate
from specdec_collector.sources.protocol import Chain
from specdec_collector.store.db import write_session
from specdec_collector.store.tables import utcnow
from specdec_collector.windows.closing import add_close, prepare_close_in
from specdec_collector.windows.storage import add_baseline, add_window, find_window, store_snapshots
from specdec_collector.windows.stored import Actor

#: What a one-instance vLLM server answers, as far as the collector reads it.
_ANSWER = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 4.0
"""


def rehearse_window(database: Engine) -> None:
    """Start, sample, read and stop a window of two targets on `database`, and roll it all back."""
    # A team no key names, and a window and endpoints of this process alone: a replica that
    # rehearses at the same moment takes no lock this one waits on.
    actor = Actor(team=" rehearsal", key="rehearsal")
    own = uuid.uuid4().hex
    body = WindowCreate(
        targets=[f"rehearsal-{own}-{n}.invalid:9" for n in range(2)], sample_interval_s=1.0
    )
    targets = body.parsed_targets()
    series = extract_spec_decode(_ANSWER)
    outcomes = [TargetReading(target, utcnow(), series) for target in targets]
    with write_session(database) as transaction:
        session = transaction.session
        try:
            stored = add_window(transaction, actor, own, body, targets, 1, "", 0.0)
            assert stored is not None, "a window of a fresh id is added"
            add_baseline(transaction, stored, outcomes)
            store_snapshots(
                session, {t.name: t.id for t in stored.targets}, SnapshotPhase.SAMPLE, outcomes
            )
            find_window(session, actor.team, own)
            chains = [Chain(reading) for reading in outcomes]
            prepared = prepare_close_in(session, stored, chains, utcnow())
            add_close(transaction, stored, actor, prepared)
        finally:
            transaction.rollback()
