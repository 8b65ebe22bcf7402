"""The Policy and the collaborators it hands each call to.

:class:`Policy` (in :mod:`~slopolicy.core.policy.policy`) is built from its
:class:`~slopolicy.core.policy.parts.Parts` and shares one
:class:`~slopolicy.core.policy.book.Book` of live requests with the submit
path (:mod:`~slopolicy.core.policy.intake`), the dispatcher
(:mod:`~slopolicy.core.policy.dispatcher`) and the running path
(:mod:`~slopolicy.core.policy.serving`);
:mod:`~slopolicy.core.policy.reservations` sizes what running requests hold
in the KV ledger.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.policy.policy import Policy as Policy
from slopolicy.core.specs import PolicySource as PolicySource
from slopolicy.core.specs import PolicySpec as PolicySpec

__all__ = ("Policy", "PolicySource", "PolicySpec")
