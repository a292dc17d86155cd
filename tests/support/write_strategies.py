"""Hypothesis strategies for write requests shared by the apply-path tests."""

from __future__ import annotations

from hypothesis import strategies as st

from cairn.proto import oxia_client_pb2 as pb


def plain_puts(keys: st.SearchStrategy[str], max_expected: int) -> st.SearchStrategy[pb.PutRequest]:
    """Puts with only key, value and maybe an expected version (-1: must not exist,
    or 0..max_expected): what the server's plain-put fast path takes."""
    return st.builds(
        lambda key, value, expected: (
            pb.PutRequest(key=key, value=value, expected_version_id=expected)
            if expected is not None
            else pb.PutRequest(key=key, value=value)
        ),
        keys,
        st.binary(max_size=8),
        st.none() | st.integers(min_value=-1, max_value=max_expected),
    )
