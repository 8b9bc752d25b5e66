#!/usr/bin/env python3
"""Helpers of scripts/sizing.sh (see its header).

  sizing_report.py gen BIN SESSIONS PER_SESSION OUT.jsonl TICK.jsonl [SPREAD_MS]
      OUT: SESSIONS fleet sessions with exactly PER_SESSION events each (their first
      ones), from one `BIN loadgen dump` of a chunk of up to CHUNK (10,000) sessions,
      copied under new session ids ("c<k>-...") until SESSIONS are written. TICK: one
      event of a session of its own stamped 120 s after the last event of OUT: it moves
      the partition's event clock past `engine.freeze_idle_secs` (60 s), so every other
      session is frozen (idle) at the next sweep. SPREAD_MS (0): session g's events in a
      row at g * SPREAD_MS ms of event time (0: the fleet's interleaving, all within 40 ms).
  sizing_report.py report WORK_DIR
      The Markdown table of WORK_DIR/figures (lines `key<TAB>value<TAB>load average`)
      and WORK_DIR/commands (lines `key<TAB>command`), to stdout.
"""
import json
import os
import re
import subprocess
import sys

CHUNK = 10_000


def gen(binary, sessions, per, out_path, tick_path, spread_ms=0):
    chunk = min(CHUNK, sessions)
    # The fleet interleaves its sessions at random; reading it until every session of the
    # chunk has PER events (the shortest scenario has 7) stops long before its end.
    dump = subprocess.Popen(
        [binary, "loadgen", "dump", "--sessions", str(chunk), "--events", str(chunk * 400)],
        stdout=subprocess.PIPE, text=True)
    seen, lines, full = {}, [], 0
    for line in dump.stdout:
        sid = json.loads(line)["session_id"]
        if not sid.startswith("dump-0-"):
            break  # the fleet ran out (PER above a scenario's length): keep what there is
        n = seen.get(sid, 0)
        if n < per:
            seen[sid] = n + 1
            lines.append(line)
            if n + 1 == per:
                full += 1
                if full == chunk:
                    break
    dump.kill()
    dump.wait()
    short = sum(1 for n in seen.values() if n < per)
    if short:
        print(f"sizing gen: {short} of {len(seen)} sessions have fewer than {per} events", file=sys.stderr)
    if spread_ms:
        # Session by session, session g's events at g * spread_ms of event time (+10 ms each).
        by_session = {}
        for line in lines:
            by_session.setdefault(json.loads(line)["session_id"], []).append(line)
        lines = [l for sid in by_session for l in by_session[sid]]
    ts_re = re.compile(r'"ts":(\d+)')
    last_ts, written, k = 0, 0, 0
    with open(out_path, "w") as out:
        while written < sessions:
            take = min(len(seen), sessions - written)
            keep = set(sorted(seen)[:take]) if take < len(seen) else None
            index = {}
            for line in lines:
                e = json.loads(line)
                sid = e["session_id"]
                if keep is not None and sid not in keep:
                    continue
                line = line.replace('"dump-0-', f'"c{k}-')
                if spread_ms:
                    g = written + index.setdefault(sid, len(index))
                    ts = e["ts"] + g * spread_ms
                    line = ts_re.sub(f'"ts":{ts}', line, count=1)
                else:
                    ts = e["ts"]
                last_ts = max(last_ts, ts)
                out.write(line)
            written += take
            k += 1
    tick = json.loads(lines[0])
    tick.update(session_id="sizing-tick", event_id="sizing-tick-1", seq=1, ts=last_ts + 120_000,
                type="user_message", text="tick")
    with open(tick_path, "w") as f:
        f.write(json.dumps(tick, separators=(",", ":")) + "\n")
    print(f"sizing gen: {written} sessions x {per} events -> {out_path} ({os.path.getsize(out_path):,} bytes)",
          file=sys.stderr)


