"""The planner reads its records without building Powertools Parser's models (cold start,
docs/architecture.md): a fresh interpreter classifies a CloudTrail record and a scheduled
event, and no module of Parser's models is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from event_samples import ACCOUNT_ID, EVENTS_DIR, REGION

LAYER = Path(__file__).resolve().parents[3] / "layers"

PROBE = """
import json, sys
from sg_reconciler.trigger.classify import Relevant, parse_record, parse_sqs_record
record = json.load(open(sys.argv[1]))["Records"][0]
scheduled = json.load(open(sys.argv[2]))
where = dict(account_id=sys.argv[3], region=sys.argv[4], own_role_arns=frozenset())
_, parsed = parse_sqs_record(record, 0, **where)
assert isinstance(parsed, Relevant), parsed
assert isinstance(parse_record(scheduled, **where), Relevant)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("aws_lambda_powertools.utilities.parser"))))
"""


def test_a_cold_planner_reads_records_without_parsers_models() -> None:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(EVENTS_DIR / "sqs" / "RegisterTargets.json"),
            str(EVENTS_DIR / "scheduled.json"),
            ACCOUNT_ID,
            REGION,
        ],
        env={**os.environ, "PYTHONPATH": str(LAYER)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(probe.stdout)

    assert "aws_lambda_powertools.utilities.parser.parser" in loaded  # read with Parser's parse
    assert [m for m in loaded if ".parser.models" in m] == []
