"""Caps on what one principal, and the whole pod, may hold open at once. Pure.

One `Quota` per kind of long-lived thing (notification streams, sequence-update
streams): a caller past its own cap, or a pod past its total, is refused with a
message saying which cap and how many are held, so that one client cannot take
every stream slot a pod has (gRPC's `max_concurrent_rpcs` counts everyone's
calls together).
"""

from __future__ import annotations


class Quota:
    def __init__(self, what: str, per_principal: int, per_pod: int) -> None:
        self.what = what
        self.per_principal = per_principal
        self.per_pod = per_pod
        self.held: dict[str, int] = {}
        self.total = 0

    def acquire(self, owner: str) -> str | None:
        """Take one for `owner`; the refusal's message instead if a cap is reached."""
        mine = self.held.get(owner, 0)
        if mine >= self.per_principal:
            return (
                f"{owner} holds {mine} {self.what} on this pod, its limit "
                f"({self.per_principal}); close some first"
            )
        if self.total >= self.per_pod:
            return f"this pod serves {self.total} {self.what}, its limit ({self.per_pod})"
        self.held[owner] = mine + 1
        self.total += 1
        return None

    def release(self, owner: str) -> None:
        left = self.held[owner] - 1
        assert left >= 0, "released more than acquired"
        assert self.total > 0, "released more than acquired"
        if left:
            self.held[owner] = left
        else:
            del self.held[owner]
        self.total -= 1


def session_cap_problem(
    owner: str, held_by_owner: int, held_on_pod: int, per_principal: int, per_pod: int
) -> str | None:
    """Sessions are counted from the leaders' trackers (they outlive any RPC), so
    their cap is a check rather than a Quota."""
    if held_by_owner >= per_principal:
        return (
            f"{owner} holds {held_by_owner} sessions on this pod, its limit "
            f"({per_principal}); close some first"
        )
    if held_on_pod >= per_pod:
        return f"this pod holds {held_on_pod} sessions, its limit ({per_pod})"
    return None
