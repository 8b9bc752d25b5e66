"""Time from producing the event that triggers a guard's first verdict to reading that
verdict (read_uncommitted), on fresh topics, right after the guard reports ready.

    build/pyclient-2.16.1/bin/python3 scripts/first_verdict.py target/release/loopguard 3

Needs a broker on 127.0.0.1:19092 (scripts/kafka.sh start) and confluent-kafka (the venv
scripts/clients-test.sh makes). Uses port 19464 for the guard's admin server. Prints the
milliseconds of each run (docs/benchmarks.md, "First verdict after a start")."""
import json, subprocess, sys, time, urllib.request, uuid
from confluent_kafka import Consumer, Producer

binary, runs = sys.argv[1], int(sys.argv[2])
boot = "127.0.0.1:19092"
out = []
for r in range(runs):
    name = f"fv-{uuid.uuid4().hex[:8]}"
    cfg = f"/tmp/{name}.toml"
    open(cfg, "w").write(f"""[kafka]
bootstrap_servers = "{boot}"
group_id = "{name}"
transactional_id_prefix = "{name}"
events_topic = "{name}-events"
verdicts_topic = "{name}-verdicts"
dlq_topic = "{name}-dlq"
state_topic = "{name}-state"
[admin]
listen = "127.0.0.1:19464"
""")
    subprocess.run([binary, "topics", "create", "--config", cfg, "--partitions", "1"], check=True, capture_output=True)
    guard = subprocess.Popen([binary, "serve", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen("http://127.0.0.1:19464/readyz", timeout=1).status == 200:
                break
        except Exception:
            time.sleep(0.05)
    time.sleep(0.5)
    c = Consumer({"bootstrap.servers": boot, "group.id": name + "-r", "isolation.level": "read_uncommitted",
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5})
    c.assign([__import__("confluent_kafka").TopicPartition(f"{name}-verdicts", 0, 0)])
    c.poll(0.5)
    p = Producer({"bootstrap.servers": boot, "linger.ms": 0})
    def ev(i):
        return json.dumps({"v": 1, "event_id": f"e{i}", "session_id": "s", "ts": 1767225600000 + i, "type": "tool_call",
                           "turn_id": f"t{i}", "call_id": f"c{i}", "tool": "bash", "args": {"command": "make test"}})
    for i in (1, 2):
        p.produce(f"{name}-events", key="s", value=ev(i))
    p.flush()
    t0 = time.time()
    p.produce(f"{name}-events", key="s", value=ev(3))
    p.flush()
    got = None
    while time.time() < t0 + 10:
        m = c.poll(0.01)
        if m is not None and not m.error():
            got = time.time()
            break
    out.append(round((got - t0) * 1000, 1) if got else None)
    c.close()
    guard.terminate(); guard.wait()
print(binary, out)
