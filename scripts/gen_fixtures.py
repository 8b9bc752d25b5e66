#!/usr/bin/env python3
"""Writes the golden replay fixtures: tests/fixtures/NAME.events.jsonl, one case per file.

Deterministic: no clock, no randomness; running it twice gives the same bytes. The expected
verdicts (tests/fixtures/NAME.verdicts.jsonl) are not written here: they are the output of
`loopguard replay` over each file, blessed after reading them (see tests/fixtures/README.md).

    python3 scripts/gen_fixtures.py           # (re)write every fixture
    python3 scripts/gen_fixtures.py --check   # exit 1 if a fixture differs from its generator

Standard library only. `scripts/gen_examples.py` reuses the `Session` builder.
"""

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
REAL = ROOT / "tests" / "data" / "real"

# 2026-01-01T00:00:00Z in epoch milliseconds.
T0 = 1_767_225_600_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Raw:
    """JSON text spliced into an event as is (to show whitespace and key-order variants)."""

    def __init__(self, text):
        json.loads(text)  # must still be valid JSON
        self.text = text


def dumps(value):
    """Compact JSON, UTF-8 kept readable, `Raw` values written verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + dumps(v) for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def rfc3339(ms, offset_minutes=0):
    """Epoch milliseconds as RFC 3339 with milliseconds, in the given UTC offset."""
    zone = timezone(timedelta(minutes=offset_minutes))
    t = (EPOCH + timedelta(milliseconds=ms)).astimezone(zone)
    text = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}"
    return text + ("Z" if offset_minutes == 0 else t.strftime("%z")[:3] + ":" + t.strftime("%z")[3:])


class Session:
    """Builds one session's events with increasing ids, sequence numbers and times."""

    def __init__(self, sid, start=T0, step=400, who=None, ts_text=None):
        self.sid = sid
        self.ts = start
        self.step = step
        self.who = who or {}
        # None: integer milliseconds; else the UTC offset (minutes) of RFC 3339 strings.
        self.ts_text = ts_text
        self.n = 0
        self.turn_no = 0
        self.call_no = 0
        self.events = []  # (ts, event dict)

    def wait(self, ms):
        self.ts += ms
        return self

    def turn(self):
        return f"t{self.turn_no}"

    def new_turn(self):
        self.turn_no += 1
        return self.turn()

    def _push(self, kind, fields):
        self.n += 1
        self.ts += self.step
        e = {
            "v": 1,
            "event_id": f"{self.sid}-e{self.n}",
            "session_id": self.sid,
            "ts": self.ts if self.ts_text is None else rfc3339(self.ts, self.ts_text),
            "type": kind,
            "seq": self.n,
        }
        e.update(self.who)
        e.update({k: v for k, v in fields.items() if v is not None})
        self.events.append((self.ts, e))
        return e["event_id"]

    def user(self, text, limits=None):
        """A new request; `limits` is what the runtime announces for it (its own budget)."""
        return self._push("user_message", {"text": text, "limits": limits})

    def assistant(self, text, usage=None):
        """A finished response's visible text; `usage` what the response used (optional)."""
        return self._push("assistant_message", {"turn_id": self.turn(), "text": text, "usage": usage})

    def call(self, tool, args):
        """A tool call in the current turn; returns (event id, call id)."""
        self.call_no += 1
        call_id = f"c{self.call_no}"
        fields = {"turn_id": self.turn(), "call_id": call_id, "tool": tool, "args": args}
        return self._push("tool_call", fields), call_id

    def result(self, call_id, tool, ok=True, error=None, evidence=None):
        fields = {
            "call_id": call_id,
            "tool": tool,
            "status": "ok" if ok else "error",
            "error": error,
            "evidence": evidence,
        }
        return self._push("tool_result", fields)

    def answer(self, text):
        """A final response: a new turn with visible content, then its end."""
        self.new_turn()
        self.content(text)
        self.turn_end()

    def turn_end(self, usage=None):
        return self._push("turn_end", {"turn_id": self.turn(), "usage": usage})

    def reasoning(self, text, final=False):
        return self._push("reasoning", {"turn_id": self.turn(), "text": text, "final": final or None})

    def content(self, text):
        return self._push("content", {"turn_id": self.turn(), "text": text})

    def compaction(self):
        return self._push("compaction", {})

    def session_end(self):
        return self._push("session_end", {})

    def other(self, kind, **fields):
        """An event of a type this contract version does not define."""
        return self._push(kind, fields)

    def retry(self, event_id):
        """The producer sends an earlier event again, unchanged (same id, same bytes)."""
        for ts, e in self.events:
            if e["event_id"] == event_id:
                self.events.append((ts, dict(e)))
                return event_id
        raise KeyError(event_id)

    def round(self, tool, args, evidence=None, ok=True, error=None):
        """One model response making one call: call, end of response, then the result."""
        self.new_turn()
        eid, call_id = self.call(tool, args)
        self.turn_end()
        self.result(call_id, tool, ok=ok, error=error, evidence=evidence)
        return eid

    def lines(self):
        return [dumps(e) for _, e in self.events]


