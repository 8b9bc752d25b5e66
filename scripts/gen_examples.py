#!/usr/bin/env python3
"""Writes examples/fleet.events.jsonl: a small fleet of agent sessions, interleaved by time
the way they would arrive on one partition of `agent-events`.

Ten sessions: six healthy ones (coding, paging through a log, polling a background job, a
plain chat), and four that loop (a tool doom loop, a reasoning loop streamed in chunks, a
chanting content loop, a portfolio question answered without the portfolio tool).

    python3 scripts/gen_examples.py           # (re)write the file
    python3 scripts/gen_examples.py --check   # exit 1 if it differs from this generator
    cargo run -q -- replay examples/fleet.events.jsonl

Deterministic, standard library only; examples/README.md shows the expected verdicts.
"""

import sys
from pathlib import Path

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_fixtures import REAL, ROOT, T0, Session, chunks, interleave, mutation, read  # noqa: E402

OUT = ROOT / "examples" / "fleet.events.jsonl"


class Metered(Session):
    """A session whose runtime reports each response's usage on its turn_end, as model APIs
    do: the prompt grows with the conversation, the answer does not."""

    responses = 0

    def turn_end(self, usage=None):
        self.responses += 1
        n = self.responses
        inp, out = 2400 + 650 * n, 180 + 35 * (n % 4)
        usage = usage or {"input_tokens": inp, "output_tokens": out, "cost": round((inp * 3 + out * 15) / 1e6, 6)}
        return super().turn_end(usage=usage)


def coder(sid, start, feature, files, model="m-large"):
    """A healthy coding request: read, edit, test (one failure, then a fix), answer."""
    s = Metered(sid, start=start, step=900, who={"tenant": "acme", "agent": "coder", "model": model})
    s.user(f"Implement {feature}.")
    s.new_turn()
    s.reasoning(f"To implement {feature} I need to see where it plugs in. ")
    s.reasoning("Reading the module and its tests first.")
    for f in files:
        _, c = s.call("read_file", {"path": f})
        s.result(c, "read_file", evidence=read(resource=f, read_range=[1, 150]))
    s.turn_end()
    for i, f in enumerate(files):
        s.new_turn()
        s.content(f"Editing {f}. ")
        _, c = s.call("edit_file", {"path": f, "old": f"// TODO {feature}", "new": f"{feature}_impl();"})
        s.turn_end()
        s.result(c, "edit_file", evidence=mutation(f"{sid}-{i}a", f"{sid}-{i}b"))
    s.new_turn()
    _, c = s.call("run_tests", {"filter": feature.split()[0]})
    s.turn_end()
    s.result(c, "run_tests", ok=False, error=f"1 failed: {feature} returns None", evidence={"effect": "none", "new_info": True})
    s.new_turn()
    s.reasoning("The new branch forgets to return its value.")
    _, c = s.call("edit_file", {"path": files[0], "old": f"{feature}_impl();", "new": f"return {feature}_impl();"})
    s.turn_end()
    s.result(c, "edit_file", evidence=mutation(f"{sid}-0b", f"{sid}-0c"))
    s.new_turn()
    _, c = s.call("run_tests", {"filter": feature.split()[0]})
    s.turn_end()
    s.result(c, "run_tests", evidence={"effect": "none", "new_info": True})
    s.answer(f"{feature} is implemented and its tests pass.")
    return s


def chat(sid, start):
    """A plain assistant: two questions, streamed answers, no tools."""
    s = Metered(sid, start=start, step=1200, who={"tenant": "globex", "agent": "helpdesk", "model": "m-chat"})
    s.user("How do I rotate my API key?")
    s.new_turn()
    for piece in ["Open Settings → API keys, ", "click Rotate next to the key, ", "then update your clients within 24 hours; ", "the old key keeps working until then."]:
        s.content(piece)
    s.turn_end()
    s.wait(30_000)
    s.user("And how do I revoke the old one right away?")
    s.new_turn()
    s.reasoning("Revoking is a separate button in the same table.")
    s.content("Use Revoke on the old key's row: it stops working immediately.")
    s.turn_end()
    s.session_end()
    return s


def pager(sid, start):
    """Pages through a large log by offset: seven reads of new ranges, then an answer."""
    s = Metered(sid, start=start, step=700, who={"tenant": "acme", "agent": "sre"})
    log = "/var/log/payments/2026-01-01.log"
    s.user("Why did payments fail at 03:00?")
    for page in range(7):
        s.round("read_file", {"path": log, "offset": page * 500, "limit": 500},
                evidence=read(resource=log, read_range=[page * 500, page * 500 + 500]))
    s.answer("At 03:00:12 the card processor's TLS certificate expired; every charge failed until 03:41.")
    return s


