"""Messages decoded with the definition a bag recorded, for bags older than this build's messages.

A field added to a message since a bag was recorded makes its bytes unreadable with today's class. Every MCAP file
holds the ros2msg schema of each type it recorded; `RecordedTypes` decodes with that schema instead (rosbags' CDR
decoder). The objects it returns have the recorded fields under the same names, which is all a report reads; a
field added later is absent from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rclpy.serialization import deserialize_message
from rosbags.typesys import Stores, get_types_from_msg, get_typestore


class RecordedTypes:
    """Decodes CDR bytes of a type with the schema a bag recorded for it (`definitions`: type -> ros2msg text)."""

    def __init__(self, definitions: Mapping[str, str]) -> None:
        self.definitions = dict(definitions)
        self._stores: dict[str, Any] = {}

    def decode(self, type_name: str, data: bytes) -> Any:
        """The message `data` holds, decoded with its recorded schema; KeyError when the bag recorded none for
        `type_name`, ValueError when the bytes or the schema do not decode."""
        store = self._stores.get(type_name)
        if store is None:
            definition = self.definitions[type_name]
            store = get_typestore(Stores.EMPTY)
            try:
                store.register(get_types_from_msg(definition, type_name))
            except Exception as exc:  # noqa: BLE001 (rosbags raises its own parse errors)
                raise ValueError(f"the recorded schema of {type_name} does not parse: {exc}") from None
            self._stores[type_name] = store
        try:
            return store.deserialize_cdr(data, type_name)
        except Exception as exc:  # noqa: BLE001 (a truncated or foreign message)
            raise ValueError(f"{type_name} does not decode with its recorded schema: {exc}") from None

    def read(self, type_name: str, data: bytes, cls: type) -> tuple[Any, bool]:
        """The message `data` holds: with today's class `cls`, else with the recorded schema; and whether it took the
        recorded schema. KeyError / ValueError when neither reads it."""
        try:
            return deserialize_message(data, cls), False
        except Exception:  # noqa: BLE001 (rclpy raises RMWError for bytes of another definition)
            return self.decode(type_name, data), True