def interleave(*sessions):
    """Merges sessions by event time; ties keep the order the sessions were given in."""
    tagged = []
    for i, s in enumerate(sessions):
        for j, (ts, e) in enumerate(s.events):
            tagged.append((ts, i, j, e))
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    return [dumps(e) for _, _, _, e in tagged]


def chunks(text, size):
    return [text[i : i + size] for i in range(0, len(text), size)]


def read(effect="read", **kw):
    return dict({"effect": effect}, **kw)


def mutation(before, after):
    return {"effect": "mutation", "state_before": before, "state_after": after}


WHO = {"tenant": "acme", "agent": "coder", "model": "m-large"}

# ---------------------------------------------------------------------------------------
# The cases. Each returns the lines of one fixture; the README lists what each expects.
# ---------------------------------------------------------------------------------------


def healthy_session():
    s = Session("healthy", who=WHO)
    s.user("Add a --verbose flag to the CLI and cover it with a test.")
    s.new_turn()
    s.reasoning("The flag belongs in the argument parser; first I need to see how options ")
    s.reasoning("are declared today, then where logging is configured.")
    s.content("Let me look at the CLI module.")
    _, c = s.call("read_file", {"path": "src/cli.rs"})
    s.turn_end()
    s.result(c, "read_file", evidence=read(resource="src/cli.rs", read_range=[1, 120]))
    s.new_turn()
    s.reasoning("Options are a clap derive struct. Logging is set up in main.rs.")
    _, c = s.call("read_file", {"path": "src/main.rs"})
    s.turn_end()
    s.result(c, "read_file", evidence=read(resource="src/main.rs", read_range=[1, 80]))
    s.new_turn()
    s.content("Adding the flag and wiring it to the log level.")
    _, c1 = s.call("edit_file", {"path": "src/cli.rs", "old": "pub struct Cli {", "new": "pub struct Cli {\n    #[arg(long)]\n    pub verbose: bool,"})
    _, c2 = s.call("edit_file", {"path": "src/main.rs", "old": "let level = Level::INFO;", "new": "let level = if cli.verbose { Level::DEBUG } else { Level::INFO };"})
    s.turn_end()
    s.result(c1, "edit_file", evidence=mutation("a1f0", "b7c2"))
    s.result(c2, "edit_file", evidence=mutation("c3d4", "e5f6"))
    s.new_turn()
    _, c = s.call("write_file", {"path": "tests/verbose.rs", "content": "#[test]\nfn verbose_sets_debug() { /* ... */ }\n"})
    s.turn_end()
    s.result(c, "write_file", evidence=mutation("none", "0a9b"))
    s.new_turn()
    _, c = s.call("run_tests", {"filter": "verbose"})
    s.turn_end()
    s.result(c, "run_tests", ok=False, error="test verbose_sets_debug ... FAILED: level was INFO", evidence={"effect": "none", "new_info": True})
    s.new_turn()
    s.reasoning("The parse happens after the logger is built; move the logger setup below it.")
    _, c = s.call("edit_file", {"path": "src/main.rs", "old": "init_logging(level);\nlet cli = Cli::parse();", "new": "let cli = Cli::parse();\ninit_logging(level);"})
    s.turn_end()
    s.result(c, "edit_file", evidence=mutation("e5f6", "f1e2"))
    s.new_turn()
    _, c = s.call("run_tests", {"filter": "verbose"})
    s.turn_end()
    s.result(c, "run_tests", evidence={"effect": "none", "new_info": True})
    s.new_turn()
    s.content("Done: `--verbose` switches the log level to DEBUG, and `tests/verbose.rs` covers it.")
    # Runtimes may report what a response used (contract: `usage`); no rule reads it yet.
    s.assistant("Done: `--verbose` switches the log level to DEBUG, and `tests/verbose.rs` covers it.", usage={"output_tokens": 31})
    s.turn_end(usage={"input_tokens": 18250, "output_tokens": 412, "cost": 0.0611})
    s.session_end()
    return s.lines()


def exact_repeat():
    # The same call three times, its JSON spelled three ways (key order, whitespace).
    s = Session("exact", who=WHO)
    s.user("The build is broken, fix it.")
    for args in [
        Raw('{"cmd":"cargo build --locked","cwd":"/work/app"}'),
        Raw('{"cwd": "/work/app", "cmd": "cargo build --locked"}'),
        Raw('{ "cwd" : "/work/app" ,  "cmd":"cargo build --locked" }'),
    ]:
        s.new_turn()
        _, c = s.call("bash", args)
        s.turn_end()
        if s.call_no < 3:
            s.result(c, "bash", evidence={"output_hash": "9f2c11d0"})
    # The third call was refused (no result); the model changes approach.
    s.new_turn()
    _, c = s.call("read_file", {"path": "/work/app/build.log"})
    s.turn_end()
    s.result(c, "read_file", evidence=read(resource="/work/app/build.log", read_range=[1, 200]))
    s.answer("The linker is missing; install `cc` or set CC, then rebuild.")
    return s.lines()


