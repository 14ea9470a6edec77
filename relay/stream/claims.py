"""Claiming stream entries with their size checked inside Redis.

XAUTOCLAIM and XCLAIM send each entry whole, and Relay cannot make such a
reply smaller by asking for fewer entries: one entry may hold hundreds of
megabytes. The script here claims the entries and measures them where they
are; an entry within Relay's limits comes back whole, one over them comes
back as its sizes and the start of its event, which is all its dead letter
keeps (``relay.stream.plans.Oversized``). The reclaimer, a held entry
taken back for its retry, and the entries of a read that was too large to
hold (relay.reply_cap) all come this way.

Both claims reset the entries' idle time and count a delivery, as the
plain commands do.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from relay.stream.keys import EVENT, StreamAddress
from relay.stream.plans import KEPT_PREFIX_BYTES, MAX_OTHER_FIELD_BYTES, Oversized

Fields = dict[bytes, bytes] | Oversized | None   # None: the entry is gone (trimmed, or acknowledged meanwhile)
Entries = list[tuple[str, Fields]]

# KEYS: the stream. ARGV: the group, the consumer, MAX_EVENT_BYTES, the other fields' limit, the bytes kept
# of an event over its limit, the event field's name, then either 'ids' and the ids to claim, or 'idle',
# the minimum idle time (ms), the start id and the count, for XAUTOCLAIM. Replies {next start, entries};
# an entry is {id} when it is gone, {id, fields} within the limits, else {id, {}, event size, other
# fields' size, the event (cut when over its limit) or false}. JUSTID keeps XAUTOCLAIM's reply small;
# the XCLAIM after it reads each entry alone and counts the delivery.
_CLAIM = """
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local max_event, max_other, kept, name = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local next_start, ids = '0-0', {}
if ARGV[7] == 'idle' then
  local reply = redis.call('XAUTOCLAIM', stream, group, consumer, ARGV[8], ARGV[9], 'COUNT', ARGV[10], 'JUSTID')
  next_start, ids = reply[1], reply[2]
else
  for index = 8, #ARGV do ids[#ids + 1] = ARGV[index] end
end
local entries = {}
for _, id in ipairs(ids) do
  local claimed = redis.call('XCLAIM', stream, group, consumer, 0, id)[1]
  if not claimed then
    entries[#entries + 1] = {id}
  else
    local fields, event, other = claimed[2], nil, 0
    for index = 1, #fields, 2 do
      if fields[index] == name then
        if event then other = other + #name + #event end
        event = fields[index + 1]
      else
        other = other + #fields[index] + #fields[index + 1]
      end
    end
    local size = event and #event or 0
    if size > max_event or other > max_other then
      if size > max_event then event = string.sub(event, 1, kept) end
      entries[#entries + 1] = {id, {}, size, other, event or false}
    else
      entries[#entries + 1] = {id, fields}
    end
  end
end
return {next_start, entries}
"""


class Claims:
    """Claims entries for this worker's consumer, each measured before it leaves Redis."""

    def __init__(self, client: redis.Redis, address: StreamAddress) -> None:
        self.address = address
        self._script = client.register_script(_CLAIM)

    def claim(self, message_ids: Sequence[str], max_event_bytes: int) -> Entries:
        """Claim *message_ids* (XCLAIM, no minimum idle time); an id no longer pending comes back gone."""
        if not message_ids:
            return []
        _next, entries = self._run(max_event_bytes, "ids", *message_ids)
        return entries

    def claim_idle(self, min_idle_ms: int, start: str, count: int, max_event_bytes: int) -> tuple[str, Entries]:
        """XAUTOCLAIM from *start*: up to *count* entries idle at least *min_idle_ms*, and where to go on."""
        return self._run(max_event_bytes, "idle", min_idle_ms, start, count)

    def _run(self, max_event_bytes: int, *args: str | int) -> tuple[str, Entries]:
        address = self.address
        next_start, reply = self._script(keys=[address.stream], args=[
            address.group, address.consumer, max_event_bytes, MAX_OTHER_FIELD_BYTES, KEPT_PREFIX_BYTES, EVENT,
            *args])
        return _text(next_start), [_entry(item) for item in reply]


def _entry(item: list) -> tuple[str, Fields]:
    message_id = _text(item[0])
    if len(item) == 1:
        return message_id, None
    if len(item) == 2:
        flat = item[1]
        return message_id, dict(zip(flat[::2], flat[1::2], strict=True))
    _id, _empty, event_bytes, other_bytes, event = item
    return message_id, Oversized(event, event_bytes, other_bytes)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
