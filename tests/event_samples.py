"""The sample events in `events/`, loaded by name: the same files `sam local invoke -e` uses.

Names are paths under `events/` without `.json`: `eventbridge/AuthorizeSecurityGroupIngress`,
`sqs/RegisterTargets`, `sqs/burst`, `scheduled`. Each call returns a fresh copy, so a test
may mutate it. The samples share one fake world, described by the constants below.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

EVENTS_DIR = Path(__file__).resolve().parent.parent / "events"

ACCOUNT_ID = "123456789012"
REGION = "eu-west-1"
# The sessionIssuer ARNs the samples use; neither is the reconciler's own role.
LOAD_BALANCER_CONTROLLER_ROLE_ARN = (
    "arn:aws:iam::123456789012:role/eks-shop-aws-load-balancer-controller"
)
ADMIN_ROLE_ARN = (
    "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/eu-west-1/"
    "AWSReservedSSO_PlatformAdmin_0a1b2c3d4e5f6071"
)


def load_event(name: str) -> Any:
    """The parsed JSON of `events/<name>.json` (a fresh object on every call)."""
    return json.loads(event_text(name))


@cache
def event_text(name: str) -> str:
    """The raw text of `events/<name>.json`, as `sam local invoke -e` would send it."""
    path = EVENTS_DIR / f"{name.removesuffix('.json')}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no sample event {name!r} in {EVENTS_DIR}")
    return path.read_text()


def event_names(folder: str) -> list[str]:
    """The sample names (file stems) in `events/<folder>/`, sorted."""
    return sorted(p.stem for p in (EVENTS_DIR / folder).glob("*.json"))


KeyPath = tuple[str | int, ...]  # a path of keys and indexes into a JSON document


def key_paths(node: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """Every key path in a JSON document, shortest first: where the fuzzers mutate a sample."""
    children: list[tuple[str | int, Any]] = []
    if isinstance(node, dict):
        children = list(node.items())
    elif isinstance(node, list):
        children = list(enumerate(node))
    found: list[KeyPath] = []
    for key, child in children:
        found.append((*prefix, key))
        found.extend(key_paths(child, (*prefix, key)))
    return found


def parent_of(doc: Any, path: KeyPath) -> Any:
    """The container that holds the last key of `path`."""
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node