def fuzzy_repeat_whitespace():
    # Codex-style: the same shell command, spacing around `&&` varying (issue #7049 shape).
    s = Session("fuzzy", who={"tenant": "acme", "agent": "shell-bot"})
    s.user("Commit and push my changes.")
    for cmd in [
        "cd /home/dev/projects/storefront && git status --short --branch",
        "cd /home/dev/projects/storefront&& git status --short --branch",
        "cd  /home/dev/projects/storefront &&  git status --short --branch",
    ]:
        s.new_turn()
        _, c = s.call("shell", {"command": cmd, "timeout_ms": 10000})
        s.turn_end()
        if s.call_no < 3:
            s.result(c, "shell", evidence={"output_hash": "77aa01"})
    return s.lines()


def polling_exempt():
    # check_background_tasks is seed 000's exempt polling tool: never a repeat, however often.
    s = Session("poll-exempt", who=WHO, step=2000)
    s.user("Run the migration in the background and tell me when it is done.")
    s.new_turn()
    _, c = s.call("start_background_task", {"command": "./migrate.sh --all"})
    s.turn_end()
    s.result(c, "start_background_task", evidence={"effect": "mutation"})
    for i in range(9):
        s.wait(5000)
        s.round("check_background_tasks", {}, evidence={"output_hash": "running" if i < 8 else "done"})
    s.answer("The migration finished.")
    return s.lines()


def polling_progress():
    # A non-exempt status tool: while its output changes the repeats are progress (no block);
    # once the output stops changing, the third identical call in a row is blocked.
    s = Session("poll-progress", who=WHO, step=1500)
    s.user("Deploy build 42 and wait until it is live.")
    outputs = ["queued", "building-10", "building-55", "building-90", "rolling-out", "live", "live", "live"]
    for i, out in enumerate(outputs):
        s.wait(4000)
        s.new_turn()
        _, c = s.call("job_status", {"job": "deploy-42"})
        s.turn_end()
        if i < len(outputs) - 1:
            s.result(c, "job_status", evidence={"effect": "read", "resource": "job:deploy-42", "output_hash": out})
    return s.lines()


def paging():
    # Paging through a log by offset, then through a source file by view_range: work.
    s = Session("paging", who={"tenant": "acme", "agent": "openhands"})
    s.user("Find why the nightly job failed.")
    log = "/var/log/nightly/2026-01-01.log"
    for page in range(4):
        s.round(
            "read_file",
            {"path": log, "offset": page * 400, "limit": 400, "encoding": "utf-8"},
            evidence=read(resource=log, read_range=[page * 400, page * 400 + 400]),
        )
    src = "/workspace/jobs/nightly/export.py"
    for start in (1, 61, 121):
        s.round(
            "str_replace_editor",
            {"command": "view", "path": src, "view_range": [start, start + 59], "security_risk": "LOW"},
            evidence=read(resource=src, read_range=[start, start + 59]),
        )
    s.answer("The export fails at line 142: the S3 bucket name is read from an unset variable.")
    return s.lines()


def cycle():
    s = Session("cycle", who=WHO)
    s.user("Make the failing test pass.")
    for _ in range(3):
        s.round("edit_file", {"path": "src/parse.rs", "old": "n + 1", "new": "n - 1"})
        s.round("run_tests", {"filter": "parse"}, ok=False, error="1 failed")
        s.round("git_checkout", {"path": "src/parse.rs"})
    return s.lines()


def error_repeat():
    # Different args, the same failure (whitespace aside) three times in a row.
    s = Session("errors", who=WHO)
    s.user("Build the release binary.")
    errors = [
        "error: linker `cc` not found\n  = note: No such file or directory (os error 2)",
        "error: linker `cc` not found\n    = note: No such file or directory (os error 2)",
        "error:  linker `cc` not found = note: No such file or directory (os error 2)",
    ]
    for i, err in enumerate(errors):
        s.round("bash", {"cmd": f"cargo build --release -j{i + 2}"}, ok=False, error=err)
    s.answer("The build needs a C linker; please install build-essential.")
    return s.lines()


def near_duplicate():
    # Only a volatile key (request_id) changes: one warning at the sixth call, nothing after.
    s = Session("near-dup", who=WHO)
    s.user("Get the account balance.")
    for i in range(7):
        s.round("bank_api", {"op": "balance", "account": "ACC-7", "request_id": f"req-{1000 + i}"},
                evidence={"effect": "read", "resource": "acct:ACC-7", "output_hash": f"resp-{i}"})
    return s.lines()


