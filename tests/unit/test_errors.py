"""The typed error tree: one class per wire code, rebuilt from the code alone; the native codec's errors are both."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.protocols import exceptions

#: The classes ``mqbroker.errors`` defines (others, like the native codec's, subclass them).
ERROR_CLASSES = [value for value in vars(errors).values()
                 if isinstance(value, type) and issubclass(value, errors.BrokerError) and value is not errors.BrokerError]


def test_no_two_error_classes_share_a_wire_code() -> None:
    codes = [cls.code for cls in ERROR_CLASSES]
    assert len(codes) == len(set(codes)) and errors.ErrorCode.NONE not in codes


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_a_code_rebuilds_its_class_with_the_message(cls: type[errors.BrokerError]) -> None:
    rebuilt = errors.error_for_code(int(cls.code), "what went wrong")
    assert type(rebuilt) is cls and rebuilt.message == "what went wrong"
    assert cls.__doc__ and not cls.__doc__.startswith("Reported as")


def test_an_unknown_code_is_an_unknown_server_error_that_names_it() -> None:
    rebuilt = errors.error_for_code(4242, "?")
    assert isinstance(rebuilt, errors.UnknownServerError) and "4242" in rebuilt.message


@pytest.mark.parametrize("cls, parent", [
    (exceptions.MalformedMessageError, errors.MalformedRequestError),
    (exceptions.UnknownApiKeyError, errors.UnknownApiKeyError),
    (exceptions.UnsupportedVersionError, errors.UnsupportedVersionError),
    (exceptions.FrameTooLargeError, errors.FrameTooLargeError),
])
def test_a_codec_error_is_the_broker_error_of_its_code(cls: type[errors.BrokerError],
                                                                 parent: type[errors.BrokerError]) -> None:
    error = cls("bad frame")
    assert isinstance(error, parent) and isinstance(error, exceptions.ProtocolError) and error.code == parent.code
