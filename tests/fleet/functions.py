"""The fleet's functions and the events that exercise them.

Every handler prints one mark line per execution, ``FLEET-MARK <function>
<seq> <outcome> <unix time>``; Relay forwards it prefixed with the message id,
so the verdict can count executions per entry from the workers' output alone,
and tell when each ran (to account for a duplicate by the fault it met).

fleet-py (Python) and fleet-node (Node) run warm: reused containers, replaced
every 200 invocations (fleet-py) or after 20 s idle (fleet-node); so do the
two limited functions, and the rest run a new container per invocation. With
``write_functions(root, cold=True)`` (``python -m tests.fleet --cold``) every
function runs cold: the same templates without their ``warm:`` block.

The limited functions: fleet-rated (``rate_limit: 10/s``, the eu events)
prints ``FLEET-START fleet-rated <seq> <unix time>`` as it starts, and
fleet-keyed (``concurrency_key: account``, the us events) prints ``FLEET-SPAN
fleet-keyed <seq> <account> <start> <end>`` around a 0.3 s sleep, so the
verdict measures the rate and the per-key concurrency from the handlers' own
clocks.

kind     functions that run                                      ends
ok       fleet-py (+ fleet-node, fleet-rated if eu; fleet-keyed if us)  acked
flaky    the above + fleet-flaky            acked, or DLQ if 3 random failures in a row
poison   the above + fleet-poison           DLQ after 2 attempts
hang     the above + fleet-hang             DLQ after 2 attempts, each cut at 3s
"""

import re
from pathlib import Path

KINDS = ("ok", "flaky", "poison", "hang")
FAILING_FOREVER = {"poison": "fleet-poison", "hang": "fleet-hang"}
MUST_SUCCEED = ("fleet-py", "fleet-node", "fleet-rated", "fleet-keyed")
RATE_LIMIT = 10          # fleet-rated's starts per second, fleet-wide
ACCOUNTS = tuple(f"acct-{number}" for number in range(8))
ATTEMPTS = {"fleet-poison": 2, "fleet-hang": 2, "fleet-flaky": 3}

_PYTHON_MARK = '''import random
import time

FUNCTION = NAME


def mark(event, outcome):
    print(f"FLEET-MARK {FUNCTION} {event['seq']} {outcome} {time.time():.3f}", flush=True)
'''