def report(work):
    fig, load = {}, {}
    for line in open(os.path.join(work, "figures")):
        k, v, l = line.rstrip("\n").split("\t")
        fig[k], load[k] = float(v), l
    cmds = dict(line.rstrip("\n").split("\t", 1) for line in open(os.path.join(work, "commands")))
    rows = []

    def row(name, value, unit, keys, cmd):
        la = "; ".join(sorted({load[k] for k in keys if k in load}))
        rows.append((name, value, unit, la, cmd))

    def f(k, default=None):
        return fig.get(k, default)

    def fmt(v, nd=0):
        return "-" if v is None else f"{v:,.{nd}f}"

    for size in ("small", "big"):
        n, ev = f(f"{size}.sessions"), f(f"{size}.events")
        if n is None:
            continue
        if f(f"{size}.spread_ms"):
            row(f"{int(n):,} sessions: session starts spaced in event time (SPREAD_MS)", fmt(f(f"{size}.spread_ms")),
                "ms", [f"{size}.spread_ms"], "scripts/sizing_report.py gen")
        s = f"{int(n):,} sessions"
        pre = f"{size}."
        act = "most frozen: SPREAD_MS" if f(pre + "spread_ms") else "all live"
        row(f"{s}: events loaded", fmt(ev), "events", [pre + "events"], cmds.get(pre + "preload", ""))
        row(f"{s}: sessions held after the drain (loopguard_active_sessions)", fmt(f(pre + "active_sessions")),
            "sessions", [pre + "active_sessions"], cmds.get(pre + "metrics", ""))
        row(f"{s}: drain wall time, guard start to all committed", fmt(f(pre + "drain_s"), 1), "s",
            [pre + "drain_s"], cmds.get(pre + "drain", ""))
        row(f"{s}: drain rate (loadgen drain, first commit to last)", fmt(f(pre + "drain_rate")), "events/s",
            [pre + "drain_s"], cmds.get(pre + "drain", ""))
        if ev:
            row(f"{s}: guard CPU per event (utime+stime, start-up included)",
                fmt(f(pre + "cpu_us") / ev, 2), "us/event", [pre + "cpu_us"], "/proc/PID/stat fields 14+15")
        row(f"{s}: guard peak RSS (VmHWM) after the drain (sessions {act})", fmt(f(pre + "hwm_kb") / 1024, 1), "MiB",
            [pre + "hwm_kb"], "/proc/PID/status")
        row(f"{s}: guard VmRSS after the drain (sessions {act})", fmt(f(pre + "rss_kb") / 1024, 1), "MiB",
            [pre + "rss_kb"], "/proc/PID/status")
        row(f"{s}: guard VmRSS with every session frozen (idle)", fmt(f(pre + "idle_rss_kb", 0) / 1024, 1), "MiB",
            [pre + "idle_rss_kb"], cmds.get(pre + "tick", ""))
        row(f"{s}: sessions held after the clock tick (loopguard_active_sessions)", fmt(f(pre + "idle_sessions")),
            "sessions", [pre + "idle_rss_kb"], cmds.get(pre + "metrics", ""))
        sb, st = f(pre + "ckpt_bytes"), f(pre + "ckpt_states")
        row(f"{s}: checkpoint state records written by guard A before its shutdown",
            fmt(f(pre + "ckpt_states_settled")), "records", [pre + "ckpt_bytes_settled"], "RUST_LOG ...worker::commit=debug")
        row(f"{s}: checkpoint state records written by guard A (debug `batch committed`), shutdown included",
            fmt(st), "records", [pre + "ckpt_bytes"], "RUST_LOG ...worker::commit=debug")
        if st:
            row(f"{s}: bytes per checkpointed session state (state_bytes / states)", fmt(sb / st), "bytes",
                [pre + "ckpt_bytes"], "sum of state_bytes / sum of states")
        for when, label in (("drained", "right after the drain (mid-drain checkpoints only)"),
                            ("settled", "after the checkpoint of the tick's batch"),
                            ("after_stop", "after guard A's shutdown checkpoint")):
            b = f(f"{pre}state_log_bytes.{when}")
            if b is not None:
                row(f"{s}: state topic partition .log bytes, {label}", fmt(b), "bytes",
                    [f"{pre}state_log_bytes.{when}"], cmds.get(pre + "state_du", ""))
                row(f"{s}: state topic .log bytes per session, {label}", fmt(b / n), "bytes/session",
                    [f"{pre}state_log_bytes.{when}"], cmds.get(pre + "state_du", ""))
        row(f"{s}: guard A shutdown (SIGTERM to exit)", fmt(f(pre + "stop_s"), 2), "s", [pre + "stop_s"], "kill -TERM")
        for who, label, start in (("b", "graceful: guard B", "B's start"), ("c", "crash: guard C", "kill -9 of B")):
            q = f"{pre}{who}."
            if f(q + "restored_s") is None:
                continue
            row(f"{s}, {label}: {start} to `partition restored` logged", fmt(f(q + "restored_s"), 2), "s",
                [q + "restored_s"], cmds.get(q + "cmd", ""))
            row(f"{s}, {label}: {start} to /readyz 200 with the partition", fmt(f(q + "ready_s"), 2), "s",
                [q + "ready_s"], "curl /readyz every 50 ms")
            row(f"{s}, {label}: `partition restored` fields", f"sessions={fmt(f(q + 'sessions'))} "
                f"replayed={fmt(f(q + 'replayed'))} ms={fmt(f(q + 'ms'))}", "", [q + "restored_s"], "serve log")
            row(f"{s}, {label}: peak RSS (VmHWM) after the restore", fmt(f(q + "hwm_kb") / 1024, 1), "MiB",
                [q + "hwm_kb"], "/proc/PID/status")
            row(f"{s}, {label}: VmRSS after the restore", fmt(f(q + "rss_kb") / 1024, 1), "MiB",
                [q + "hwm_kb"], "/proc/PID/status")
            if f(q + "cpu_us") is not None:
                row(f"{s}, {label}: guard CPU from its start to ready", fmt(f(q + "cpu_us") / 1e6, 2), "s",
                    [q + "hwm_kb"], "/proc/PID/stat fields 14+15")
    big, small = f("big.sessions"), f("small.sessions")
    if big and small and big != small:
        nb, ns = f("big.active_sessions", big), f("small.active_sessions", small)
        act = "most frozen as the drain went (SPREAD_MS)" if f("big.spread_ms") else "all live"
        d = nb - ns
        for key, label in (("hwm_kb", f"peak RSS (VmHWM), sessions {act}"), ("rss_kb", f"VmRSS after the drain, sessions {act}"),
                           ("idle_rss_kb", "VmRSS, sessions frozen (idle)"), ("b.hwm_kb", "peak RSS of a guard restoring them (kept frozen until their next event since decision (gq))"),
                           ("b.rss_kb", "VmRSS of a guard that restored them")):
            a, b = f("big." + key), f("small." + key)
            if a is not None and b is not None:
                row(f"memory per session: {label} (big - small) / ({int(nb):,} - {int(ns):,})",
                    fmt((a - b) * 1024 / d), "bytes/session", ["big." + key, "small." + key], "difference of the two runs")
    print("| figure | value | unit | load average (1, 5, 15 min) | measured with |")
    print("| --- | ---: | --- | --- | --- |")
    for name, value, unit, la, cmd in rows:
        print(f"| {name} | {value} | {unit} | {la} | `{cmd}` |" if cmd else f"| {name} | {value} | {unit} | {la} | |")


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6],
            int(sys.argv[7]) if len(sys.argv) > 7 else 0)
    elif sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