def no_change():
    # The identical migration, proven to change nothing, in five consecutive rounds; each
    # round also makes two other calls, so the window of 6 never holds it three times.
    s = Session("no-change", who=WHO)
    s.user("Apply the pending migration.")
    for r in range(5):
        s.new_turn()
        _, c1 = s.call("apply_migration", {"name": "0042_add_index"})
        _, c2 = s.call("read_file", {"path": f"migrations/notes_{r}.md"})
        _, c3 = s.call("list_dir", {"path": f"migrations/batch_{r}"})
        s.turn_end()
        s.result(c2, "read_file")
        s.result(c3, "list_dir")
        s.result(c1, "apply_migration", evidence=mutation("db-9a1e", "db-9a1e"))
    return s.lines()


def no_progress():
    s = Session("no-progress", who=WHO)
    s.user("Find where the session token is refreshed.")
    for q in ["refresh_token", "refreshToken", "token refresh", "renew session"]:
        s.round("search", {"query": q, "path": "src/"}, evidence=read(new_info=False))
    return s.lines()


def discovery_only():
    # 9 read-only rounds in a request whose runtime announces a 15-round budget (seed 004's
    # 8 rounds apply as is up to a budget of 80).
    s = Session("discovery", who=WHO)
    s.user("Explain how the scheduler works.", limits={"max_tool_rounds": 15})
    for i in range(9):
        tool = ["read_file", "grep", "list_dir"][i % 3]
        s.round(tool, {"path": f"src/scheduler/part_{i}.rs"}, evidence=read(resource=f"src/scheduler/part_{i}.rs"))
    return s.lines()


def seventeen_rounds(sid, limits=None):
    """One request of 17 healthy rounds (edit, test, edit, ...), with an announced budget or not."""
    s = Session(sid, who=WHO)
    s.user("Port the whole test suite to the new framework.", limits=limits)
    for i in range(17):
        tool = "edit_file" if i % 2 == 0 else "run_tests"
        ev = mutation(f"h{i}", f"h{i + 1}") if tool == "edit_file" else {"effect": "none", "new_info": True}
        s.round(tool, {"path": f"tests/suite_{i}.py"}, evidence=ev)
    return s.lines()


def budget_abort():
    # 17 rounds in one request whose runtime announces seed 000's budget of 15: a warning when
    # round 12 starts (80 % of 15), an abort when round 16 starts, and nothing more for
    # round 17 (once per request).
    return seventeen_rounds("budget", limits={"max_tool_rounds": 15})


def budget_fleet_default():
    # The same 17 rounds with no announced budget: the fleet default (250) applies, so a
    # long healthy run gets nothing.
    return seventeen_rounds("budget-default")


def budget_reset():
    # Three requests of 11 rounds each: 33 rounds in the session, never 12 in one request.
    s = Session("budget-reset", who=WHO)
    for req in range(3):
        s.user(f"Now refactor module {req}.")
        for i in range(11):
            tool = "edit_file" if i % 2 == 0 else "run_tests"
            ev = mutation(f"m{req}-{i}", f"m{req}-{i + 1}") if tool == "edit_file" else {"effect": "none", "new_info": True}
            s.round(tool, {"path": f"src/mod_{req}/f{i}.rs"}, evidence=ev)
        s.answer(f"Module {req} refactored.")
    return s.lines()


def compaction_churn():
    # Two compactions, the second once 12 of 15 rounds are used: the churn warning fires on
    # the compaction itself (the near-limit warning came earlier, at round 12).
    s = Session("churn", who=WHO)
    s.user("Migrate every handler to the async API.", limits={"max_tool_rounds": 15})
    for i in range(12):
        s.round("edit_file", {"path": f"src/handlers/h{i}.rs", "change": "async"}, evidence=mutation(f"a{i}", f"b{i}"))
        if i == 4:
            s.compaction()
    s.compaction()
    s.round("edit_file", {"path": "src/handlers/h12.rs", "change": "async"}, evidence=mutation("a12", "b12"))
    return s.lines()


def slow_convergence():
    # Ten benchmark rounds a minute apart; the last five bring nothing new.
    s = Session("slow", who=WHO)
    s.user("Tune the cache until p99 is under 20 ms.")
    for i in range(10):
        s.wait(60_000)
        s.round("run_benchmark", {"cache_mb": 64 * (i + 1)}, evidence={"effect": "none", "new_info": i < 5})
    return s.lines()