FUNCTIONS = {
    "fleet-py": {
        "template.yaml": """runtime: python3.14
warm:
  containers: 2
  max_invocations: 200
events:
  - handler: handler.record
    pattern:
      event_name: [fleet.order]
    timeout: 10s
    retries: 2
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-py"') + '''

def record(event):
    mark(event, "ok")
''',
    },
    "fleet-node": {
        "template.yaml": """runtime: node24
warm:
  containers: 1
  idle: 20s
events:
  - handler: handler.record
    pattern:
      event_name: [fleet.order]
      region: [eu]
    timeout: 10s
    retries: 2
""",
        "handler.js": """export function record(event) {
  console.log(`FLEET-MARK fleet-node ${event.seq} ok ${(Date.now() / 1000).toFixed(3)}`);
}
""",
    },
    "fleet-rated": {
        "template.yaml": f"""runtime: python3.14
rate_limit: {RATE_LIMIT}/s
concurrency: 2
warm:
  containers: 2
events:
  - handler: handler.record
    pattern:
      event_name: [fleet.order]
      region: [eu]
    timeout: 10s
    retries: 2
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-rated"') + '''

def record(event):
    print(f"FLEET-START fleet-rated {event['seq']} {time.time():.6f}", flush=True)
    mark(event, "ok")
''',
    },
    "fleet-keyed": {
        "template.yaml": """runtime: python3.14
concurrency_key: account
concurrency: 2
warm:
  containers: 2
events:
  - handler: handler.record
    pattern:
      event_name: [fleet.order]
      region: [us]
    timeout: 10s
    retries: 2
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-keyed"') + '''

def record(event):
    started = time.time()
    time.sleep(0.3)
    print(f"FLEET-SPAN fleet-keyed {event['seq']} {event['account']} {started:.6f} {time.time():.6f}", flush=True)
    mark(event, "ok")
''',
    },
    "fleet-flaky": {
        "template.yaml": """runtime: python3.14
events:
  - handler: handler.maybe
    pattern:
      kind: [flaky]
    timeout: 10s
    retries: 2
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-flaky"') + '''

def maybe(event):
    if random.random() < 0.3:
        mark(event, "fail")
        raise RuntimeError("flaky: failed at random")
    mark(event, "ok")
''',
    },
    "fleet-poison": {
        "template.yaml": """runtime: python3.14
events:
  - handler: handler.reject
    pattern:
      kind: [poison]
    timeout: 10s
    retries: 1
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-poison"') + '''

def reject(event):
    mark(event, "fail")
    raise ValueError("poison: this event can never succeed")
''',
    },
    "fleet-hang": {
        "template.yaml": """runtime: python3.14
events:
  - handler: handler.hang
    pattern:
      kind: [hang]
    timeout: 3s
    retries: 1
""",
        "handler.py": _PYTHON_MARK.replace("NAME", '"fleet-hang"') + '''

def hang(event):
    mark(event, "start")
    time.sleep(600)
''',
    },
}


def write_functions(root, cold=False):
    """The fleet's functions under *root*; with *cold*, none of them warm."""
    for name, files in FUNCTIONS.items():
        directory = Path(root) / name
        directory.mkdir(parents=True, exist_ok=True)
        for filename, text in files.items():
            (directory / filename).write_text(without_warm(text) if cold and filename == "template.yaml" else text)


def without_warm(template):
    """*template* without its ``warm:`` block (the key and its indented lines)."""
    return re.sub(r"^warm:\n(?:[ \t]+.*\n)*", "", template, flags=re.M)


def expected_functions(event):
    """The functions whose handlers must run for *event*."""
    names = ["fleet-py"]
    if event["region"] == "eu":
        names += ["fleet-node", "fleet-rated"]
    else:
        names.append("fleet-keyed")
    if event["kind"] != "ok":
        names.append(f"fleet-{event['kind']}")
    return names


def make_event(run_id, seq, rng):
    kind = rng.choices(KINDS, weights=(80, 10, 5, 5))[0]
    return {"event_id": f"{run_id}-{seq}", "event_name": "fleet.order", "seq": seq, "kind": kind,
            "region": rng.choice(("eu", "us")), "amount": rng.randint(1, 10_000), "account": rng.choice(ACCOUNTS)}


NESTED_EVENT = "[" * 1000 + "]" * 1000
HUGE_EVENT = '{"kind": "ok", "blob": "' + "x" * (2 * 1024 * 1024) + '"}'
NOT_UTF8_EVENT = b'{"kind": "ok", "name": "\xff\xfe"}'
KEPT_BYTES = 4096        # what a dead-letter entry keeps of an event over MAX_EVENT_BYTES

# Each malformed entry's fields and the start of the reason its dead-letter entry must give.
MALFORMED_REASONS = (
    ({"note": "no event field"}, "the entry has no 'event' field"),
    ({"event": "{not json"}, "the 'event' field is not valid JSON"),
    ({"event": "[1, 2, 3]"}, "the event is a JSON list, not an object"),
    ({"event": '"a string"'}, "the event is a JSON str, not an object"),
    ({"event": ""}, "the 'event' field is not valid JSON"),
    ({"event": NESTED_EVENT}, "the event nests deeper than 64 levels"),
    ({"event": HUGE_EVENT}, f"event is {len(HUGE_EVENT)} bytes, over MAX_EVENT_BYTES (1048576)"),
    ({"event": NOT_UTF8_EVENT}, "the 'event' field is not UTF-8 text"),
)
MALFORMED = tuple(fields for fields, _reason in MALFORMED_REASONS)
