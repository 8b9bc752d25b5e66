"""One agent runtime process for the two-process test: loops in its sessions until each is
blocked, then prints what it saw as one JSON line.

    agent_process.py BOOTSTRAP EVENTS_TOPIC VERDICTS_TOPIC BARRIER_DIR NAME SESSION...
"""

import json
import pathlib
import sys
import time

from loopguard import Action, Guard

bootstrap, events, verdicts, barrier, name, *sessions = sys.argv[1:]
guard = Guard(bootstrap, events_topic=events, verdicts_topic=verdicts)
# Both processes read from their start offsets: start both readers before either loops, so
# each one's reader is there when the other's verdicts are written.
pathlib.Path(barrier, f"ready-{name}").touch()
until = time.monotonic() + 60
while len(list(pathlib.Path(barrier).glob("ready-*"))) < 2 and time.monotonic() < until:
    time.sleep(0.05)

handles = [guard.session(s) for s in sessions]
for h in handles:
    h.user_message("keep polling the job")
blocks = 0
for n in range(3):
    for h in handles:
        v = h.tool_call("job_status", {"id": 7}, deadline=10.0 if n == 2 else 0.0)
        if v is not None and v.action is Action.BLOCK:
            blocks += 1
        h.turn_end()
# Stay until the other process's verdicts have gone by on the shared partition.
until = time.monotonic() + 20
while guard.stats().verdicts_other_sessions < len(sessions) and time.monotonic() < until:
    time.sleep(0.05)
report = {
    "verdict_sessions": sorted({v.session_id for h in handles for v in h.verdicts}),
    "blocks": blocks,
    "partitions": guard.verdict_partitions(),
    "stats": guard.stats().__dict__,
}
guard.close()
print(json.dumps(report))