def required_tool():
    s = Session("portfolio", who={"tenant": "fin", "agent": "advisor", "model": "m-chat"})
    # 1. Keywords only inside injected memories: stripped, so nothing is required.
    s.user("<relevant-memories>用户常问：我有什么持仓、持仓情况</relevant-memories>"
           "<current-user-message>讲个笑话吧</current-user-message>")
    s.answer("为什么程序员分不清万圣节和圣诞节？因为 Oct 31 == Dec 25。")
    # 2. A direct portfolio.view intent, answered from memory four times.
    s.user("<relevant-memories>用户持有贵州茅台</relevant-memories>"
           "<current-user-message>我有什么持仓？</current-user-message>")
    for answer in ["根据记忆，你持有贵州茅台。", "你目前应该持有茅台一只股票。", "我记得你有茅台。", "你的持仓是茅台。"]:
        s.answer(answer)
    # 3. A direct portfolio.diagnose intent, satisfied by the right call.
    s.user("我持仓怎么样？")
    s.new_turn()
    _, c = s.call("portfolio", {"mode": "diagnose"})
    s.turn_end()
    s.result(c, "portfolio", evidence={"effect": "read", "new_info": True})
    s.new_turn()
    s.assistant("代码 | 名称 | 持股\n600519 | 贵州茅台 | 100\n整体健康，集中度偏高。")
    s.turn_end()
    return s.lines()


def reasoning_loop():
    # A real DeepSeek reasoning loop (real_loop3.txt, MIT, see README), streamed in 12-char
    # chunks: steer, then a firmer steer with reasoning_effort=low, then the guard gives up.
    text = (REAL / "dsh-thinking-loop-guard" / "real_loop3.txt").read_text(encoding="utf-8")
    s = Session("reasoning", step=40, who={"tenant": "acme", "agent": "dsh", "model": "deepseek-reasoner"})
    s.user("跑一下 Beardifier 对拍")
    s.new_turn()
    for piece in chunks(text, 12):
        s.reasoning(piece)
    s.turn_end()
    return s.lines()


def block_repeat():
    # The same long passage recomputed in three responses of one request, other text in
    # between (seed 003's accumulation case); each response's reasoning arrives whole, as
    # one `final` chunk at its end.
    passage = ("Recompute the cache hit rate for eight chunks: each grid rebuild costs about "
               "a millisecond, so the misses must dominate the profile. ")
    between = [
        "First guess: the cache key includes the chunk origin. ",
        "Second guess: the key is fine but the cache is cleared per column. ",
        "Third guess: maybe the timer itself is wrong. ",
    ]
    s = Session("block", step=300, who=WHO)
    s.user("Why is the eight-chunk benchmark slower than one chunk?")
    for i, other in enumerate(between):
        s.new_turn()
        s.reasoning(passage + other, final=True)
        _, c = s.call("run_benchmark", {"chunks": 8, "variant": i})
        s.turn_end()
        s.result(c, "run_benchmark", evidence={"effect": "none", "new_info": True})
    return s.lines()


CHANT = "I will now re-run the full test suite to confirm that everything passes. "


def content_chanting():
    # Visible output chanting one sentence (73 chars); a 146-char span repeats back to back.
    s = Session("chant", step=150, who=WHO)
    s.user("Finish the task.")
    s.new_turn()
    s.content("All edits are in place. ")
    for _ in range(14):
        s.content(CHANT)
    s.turn_end()
    return s.lines()


def idle():
    # Reasoning streams for more than 60 s with no visible output.
    s = Session("idle", step=100, who=WHO)
    s.user("Which index should this query use?")
    s.new_turn()
    thoughts = [
        "The query filters on tenant and sorts by created time.",
        "A composite index on (tenant, created) would serve both.",
        "But the planner may prefer the primary key for small tenants;",
        "the histogram says ninety percent of tenants have under a thousand rows.",
        "For the large ones a covering index avoids the heap fetch entirely.",
        "Write amplification matters here: the table takes many inserts per second.",
        "A partial index only on active rows halves its size.",
        "So: a partial composite index, created concurrently.",
    ]
    for t in thoughts:
        s.reasoning(t + " ")
        s.wait(10_000)
    s.content("Use a partial index on (tenant_id, created_at) WHERE active, built CONCURRENTLY.")
    s.turn_end()
    return s.lines()


def turn_timeout():
    s = Session("timeout", step=100, who=WHO)
    s.user("Summarise the quarterly report.")
    s.new_turn()
    s.content("Revenue grew 12 % quarter on quarter, ")
    s.wait(60_000)
    s.content("driven by the enterprise tier; ")
    s.wait(59_000)
    s.content("churn fell to 2.1 %, ")
    s.wait(2_000)
    s.content("and operating costs were flat.")
    s.turn_end()
    return s.lines()


def reasoning_overflow():
    # More than 20 000 reasoning chars in one response, none of it repeating.
    s = Session("overflow", step=50, who=WHO)
    s.user("Enumerate the candidates.")
    s.new_turn()
    for i in range(22):
        s.reasoning("".join(f"{i * 100 + j:09d} " for j in range(100)))
    s.turn_end()
    return s.lines()


