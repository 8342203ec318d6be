"""call_service sends an idempotent request again when its response never came, and fails naming the service."""

from __future__ import annotations

import pytest
from rclpy.task import Future

from brace_common.testing import call_service


class DroppingClient:
    """A client whose first `dropped` requests are never answered (their responses lost), the rest at once."""

    def __init__(self, dropped: int) -> None:
        self.dropped, self.sent, self.removed = dropped, [], []

    def service_is_ready(self) -> bool:
        return True

    def call_async(self, request) -> Future:
        future = Future()
        self.sent.append(request)
        if len(self.sent) > self.dropped:
            future.set_result(f"answer to {request}")
        return future

    def remove_pending_request(self, future: Future) -> None:
        self.removed.append(future)


def test_an_unanswered_request_is_sent_again():
    client = DroppingClient(dropped=1)
    assert call_service(client, "set", "the service", answer_s=0.1, resends=2) == "answer to set"
    assert (client.sent, len(client.removed)) == (["set", "set"], 1)


def test_no_resends_by_default_and_the_failure_names_the_service():
    client = DroppingClient(dropped=1)
    with pytest.raises(AssertionError, match="the service answered"):
        call_service(client, "call", "the service", answer_s=0.1)
    assert client.sent == ["call"]
    with pytest.raises(AssertionError, match=r"3 sent"):
        call_service(DroppingClient(dropped=5), "call", "the service", answer_s=0.1, resends=2)
