"""Live-read tests run on moto with the local runtime's EC2 fidelity hooks, so that what the
reader asks (secondary and IPv6 addresses, delegated prefixes, subnets' IPv6 blocks) is
answered as AWS answers it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sg_reconciler_tools.local import moto_hooks


@pytest.fixture(autouse=True, scope="module")
def ec2_as_aws() -> Iterator[None]:
    patches = moto_hooks.patch_ec2_fidelity()
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()