def duplicate_event_id():
    # Producer retries resend the first call twice: counted once, so no exact_repeat.
    s = Session("retry", who=WHO)
    s.user("Run the linter.")
    s.new_turn()
    first, c = s.call("bash", {"cmd": "ruff check ."})
    s.retry(first)
    s.turn_end()
    s.retry(first)
    s.result(c, "bash", evidence={"output_hash": "lint-1"})
    s.new_turn()
    _, c = s.call("bash", {"cmd": "ruff check ."})
    s.turn_end()
    s.result(c, "bash", evidence={"output_hash": "lint-1"})
    s.answer("Two lint findings, both in tests/.")
    return s.lines()


def unknown_type():
    # Types from a newer contract are skipped; the rules see only the known ones.
    s = Session("unknown", who=WHO)
    s.user("Check the service health.")
    for i in range(3):
        s.new_turn()
        s.other("tool_progress", turn_id=s.turn(), call_id=f"c{i}", percent=50)
        _, c = s.call("http_get", {"url": "http://localhost:8080/healthz"})
        s.other("telemetry", tokens={"in": 1200, "out": 40})
        s.turn_end()
        s.result(c, "http_get", evidence={"effect": "read", "output_hash": "503"})
    return s.lines()


def reread_after_edit():
    # Read lines 40-60, edit them, read them again, three times over: each re-read follows a
    # successful mutation, so it looks at a changed file. Then the same read three times more
    # with nothing in between: the third read of the unchanged file is blocked.
    s = Session("reread", who=WHO)
    s.user("Fix the off-by-one in the pager.")
    view = {"command": "sed -n '40,60p' src/pager.py"}
    for i in range(3):
        s.round("bash", view, evidence=read(resource="src/pager.py", output_hash=f"v{i}"))
        s.round("bash", {"command": f"sed -i '4{i}s/<=/</' src/pager.py"}, evidence={"effect": "mutation"})
    for _ in range(3):
        s.round("bash", view, evidence=read(resource="src/pager.py", output_hash="v3"))
    return s.lines()


def shell_targets():
    # Three different test scripts written with a heredoc and run: similar text, different
    # files written and run, so no fuzzy repeat.
    s = Session("shell-targets", who=WHO)
    s.user("Reproduce the bug in three ways.")
    body = "import app\nprint(app.parse('2024-01-01T00:00:00'))\n"
    for name in ["repro_a.py", "repro_b.py", "repro_c.py"]:
        s.round("bash", {"command": f"cat > {name} << 'EOF'\n{body}EOF\npython {name}"}, evidence={"output_hash": name})
    return s.lines()


def fuzzy_changing():
    # The same search rephrased four times. The third follows two tries that each got an
    # answer of its own: nothing (each changed what the agent knows). The fourth follows an
    # answer seen again among changing ones: a fuzzy repeat whose results change only
    # steers, once for the group.
    s = Session("fuzzy-changing", who=WHO)
    s.user("Find the retry settings.")
    for q, out in [("where are the http client retry settings configured in the repo", "r0"),
                   ("where are the http client retry settings configured in the repo?", "r1"),
                   ("where are http client retry settings configured in this repo", "r1"),
                   ("where are the http client retry settings configured in this repo", "r3")]:
        s.round("search", {"query": q}, evidence={"effect": "read", "output_hash": out})
    return s.lines()


def revert_cycle():
    # Edit / test / restore from the same backup, three times, the restore spelled three
    # ways: the third restore is steered.
    s = Session("revert", who=WHO)
    s.user("Make the schema test pass.")
    s.round("bash", {"command": "cp src/schema.py src/schema.py.orig"})
    restores = ["cp src/schema.py.orig src/schema.py", "cd /repo && cp src/schema.py.orig src/schema.py",
                "cp -f src/schema.py.orig src/schema.py"]
    for i, restore in enumerate(restores):
        s.round("bash", {"command": f"python fix_{i}.py"}, evidence={"effect": "mutation", "output_hash": f"f{i}"})
        s.round("bash", {"command": "python -m pytest tests/test_schema.py -q"}, ok=False, error=f"1 failed ({i})")
        s.round("bash", {"command": restore})
    return s.lines()


def retry_across_requests():
    # A customer-service agent retries the same refused booking each time the user says
    # "try again": one failure per request, steered at the third request.
    s = Session("retry-requests", who={"tenant": "acme", "agent": "support"})
    for i in range(3):
        s.user("Try again please." if i else "Book the 9:00 flight to Oslo for Kim.")
        eid, c = s.call("book_flight", {"flight": "SK 4411", "passenger": "Kim Larsen", "date": "2026-02-03"})
        s.turn_end()
        s.result(c, "book_flight", ok=False, error="fare class Y is sold out")
        s.answer("I'm sorry, the booking was refused: fare class Y is sold out.")
    return s.lines()


