"""SequenceGaps: samples a subscription never took, from each publisher's sequence numbers."""

from __future__ import annotations

from brace_common.reception import SequenceGaps


def info(gid: bytes, number: int) -> dict:
    return {"publication_sequence_number": number, "publisher_gid": {"implementation_identifier": "x", "data": gid}}


def test_gaps_are_counted_per_publisher_and_the_first_sample_sets_the_start():
    gaps = SequenceGaps()
    assert gaps.received(info(b"p", 5)) == 0  # joined late: what came before is not this reader's loss
    assert gaps.received(info(b"p", 6)) == 0 and gaps.received(info(b"p", 10)) == 3
    assert gaps.received(info(b"q", 1)) == 0 and gaps.received(info(b"q", 3)) == 1
    assert gaps.received(info(b"p", 10)) == 0 and gaps.unordered == 1
    assert gaps.lost == 4


def test_no_sequence_number_counts_nothing_and_publishers_are_bounded():
    gaps = SequenceGaps(max_publishers=2)
    assert gaps.received({"publication_sequence_number": None, "publisher_gid": None}) == 0
    for gid in (b"a", b"b", b"c"):
        gaps.received(info(gid, 1))
    assert gaps.received(info(b"a", 9)) == 0  # forgotten (least recently heard), starts again
    assert gaps.received(info(b"c", 4)) == 2 and gaps.lost == 2
