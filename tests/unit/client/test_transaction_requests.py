"""A transactional producer's requests: version 1 and version 2 (epoch bumps) EndTxn and their answers."""

from mqbroker.client.transaction_requests import TransactionRequests
from mqbroker.protocols.native import txn_messages as t


def _requests(version: int) -> TransactionRequests:
    return TransactionRequests("tx", 60_000, producer_id=7, producer_epoch=3, transaction_version=version)


def test_version_1_ends_without_bumping_and_keeps_the_epoch() -> None:
    requests = _requests(1)
    assert requests.end(committed=True).bump_epoch is False
    assert requests.ended(t.EndTxnResponse()) is False
    assert (requests.producer_id, requests.producer_epoch) == (7, 3)


def test_version_2_ends_bumping_and_takes_the_answered_epoch() -> None:
    requests = _requests(2)
    ended = requests.end(committed=False)
    assert (ended.bump_epoch, ended.committed, ended.producer_epoch) == (True, False, 3)
    assert requests.ended(t.EndTxnResponse(producer_id=7, producer_epoch=4)) is True
    assert (requests.producer_id, requests.producer_epoch) == (7, 4)
    assert requests.ended(t.EndTxnResponse(producer_id=12, producer_epoch=0)) is True  # epoch exhausted: a new id
    assert (requests.producer_id, requests.producer_epoch) == (12, 0)


def test_version_2_keeps_the_epoch_when_the_answer_names_none() -> None:
    requests = _requests(2)
    assert requests.ended(t.EndTxnResponse()) is False
    assert (requests.producer_id, requests.producer_epoch) == (7, 3)