def failure_across_requests():
    # Issue 20, item 1. A booking refused the same way in three requests, the agent changing
    # one field each time (the date, echoed in the error): steered at the third request.
    # Then a lookup run the same way in four requests, its error text different each time:
    # steered at the fourth.
    s = Session("refused", who={"tenant": "acme", "agent": "support"})
    for i, day in enumerate(["2026-02-03", "2026-02-04", "2026-02-05"]):
        s.user("Then try the next day." if i else "Move my Oslo flight to Feb 3.")
        args = {"reservation_id": "ZFA04Y", "flight": "SK4411", "date": day, "cabin": "economy"}
        s.round("update_reservation_flights", args, ok=False,
                error=f"Error: flight SK4411 not available on {day}")
        s.answer("I'm sorry, that flight is not available on that day.")
    s2 = Session("not-found", who={"tenant": "acme", "agent": "support"})
    errors = ["user not found", "still not found", "lookup failed: no such user", "not found (404)"]
    for i, err in enumerate(errors):
        s2.user("Please look me up again." if i else "Find my account: kim@example.org.")
        s2.round("find_user_id_by_email", {"email": "kim@example.org"}, ok=False, error=err)
        s2.answer("I could not find your account.")
    return interleave(s, s2)


def paraphrased_search():
    # Issue 20, item 4. A ReAct agent rewords one search four times, a lookup in between, and
    # gets the same "could not find" each time (the query echoed): steered at the third.
    # The parallel searches of one response failing alike (a plan, issue 20, item 5) count
    # as one try: the other session gets nothing.
    s = Session("react", who={"tenant": "acme", "agent": "qa"})
    s.user("Which band released the album Kind of Blue Skies?")
    for q in ["Kind of Blue Skies album", "Kind of Blue Skies (album)", "Blue Skies album band"]:
        s.round("search", {"query": q}, ok=False, error=f"Could not find {q}.")
        s.round("lookup", {"keyword": q.split()[0]}, evidence={"effect": "read", "output_hash": q})
    s2 = Session("plan", who={"tenant": "acme", "agent": "travel"})
    s2.user("Find me any flight from Oslo next week.")
    s2.new_turn()
    calls = [s2.call("search_direct_flight", {"origin": "OSL", "destination": d, "date": "2026-02-10"})
             for d in ["BGO", "TRD", "SVG", "BOO", "TOS", "AES"]]
    s2.turn_end()
    for _, c in calls:
        s2.result(c, "search_direct_flight", ok=False, error="no flights on this route")
    s2.answer("There is no direct flight from Oslo on that date.")
    return interleave(s, s2)


def navigation():
    # Issue 20, item 6. A web agent goes back to its results page after opening each of
    # three items: navigation, nothing fires. Then it presses "< Prev" three times in a row
    # on the same page and gets the same page: blocked.
    s = Session("web", who={"tenant": "shop", "agent": "web"})
    s.user("Find a red wool scarf under $30.")
    s.round("search", {"query": "red wool scarf"}, evidence={"effect": "read", "output_hash": "results-1"})
    for item in ["B09A", "B07C", "B08F"]:
        s.round("click", {"target": item}, evidence={"effect": "read", "output_hash": f"item-{item}"})
        s.round("click", {"target": "< Prev"}, evidence={"effect": "read", "output_hash": "results-1"})
    for _ in range(2):
        s.round("click", {"target": "< Prev"}, evidence={"effect": "read", "output_hash": "results-1"})
    return s.lines()


def loop_cost():
    # Issue 18. An agent re-runs a failing migration, each response reporting its usage on
    # turn_end: the block on the third call carries what the loop cost since the first
    # (two responses' usage, the seconds since it), the steer on the third failure what it
    # cost since the first failure. After a fourth try it moves on and answers; usage after
    # that is not the loop's.
    s = Session("costly", who=WHO)
    s.user("Run the database migrations.")
    for i in range(4):
        s.new_turn()
        _, c = s.call("bash", {"command": "./migrate.sh --all"})
        s.turn_end(usage={"input_tokens": 1200 + 100 * i, "output_tokens": 80, "cost": 0.0042})
        s.result(c, "bash", ok=False, error="psql: connection refused")
    s.new_turn()
    s.content("The database refuses connections; please start it and I will run the migrations.")
    s.turn_end(usage={"input_tokens": 1700, "output_tokens": 40, "cost": 0.0031})
    return s.lines()


def rewrite_cycle():
    # Issue 20, item 2. A coding agent writes its fix whole, tests it, and goes back to the
    # version before, with reads in between: A, B, A, B, A. The third return to an earlier
    # content (the fifth write) is steered, though no result reported a state.
    s = Session("rewrite", who=WHO)
    s.user("Make test_parse pass.")
    for i, body in enumerate(["n + 1", "n - 1", "n + 1", "n - 1", "n + 1"]):
        s.round("write_file", {"path": "src/parse.py", "content": f"def step(n):\n    return {body}\n"})
        s.round("bash", {"command": "python -m pytest tests/test_parse.py -q"}, ok=False, error=f"1 failed ({i})")
        s.round("read_file", {"path": f"tests/case_{i}.txt"}, evidence=read(output_hash=f"case{i}"))
    return s.lines()


