"""The vocabulary enums equal the constants of the generated brace_msgs classes, member for member."""

from __future__ import annotations

import importlib

import pytest

from brace_common.vocabulary import MSG_CONSTANTS, CallStatus, meets_slo


@pytest.mark.parametrize("enum_cls", list(MSG_CONSTANTS), ids=lambda c: c.__name__)
def test_enum_mirrors_the_message_constants(enum_cls):
    module, message, prefix = MSG_CONSTANTS[enum_cls]
    msg_cls = getattr(importlib.import_module(module), message)
    constants = {name[len(prefix):]: getattr(msg_cls, name) for name in dir(type(msg_cls))
                 if name.startswith(prefix) and name[len(prefix):].isupper()}
    members = {m.name: m.value for m in enum_cls}
    assert members == constants


def test_a_deadline_miss_never_meets_the_slo():
    assert meets_slo(CallStatus.OK, 10.0, 20.0)
    assert not meets_slo(CallStatus.OK, 30.0, 20.0)
    assert not meets_slo(CallStatus.DEADLINE, 10.0, 20.0)
