#!/usr/bin/env python3
"""Do two loopguard builds give the same verdicts? For engine changes meant to change
nothing but cost (docs/benchmarks.md): replays one corpus with both binaries, with the
default policy and with `engine.hot_text_sessions = 2` (text tables freed and rebuilt at
almost every response end), and compares the verdicts byte for byte, `emitted_at` aside;
then the old build's default verdicts against the new build with
`engine.freeze_idle_secs = 0` (every idle session frozen and thawed at each sweep), when
the new build has that setting.

The corpus: the golden fixtures, the real agent traces, examples/fleet.events.jsonl, a
fleet dump (`loadgen dump`, 200,000 events) and a text stress file made here from the real
reasoning loops, the Gemini chanting and mini-swe-agent's reasoning, cut into chunks of
8-2,000 chars over 120 sessions (reasoning and content, with response ends), seeded.

    scripts/same_verdicts.py OLD_BIN NEW_BIN

Exit 0 when every file agrees; 1 with the files that differ.
"""
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(ROOT, "tests", "data", "real")


def strings(x):
    if isinstance(x, str) and len(x) > 40:
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v)


def text_stress(path):
    rng = random.Random(7)
    texts = [open(f, encoding="utf-8").read()
             for f in sorted(glob.glob(os.path.join(REAL, "dsh-thinking-loop-guard", "*.txt")))]
    with open(os.path.join(REAL, "gemini-cli", "content_loop_examples.json"), encoding="utf-8") as f:
        texts += list(strings(json.load(f)))
    with open(os.path.join(REAL, "agent-traces", "mini-swe-agent.jsonl"), encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e["type"] == "reasoning" and len(e["text"]) > 200:
                texts.append(e["text"])
    ts = 1775815859134
    sessions = [f"ts-{s}" for s in range(120)]
    turn = {s: 0 for s in sessions}
    with open(path, "w", encoding="utf-8") as out:
        def emit(ev):
            ev["v"] = 1
            out.write(json.dumps(ev, ensure_ascii=False) + "\n")
        for sid in sessions:
            emit({"event_id": f"{sid}-u", "session_id": sid, "ts": ts, "type": "user_message", "text": "go"})
        for step in range(9000):
            sid = rng.choice(sessions)
            ts += rng.randint(1, 50)
            t = rng.choice(texts)
            a = rng.randint(0, max(0, len(t) - 1))
            chunk = t[a:a + rng.choice([8, 13, 32, 100, 400, 2000])]
            tid = f"t{turn[sid]}"
            kind = rng.random()
            ev = {"event_id": f"{sid}-{step}", "session_id": sid, "ts": ts, "turn_id": tid}
            if kind < 0.85:
                ev.update(type="reasoning" if kind < 0.7 else "content", text=chunk)
                if rng.random() < 0.2:
                    ev["final"] = True
            else:
                ev["type"] = "turn_end"
                turn[sid] += 1
            emit(ev)
        for i, t in enumerate(texts[:6]):
            sid, pos = f"loop-{i}", 0
            emit({"event_id": f"{sid}-u", "session_id": sid, "ts": ts, "type": "user_message", "text": "go"})
            while pos < len(t):
                k = rng.choice([8, 13, 32])
                ts += 1
                emit({"event_id": f"{sid}-{pos}", "session_id": sid, "ts": ts,
                      "type": "reasoning" if i % 2 == 0 else "content", "turn_id": "t1",
                      "text": t[pos:pos + k]})
                pos += k


def verdicts(binary, path, config):
    env = dict(os.environ)
    env.pop("LOOPGUARD_CONFIG", None)
    if config:
        env["LOOPGUARD_CONFIG"] = config
    out = subprocess.run([binary, "replay", path], env=env, check=True,
                         capture_output=True, text=True).stdout
    return re.sub(r'"emitted_at":[^,}]*', "", out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        cold = os.path.join(tmp, "cold.toml")
        with open(cold, "w") as f:
            f.write("[engine]\nhot_text_sessions = 2\n")
        frozen = os.path.join(tmp, "frozen.toml")
        with open(frozen, "w") as f:
            f.write("[engine]\nfreeze_idle_secs = 0\n")
        pairs = [(None, None, ""), (cold, cold, " (cold)")]
        with open(os.path.join(ROOT, "src", "config", "default.toml")) as f:
            if "freeze_idle_secs" in f.read():
                pairs.append((None, frozen, " (frozen at every sweep)"))
        files = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.events.jsonl")))
        files += sorted(glob.glob(os.path.join(REAL, "agent-traces", "*.jsonl")))
        files.append(os.path.join(ROOT, "examples", "fleet.events.jsonl"))
        fleet = os.path.join(tmp, "fleet200k.events.jsonl")
        with open(fleet, "w") as f:
            subprocess.run([new, "loadgen", "dump", "--events", "200000"], stdout=f, check=True)
        stress = os.path.join(tmp, "textstress.events.jsonl")
        text_stress(stress)
        files += [fleet, stress]
        differ, total = [], 0
        for path in files:
            for old_config, new_config, label in pairs:
                a, b = verdicts(old, path, old_config), verdicts(new, path, new_config)
                total += a.count("\n")
                if a != b:
                    differ.append(f"{os.path.basename(path)}{label}")
        print(f"{len(files)} files x {len(pairs)} configurations, {total} verdicts from the old build")
        if differ:
            print("verdicts differ: " + ", ".join(differ))
            sys.exit(1)
        print("identical verdicts")


if __name__ == "__main__":
    main()