def answer_repeat():
    # The same short answer three times in a row, whatever the user says.
    s = Session("answers", who={"tenant": "acme", "agent": "support"})
    for text in ["Where is my parcel?", "It has been a week.", "Can you check again?"]:
        s.user(text)
        s.new_turn()
        s._push("assistant_message", {"turn_id": s.turn(), "text": "Let me check that for you."})
        s.turn_end()
    return s.lines()


def compaction_storm():
    # Three compactions in a row with no tool round between them.
    s = Session("storm", who=WHO)
    s.user("Summarise the incident log.")
    s.round("read_file", {"path": "incident.log"}, evidence=read(resource="incident.log"))
    for _ in range(3):
        s.compaction()
    return s.lines()


def code_block_content():
    # Visible output with a generated test file: the same assertion line many times inside a
    # fenced code block is code, not chanting; nothing fires.
    s = Session("code-block", who=WHO)
    s.user("Write table tests for is_even.")
    s.new_turn()
    s.content("Here are the tests:\n\n```python\n")
    for i in range(12):
        s.content("assert is_even(value) is expected, f'unexpected result for {value!r}: {expected}'\n")
    s.content("```\n\nRun them with pytest.")
    s.turn_end()
    return s.lines()


def mixed_sessions():
    # Three sessions interleaved on one partition; times as RFC 3339 strings, one in +08:00.
    healthy = Session("mix-healthy", start=T0, step=700, ts_text=0, who={"tenant": "acme", "agent": "coder"})
    looping = Session("mix-loop", start=T0 + 150, step=900, ts_text=480, who={"tenant": "globex", "agent": "ops"})
    chatty = Session("mix-variant", start=T0 + 300, step=500, ts_text=0, who={"tenant": "acme", "agent": "chat"})
    healthy.user("Rename `fetch_all` to `fetch_every`.")
    for i, f in enumerate(["api.py", "client.py", "tests/test_api.py"]):
        healthy.round("edit_file", {"path": f, "old": "fetch_all", "new": "fetch_every"}, evidence=mutation(f"x{i}", f"y{i}"))
    looping.user("Restart the worker pool.")
    for _ in range(4):
        looping.round("kubectl", {"args": ["rollout", "restart", "deployment/workers", "-n", "prod"]})
    chatty.user("Is 91 prime?")
    chatty.new_turn()
    chatty.reasoning("91 = 7 × 13. ")
    chatty.reasoning("Let me check again! Let me check again? ")
    chatty.reasoning("Let me check again. So it is not prime.")
    chatty.content("No: 91 = 7 × 13.")
    chatty.turn_end()
    return interleave(healthy, looping, chatty)


CASES = {
    "healthy_session": healthy_session,
    "exact_repeat": exact_repeat,
    "fuzzy_repeat_whitespace": fuzzy_repeat_whitespace,
    "polling_exempt": polling_exempt,
    "polling_progress": polling_progress,
    "paging": paging,
    "cycle": cycle,
    "error_repeat": error_repeat,
    "near_duplicate": near_duplicate,
    "no_change": no_change,
    "no_progress": no_progress,
    "discovery_only": discovery_only,
    "budget_abort": budget_abort,
    "budget_fleet_default": budget_fleet_default,
    "budget_reset": budget_reset,
    "compaction_churn": compaction_churn,
    "slow_convergence": slow_convergence,
    "required_tool": required_tool,
    "reasoning_loop": reasoning_loop,
    "block_repeat": block_repeat,
    "content_chanting": content_chanting,
    "idle": idle,
    "turn_timeout": turn_timeout,
    "reasoning_overflow": reasoning_overflow,
    "duplicate_event_id": duplicate_event_id,
    "unknown_type": unknown_type,
    "mixed_sessions": mixed_sessions,
    "reread_after_edit": reread_after_edit,
    "shell_targets": shell_targets,
    "fuzzy_changing": fuzzy_changing,
    "revert_cycle": revert_cycle,
    "retry_across_requests": retry_across_requests,
    "failure_across_requests": failure_across_requests,
    "paraphrased_search": paraphrased_search,
    "navigation": navigation,
    "loop_cost": loop_cost,
    "rewrite_cycle": rewrite_cycle,
    "answer_repeat": answer_repeat,
    "compaction_storm": compaction_storm,
    "code_block_content": code_block_content,
}


def render(lines):
    return "".join(line + "\n" for line in lines)


def main(argv):
    check = "--check" in argv
    FIXTURES.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, build in CASES.items():
        path = FIXTURES / f"{name}.events.jsonl"
        text = render(build())
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)} ({text.count(chr(10))} events)")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