def poller(sid, start):
    """Starts a background build and polls it with the exempt polling tool."""
    s = Metered(sid, start=start, step=600, who={"tenant": "acme", "agent": "ci-bot"})
    s.user("Build the release and tell me when it is ready.")
    s.new_turn()
    _, c = s.call("start_background_task", {"command": "make release"})
    s.turn_end()
    s.result(c, "start_background_task", evidence={"effect": "mutation"})
    for i in range(9):
        s.wait(15_000)
        s.round("check_background_tasks", {}, evidence={"output_hash": "running" if i < 8 else "finished"})
    s.answer("The release build finished: dist/app-1.4.0.tar.gz.")
    return s


def doom_loop(sid, start):
    """The same failing test command again and again, then a variant with the same error."""
    s = Metered(sid, start=start, step=800, who={"tenant": "globex", "agent": "coder", "model": "m-small"})
    s.user("Make the integration tests pass.")
    error = "Error: connect ECONNREFUSED 127.0.0.1:5432\n    at TCPConnectWrap.afterConnect"
    thoughts = ["Run the integration suite.", "It failed, maybe a flaky test: run it again.",
                "Still failing; one more run to be sure.", "Let me retry the suite."]
    for i, thought in enumerate(thoughts):
        s.new_turn()
        s.reasoning(thought)
        _, c = s.call("bash", {"command": "npm run test:integration", "cwd": "/srv/app"})
        s.turn_end()
        if i < 2:  # the third and fourth calls are blocked and never run
            s.result(c, "bash", ok=False, error=error)
    s.new_turn()
    _, c = s.call("bash", {"command": "npm run test:integration -- --runInBand", "cwd": "/srv/app"})
    s.turn_end()
    s.result(c, "bash", ok=False, error=error)
    s.answer("The tests need PostgreSQL on port 5432, which is not running here.")
    return s


def reasoning_loop(sid, start):
    """real_loop2.txt (MIT, see examples/README.md) streamed as reasoning in 10-char chunks."""
    text = (REAL / "dsh-thinking-loop-guard" / "real_loop2.txt").read_text(encoding="utf-8")
    s = Metered(sid, start=start, step=60, who={"tenant": "acme", "agent": "dsh", "model": "deepseek-reasoner"})
    s.user("跑一下对拍")
    s.new_turn()
    for piece in chunks(text, 10):
        s.reasoning(piece)
    s.turn_end()
    return s


def chanting(sid, start):
    """Visible output stuck on one sentence."""
    s = Metered(sid, start=start, step=200, who={"tenant": "globex", "agent": "writer", "model": "m-small"})
    s.user("Write the release notes.")
    s.new_turn()
    s.content("Release notes for 1.4.0:\n")
    for _ in range(16):
        s.content("- Improved stability and performance across the board.\n")
    s.turn_end()
    return s


def portfolio(sid, start):
    """A holdings question the model answers from memory, never calling `portfolio`."""
    s = Metered(sid, start=start, step=1500, who={"tenant": "fin", "agent": "advisor", "model": "m-chat"})
    s.user("<relevant-memories>用户上次提到持有宁德时代</relevant-memories>"
           "<current-user-message>帮我看看我的持仓情况</current-user-message>")
    answers = [("用户问持仓，记忆里有宁德时代。", "你持有宁德时代，表现不错。"),
               ("系统提示要调用工具，但我记得答案。", "根据之前的对话，你的持仓是宁德时代。"),
               ("直接回答即可。", "你应该还持有宁德时代。")]
    for thought, answer in answers:
        s.new_turn()
        s.reasoning(thought)
        s.content(answer)
        s.turn_end()
    return s


def fleet():
    sessions = [
        coder("dev-alice", T0, "csv export", ["src/export.py", "tests/test_export.py"]),
        coder("dev-bob", T0 + 4_000, "rate limit header", ["src/middleware.rs", "src/config.rs", "tests/limits.rs"]),
        coder("dev-carol", T0 + 9_000, "dark mode toggle", ["web/src/Settings.tsx"], model="m-small"),
        chat("help-dan", T0 + 2_000),
        pager("sre-erin", T0 + 6_000),
        poller("ci-frank", T0 + 1_000),
        doom_loop("loop-tools", T0 + 3_000),
        reasoning_loop("loop-reasoning", T0 + 5_000),
        chanting("loop-chant", T0 + 7_000),
        portfolio("loop-portfolio", T0 + 8_000),
    ]
    return interleave(*sessions)


def main(argv):
    lines = fleet()
    text = "".join(line + "\n" for line in lines)
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"out of date: {OUT.relative_to(ROOT)}", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(lines)} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
