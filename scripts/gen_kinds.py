#!/usr/bin/env python3
"""Writes tests/data/kinds/: a labelled corpus of synthetic agent sessions of five kinds, as loopguard events.

The kinds are the agents the guard must handle besides coding agents on SWE-bench: household
text-game agents (ReAct on 7-9B models), web-shop agents, question-answering agents with a
search tool, customer-service agents with many user turns, and coding agents (aider /
Claude Code style). Every session text was written for this project; no environment or
trajectory was copied. Conversion conventions are those of tests/data/real/agent-traces
(see its README.md): one response per step (a `reasoning` event with `final: true` when the
agent thought, the `tool_call`, `turn_end`), then the `tool_result` with
`evidence.output_hash` (first 12 hex digits of the SHA-1 of the observation) and
`evidence.effect` only where the action makes it plain.

    python3 scripts/gen_kinds.py           # (re)write tests/data/kinds/
    python3 scripts/gen_kinds.py --check   # exit 1 if a file on disk differs from what it would write

Deterministic: fixed seeds (derived from each session id), no clock. Standard library only.
Score a build against it with
`python3 scripts/score_traces.py BIN --labels tests/data/kinds --verbose`.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "kinds"

# 2026-02-02T08:00:00Z in epoch milliseconds; each session starts some hours after the last.
T0 = 1_770_019_200_000
NOTHING = "Nothing happens."

ORIGIN = {
    "generator": "scripts/gen_kinds.py",
    "license": "MIT (this project's license); synthetic, written for loopguard",
}


def out_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def seed_of(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], 16)


# --------------------------------------------------------------------------------------
# Session builder


class Session:
    """One session's events: increasing ids, sequence numbers and realistic times.

    `pace` is the model's time per response in seconds (drawn uniformly), `tool_ms` the
    default tool run time in milliseconds.
    """

    def __init__(self, sid, file, agent, model, tenant, start, pace=(1.0, 6.0), tool_ms=(40, 400)):
        self.sid, self.file = sid, file
        self.who = {"tenant": tenant, "agent": agent, "model": model}
        self.rng = random.Random(seed_of(sid))
        self.ts = start
        self.pace, self.tool_ms = pace, tool_ms
        self.n = self.turns = self.calls = 0
        self.events: list[dict] = []
        self.observations: list[str] = []  # for reading the generator's output, not written
        self.intervene = None

    def _push(self, kind, fields):
        self.n += 1
        e = {"v": 1, "event_id": f"{self.sid}-e{self.n}", "session_id": self.sid, "ts": self.ts,
             "type": kind, "seq": self.n}
        e.update(self.who)
        e.update(fields)
        self.events.append(e)
        return e["event_id"]

    def wait(self, lo, hi):
        """Let between lo and hi seconds pass."""
        self.ts += int(round(self.rng.uniform(lo, hi) * 1000))

    def user(self, text, limits=None, after=(8.0, 45.0)):
        """A new user request (a customer's reply comes after `after` seconds of typing)."""
        if self.events:
            self.wait(*after)
        fields = {"text": text}
        if limits:
            fields["limits"] = limits
        return self._push("user_message", fields)

    def step(self, thought, tool, args, obs, ok=True, error=None, effect=None, run_ms=None,
             pace=None, mark=False):
        """One response: optional thought, one call, turn end; then the result. Returns the
        call's event id; `mark` makes it the session's labelled intervention point."""
        self.wait(*(pace or self.pace))
        self.turns += 1
        turn = f"t{self.turns}"
        if thought:
            self._push("reasoning", {"turn_id": turn, "text": thought, "final": True})
            self.ts += self.rng.randint(120, 900)
        self.calls += 1
        call_id = f"c{self.calls}"
        eid = self._push("tool_call", {"turn_id": turn, "call_id": call_id, "tool": tool, "args": args})
        self.ts += self.rng.randint(15, 90)
        self._push("turn_end", {"turn_id": turn})
        lo, hi = run_ms or self.tool_ms
        self.ts += self.rng.randint(lo, hi)
        self.observations.append(obs)
        evidence = {"output_hash": out_hash(obs)}
        if effect:
            evidence["effect"] = effect
        fields = {"call_id": call_id, "tool": tool, "status": "ok" if ok else "error"}
        if not ok:
            fields["error"] = error or obs
        fields["evidence"] = evidence
        self._push("tool_result", fields)
        if mark:
            assert self.intervene is None, f"{self.sid}: two intervention marks"
            self.intervene = eid
        return eid

    def reply(self, text, thought=None, pace=None):
        """A response without a tool call: the agent's visible message to the user."""
        self.wait(*(pace or self.pace))
        self.turns += 1
        turn = f"t{self.turns}"
        if thought:
            self._push("reasoning", {"turn_id": turn, "text": thought, "final": True})
            self.ts += self.rng.randint(120, 900)
        self._push("assistant_message", {"turn_id": turn, "text": text})
        self.ts += self.rng.randint(15, 90)
        self._push("turn_end", {"turn_id": turn})

    def lines(self):
        return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in self.events)


SESSIONS: list[tuple[Session, dict]] = []
_CLOCK = [T0]


def new(sid, file, agent, model, tenant, **kw):
    """A session starting a few hours after the previous one."""
    rng = random.Random(seed_of("start:" + sid))
    _CLOCK[0] += rng.randint(2 * 3600, 9 * 3600) * 1000 + rng.randint(0, 999)
    return Session(sid, file, agent, model, tenant, _CLOCK[0], **kw)


def done(s: Session, loop: bool, kind: str, exit: str, notes: str):
    assert loop == (s.intervene is not None), f"{s.sid}: loop label and mark disagree"
    SESSIONS.append((s, {"loop": loop, "kind": kind, "exit": exit, "notes": notes}))


# --------------------------------------------------------------------------------------
# Household: a small text world (receptacles holding objects), played by `act` or per-verb tools


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def listing(items):
    if not items:
        return "nothing"
    words = [f"{article(i)} {i}" for i in items]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + ", and " + words[-1]


class House:
    """Receptacles from a spec: one per line, `name[*]: item, item` (`*`: opens and closes)."""

    def __init__(self, spec, opened=()):
        self.places = {}
        for line in spec.strip().splitlines():
            name, _, items = line.partition(":")
            openable = name.strip().endswith("*")
            name = name.strip().rstrip("*").strip()
            self.places[name] = {"openable": openable, "open": not openable or name in opened,
                                 "items": [i.strip() for i in items.split(",") if i.strip()]}
        self.at = None
        self.hold = None

    def intro(self):
        names = list(self.places)
        return "You are in the middle of a room. Looking quickly around you, you see " + \
            ", ".join(f"{article(n)} {n}" for n in names[:-1]) + f", and {article(names[-1])} {names[-1]}."

    def _contents(self, name):
        p = self.places[name]
        return f"On the {name}, you see {listing(p['items'])}."

    def do(self, action):
        verb, a, b = parse_action(action)
        p = self.places.get(b if verb in ("take", "put", "clean", "heat", "cool") else a)
        if verb == "go":
            if p is None:
                return NOTHING
            self.at = a
            if not p["open"]:
                return f"You arrive at {a}. The {a} is closed."
            return f"You arrive at {a}. " + self._contents(a)
        if verb == "look":
            if self.at is None:
                return "You are in the middle of a room. Looking quickly around you, you see nothing new."
            return f"You are facing the {self.at}. Next to it, you see nothing."
        if verb == "inventory":
            return f"You are carrying: {article(self.hold)} {self.hold}." if self.hold else \
                "You are not carrying anything."
        if verb == "examine":
            if self.hold == a:
                return f"There's nothing special about {a}."
            if p is None or self.at != a:
                return NOTHING
            if not p["open"]:
                return f"The {a} is closed."
            return self._contents(a)
        if verb == "open":
            if p is None or self.at != a or not p["openable"] or p["open"]:
                return NOTHING
            p["open"] = True
            return f"You open the {a}. The {a} is open. In it, you see {listing(p['items'])}."
        if verb == "close":
            if p is None or self.at != a or not p["openable"] or not p["open"]:
                return NOTHING
            p["open"] = False
            return f"You close the {a}."
        if verb == "take":
            if p is None or self.at != b or not p["open"] or a not in p["items"] or self.hold:
                return NOTHING
            p["items"].remove(a)
            self.hold = a
            return f"You pick up the {a} from the {b}."
        if verb == "put":
            if p is None or self.at != b or not p["open"] or self.hold != a:
                return NOTHING
            p["items"].append(a)
            self.hold = None
            return f"You put the {a} in/on the {b}."
        if verb in ("clean", "heat", "cool"):
            tool = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}[verb]
            if p is None or self.at != b or self.hold != a or not b.startswith(tool):
                return NOTHING
            return f"You {verb} the {a} using the {b}."
        if verb == "use":
            if p is None or self.at != a or "lamp" not in a:
                return NOTHING
            return f"You turn on the {a}."
        raise ValueError(action)


ACTION = [
    (re.compile(r"^go to (.+)$"), "go"),
    (re.compile(r"^take (.+) from (.+)$"), "take"),
    (re.compile(r"^put (.+) in/on (.+)$"), "put"),
    (re.compile(r"^(clean|heat|cool) (.+) with (.+)$"), None),
    (re.compile(r"^(open|close|examine|use) (.+)$"), None),
    (re.compile(r"^(look|inventory)$"), None),
]


def parse_action(action):
    for pattern, verb in ACTION:
        m = pattern.match(action)
        if not m:
            continue
        g = m.groups()
        if verb:
            return (verb,) + g + (None,) * (2 - len(g))
        return (g[0],) + g[1:] + (None,) * (3 - len(g))
    raise ValueError(action)


VERB_TOOL = {"go": "go_to", "take": "take", "put": "put", "clean": "clean", "heat": "heat",
             "cool": "cool", "open": "open", "close": "close", "examine": "examine", "use": "use",
             "look": "look", "inventory": "inventory"}
READS = {"look", "examine", "open", "inventory"}
CHANGES = {"take", "put", "clean", "heat", "cool"}


def encode(mode, action):
    """(tool, args) of an action: one `act` tool, or one tool per verb."""
    if mode == "act":
        return "act", {"action": action}
    verb, a, b = parse_action(action)
    tool = VERB_TOOL[verb]
    if verb in ("look", "inventory"):
        return tool, {}
    if verb == "take":
        return tool, {"target": a, "from": b}
    if verb == "put":
        return tool, {"target": a, "to": b}
    if verb in ("clean", "heat", "cool"):
        return tool, {"target": a, "with": b}
    return tool, {"target": a}


def play(s: Session, house: House, mode: str, script):
    """Runs a script of (thought or None, action[, "!"]) steps; "!" marks the intervention."""
    for item in script:
        thought, action = item[0], item[1]
        obs = house.do(action)
        verb = parse_action(action)[0]
        failed = obs == NOTHING
        effect = "read" if verb in READS else ("mutation" if verb in CHANGES and not failed else None)
        tool, args = encode(mode, action)
        s.step(thought, tool, args, obs, ok=not failed, effect=effect, mark=len(item) > 2)


def household_task(house, task, preamble):
    return f"{preamble}\n\n{house.intro()}\nYour task is to: {task}."


HH_PRE = [
    "Interact with a household to solve a task. Reply with one action per step (go to, open, close, "
    "take, put, clean, heat, cool, use, look, examine, inventory). You may think before acting.",
    "You are a household robot in a text world. Each step, say what you think and then give exactly "
    "one command. Objects are named with a number, e.g. mug 2.",
    "Solve the task below by issuing commands to the environment, one per turn. Use the tools you "
    "were given; a command that cannot be done returns 'Nothing happens.'",
]


# --------------------------------------------------------------------------------------
# Household sessions

HH = "household.jsonl"
HH_AGENT = "react-household"


def hh_clean_mug():
    s = new("kind-hh-clean-mug", HH, HH_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 3.5))
    house = House("""
cabinet 1*:
cabinet 2*: glassbottle 1
cabinet 3*: bowl 2, plate 1
cabinet 4*: mug 2, soapbottle 1
cabinet 5*: dishsponge 2
cabinet 6*: winebottle 1
coffeemachine 1:
countertop 1: bread 1, butterknife 1, saltshaker 2
countertop 2: apple 1, dishsponge 1, lettuce 2, spatula 1
countertop 3: cellphone 1, pan 1, peppershaker 3, tomato 1
drawer 1*: fork 1
fridge 1*: egg 1, potato 2
garbagecan 1: papertowelroll 1
microwave 1*:
sinkbasin 1: egg 2, fork 3
stoveburner 1: pot 1
toaster 1:
""")
    s.user(household_task(house, "put a clean mug in coffeemachine", HH_PRE[0]))
    go_on = "No mug here. Next, I need to go to the next place."
    open_it = "Next, I need to open it."
    play(s, house, "act", [
        ("The task needs a clean mug in the coffeemachine. Plan: find a mug, wash it at the "
         "sinkbasin, then put it in the coffeemachine. Mugs are usually on countertops or in "
         "cabinets, so I will check those in order.", "go to countertop 1"),
        (go_on, "go to countertop 2"),
        (go_on, "go to countertop 3"),
        (go_on, "go to cabinet 1"),
        (open_it, "open cabinet 1"),
        (go_on, "go to cabinet 2"),
        (open_it, "open cabinet 2"),
        (go_on, "go to cabinet 3"),
        (open_it, "open cabinet 3"),
        (go_on, "go to cabinet 4"),
        (open_it, "open cabinet 4"),
        ("Now I find the mug 2. Next, I need to take it.", "take mug 2 from cabinet 4"),
        ("Now I take the mug 2. Next, I need to go to the sinkbasin 1 and clean it.", "go to sinkbasin 1"),
        (None, "clean mug 2 with sinkbasin 1"),
        ("Now I clean the mug 2. Next, I need to go to the coffeemachine 1 and put it in.",
         "go to coffeemachine 1"),
        (None, "put mug 2 in/on coffeemachine 1"),
    ])
    done(s, False, "healthy: formulaic thoughts", "task solved",
         "16 steps. The same two thoughts recur word for word ('No mug here. Next, I need to go to the "
         "next place.' 6 times, 'Next, I need to open it.' 4 times) while every action goes somewhere "
         "new and every observation is new; finds the mug in cabinet 4, cleans it, puts it away.")


def hh_two_cellphones():
    s = new("kind-hh-cellphones-bed", HH, HH_AGENT, "qwen2.5-7b-instruct", "lab-eval", pace=(1.0, 3.0))
    house = House("""
bed 1: pillow 1, laptop 1
desk 1: alarmclock 2, creditcard 1, pen 1
drawer 1*:
drawer 2*: keychain 1
drawer 3*:
drawer 4*:
drawer 5*: cellphone 2
drawer 6*:
dresser 1: book 2, cellphone 4, watch 1
garbagecan 1: tissuebox 1
laundryhamper 1: cloth 2
safe 1*: cd 3
shelf 1: vase 1
shelf 2: bowl 1
shelf 3:
shelf 4: pencil 2
sidetable 1: cd 2, desklamp 1
""")
    s.user(household_task(house, "put two cellphone in bed", HH_PRE[1]))
    f = "No cellphone here. Next, I will check the next one."
    play(s, house, "verbs", [
        ("I need two cellphones on the bed. I will look for them on the desk, the sidetable, the "
         "shelves, the drawers and the dresser.", "go to desk 1"),
        (f, "go to sidetable 1"),
        (f, "go to shelf 1"),
        (f, "go to shelf 2"),
        (f, "go to shelf 3"),
        (f, "go to shelf 4"),
        (f, "go to drawer 1"),
        ("The drawer 1 is closed. I will open it.", "open drawer 1"),
        (f, "go to drawer 2"),
        ("The drawer 2 is closed. I will open it.", "open drawer 2"),
        (f, "go to drawer 3"),
        (None, "open drawer 3"),
        (f, "go to drawer 4"),
        (None, "open drawer 4"),
        (f, "go to drawer 5"),
        (None, "open drawer 5"),
        ("Now I find a cellphone (2). Next, I need to take it.", "take cellphone 2 from drawer 5"),
        ("Now I take a cellphone (2). Next, I need to put it in/on bed 1.", "go to bed 1"),
        (None, "put cellphone 2 in/on bed 1"),
        ("Now I put the first cellphone on the bed. Next, I need to find the second one. I have not "
         "checked drawer 6 and dresser 1.", "go to drawer 6"),
        (None, "open drawer 6"),
        (f, "go to dresser 1"),
        ("Now I find a cellphone (4). Next, I need to take it.", "take cellphone 4 from dresser 1"),
        ("Now I take a cellphone (4). Next, I need to put it in/on bed 1.", "go to bed 1"),
        (None, "put cellphone 4 in/on bed 1"),
    ])
    done(s, False, "healthy: formulaic thoughts", "task solved",
         "25 steps with per-verb tools. 'No cellphone here. Next, I will check the next one.' is the "
         "thought of 11 steps, word for word, each before a move to a place not seen yet (desk, "
         "sidetable, shelves 1-4, drawers 1-5, dresser); both cellphones are found and put on the bed.")


def hh_heat_egg():
    s = new("kind-hh-heat-egg", HH, HH_AGENT, "mistral-7b-instruct-v0.3", "lab-eval", pace=(1.2, 4.0))
    house = House("""
cabinet 1*: cup 2
cabinet 2*:
cabinet 3*: plate 3
cabinet 4*: bowl 1
coffeemachine 1: mug 1
countertop 1: knife 2, saltshaker 1, spoon 2
countertop 2: bread 2, creditcard 3, houseplant 1
diningtable 1: apple 3, butterknife 2, fork 1, lettuce 3, winebottle 2
drawer 1*: ladle 1
fridge 1*: cup 1, egg 1, lettuce 1
garbagecan 1: potato 2, tomato 3
microwave 1*:
sinkbasin 1: spatula 2
stoveburner 1: pan 1
stoveburner 2: pot 1
stoveburner 3:
stoveburner 4: kettle 1
toaster 1:
""")
    s.user(household_task(house, "heat some egg and put it in diningtable", HH_PRE[0]))
    f = "Nothing useful here. I should check somewhere else."
    play(s, house, "act", [
        ("To finish the task I have to find an egg, heat it with the microwave, and put it on the "
         "diningtable. Eggs are often in the fridge, on a countertop, or in the sinkbasin.",
         "go to countertop 1"),
        (f, "go to countertop 2"),
        (f, "go to sinkbasin 1"),
        (f, "go to diningtable 1"),
        (f, "go to stoveburner 1"),
        (f, "go to stoveburner 2"),
        (f, "go to stoveburner 3"),
        (f, "go to cabinet 1"),
        (None, "open cabinet 1"),
        (f, "go to garbagecan 1"),
        (f, "go to fridge 1"),
        ("The fridge 1 is closed. I should open it.", "open fridge 1"),
        ("Now I find an egg (1). Next, I need to take it.", "take egg 1 from fridge 1"),
        ("Now I take an egg (1). Next, I need to go to microwave 1 and heat it.", "go to microwave 1"),
        (None, "heat egg 1 with microwave 1"),
        ("Now I heat an egg (1). Next, I need to put it in/on diningtable 1.", "go to diningtable 1"),
        (None, "put egg 1 in/on diningtable 1"),
    ])
    done(s, False, "healthy: formulaic thoughts", "task solved",
         "17 steps. 'Nothing useful here. I should check somewhere else.' 9 times word for word, each "
         "followed by a move to a new place (countertops, sinkbasin, diningtable, stoveburners, cabinet, "
         "garbagecan, fridge); finds the egg in the fridge, heats it, puts it on the table.")


def hh_two_soapbars():
    s = new("kind-hh-soapbars-garbage", HH, HH_AGENT, "gemma-2-9b-it", "lab-eval", pace=(1.0, 3.2))
    house = House("""
bathtubbasin 1:
cabinet 1*: spraybottle 1
cabinet 2*:
cabinet 3*: soapbar 1, toiletpaper 2
cabinet 4*:
countertop 1: candle 1, spraybottle 2, toiletpaper 1
garbagecan 1:
handtowelholder 1: handtowel 1
handtowelholder 2:
shelf 1: soapbottle 2
sinkbasin 1:
sinkbasin 2: cloth 1
toilet 1: candle 2, soapbar 2
toiletpaperhanger 1:
towelholder 1: towel 1
""")
    s.user(household_task(house, "put two soapbar in garbagecan", HH_PRE[2]))
    f = "There is no soapbar. Next, I need to go to the next place."
    play(s, house, "verbs", [
        ("I need to put two soapbars in the garbagecan. I will search the countertop, the "
         "sinkbasins, the cabinets and the toilet.", "go to countertop 1"),
        (f, "go to sinkbasin 1"),
        (f, "go to sinkbasin 2"),
        (f, "go to cabinet 1"),
        (None, "open cabinet 1"),
        (f, "go to cabinet 2"),
        (None, "open cabinet 2"),
        (f, "go to cabinet 3"),
        (None, "open cabinet 3"),
        ("Now I find a soapbar (1). Next, I need to take it.", "take soapbar 1 from cabinet 3"),
        ("Now I take a soapbar (1). Next, I need to put it in garbagecan 1.", "go to garbagecan 1"),
        (None, "put soapbar 1 in/on garbagecan 1"),
        ("Now I put the first soapbar in garbagecan 1. Next, I need to find the second soapbar.",
         "go to cabinet 4"),
        (None, "open cabinet 4"),
        (f, "go to bathtubbasin 1"),
        (f, "go to shelf 1"),
        (f, "go to toilet 1"),
        ("Now I find a soapbar (2). Next, I need to take it.", "take soapbar 2 from toilet 1"),
        ("Now I take a soapbar (2). Next, I need to put it in garbagecan 1.", "go to garbagecan 1"),
        (None, "put soapbar 2 in/on garbagecan 1"),
    ])
    done(s, False, "healthy: formulaic thoughts", "task solved",
         "20 steps with per-verb tools; 'There is no soapbar. Next, I need to go to the next place.' "
         "8 times identically, each before a new place; two soapbars found (cabinet 3, toilet 1) and "
         "put in the garbagecan.")


def hh_cool_tomato():
    s = new("kind-hh-cool-tomato", HH, HH_AGENT, "llama-3-8b-instruct", "lab-eval", pace=(1.0, 3.0))
    spec = "\n".join([f"cabinet {i}*: {x}" for i, x in enumerate(
        ["", "plate 2", "", "glassbottle 3", "bowl 3, cup 3", "", "", "peppershaker 1", "dishsponge 3"], 1)] + [
        "coffeemachine 1: mug 3",
        "countertop 1: butterknife 3, egg 3, spatula 3",
        "countertop 2: bread 3, cellphone 2, knife 1, pan 2",
        "drawer 1*: spoon 1",
        "drawer 2*: fork 2",
        "fridge 1*: apple 2, lettuce 4",
        "garbagecan 1: papertowelroll 2, tomato 2",
        "microwave 1*:",
        "sinkbasin 1: potato 1",
        "stoveburner 1:",
        "stoveburner 2: pot 2",
        "toaster 1:",
    ])
    house = House(spec)
    s.user(household_task(house, "cool some tomato and put it in microwave", HH_PRE[1]))
    f = "There is no tomato. Next, I need to check another place."
    script = [("A tomato needs to be found, cooled in the fridge, and put in the microwave. I will "
               "start with the countertops, then the cabinets.", "go to countertop 1"),
              (f, "go to countertop 2"),
              (f, "go to sinkbasin 1")]
    for i in range(1, 10):
        script.append((f, f"go to cabinet {i}"))
        script.append((None, f"open cabinet {i}"))
    script += [
        (f, "go to drawer 1"),
        (None, "open drawer 1"),
        ("Tomatoes are not kept in drawers. The garbagecan is left.", "go to garbagecan 1"),
        ("Now I find a tomato (2). Next, I need to take it.", "take tomato 2 from garbagecan 1"),
        ("Now I take a tomato (2). Next, I need to go to fridge 1 and cool it.", "go to fridge 1"),
        (None, "cool tomato 2 with fridge 1"),
        ("Now I cool a tomato (2). Next, I need to put it in microwave 1.", "go to microwave 1"),
        (None, "open microwave 1"),
        (None, "put tomato 2 in/on microwave 1"),
    ]
    play(s, house, "act", script)
    done(s, False, "healthy: formulaic thoughts", "task solved",
         "30 steps. 'There is no tomato. Next, I need to check another place.' 12 times word for word, "
         "before each new place (countertops, sinkbasin, cabinets 1-9, drawer 1); every cabinet "
         "opened shows different contents; the tomato is in the garbagecan, cooled, put away.")


def hh_spatula_fixups():
    s = new("kind-hh-spatula-drawer", HH, HH_AGENT, "qwen2.5-7b-instruct", "lab-eval", pace=(1.0, 2.8))
    house = House("""
cabinet 1*: pan 3
cabinet 2*:
countertop 1: egg 4, mug 4
countertop 2: spatula 1, saltshaker 3
drawer 1*: spoon 4
drawer 2*:
fridge 1*: milk 1
sinkbasin 1: cup 4
stoveburner 1: pot 3
""")
    s.user(household_task(house, "put a clean spatula in drawer", HH_PRE[2]))
    play(s, house, "verbs", [
        ("I need a spatula. I am near countertop 1, so I look there first.", "go to countertop 1"),
        ("The spatula may be on countertop 2. I will take it.", "take spatula 1 from countertop 2"),
        ("Nothing happened because I am not at countertop 2. I must go there first.", "go to countertop 2"),
        ("Now I find the spatula 1. Next, I need to take it.", "take spatula 1 from countertop 2"),
        ("Now I take the spatula 1. Next, I need to clean it with sinkbasin 1.", "go to sinkbasin 1"),
        (None, "clean spatula 1 with sinkbasin 1"),
        ("Now I clean the spatula 1. Next, I need to put it in drawer 2, which looked empty in the "
         "task list.", "go to drawer 2"),
        (None, "put spatula 1 in/on drawer 2"),
        ("The drawer 2 is closed, so the put did nothing. I will open it first.", "open drawer 2"),
        (None, "put spatula 1 in/on drawer 2"),
        ("Done. I will check that the spatula is in the drawer.", "examine drawer 2"),
    ])
    done(s, False, "healthy: one-off failures fixed", "task solved",
         "11 steps with two different one-off failures ('Nothing happens.' for a take from the wrong "
         "place, then for a put into a closed drawer), each understood and fixed at once.")


def hh_sweep_keychain():
    s = new("kind-hh-sweep-keychain", HH, HH_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 2.5))
    contents = ["", "pen 2", "", "creditcard 2", "", "cd 1, pencil 1", "", "keychain 1, watch 2"]
    spec = "\n".join(["armchair 1: pillow 2", "coffeetable 1: remotecontrol 1, statue 2"] +
                     [f"drawer {i}*: {x}" for i, x in enumerate(contents, 1)] +
                     ["dresser 1: television 1", "garbagecan 1:", "safe 1*:", "shelf 1: vase 3",
                      "sidetable 1: newspaper 1", "sofa 1: box 1"])
    house = House(spec)
    s.user(household_task(house, "put a keychain in safe", HH_PRE[0]))
    script = [("Keys are usually kept in drawers. There are eight; I will go through them one by one.",
               "go to drawer 1"), (None, "open drawer 1")]
    for i in range(2, 9):
        script.append((None, f"go to drawer {i}"))
        script.append((None, f"open drawer {i}"))
    script += [
        ("Now I find a keychain (1). Next, I need to take it.", "take keychain 1 from drawer 8"),
        ("Now I take a keychain (1). Next, I need to put it in safe 1.", "go to safe 1"),
        (None, "open safe 1"),
        (None, "put keychain 1 in/on safe 1"),
    ]
    play(s, house, "act", script)
    done(s, False, "healthy: exploration sweep", "task solved",
         "16 discovery steps in a row (go to / open drawers 1-8), without thoughts, each observation "
         "new (different drawer, different contents); the keychain is in the last drawer; then 4 "
         "steps to put it in the safe.")


def hh_sweep_peppershaker():
    s = new("kind-hh-sweep-peppershaker", HH, HH_AGENT, "qwen2.5-7b-instruct", "lab-eval", pace=(1.0, 3.0))
    contents = ["plate 4", "", "bowl 4", "", "glassbottle 2", "cup 5", "", "soapbottle 3", "",
                "mug 5, winebottle 3", "peppershaker 1", "pan 4"]
    spec = "\n".join([f"cabinet {i}*: {x}" for i, x in enumerate(contents, 1)] +
                     ["countertop 1: apple 4, bread 4", "drawer 1*: spoon 5", "drawer 2*:",
                      "fridge 1*: egg 5", "sinkbasin 1:", "stoveburner 1:"])
    house = House(spec)
    s.user(household_task(house, "put a peppershaker in drawer", HH_PRE[1]), limits={"max_tool_rounds": 50})
    script = []
    for i in range(1, 12):
        thought = ("The countertop only has food. Shakers are kept in cabinets; I will check all "
                   "twelve, starting with cabinet 1.") if i == 1 else (
            "Cabinet 6 had a cup. Still no peppershaker, I keep going." if i == 7 else None)
        script.append((thought, f"go to cabinet {i}"))
        script.append((None, f"open cabinet {i}"))
    script = [(None, "go to countertop 1")] + script + [
        ("Now I find a peppershaker (1). Next, I need to take it.", "take peppershaker 1 from cabinet 11"),
        ("Now I take a peppershaker (1). Next, I need to put it in a drawer.", "go to drawer 1"),
        (None, "open drawer 1"),
        (None, "put peppershaker 1 in/on drawer 1"),
    ]
    play(s, house, "verbs", script)
    done(s, False, "healthy: exploration sweep", "task solved",
         "The runtime announces max_tool_rounds 50. 23 discovery steps in a row (countertop, then go to "
         "/ open cabinets 1-11), each with a new observation, before the peppershaker turns up in "
         "cabinet 11; 27 rounds in all.")


def hh_sweep_book():
    s = new("kind-hh-sweep-book", HH, HH_AGENT, "gemma-2-9b-it", "lab-eval", pace=(1.0, 3.5))
    shelves = ["vase 4", "", "statue 3", "houseplant 2", "", "keychain 2"]
    drawers = ["", "pen 3", "", "creditcard 4", "book 1, pencil 3"]
    spec = "\n".join(["armchair 1: laptop 2", "bed 1: pillow 3"] +
                     [f"drawer {i}*: {x}" for i, x in enumerate(drawers, 1)] +
                     ["dresser 1: alarmclock 1"] +
                     [f"shelf {i}: {x}" for i, x in enumerate(shelves, 1)] +
                     ["sidetable 1: desklamp 2", "sofa 1:"])
    house = House(spec)
    s.user(household_task(house, "put a book in sofa", HH_PRE[2]), limits={"max_tool_rounds": 50})
    script = [("Books are on shelves or in drawers. I will check the six shelves first.", "go to shelf 1")]
    for i in range(2, 7):
        script.append((None, f"go to shelf {i}"))
    script.append(("No book on the shelves. Now the drawers.", "go to drawer 1"))
    script.append((None, "open drawer 1"))
    for i in range(2, 6):
        script.append((None, f"go to drawer {i}"))
        script.append((None, f"open drawer {i}"))
    script += [
        ("Now I find a book (1). Next, I need to take it.", "take book 1 from drawer 5"),
        (None, "go to sofa 1"),
        (None, "put book 1 in/on sofa 1"),
        (None, "examine sofa 1"),
    ]
    play(s, house, "act", script)
    done(s, False, "healthy: exploration sweep", "task solved",
         "max_tool_rounds 50 announced. 16 discovery steps in a row (shelves 1-6, go to / open drawers "
         "1-5), every observation different; the book is in drawer 5; 20 rounds in all.")


def hh_loop_knives():
    s = new("kind-hh-loop-knife-enum", HH, HH_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 2.6))
    house = House("""
cabinet 1*: plate 5
countertop 1: bread 5, butterknife 2, fork 4, lettuce 5, spoon 3
countertop 2: cup 6
drawer 1*: ladle 2
fridge 1*: apple 5
sinkbasin 1:
""")
    s.user(household_task(house, "put a clean knife in drawer", HH_PRE[0]))
    script = [
        ("I need a knife, then clean it at the sinkbasin, then put it in drawer 1. Knives are on "
         "countertops.", "go to countertop 1"),
        ("I see the countertop. Next, I need to take a knife.", "take knife 1 from countertop 1"),
        ("Nothing happens. I need to take a knife.", "take knife 2 from countertop 1"),
        ("Nothing happens. I need to take a knife.", "take knife 3 from countertop 1", "!"),
    ]
    for k in range(4, 23):
        thought = "Nothing happens. I need to take a knife." if k % 3 else \
            "Nothing happens. Maybe it is a different knife. I will try the next one."
        script.append((thought if k % 4 else None, f"take knife {k} from countertop 1"))
    play(s, house, "act", script)
    done(s, True, "enumerated failing action", "step limit (episode cut at 23 steps)",
         "On countertop 1 there is only a butterknife 2; the agent tries 'take knife N from countertop 1' "
         "for N = 1..22, every one 'Nothing happens.' (the same observation), with the same formulaic "
         "thought. Intervene at the 3rd failing take (knife 3).")


def hh_loop_apples():
    s = new("kind-hh-loop-apple-enum", HH, HH_AGENT, "mistral-7b-instruct-v0.3", "lab-eval", pace=(1.0, 3.0))
    house = House("""
countertop 1: bread 6
diningtable 1: apple 1, apple 3, knife 4, saltshaker 4
fridge 1*: lettuce 6, tomato 4
garbagecan 1:
microwave 1*:
sinkbasin 1: fork 5
""")
    s.user(household_task(house, "cool some apple and put it in garbagecan", HH_PRE[1]))
    script = [
        ("An apple must be cooled in the fridge and then thrown in the garbagecan. The fridge may "
         "have one.", "go to fridge 1"),
        (None, "open fridge 1"),
        ("There is no apple in the fridge. The diningtable 1 has apples. I will take one.",
         "take apple 1 from diningtable 1"),
        ("I need to take an apple from the diningtable 1.", "take apple 2 from diningtable 1"),
        ("I need to take an apple from the diningtable 1.", "take apple 3 from diningtable 1", "!"),
    ]
    for k in range(4, 18):
        script.append(("I need to take an apple from the diningtable 1." if k % 5 else
                       "The apple did not come. I need to take an apple from the diningtable 1.",
                       f"take apple {k} from diningtable 1"))
    script.append(("I cannot find an apple to take. I will go to the diningtable 1.", "go to diningtable 1"))
    script.append((None, "take apple 1 from diningtable 1"))
    play(s, house, "verbs", script)
    done(s, True, "enumerated failing action", "gave up the enumeration after 17 takes",
         "Standing at the fridge, the agent calls take {target: apple N, from: diningtable 1} for N = "
         "1..17 without going to the diningtable; every one 'Nothing happens.'. Thoughts are the same "
         "sentence. Intervene at the 3rd failing take (apple 3). It finally goes to the table.")


def hh_loop_open_sweep():
    s = new("kind-hh-loop-open-sweep", HH, HH_AGENT, "gemma-2-9b-it", "lab-eval", pace=(1.0, 3.0))
    spec = "\n".join([f"cabinet {i}*: {x}" for i, x in enumerate(
        ["", "cup 7", "", "", "bowl 5", "", "dishsponge 4", "", "", "plate 6", "", "ladle 3"], 1)] +
        ["countertop 1: lettuce 7", "countertop 2: kettle 2, spatula 4", "fridge 1*:", "sinkbasin 1:"])
    house = House(spec)
    s.user(household_task(house, "find some dishsponge and put it in sinkbasin", HH_PRE[2]))
    script = [("A dishsponge is small; it may be in a cabinet. I start at countertop 2.", "go to countertop 2")]
    for i in range(1, 13):
        thought = {1: "I will open the cabinets to look inside.",
                   2: "Nothing happens. I will open the next cabinet.",
                   3: "Nothing happens. I will open the next cabinet.",
                   6: "The cabinets do not open. I will try the next cabinet.",
                   10: "Nothing happens. I will open the next cabinet."}.get(i)
        script.append((thought, f"open cabinet {i}") + (("!",) if i == 3 else ()))
    script += [
        ("None of the cabinets opened. Maybe I need to be at a cabinet first.", "go to cabinet 1"),
        (None, "open cabinet 1"),
    ]
    play(s, house, "verbs", script)
    done(s, True, "failing sweep", "step limit after recovering",
         "From countertop 2 the agent calls open {target: cabinet N} for N = 1..12, never going to a "
         "cabinet: twelve times 'Nothing happens.' (the same observation, the same reason). Intervene "
         "at the 3rd failing open (cabinet 3).")


def hh_loop_vase_cycle():
    s = new("kind-hh-loop-vase-cycle", HH, HH_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 2.5))
    house = House("""
cabinet 1*:
coffeetable 1: newspaper 2
shelf 1: keychain 3, vase 2
shelf 2: statue 1
shelf 3: vase 1
sidetable 1: desklamp 3
""")
    s.user(household_task(house, "put a vase in coffeetable", HH_PRE[0]))
    script = [("A vase is usually on a shelf. I will go to shelf 1.", "go to shelf 1"),
              ("I need to take the vase 1.", "take vase 1 from shelf 1"),
              ("The vase is not here. I will try shelf 2.", "go to shelf 2"),
              ("I need to take the vase 1.", "take vase 1 from shelf 2")]
    for cycle in range(2, 6):
        script += [
            ("I will check shelf 1 again." if cycle % 2 else "The vase may be on shelf 1.", "go to shelf 1"),
            ("I need to take the vase 1.", "take vase 1 from shelf 1") + (("!",) if cycle == 3 else ()),
            ("The vase is not here. I will try shelf 2.", "go to shelf 2"),
            ("I need to take the vase 1.", "take vase 1 from shelf 2"),
        ]
    play(s, house, "act", script)
    done(s, True, "move/fail cycle", "step limit",
         "Shelf 1 shows a vase 2, the agent wants vase 1 (on shelf 3, never visited): go to shelf 1 (same "
         "observation) -> take vase 1 from shelf 1 (Nothing happens) -> go to shelf 2 -> take vase 1 "
         "from shelf 2 (Nothing happens), 5 times. Intervene at the 3rd 'take vase 1 from shelf 1'.")


def hh_loop_creditcard_cycle():
    s = new("kind-hh-loop-card-cycle", HH, HH_AGENT, "qwen2.5-7b-instruct", "lab-eval", pace=(1.0, 2.8))
    house = House("""
armchair 1: creditcard 2, pillow 4
diningtable 1: laptop 3
drawer 1*:
dresser 1: box 2
sofa 1: remotecontrol 2
""")
    s.user(household_task(house, "put a creditcard in dresser", HH_PRE[1]))
    script = [("A creditcard could be on the sofa or the armchair.", "go to sofa 1"),
              ("I will take the creditcard 1.", "take creditcard 1 from sofa 1"),
              ("It is not on the sofa. I will try the armchair.", "go to armchair 1"),
              ("I will take the creditcard 1.", "take creditcard 1 from armchair 1")]
    for cycle in range(2, 6):
        script += [
            ("Let me look at the sofa 1 again.", "go to sofa 1"),
            ("I will take the creditcard 1.", "take creditcard 1 from sofa 1") + (("!",) if cycle == 3 else ()),
            ("It is not on the sofa. I will try the armchair.", "go to armchair 1"),
            ("I will take the creditcard 1." if cycle < 4 else
             "The armchair has a creditcard. I will take the creditcard 1.", "take creditcard 1 from armchair 1"),
        ]
    script.append(("I keep failing. The armchair shows creditcard 2, not 1.", "take creditcard 2 from armchair 1"))
    script.append((None, "go to dresser 1"))
    script.append((None, "put creditcard 2 in/on dresser 1"))
    play(s, house, "verbs", script)
    done(s, True, "move/fail cycle", "task solved late",
         "The armchair holds creditcard 2; the agent asks for creditcard 1: go_to sofa 1 -> take "
         "creditcard 1 from sofa 1 (Nothing happens) -> go_to armchair 1 -> take creditcard 1 from "
         "armchair 1 (Nothing happens), 5 times, then reads the number and solves it. Intervene at "
         "the 3rd 'take creditcard 1 from sofa 1'.")


def hh_loop_put_unheld():
    s = new("kind-hh-loop-put-unheld", HH, HH_AGENT, "phi-3-mini-4k-instruct", "lab-eval", pace=(1.0, 2.0))
    house = House("""
cabinet 1*: mug 1
coffeemachine 1:
countertop 1: apple 6
sinkbasin 1:
""")
    s.user(household_task(house, "put a mug in coffeemachine", HH_PRE[2]))
    play(s, house, "act", [
        ("I need a mug. Cabinet 1 may have one.", "go to cabinet 1"),
        (None, "open cabinet 1"),
        ("There is a mug 1. Now I go to the coffeemachine.", "go to coffeemachine 1"),
        ("I put the mug 1 in the coffeemachine.", "put mug 1 in/on coffeemachine 1"),
        ("Nothing happens. I put the mug 1 in the coffeemachine.", "put mug 1 in/on coffeemachine 1"),
        ("I need to put the mug 1 in the coffeemachine 1.", "put mug 1 in/on coffeemachine 1", "!"),
        ("I need to put the mug 1 in the coffeemachine 1.", "put mug 1 in/on coffeemachine 1"),
        (None, "put mug 1 in/on coffeemachine 1"),
        ("Maybe I am not holding the mug.", "inventory"),
        ("I am not carrying anything. I must take the mug from cabinet 1 first.", "go to cabinet 1"),
        (None, "take mug 1 from cabinet 1"),
        (None, "go to coffeemachine 1"),
        (None, "put mug 1 in/on coffeemachine 1"),
    ])
    done(s, True, "same failing action", "task solved late",
         "Sees the mug but never takes it; 'put mug 1 in/on coffeemachine 1' 5 times in a row, each "
         "'Nothing happens.'. Intervene at the 3rd identical failing put; it recovers after checking "
         "its inventory.")


HOUSEHOLD = [hh_clean_mug, hh_two_cellphones, hh_heat_egg, hh_two_soapbars, hh_cool_tomato,
             hh_spatula_fixups, hh_sweep_keychain, hh_sweep_peppershaker, hh_sweep_book,
             hh_loop_knives, hh_loop_apples, hh_loop_open_sweep, hh_loop_vase_cycle,
             hh_loop_creditcard_cycle, hh_loop_put_unheld]


# --------------------------------------------------------------------------------------
# Web shop: search results, item pages with options, a few detail tabs, Buy Now


class Shop:
    """A small shop. `items`: asin -> dict(title, price, options {name: [values]}, and optional
    description/features/reviews); `queries`: query -> list of asins (10 per results page)."""

    def __init__(self, items, queries):
        self.items, self.queries = items, queries
        self.view, self.query, self.page, self.item, self.detail = "search", None, 1, None, None
        self.selected = {}

    def results(self):
        asins = self.queries[self.query]
        shown = asins[(self.page - 1) * 10:self.page * 10]
        head = ["[Back to Search]", f"Page {self.page} (Total results: {len(asins)})"]
        if self.page > 1:
            head.append("[< Prev]")
        if self.page * 10 < len(asins):
            head.append("[Next >]")
        rows = []
        for a in shown:
            rows += [f"[{a}]", self.items[a]["title"], f"${self.items[a]['price']:.2f}"]
        return "\n".join(head + rows)

    def item_page(self):
        it = self.items[self.item]
        lines = ["[Back to Search]", "[< Prev]"]
        for name, values in it.get("options", {}).items():
            lines.append(name + " " + " ".join(f"[{v}]" for v in values))
        lines += [it["title"], f"Price: ${it['price']:.2f}", f"Rating: {it.get('rating', 'N.A.')}",
                  "[Description]", "[Features]", "[Reviews]", "[Buy Now]"]
        if self.selected:
            lines.append("Selected: " + ", ".join(f"{k} {v}" for k, v in self.selected.items()))
        return "\n".join(lines)

    def search(self, query):
        self.view, self.query, self.page = "results", query, 1
        return self.results()

    def click(self, target):
        """(observation, ok)"""
        if target == "Back to Search":
            self.view = "search"
            return "[Search]", True
        if self.view == "results":
            if target == "Next >" and self.page * 10 < len(self.queries[self.query]):
                self.page += 1
                return self.results(), True
            if target == "< Prev" and self.page > 1:
                self.page -= 1
                return self.results(), True
            if target in self.queries[self.query][(self.page - 1) * 10:self.page * 10]:
                self.view, self.item, self.selected = "item", target, {}
                return self.item_page(), True
        elif self.view == "item":
            it = self.items[self.item]
            if target == "< Prev":
                self.view = "results"
                return self.results(), True
            if target in ("Description", "Features", "Reviews"):
                self.view, self.detail = "detail", target
                text = it.get(target.lower(), "N.A.")
                return "\n".join(["[Back to Search]", "[< Prev]", text]), True
            if target == "Buy Now":
                self.view = "done"
                return (f"Thank you for shopping with us! Your code: {out_hash(self.item)[:6]}\n"
                        f"Your score (min 0.0, max 1.0): {it.get('score', 1.0)}"), True
            for name, values in it.get("options", {}).items():
                if target in values:
                    self.selected[name] = target
                    return self.item_page(), True
        elif self.view == "detail" and target == "< Prev":
            self.view = "item"
            return self.item_page(), True
        return "Invalid action!", False


def shop_play(s: Session, shop: Shop, script):
    """(thought or None, "search"|"click", text[, "!"]) steps."""
    for item in script:
        thought, verb, arg = item[:3]
        if verb == "search":
            obs, ok = shop.search(arg), True
            s.step(thought, "search", {"query": arg}, obs, effect="read", mark=len(item) > 3)
        else:
            obs, ok = shop.click(arg)
            effect = "mutation" if arg == "Buy Now" and ok else None
            s.step(thought, "click", {"target": arg}, obs, ok=ok, effect=effect, mark=len(item) > 3)


def catalog(seed, brands, nouns, extras, lo, hi, n, prefix):
    """n invented products: asin -> {title, price}; deterministic from seed."""
    rng = random.Random(seed_of(seed))
    out = {}
    for i in range(n):
        asin = prefix + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(10 - len(prefix)))
        title = f"{rng.choice(brands)} {rng.choice(extras)} {rng.choice(nouns)}"
        if rng.random() < 0.5:
            title += f", {rng.choice(['Pack of 2', 'Pack of 3', '1 Count', 'Set of 4', 'Value Pack'])}"
        out[asin] = {"title": title, "price": round(rng.uniform(lo, hi), 2)}
    return out


WS = "webshop.jsonl"
WS_AGENT = "react-webshop"


def ws_task(text):
    return ("WebShop. Find and buy the product that best matches the instruction. Actions: "
            "search[query] and click[button]; buttons are shown in square brackets.\n"
            f"Instruction: {text}\n[Search]")


def ws_sweep_socks():
    s = new("kind-ws-sweep-socks", WS, WS_AGENT, "gpt-3.5-turbo-0125", "lab-eval", pace=(1.5, 5.0),
            tool_ms=(300, 1500))
    brands = ["Trailfox", "Northbend", "Aldenwool", "Peakline", "Fellwalk", "Cobbleton", "Ridgeway Co"]
    nouns = ["Hiking Socks", "Crew Socks", "Trail Socks", "Boot Socks", "Quarter Socks"]
    extras = ["Merino Wool", "Cushioned Merino", "Lightweight Wool Blend", "Midweight Merino",
              "Cotton Blend", "Bamboo Viscose", "Thermal"]
    items = catalog("socks", brands, nouns, extras, 9, 38, 70, "B0")
    asins = list(items)
    target = asins[61]
    items[target] = {"title": "Fellwalk Men's Merino Wool Hiking Crew Socks, Cushioned, Pack of 3",
                     "price": 21.99, "options": {"size": ["medium", "large", "x-large"],
                                                 "color": ["charcoal", "navy", "olive"]},
                     "reviews": "4.6 out of 5. 'Warm without being sweaty; the charcoal matches the "
                                "photos.' 'Runs true to size (large fits US 10-12).'",
                     "rating": "4.6", "score": 1.0}
    decoy = asins[60]
    items[decoy].update({"title": "Trailfox Merino Look Crew Socks, Pack of 3", "price": 14.99,
                         "options": {"size": ["small", "medium"], "color": ["grey", "blue"]},
                         "features": "80% cotton, 20% nylon. Machine wash."})
    queries = {"merino wool hiking socks men": asins[0:40],
               "charcoal merino socks large": asins[40:58],
               "men's merino crew socks charcoal pack": asins[58:66]}
    shop = Shop(items, queries)
    s.user(ws_task("i need merino wool hiking socks for men in charcoal, size large, and price lower "
                   "than 25.00 dollars"), limits={"max_tool_rounds": 50})
    shop_play(s, shop, [
        ("I will search for merino hiking socks and look through the results before picking.",
         "search", "merino wool hiking socks men"),
        ("Page 1 has no charcoal option in the titles and several are cotton. Next page.", "click", "Next >"),
        ("Still nothing that says charcoal under $25. Next page.", "click", "Next >"),
        (None, "click", "Next >"),
        ("Four pages without a clear match. A narrower query may be better.", "search", "charcoal merino socks large"),
        (None, "click", "Next >"),
        ("These are mostly thermal or bamboo. I will try crew socks in a pack.", "search",
         "men's merino crew socks charcoal pack"),
        ("The third result looks cheap; let me check whether it is merino.", "click", decoy),
        ("Let me look at its features.", "click", "Features"),
        ("It is cotton. Back to the results.", "click", "< Prev"),
        (None, "click", "< Prev"),
        ("The Fellwalk pack of 3 is merino, $21.99. Let me open it.", "click", target),
        ("Check the reviews for sizing.", "click", "Reviews"),
        ("Large fits US 10-12. Back to the item to choose options.", "click", "< Prev"),
        (None, "click", "large"),
        (None, "click", "charcoal"),
        ("Size large and charcoal selected, price below 25. Buy.", "click", "Buy Now"),
    ])
    done(s, False, "healthy: exploration sweep", "bought, score 1.0",
         "max_tool_rounds 50 announced. 11 discovery rounds before an item is chosen: 3 searches, "
         "'Next >' 4 times (same arguments, a new results page each time), a decoy item and its "
         "features; then the matching item, reviews, options, buy. 17 rounds.")


def ws_sweep_lamps():
    s = new("kind-ws-sweep-lamps", WS, WS_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(300, 1500))
    brands = ["Lumora", "Brightwell", "Oakhaven", "Tessel", "Kestrel Home", "Halden"]
    nouns = ["Desk Lamp", "Table Lamp", "Reading Lamp", "Task Light", "Clip Lamp"]
    extras = ["LED", "Dimmable LED", "Swing Arm", "USB Charging", "Wooden Base", "Architect", "Touch Control"]
    items = catalog("lamps", brands, nouns, extras, 14, 70, 50, "B08")
    asins = list(items)
    picks = [asins[2], asins[13], asins[24], asins[31], asins[45]]
    looks = [
        ("Dimmable, but the shade is plastic and there is no USB port.", 4.1),
        ("USB port on the base, 3 colour temperatures; $58, above budget.", 4.4),
        ("Clip lamp, not for a desk.", 3.9),
        ("Wooden base, dimmable, USB-A port, $36.50.", 4.7),
        ("Touch control, no dimming steps, no USB.", 4.0),
    ]
    for a, (text, rating) in zip(picks, looks):
        items[a]["description"] = text
        items[a]["rating"] = str(rating)
    items[picks[3]].update({"title": "Oakhaven Dimmable LED Desk Lamp with USB Charging Port, Wooden Base",
                            "price": 36.5, "options": {"color": ["walnut", "oak", "black"]}, "score": 0.9})
    queries = {"dimmable led desk lamp": asins[0:12], "desk lamp usb charging port": asins[12:22],
               "led lamp for desk adjustable": asins[22:30], "wooden desk lamp dimmable usb": asins[30:40],
               "touch desk lamp": asins[40:50]}
    shop = Shop(items, queries)
    s.user(ws_task("i want a dimmable led desk lamp with a usb charging port and a wooden base, "
                   "price lower than 45.00 dollars"), limits={"max_tool_rounds": 50})
    script = []
    thoughts = ["I will compare several lamps before buying.",
                "The first lamp had no USB port. Let me search with the port in the query.",
                "Too expensive. Another query.",
                "That was a clip lamp. I will add wooden to the query.",
                "This one has everything, but let me see one touch lamp for comparison."]
    for (q, _), a, t in zip(queries.items(), picks, thoughts):
        script += [(t, "search", q), (None, "click", a), (None, "click", "Description"),
                   (None, "click", "Back to Search")]
    script = script[:-1]
    script += [("The touch lamp has no USB port. The Oakhaven lamp from the previous query is the "
                "match.", "click", "Back to Search"),
               (None, "search", "wooden desk lamp dimmable usb"),
               (None, "click", picks[3]), (None, "click", "walnut"), (None, "click", "Buy Now")]
    shop_play(s, shop, script)
    done(s, False, "healthy: exploration sweep", "bought, score 0.9",
         "max_tool_rounds 50 announced. 19 rounds of comparison shopping: 5 different queries, an item "
         "of each opened and its description read, 'Back to Search' between them (same button, same "
         "search page, never 3 times in 6 calls); then back to the best item, option, buy: 24 rounds.")


def ws_browse_prev():
    s = new("kind-ws-browse-prev", WS, WS_AGENT, "mixtral-8x7b-instruct", "lab-eval", pace=(1.5, 6.0),
            tool_ms=(300, 1200))
    brands = ["Saltmarsh", "Greyfen", "Purewick", "Linden & Fox", "Haybarn"]
    nouns = ["Deodorant Stick", "Natural Deodorant", "Deodorant Balm", "Deodorant Cream"]
    extras = ["Unscented Bamboo", "Aluminum Free", "Sensitive Skin", "Charcoal", "Lavender", "Baking Soda Free"]
    items = catalog("deodorant", brands, nouns, extras, 6, 32, 10, "B07")
    asins = list(items)
    notes = {asins[0]: ("Scented (lavender).", {"scent": ["lavender"]}),
             asins[1]: ("Unscented, but $34 for one stick.", {"size": ["2.6 oz"]}),
             asins[2]: ("Contains baking soda, not for sensitive skin.", {"scent": ["unscented", "cedar"]}),
             asins[4]: ("Unscented bamboo charcoal formula for sensitive skin, 2 sticks.",
                        {"size": ["2 x 2.5 oz", "3 x 2.5 oz"]})}
    for a, (d, opts) in notes.items():
        items[a].update({"description": d, "options": opts})
    items[asins[1]]["price"] = 34.0
    items[asins[4]].update({"title": "Greyfen Unscented Bamboo Deodorant for Sensitive Skin, Pack of 2",
                            "price": 17.49, "score": 1.0})
    shop = Shop(items, {"unscented bamboo deodorant sensitive skin": asins})
    s.user(ws_task("i need a pack of unscented bamboo deodorant for sensitive skin, and price lower "
                   "than 30.00 dollars"))
    shop_play(s, shop, [
        (None, "search", "unscented bamboo deodorant sensitive skin"),
        ("I will open the first few results and compare.", "click", asins[0]),
        ("Lavender, not unscented. Back to the list.", "click", "< Prev"),
        (None, "click", asins[1]),
        ("Over budget. Back.", "click", "< Prev"),
        (None, "click", asins[2]),
        (None, "click", "Description"),
        ("It has baking soda. Back to the results.", "click", "< Prev"),
        (None, "click", "< Prev"),
        ("The fifth result says bamboo and sensitive skin.", "click", asins[4]),
        (None, "click", "2 x 2.5 oz"),
        ("Pack of 2, unscented, $17.49. Buying.", "click", "Buy Now"),
    ])
    done(s, False, "healthy", "bought, score 1.0",
         "Opens results one after another, going back to the same results list with '< Prev' between "
         "them (4 times, same page each time, 3 of them within 6 calls): the list is re-seen, but each "
         "item opened is new. Buys the fifth result. Browsing, not a loop.")


def ws_direct():
    s = new("kind-ws-direct-kettle", WS, WS_AGENT, "gpt-4o-mini", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(300, 1200))
    items = catalog("kettle", ["Brewhill", "Copperly", "Stonebridge"], ["Electric Kettle", "Gooseneck Kettle"],
                    ["1.7L Stainless Steel", "Glass", "Variable Temperature"], 20, 80, 8, "B09")
    a = list(items)[1]
    items[a].update({"title": "Copperly Gooseneck Electric Kettle, Variable Temperature, 0.9L, Matte Black",
                     "price": 42.0, "options": {"color": ["matte black", "white", "copper"]}, "score": 1.0})
    shop = Shop(items, {"gooseneck electric kettle variable temperature": list(items)})
    s.user(ws_task("i'm looking for a gooseneck electric kettle with variable temperature in matte "
                   "black, under 50 dollars"))
    shop_play(s, shop, [
        (None, "search", "gooseneck electric kettle variable temperature"),
        ("The second result matches: gooseneck, variable temperature, $42.", "click", a),
        (None, "click", "matte black"),
        (None, "click", "Buy Now"),
    ])
    done(s, False, "healthy", "bought, score 1.0", "4 steps: search, item, colour, buy.")


def ws_loop_prev_cycle():
    s = new("kind-ws-loop-item-cycle", WS, WS_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 3.5),
            tool_ms=(300, 1200))
    items = catalog("yoga", ["Zenfold", "Matterly", "Groundwork"], ["Yoga Mat", "Exercise Mat"],
                    ["Non Slip", "Extra Thick", "TPE", "Cork"], 15, 60, 10, "B0B")
    asins = list(items)
    a = asins[3]
    items[a].update({"title": "Matterly Extra Thick Non Slip Yoga Mat, 10mm, with Carry Strap",
                     "price": 27.99, "options": {"color": ["purple", "teal", "grey"]}})
    shop = Shop(items, {"extra thick yoga mat 10mm blue": asins})
    s.user(ws_task("i need an extra thick non slip yoga mat, 10mm, in blue, price lower than 40.00 dollars"))
    script = [(None, "search", "extra thick yoga mat 10mm blue"),
              ("The Matterly mat is 10mm and non slip. I need to check if blue is available.", "click", a),
              ("There is no blue color. Let me go back and check the results.", "click", "< Prev"),
              ("The Matterly mat is the best match. I need to check if blue is available.", "click", a),
              ("There is no blue color. Let me go back.", "click", "< Prev"),
              ("The Matterly mat is 10mm and non slip. Let me open it again to check for blue.", "click", a, "!"),
              ("No blue. Going back to the results.", "click", "< Prev"),
              ("I need to check if blue is available for the Matterly mat.", "click", a),
              (None, "click", "< Prev"),
              ("The Matterly mat is the best match. I need to check if blue is available.", "click", a),
              ("Blue is not available. I will buy it in teal, the closest colour.", "click", "teal"),
              (None, "click", "Buy Now")]
    items[a]["score"] = 0.67
    shop_play(s, shop, script)
    done(s, True, "move/fail cycle", "bought the wrong colour, score 0.67",
         "Opens the same item 5 times and goes back to the same results each time (a 2-cycle: click "
         "item -> '< Prev'), each time seeing again that there is no blue option. Intervene at the 3rd "
         "opening of the item.")


WEBSHOP = [ws_sweep_socks, ws_sweep_lamps, ws_browse_prev, ws_direct, ws_loop_prev_cycle]


# --------------------------------------------------------------------------------------
# Question answering: an invented encyclopedia with search / lookup / finish


class Wiki:
    def __init__(self, pages, similar, answer):
        self.pages, self.similar, self.answer = pages, similar, answer
        self.page, self.seen = None, {}

    def search(self, entity):
        if entity in self.pages:
            self.page, self.seen = entity, {}
            return self.pages[entity], True
        return f"Could not find [{entity}]. Similar: {self.similar[entity]}.", False

    def lookup(self, keyword):
        text = self.pages.get(self.page, "")
        hits = [x.strip() + "." for x in text.split(". ") if keyword.lower() in x.lower()]
        hits = [h[:-1] if h.endswith("..") else h for h in hits]
        i = self.seen.get(keyword, 0)
        if i >= len(hits):
            return "No more results.", False
        self.seen[keyword] = i + 1
        return f"(Result {i + 1} / {len(hits)}) {hits[i]}", True


QA = "qa.jsonl"
QA_AGENT = "react-qa"
QA_ERROR = "Could not find entity."


def qa_play(s: Session, wiki: Wiki, script):
    """(thought or None, "search"|"lookup"|"finish", text[, "!"]) steps."""
    for item in script:
        thought, verb, arg = item[:3]
        mark = len(item) > 3
        if verb == "search":
            obs, ok = wiki.search(arg)
            s.step(thought, "search", {"entity": arg}, obs, ok=ok, error=None if ok else QA_ERROR,
                   effect="read", mark=mark)
        elif verb == "lookup":
            obs, ok = wiki.lookup(arg)
            s.step(thought, "lookup", {"keyword": arg}, obs, ok=ok, effect="read", mark=mark)
        else:
            reward = 1 if arg == wiki.answer else 0
            s.step(thought, "finish", {"answer": arg}, f"Episode finished, reward = {reward}", mark=mark)


def qa_task(question):
    return ("Answer the question by interleaving Thought and Action steps. Actions: search[entity] "
            "returns the first paragraph of its page or similar titles; lookup[keyword] returns the "
            "next sentence with the keyword on the current page; finish[answer] ends the task.\n"
            f"Question: {question}")


ALDERMOOR = {
    "Skellan Island (Aldermoor)":
        "Skellan Island is an island in the Marrow Sound off the north-east coast of Aldermoor. It has "
        "an area of 41 square kilometres and a population of about 2,300. The main settlement is "
        "Skellan Harbour. Since 1958 the island has been served by car ferries of the Marrow Sound "
        "Line, which sail from Keelby. A small airstrip opened in 1977.",
    "Marrow Sound Line":
        "The Marrow Sound Line is a ferry operator based in Keelby, Aldermoor. It was founded in 1921 as "
        "the Keelby and Skellan Steam Packet Company and took its present name in 1949. It runs four "
        "vessels on two routes.",
    "The Harrow Line (1987 novel)":
        "The Harrow Line is a 1987 novel by Edith Marle. It follows a railway signalwoman through the "
        "hard winter of 1947. It won the Carrow Prize in 1988 and was adapted for radio in 1994.",
    "Edith Marle":
        "Edith Marle (1931 - 2009) was an Aldermoor novelist and essayist. She was born in Penlow, a "
        "fishing port on the west coast, and trained at the Keelby School of Art before turning to "
        "fiction. Her best-known novel is The Harrow Line.",
    "Hedda Rask-Olsen":
        "Hedda Rask-Olsen (1904 - 1988) was an astronomer and cellist. Before turning to astronomy she "
        "played the cello in the Dunmere Philharmonic for nine years. In 1962 she and Arne Tolle "
        "discovered the comet Rask-Tolle from the Penlow observatory.",
    "Penlow Lighthouse":
        "Penlow Lighthouse stands on the headland north of Penlow harbour. It was built in 1871 to a "
        "design by the engineer Walter Fenn and automated in 1983. The tower is 24 metres tall.",
    "Keelby Swing Bridge":
        "The Keelby Swing Bridge carries the coast road over the mouth of the River Keel. It opened in "
        "1894, replacing a chain ferry, and was restored in 2002.",
    "Carrow Prize":
        "The Carrow Prize is an annual literary award for a novel by a writer from Aldermoor. It was "
        "established in 1961 by the publisher Iris Carrow. The prize is presented in Dunmere each "
        "November.",
    "Dunmere":
        "Dunmere is a market town in central Aldermoor, on the River Oss. It has a population of about "
        "18,000. The town hosts the Dunmere Philharmonic and the annual Carrow Prize ceremony.",
}


def qa_err_ferry():
    s = new("kind-qa-err-ferry", QA, QA_AGENT, "gpt-3.5-turbo-0125", "lab-eval", pace=(1.5, 5.0),
            tool_ms=(400, 1800))
    wiki = Wiki(ALDERMOOR, {
        "Skellan ferry": ["Skellig Ferries", "Skelland", "Ferry Skellan (ship)", "Skell (river)", "Kellan ferry disaster"],
        "Skellan Island ferry route": ["Ferry routes in Aldermoor", "Island Line (Aldermoor)", "Route 58 (Aldermoor)",
                                       "Skellig Ferries", "Ferry route"],
        "Skellan Isle": ["Skellan Island (Aldermoor)", "Isle of Skell", "Skellan Isles Cup", "Skelton Isle"],
    }, "1921")
    s.user(qa_task("In what year was the company founded that runs the car ferries to Skellan Island?"))
    qa_play(s, wiki, [
        ("I need to find which company runs the ferries to Skellan Island, then when it was founded.",
         "search", "Skellan ferry"),
        ("None of these is about Skellan Island. I will search the route instead.", "search",
         "Skellan Island ferry route"),
        ("Still not the island. Maybe the page is called Skellan Isle.", "search", "Skellan Isle"),
        ("The first suggestion is the island page.", "search", "Skellan Island (Aldermoor)"),
        ("The ferries are run by the Marrow Sound Line. I need its founding year.", "search", "Marrow Sound Line"),
        ("It was founded in 1921 (under another name).", "finish", "1921"),
    ])
    done(s, False, "healthy: varied search, same error", "answered, reward 1",
         "Three searches in a row fail with the same error text ('Could not find entity.') for three "
         "different entities; each failure lists different similar titles (different output hash) and "
         "the third one leads to the right page. Deliberate search, not a loop.")


def qa_err_harrow():
    s = new("kind-qa-err-harrow", QA, QA_AGENT, "llama-3-70b-instruct", "lab-eval", pace=(2.0, 7.0),
            tool_ms=(400, 1800))
    wiki = Wiki(ALDERMOOR, {
        "The Harrow Line": ["Harrow line (railway)", "Harrow (tool)", "Harlow Line", "The Narrow Line (album)",
                            "Harrowgate line"],
        "The Harrow Line novel": ["Novel (disambiguation)", "Harrow (novel)", "The Hollow Line", "Line novel",
                                  "Harrowing (novel)"],
        "Harrow Line (book)": ["The Harrow Line (1987 novel)", "Book of Harrow", "Harrow line (railway)",
                               "Line (book)"],
        "Edith Marle (writer)": ["Edith Marle", "Edith Marles", "Marle (river)", "Edith Merle"],
    }, "SUPPORTS")
    s.user("Verify the claim by searching. Answer SUPPORTS, REFUTES or NOT ENOUGH INFO with "
           "finish[answer].\nClaim: The author of the novel The Harrow Line was born in a coastal town.")
    qa_play(s, wiki, [
        ("I need the author of The Harrow Line and where the author was born.", "search", "The Harrow Line"),
        ("These are railways and tools. I will add the word novel.", "search", "The Harrow Line novel"),
        ("Not found either. Try book in brackets.", "search", "Harrow Line (book)"),
        ("The 1987 novel is listed.", "search", "The Harrow Line (1987 novel)"),
        ("The author is Edith Marle. I will search her as a writer.", "search", "Edith Marle (writer)"),
        (None, "search", "Edith Marle"),
        ("She was born in Penlow, a fishing port on the coast, so the claim is supported.", "finish", "SUPPORTS"),
    ])
    done(s, False, "healthy: varied search, same error", "answered, reward 1",
         "Four searches fail with the same error text (three in a row), each for a different title and "
         "each with different suggestions; the suggestions lead to the novel and to its author.")


def qa_err_rask():
    s = new("kind-qa-err-rask", QA, QA_AGENT, "qwen2.5-7b-instruct", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(400, 1800))
    wiki = Wiki(ALDERMOOR, {
        "Rask-Tolle": ["Rask (surname)", "Tolle (film)", "Comet Tollefsen", "Raskin"],
        "Comet Rask-Tolle": ["List of periodic comets", "Comet Tolle", "Comet Rasmussen", "Great Comet of 1962"],
        "Rask (astronomer)": ["Hedda Rask-Olsen", "Rask (surname)", "Astronomer Royal", "Erik Rask"],
    }, "cello")
    s.user(qa_task("Which instrument did one of the discoverers of the comet Rask-Tolle play professionally?"))
    qa_play(s, wiki, [
        ("I should search the comet first.", "search", "Rask-Tolle"),
        ("Let me search with the word Comet.", "search", "Comet Rask-Tolle"),
        ("The comet has no page. I will search the astronomer Rask.", "search", "Rask (astronomer)"),
        ("Hedda Rask-Olsen looks like the astronomer.", "search", "Hedda Rask-Olsen"),
        ("She played the cello in the Dunmere Philharmonic.", "finish", "cello"),
    ])
    done(s, False, "healthy: varied search, same error", "answered, reward 1",
         "Three different searches in a row fail with the same error text; the third failure's "
         "suggestions name the astronomer, and the answer follows.")


def qa_plain_lighthouse():
    s = new("kind-qa-plain-lighthouse", QA, QA_AGENT, "gpt-4o-mini", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(400, 1500))
    wiki = Wiki(ALDERMOOR, {}, "Penlow Lighthouse")
    s.user(qa_task("Which is older, Penlow Lighthouse or the Keelby Swing Bridge?"))
    qa_play(s, wiki, [
        ("I need the construction years of both.", "search", "Penlow Lighthouse"),
        ("Built in 1871. Now the bridge.", "search", "Keelby Swing Bridge"),
        ("The bridge opened in 1894, so the lighthouse is older.", "finish", "Penlow Lighthouse"),
    ])
    done(s, False, "healthy", "answered, reward 1", "3 steps.")


def qa_plain_river():
    s = new("kind-qa-plain-river", QA, QA_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(400, 1500))
    wiki = Wiki(ALDERMOOR, {}, "River Oss")
    s.user(qa_task("On which river is the town where the Carrow Prize is presented?"))
    qa_play(s, wiki, [
        ("First find where the Carrow Prize is presented.", "search", "Carrow Prize"),
        ("It is presented in Dunmere. Let me see if the page says more about Dunmere.", "lookup", "Dunmere"),
        ("Does the page mention a river?", "lookup", "river"),
        ("No. I will search Dunmere.", "search", "Dunmere"),
        ("Dunmere is on the River Oss.", "finish", "River Oss"),
    ])
    done(s, False, "healthy", "answered, reward 1", "5 steps, one lookup without result.")


def qa_loop_same_search():
    s = new("kind-qa-loop-same-search", QA, QA_AGENT, "llama-3.1-8b-instruct", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(400, 1500))
    wiki = Wiki(ALDERMOOR, {}, "56")
    s.user(qa_task("How many years after the founding of the Marrow Sound Line did the airstrip on "
                   "Skellan Island open?"))
    t = ("I need to search Skellan Island (Aldermoor) to find the year the airstrip opened, then "
         "subtract the year the Marrow Sound Line was founded, which is 1921.")
    qa_play(s, wiki, [
        ("First, the founding year of the Marrow Sound Line.", "search", "Marrow Sound Line"),
        (t, "search", "Skellan Island (Aldermoor)"),
        (t, "search", "Skellan Island (Aldermoor)"),
        (t, "search", "Skellan Island (Aldermoor)", "!"),
        (t, "search", "Skellan Island (Aldermoor)"),
        (t, "search", "Skellan Island (Aldermoor)"),
        ("The airstrip opened in 1977. 1977 - 1921 = 56.", "finish", "56"),
    ])
    done(s, True, "reasoning and action repeated", "answered, reward 1",
         "After getting the island page (airstrip 1977) the agent writes the same long thought and "
         "makes the same search 4 more times, each with the same page as answer. Intervene at the 3rd "
         "identical search.")


def qa_loop_lookup():
    s = new("kind-qa-loop-lookup", QA, QA_AGENT, "mistral-7b-instruct-v0.3", "lab-eval", pace=(1.0, 4.0),
            tool_ms=(300, 1200))
    wiki = Wiki(ALDERMOOR, {}, "Keelby School of Art")
    s.user(qa_task("Where did the author of The Harrow Line study?"))
    qa_play(s, wiki, [
        ("I need the author of The Harrow Line.", "search", "The Harrow Line (1987 novel)"),
        ("The author is Edith Marle.", "search", "Edith Marle"),
        ("I need to find which university she attended.", "lookup", "university"),
        ("I need to find which university she attended.", "lookup", "university"),
        ("I need to find the university.", "lookup", "university", "!"),
        ("I need to find which university she attended.", "lookup", "university"),
        ("Maybe the page says trained instead.", "lookup", "trained"),
        ("She trained at the Keelby School of Art.", "finish", "Keelby School of Art"),
    ])
    done(s, True, "same failing action", "answered, reward 1",
         "lookup[university] 4 times in a row on the same page, each 'No more results.'. Intervene at "
         "the 3rd identical failing lookup.")


QUESTIONS = [qa_err_ferry, qa_err_harrow, qa_err_rask, qa_plain_lighthouse, qa_plain_river,
             qa_loop_same_search, qa_loop_lookup]


# --------------------------------------------------------------------------------------
# Customer service: a small retail back office, many user turns per session


class Store:
    """Users, orders and products of an invented retailer; tool calls answer as JSON or `Error: ...`."""

    REASONS = ("no longer needed", "ordered by mistake")

    def __init__(self, users, orders, products):
        self.users, self.orders, self.products = users, orders, products

    def _item(self, item_id):
        for p in self.products.values():
            if item_id in p["variants"]:
                return p, p["variants"][item_id]
        return None, None

    def call(self, tool, args):
        """(observation, ok, changed)"""
        if tool == "find_user_id_by_email":
            for uid, u in self.users.items():
                if u["email"] == args["email"]:
                    return uid, True, False
            return "Error: user not found", False, False
        if tool == "find_user_id_by_name_zip":
            for uid, u in self.users.items():
                if (u["name"]["first_name"], u["name"]["last_name"], u["address"]["zip"]) == \
                        (args["first_name"], args["last_name"], args["zip"]):
                    return uid, True, False
            return "Error: user not found", False, False
        if tool == "get_user_details":
            u = self.users.get(args["user_id"])
            return (json.dumps(u), True, False) if u else ("Error: user not found", False, False)
        if tool == "get_order_details":
            o = self.orders.get(args["order_id"])
            return (json.dumps(o), True, False) if o else ("Error: order not found", False, False)
        if tool == "get_product_details":
            p = self.products.get(args["product_id"])
            return (json.dumps(p), True, False) if p else ("Error: product not found", False, False)
        if tool == "transfer_to_human_agents":
            return "Transfer successful", True, False
        o = self.orders.get(args.get("order_id"))
        if o is None:
            return "Error: order not found", False, False
        if tool == "cancel_pending_order":
            if o["status"] != "pending":
                return "Error: non-pending order cannot be cancelled", False, False
            if args["reason"] not in self.REASONS:
                return "Error: invalid reason", False, False
            o["status"] = "cancelled"
            o["cancel_reason"] = args["reason"]
            return json.dumps(o), True, True
        if tool == "modify_pending_order_address":
            if o["status"] != "pending":
                return "Error: non-pending order cannot be modified", False, False
            o["address"] = {k: args[k] for k in ("address1", "address2", "city", "state", "country", "zip")}
            return json.dumps(o), True, True
        if tool in ("exchange_delivered_order_items", "return_delivered_order_items"):
            if o["status"] != "delivered":
                verb = "exchanged" if tool.startswith("exchange") else "returned"
                return f"Error: non-delivered order cannot be {verb}", False, False
            have = [i["item_id"] for i in o["items"]]
            for i in args["item_ids"]:
                if i not in have:
                    return f"Error: {i} not found", False, False
            if args["payment_method_id"] not in self.users[o["user_id"]]["payment_methods"]:
                return "Error: payment method not found", False, False
            if tool.startswith("exchange"):
                for i in args["new_item_ids"]:
                    _, v = self._item(i)
                    if v is None or not v["available"]:
                        return f"Error: new item {i} not found or available", False, False
                o["status"] = "exchange requested"
                o["exchange_items"] = list(args["item_ids"])
                o["exchange_new_items"] = list(args["new_item_ids"])
            else:
                o["status"] = "return requested"
                o["return_items"] = list(args["item_ids"])
            o["refund_or_charge_method"] = args["payment_method_id"]
            return json.dumps(o), True, True
        raise ValueError(tool)


CS = "customer_service.jsonl"
CS_AGENT = "retail-support-agent"
CS_SYSTEM = ("<relevant-memories>Policy: authenticate the customer by email, or by name and zip, "
             "before anything else. Only pending orders can be cancelled or modified; only "
             "delivered orders can be returned or exchanged. Confirm every change with the customer "
             "before making it.</relevant-memories>")


def cs_user(s, text, first=False):
    s.user(f"{CS_SYSTEM}<current-user-message>{text}</current-user-message>" if first else
           f"<current-user-message>{text}</current-user-message>")


def cs_call(s, store, tool, args, thought=None, mark=False):
    obs, ok, changed = store.call(tool, args)
    reads = tool.startswith(("find_", "get_"))
    effect = "read" if reads else ("mutation" if changed else None)
    s.step(thought, tool, args, obs, ok=ok, error=None if ok else obs, effect=effect, mark=mark)
    return obs


def item(item_id, name, product_id, price, **options):
    return {"item_id": item_id, "name": name, "product_id": product_id, "price": price, "options": options}


def retail():
    """A fresh copy of the invented retailer's data."""
    products = {
        "6938111410": {"product_id": "6938111410", "name": "Running Shoes", "variants": {
            "4153505238": {"options": {"size": "9", "color": "black"}, "available": True, "price": 92.5},
            "1093384521": {"options": {"size": "10", "color": "black"}, "available": True, "price": 92.5},
            "9791469541": {"options": {"size": "10", "color": "red"}, "available": False, "price": 94.0},
            "2183934211": {"options": {"size": "9", "color": "white"}, "available": True, "price": 89.0}}},
        "6817146515": {"product_id": "6817146515", "name": "Desk Lamp", "variants": {
            "7624783998": {"options": {"color": "silver", "brightness": "high"}, "available": True, "price": 54.0},
            "5320792178": {"options": {"color": "black", "brightness": "medium"}, "available": True, "price": 49.0}}},
        "2892623495": {"product_id": "2892623495", "name": "Notebook", "variants": {
            "6574183535": {"options": {"size": "A5", "cover": "hard"}, "available": True, "price": 12.75}}},
        "8310926033": {"product_id": "8310926033", "name": "Water Bottle", "variants": {
            "3453331371": {"options": {"capacity": "750ml", "material": "stainless steel"}, "available": True,
                           "price": 24.0},
            "7533802601": {"options": {"capacity": "1000ml", "material": "stainless steel"}, "available": False,
                           "price": 27.0}}},
        "7363354090": {"product_id": "7363354090", "name": "Hiking Boots", "variants": {
            "8106223139": {"options": {"size": "11", "material": "leather", "waterproof": "yes"},
                           "available": True, "price": 180.0},
            "6159919747": {"options": {"size": "10", "material": "leather", "waterproof": "yes"},
                           "available": False, "price": 180.0},
            "2658930189": {"options": {"size": "10", "material": "synthetic", "waterproof": "yes"},
                           "available": True, "price": 151.0},
            "4694984344": {"options": {"size": "10", "material": "synthetic", "waterproof": "no"},
                           "available": True, "price": 139.0}}},
        "9924732112": {"product_id": "9924732112", "name": "Wireless Earbuds", "variants": {
            "3694871183": {"options": {"color": "white", "battery": "8h"}, "available": True, "price": 119.0},
            "8555936349": {"options": {"color": "blue", "battery": "8h"}, "available": True, "price": 119.0}}},
        "7996920482": {"product_id": "7996920482", "name": "Coffee Maker", "variants": {
            "3020722515": {"options": {"capacity": "1 cup", "type": "espresso"}, "available": True, "price": 238.0},
            "1323134954": {"options": {"capacity": "8 cups", "type": "drip"}, "available": True, "price": 79.0}}},
        "2524789262": {"product_id": "2524789262", "name": "Backpack", "variants": {
            "5917587651": {"options": {"color": "grey", "size": "medium"}, "available": True, "price": 64.0},
            "8030558068": {"options": {"color": "black", "size": "large"}, "available": True, "price": 71.0}}},
    }
    users = {
        "mei_tanaka_4821": {"user_id": "mei_tanaka_4821", "name": {"first_name": "Mei", "last_name": "Tanaka"},
                            "email": "mei.tanaka@example.com",
                            "address": {"address1": "418 Alder Street", "address2": "Apt 3", "city": "Seattle",
                                        "state": "WA", "country": "USA", "zip": "98105"},
                            "payment_methods": {"credit_card_5521009": {"brand": "visa", "last_four": "4417"},
                                                "gift_card_8830147": {"balance": 35.0}},
                            "orders": ["#W4817420", "#W2039158", "#W7712004"]},
        "omar_haddad_7310": {"user_id": "omar_haddad_7310", "name": {"first_name": "Omar", "last_name": "Haddad"},
                             "email": "ohaddad@example.net",
                             "address": {"address1": "77 Linden Avenue", "address2": "", "city": "Austin",
                                         "state": "TX", "country": "USA", "zip": "78704"},
                             "payment_methods": {"paypal_3392016": {}, "credit_card_1180464": {"brand": "mastercard",
                                                                                              "last_four": "0932"}},
                             "orders": ["#W8330152", "#W1206688", "#W5561940", "#W9045127"]},
        "lucia_ferreira_2254": {"user_id": "lucia_ferreira_2254",
                                "name": {"first_name": "Lucia", "last_name": "Ferreira"},
                                "email": "lucia.f@example.org",
                                "address": {"address1": "9 Garden Row", "address2": "", "city": "Chicago",
                                            "state": "IL", "country": "USA", "zip": "60616"},
                                "payment_methods": {"credit_card_6624093": {"brand": "amex", "last_four": "1005"}},
                                "orders": ["#W3318260", "#W6604471"]},
        "daniel_okafor_9105": {"user_id": "daniel_okafor_9105", "name": {"first_name": "Daniel", "last_name": "Okafor"},
                               "email": "d.okafor@example.com",
                               "address": {"address1": "1502 Pine Crest Road", "address2": "", "city": "Denver",
                                           "state": "CO", "country": "USA", "zip": "80203"},
                               "payment_methods": {"gift_card_4417720": {"balance": 120.0},
                                                   "credit_card_2846155": {"brand": "visa", "last_four": "8820"}},
                               "orders": ["#W5820417", "#W2771093", "#W6143380", "#W0459912", "#W7388205"]},
        "priya_raman_6630": {"user_id": "priya_raman_6630", "name": {"first_name": "Priya", "last_name": "Raman"},
                             "email": "priya.raman@example.com",
                             "address": {"address1": "23 Harbor View Lane", "address2": "Unit 5", "city": "Portland",
                                         "state": "ME", "country": "USA", "zip": "04101"},
                             "payment_methods": {"credit_card_7713380": {"brand": "visa", "last_four": "2291"}},
                             "orders": ["#W6690321", "#W1457788"]},
    }

    def order(oid, uid, status, items, pay):
        total = round(sum(i["price"] for i in items), 2)
        return {"order_id": oid, "user_id": uid, "address": dict(users[uid]["address"]), "items": items,
                "status": status, "payment_history": [{"transaction_type": "payment", "amount": total,
                                                       "payment_method_id": pay}]}

    orders = {o["order_id"]: o for o in [
        order("#W4817420", "mei_tanaka_4821", "pending",
              [item("7624783998", "Desk Lamp", "6817146515", 54.0, color="silver", brightness="high"),
               item("6574183535", "Notebook", "2892623495", 12.75, size="A5", cover="hard")], "credit_card_5521009"),
        order("#W2039158", "mei_tanaka_4821", "delivered",
              [item("4153505238", "Running Shoes", "6938111410", 92.5, size="9", color="black")], "credit_card_5521009"),
        order("#W7712004", "mei_tanaka_4821", "processed",
              [item("3453331371", "Water Bottle", "8310926033", 24.0, capacity="750ml")], "gift_card_8830147"),
        order("#W8330152", "omar_haddad_7310", "pending",
              [item("8555936349", "Wireless Earbuds", "9924732112", 119.0, color="blue", battery="8h")],
              "paypal_3392016"),
        order("#W1206688", "omar_haddad_7310", "delivered",
              [item("1323134954", "Coffee Maker", "7996920482", 79.0, capacity="8 cups", type="drip"),
               item("5917587651", "Backpack", "2524789262", 64.0, color="grey", size="medium")], "paypal_3392016"),
        order("#W5561940", "omar_haddad_7310", "processed",
              [item("2183934211", "Running Shoes", "6938111410", 89.0, size="9", color="white")],
              "credit_card_1180464"),
        order("#W9045127", "omar_haddad_7310", "delivered",
              [item("6574183535", "Notebook", "2892623495", 12.75, size="A5", cover="hard")], "paypal_3392016"),
        order("#W3318260", "lucia_ferreira_2254", "pending",
              [item("3020722515", "Coffee Maker", "7996920482", 238.0, capacity="1 cup", type="espresso")],
              "credit_card_6624093"),
        order("#W6604471", "lucia_ferreira_2254", "delivered",
              [item("8030558068", "Backpack", "2524789262", 71.0, color="black", size="large"),
               item("3694871183", "Wireless Earbuds", "9924732112", 119.0, color="white", battery="8h")],
              "credit_card_6624093"),
        order("#W5820417", "daniel_okafor_9105", "processed",
              [item("5320792178", "Desk Lamp", "6817146515", 49.0, color="black", brightness="medium")],
              "gift_card_4417720"),
        order("#W2771093", "daniel_okafor_9105", "delivered",
              [item("8106223139", "Hiking Boots", "7363354090", 180.0, size="11", material="leather",
                    waterproof="yes")], "credit_card_2846155"),
        order("#W6143380", "daniel_okafor_9105", "pending",
              [item("3453331371", "Water Bottle", "8310926033", 24.0, capacity="750ml")], "gift_card_4417720"),
        order("#W0459912", "daniel_okafor_9105", "delivered",
              [item("3694871183", "Wireless Earbuds", "9924732112", 119.0, color="white", battery="8h")],
              "credit_card_2846155"),
        order("#W7388205", "daniel_okafor_9105", "pending",
              [item("6574183535", "Notebook", "2892623495", 12.75, size="A5", cover="hard"),
               item("5917587651", "Backpack", "2524789262", 64.0, color="grey", size="medium")],
              "credit_card_2846155"),
        order("#W6690321", "priya_raman_6630", "delivered",
              [item("8106223139", "Hiking Boots", "7363354090", 180.0, size="11", material="leather",
                    waterproof="yes")], "credit_card_7713380"),
        order("#W1457788", "priya_raman_6630", "pending",
              [item("1323134954", "Coffee Maker", "7996920482", 79.0, capacity="8 cups", type="drip")],
              "credit_card_7713380"),
    ]}
    return Store(users, orders, products)


def cs_typo_email():
    s = new("kind-cs-typo-email", CS, CS_AGENT, "gpt-4o-2024-08-06", "acme-retail", pace=(1.5, 6.0),
            tool_ms=(80, 600))
    db = retail()
    cs_user(s, "Hi, I want to check on a couple of my orders.", first=True)
    s.reply("Happy to help! First I need to verify your identity. Could you give me the email address on "
            "your account, or your full name and zip code?")
    cs_user(s, "it's mei.tanak@example.com")
    cs_call(s, db, "find_user_id_by_email", {"email": "mei.tanak@example.com"})
    s.reply("I couldn't find an account for mei.tanak@example.com. Could you double-check the spelling?")
    cs_user(s, "oops, missing letter. mei.tanaka@example.com")
    cs_call(s, db, "find_user_id_by_email", {"email": "mei.tanaka@example.com"})
    cs_call(s, db, "get_user_details", {"user_id": "mei_tanaka_4821"})
    s.reply("Thanks, Mei, I found your account. You have three orders: #W4817420, #W2039158 and #W7712004. "
            "Which one would you like to check?")
    cs_user(s, "The one with the lamp. Has it shipped yet?")
    cs_call(s, db, "get_order_details", {"order_id": "#W4817420"})
    s.reply("Order #W4817420 (silver desk lamp and an A5 notebook) is still pending, so it has not shipped "
            "yet.")
    cs_user(s, "Ok. And my running shoes?")
    cs_call(s, db, "get_order_details", {"order_id": "#W2039158"})
    s.reply("Order #W2039158 with the black running shoes, size 9, was delivered.")
    cs_user(s, "They are too small. Can I swap them for a size 10, same colour?")
    cs_call(s, db, "get_product_details", {"product_id": "6938111410"},
            thought="The order is delivered, so an exchange is possible. Check that size 10 in black is available.")
    s.reply("Yes: the black running shoes in size 10 (item 1093384521) are available at the same price, "
            "$92.50, so there is no difference to pay. Shall I request the exchange of item 4153505238 for "
            "1093384521, with your Visa ending 4417 as the payment method for any adjustment? Please "
            "confirm with yes.")
    cs_user(s, "yes, use the credit card")
    cs_call(s, db, "exchange_delivered_order_items",
            {"order_id": "#W2039158", "item_ids": ["4153505238"], "new_item_ids": ["1093384521"],
             "payment_method_id": "credit_card_5521009"})
    s.reply("Done. The exchange is requested; you will get an email with instructions for sending the "
            "size 9 pair back.")
    cs_user(s, "Great, that's all. Thanks!")
    s.reply("You're welcome, Mei. Have a nice day!")
    done(s, False, "healthy: multi-turn support", "resolved",
         "8 user turns: the first lookup fails on a mistyped email ('Error: user not found'), the user "
         "corrects it, then two different orders are looked up and an exchange is made.")


def cs_long_errands():
    s = new("kind-cs-long-errands", CS, CS_AGENT, "claude-3-5-sonnet-20241022", "acme-retail", pace=(2.0, 7.0),
            tool_ms=(80, 600))
    db = retail()
    cs_user(s, "hello, I have a few things to sort out today", first=True)
    s.reply("Hello! I can help with that. To start, could you tell me the email address on your account?")
    cs_user(s, "ohaddad@example.net")
    cs_call(s, db, "find_user_id_by_email", {"email": "ohaddad@example.net"})
    cs_call(s, db, "get_user_details", {"user_id": "omar_haddad_7310"})
    s.reply("Thank you, Omar. I can see four orders on your account. What would you like to do first?")
    cs_user(s, "first, where is order W83301?")
    cs_call(s, db, "get_order_details", {"order_id": "#W83301"})
    s.reply("I couldn't find an order #W83301. Order numbers have seven digits after the W; your orders "
            "are #W8330152, #W1206688, #W5561940 and #W9045127. Did you mean #W8330152?")
    cs_user(s, "yes sorry, W8330152, the earbuds")
    cs_call(s, db, "get_order_details", {"order_id": "#W8330152"})
    s.reply("Order #W8330152 (blue wireless earbuds) is pending: it has not been processed yet.")
    cs_user(s, "Good, because I am moving. Can you send it to 310 Barton Springs Road, Austin TX 78746 instead?")
    s.reply("Certainly. To confirm: change the shipping address of #W8330152 to 310 Barton Springs Road, "
            "Austin, TX 78746, USA. Shall I go ahead (yes/no)?")
    cs_user(s, "yes")
    cs_call(s, db, "modify_pending_order_address",
            {"order_id": "#W8330152", "address1": "310 Barton Springs Road", "address2": "", "city": "Austin",
             "state": "TX", "country": "USA", "zip": "78746"})
    s.reply("Done: #W8330152 will ship to 310 Barton Springs Road, Austin, TX 78746.")
    cs_user(s, "Next, the coffee maker I got. It leaks. I want to return it.")
    cs_call(s, db, "get_order_details", {"order_id": "#W1206688"})
    s.reply("Order #W1206688 was delivered and contains the 8-cup drip coffee maker ($79.00) and a grey "
            "backpack. I can return just the coffee maker, refunded to your PayPal account. Confirm?")
    cs_user(s, "just the coffee maker, refund to paypal, yes")
    cs_call(s, db, "return_delivered_order_items",
            {"order_id": "#W1206688", "item_ids": ["1323134954"], "payment_method_id": "paypal_3392016"})
    s.reply("The return is requested. You'll receive a label by email; the $79.00 refund goes to PayPal "
            "once the item arrives.")
    cs_user(s, "what about the white running shoes, when do they arrive?")
    cs_call(s, db, "get_order_details", {"order_id": "#W5561940"})
    s.reply("Order #W5561940 (white running shoes, size 9) is being processed; it will ship soon and you "
            "will get a tracking number by email.")
    cs_user(s, "Do you have those shoes in size 10 white? maybe I'll order another pair later")
    cs_call(s, db, "get_product_details", {"product_id": "6938111410"})
    s.reply("Size 10 is available in black; size 10 in red is sold out, and white is only listed in size 9 "
            "at the moment.")
    cs_user(s, "ok never mind. And the notebook order, was it delivered?")
    cs_call(s, db, "get_order_details", {"order_id": "#W9045127"})
    s.reply("Yes, #W9045127 (A5 hardcover notebook) was delivered.")
    cs_user(s, "Perfect, that's everything. Thanks for your patience")
    s.reply("My pleasure, Omar. Good luck with the move!")
    done(s, False, "healthy: multi-turn support", "resolved",
         "12 user turns: an order id given with digits missing fails ('Error: order not found') and is "
         "corrected by the user; four different orders looked up, an address change, a return, a "
         "product check.")


def cs_name_zip():
    s = new("kind-cs-name-zip", CS, CS_AGENT, "gpt-4o-mini", "acme-retail", pace=(1.0, 4.5), tool_ms=(80, 600))
    db = retail()
    cs_user(s, "I ordered an espresso machine by mistake and need to cancel it", first=True)
    s.reply("I can help you cancel it. Please tell me your first and last name and your zip code.")
    cs_user(s, "Lucia Ferreira, 60614")
    cs_call(s, db, "find_user_id_by_name_zip", {"first_name": "Lucia", "last_name": "Ferreira", "zip": "60614"})
    s.reply("I could not find an account for Lucia Ferreira with zip 60614. Could you check the zip code, "
            "or give me your email address?")
    cs_user(s, "Sorry, we moved last year, it's 60616 now")
    cs_call(s, db, "find_user_id_by_name_zip", {"first_name": "Lucia", "last_name": "Ferreira", "zip": "60616"})
    cs_call(s, db, "get_user_details", {"user_id": "lucia_ferreira_2254"})
    cs_call(s, db, "get_order_details", {"order_id": "#W3318260"})
    s.reply("Found it: order #W3318260, a 1-cup espresso coffee maker, $238.00, still pending. I will cancel "
            "it with the reason 'ordered by mistake' and refund your Amex. Confirm (yes/no)?")
    cs_user(s, "yes please")
    cs_call(s, db, "cancel_pending_order", {"order_id": "#W3318260", "reason": "ordered by mistake"})
    s.reply("Order #W3318260 is cancelled; the refund to your Amex takes 5 to 7 business days.")
    cs_user(s, "Also the earbuds from my other order stopped charging. Can I return them?")
    cs_call(s, db, "get_order_details", {"order_id": "#W6604471"})
    s.reply("Order #W6604471 was delivered, so I can return the white earbuds ($119.00) to your Amex. "
            "The backpack stays with you. Shall I?")
    cs_user(s, "yes")
    cs_call(s, db, "return_delivered_order_items",
            {"order_id": "#W6604471", "item_ids": ["3694871183"], "payment_method_id": "credit_card_6624093"})
    s.reply("The return is requested; you'll get a prepaid label by email.")
    cs_user(s, "thank you!")
    s.reply("You're welcome, Lucia!")
    done(s, False, "healthy: multi-turn support", "resolved",
         "7 user turns: authentication by name and zip fails on an old zip, succeeds with the zip the "
         "user corrects; a cancellation and a return on two different orders.")


def cs_fifteen_turns():
    s = new("kind-cs-fifteen-turns", CS, CS_AGENT, "claude-3-5-sonnet-20241022", "acme-retail", pace=(2.0, 7.0),
            tool_ms=(80, 600))
    db = retail()
    cs_user(s, "hey there. so I have a bunch of orders and I'm confused about what's coming", first=True)
    s.reply("No problem, let's go through them. What's the email on your account?")
    cs_user(s, "d.okafor@example.com")
    cs_call(s, db, "find_user_id_by_email", {"email": "d.okafor@example.com"})
    cs_call(s, db, "get_user_details", {"user_id": "daniel_okafor_9105"})
    s.reply("Thanks, Daniel. You have five orders: #W5820417, #W2771093, #W6143380, #W0459912 and #W7388205. "
            "Shall I go through them one by one?")
    cs_user(s, "yes please, start with the oldest")
    cs_call(s, db, "get_order_details", {"order_id": "#W5820417"})
    s.reply("#W5820417: a black desk lamp, $49.00, paid with your gift card. It is being processed.")
    cs_user(s, "ok next")
    cs_call(s, db, "get_order_details", {"order_id": "#W2771093"})
    s.reply("#W2771093: leather waterproof hiking boots, size 11, $180.00. Delivered.")
    cs_user(s, "right, those fit. next one")
    cs_call(s, db, "get_order_details", {"order_id": "#W6143380"})
    s.reply("#W6143380: a 750 ml stainless steel water bottle, $24.00. Still pending.")
    cs_user(s, "I actually don't need that bottle anymore, I got one as a gift. cancel it, I changed my mind")
    s.reply("I can cancel #W6143380 and refund the $24.00 to your gift card. Confirm (yes)?")
    cs_user(s, "yes")
    cs_call(s, db, "cancel_pending_order", {"order_id": "#W6143380", "reason": "changed my mind"})
    s.reply("The system only accepts two reasons for a cancellation: 'no longer needed' or 'ordered by "
            "mistake'. Which one fits?")
    cs_user(s, "no longer needed then")
    cs_call(s, db, "cancel_pending_order", {"order_id": "#W6143380", "reason": "no longer needed"})
    cs_call(s, db, "get_order_details", {"order_id": "#W0459912"})
    s.reply("Done, #W6143380 is cancelled and $24.00 goes back to your gift card. The fourth order, "
            "#W0459912, is a pair of white wireless earbuds (8 h battery, $119.00), delivered.")
    cs_user(s, "do those come in blue? my kid wants blue")
    cs_call(s, db, "get_product_details", {"product_id": "9924732112"})
    s.reply("Yes, blue (item 8555936349) is available at the same price. Since the order was delivered, I "
            "could exchange the white pair for blue. Would you like that?")
    cs_user(s, "let me ask him first. what about the last order")
    cs_call(s, db, "get_order_details", {"order_id": "#W7388205"})
    s.reply("#W7388205: an A5 hardcover notebook and a grey medium backpack, $76.75 in total. Pending.")
    cs_user(s, "can that one go to my office instead? 2200 Market Street, Suite 400, Denver CO 80205")
    s.reply("Sure: ship #W7388205 to 2200 Market Street, Suite 400, Denver, CO 80205, USA. Confirm?")
    cs_user(s, "confirmed")
    cs_call(s, db, "modify_pending_order_address",
            {"order_id": "#W7388205", "address1": "2200 Market Street", "address2": "Suite 400",
             "city": "Denver", "state": "CO", "country": "USA", "zip": "80205"})
    s.reply("Done, #W7388205 will go to your office.")
    cs_user(s, "ok he says blue please. exchange the earbuds")
    s.reply("Exchanging the white earbuds (3694871183) in #W0459912 for blue (8555936349), same price, "
            "nothing to pay. Which payment method should be on file for the exchange: the Visa ending 8820 "
            "or the gift card?")
    cs_user(s, "visa")
    cs_call(s, db, "exchange_delivered_order_items",
            {"order_id": "#W0459912", "item_ids": ["3694871183"], "new_item_ids": ["8555936349"],
             "payment_method_id": "credit_card_2846155"})
    s.reply("The exchange is requested; instructions for sending the white pair back are on their way.")
    cs_user(s, "thanks a lot, that's all")
    s.reply("You're welcome, Daniel. Enjoy the earbuds!")
    done(s, False, "healthy: multi-turn support", "resolved",
         "15 user turns: five different orders looked up one by one, a cancellation first refused for "
         "its reason ('Error: invalid reason') and redone with the reason the user picks, an address "
         "change, an exchange.")


def cs_loop_cancel():
    s = new("kind-cs-loop-cancel-stale", CS, CS_AGENT, "gpt-4o-mini", "acme-retail", pace=(1.0, 4.0),
            tool_ms=(80, 600))
    db = retail()
    cs_user(s, "I need to cancel an order. my email is d.okafor@example.com", first=True)
    cs_call(s, db, "find_user_id_by_email", {"email": "d.okafor@example.com"})
    cs_call(s, db, "get_user_details", {"user_id": "daniel_okafor_9105"})
    s.reply("Thanks, Daniel. Which order would you like to cancel?")
    cs_user(s, "W5820417, the desk lamp")
    cs_call(s, db, "get_order_details", {"order_id": "#W5820417"})
    s.reply("I see order #W5820417 with a black desk lamp. What is the reason for the cancellation: no "
            "longer needed, or ordered by mistake?")
    cs_user(s, "no longer needed. go ahead")
    args = {"order_id": "#W5820417", "reason": "no longer needed"}
    cs_call(s, db, "cancel_pending_order", args)
    s.reply("I'm sorry, something went wrong while cancelling order #W5820417. Please let me know if you "
            "want me to try again.")
    cs_user(s, "please try again")
    cs_call(s, db, "cancel_pending_order", args)
    s.reply("I apologize, the cancellation did not go through. Would you like me to try once more?")
    cs_user(s, "just do it, I don't want that lamp")
    cs_call(s, db, "cancel_pending_order", args, mark=True)
    s.reply("I'm sorry, I was unable to cancel the order again. Let me know how you'd like to proceed.")
    cs_user(s, "try one more time??")
    cs_call(s, db, "cancel_pending_order", args)
    s.reply("Unfortunately the order could not be cancelled: it is no longer pending. I can transfer you "
            "to a human agent or you can return it after it arrives.")
    cs_user(s, "ugh. fine, I'll return it when it comes")
    s.reply("Understood. Once it is delivered, contact us and we will set up the return.")
    done(s, True, "stale retry across user turns", "not resolved",
         "The order is 'processed', not pending. cancel_pending_order with the same order id and reason "
         "fails 'Error: non-pending order cannot be cancelled' in 4 consecutive user turns ('please try "
         "again', 'just do it', 'try one more time'); the agent never re-reads the status it already "
         "had. Intervene at the 3rd identical failing cancel.")


def cs_loop_exchange():
    s = new("kind-cs-loop-exchange-stale", CS, CS_AGENT, "gpt-4o-2024-05-13", "acme-retail", pace=(1.5, 5.0),
            tool_ms=(80, 600))
    db = retail()
    cs_user(s, "Hi, my hiking boots are too big. I'd like a size 10 instead.", first=True)
    s.reply("Sorry they don't fit! Could you give me your email so I can find the order?")
    cs_user(s, "priya.raman@example.com")
    cs_call(s, db, "find_user_id_by_email", {"email": "priya.raman@example.com"})
    cs_call(s, db, "get_user_details", {"user_id": "priya_raman_6630"})
    cs_call(s, db, "get_order_details", {"order_id": "#W6690321"})
    cs_call(s, db, "get_product_details", {"product_id": "7363354090"})
    s.reply("Your order #W6690321 has the leather waterproof hiking boots in size 11. The same boots in size "
            "10 are item 6159919747, same price. Shall I request the exchange, with your Visa ending 2291 "
            "for any difference?")
    cs_user(s, "yes")
    args = {"order_id": "#W6690321", "item_ids": ["8106223139"], "new_item_ids": ["6159919747"],
            "payment_method_id": "credit_card_7713380"}
    cs_call(s, db, "exchange_delivered_order_items", args)
    s.reply("The exchange could not be made: the size 10 leather boots are not available. The synthetic "
            "waterproof version in size 10 is available for $151.00. Would that work?")
    cs_user(s, "ok then the synthetic waterproof ones in 10, refund the difference")
    cs_call(s, db, "exchange_delivered_order_items", args)
    s.reply("I'm sorry, the exchange failed again. Should I retry?")
    cs_user(s, "please try again")
    cs_call(s, db, "exchange_delivered_order_items", args, mark=True)
    s.reply("It still says the new item is not available. I'm not sure why.")
    cs_user(s, "Are you using the synthetic ones?? Synthetic, waterproof, size 10.")
    cs_call(s, db, "exchange_delivered_order_items",
            {"order_id": "#W6690321", "item_ids": ["8106223139"], "new_item_ids": ["2658930189"],
             "payment_method_id": "credit_card_7713380"},
            thought="I kept sending the leather item 6159919747. The synthetic waterproof size 10 is 2658930189.")
    s.reply("You're right, I'm sorry: I kept using the leather boots' item number. The exchange for the "
            "synthetic waterproof boots in size 10 is now requested, and the $29.00 difference will be "
            "refunded to your Visa.")
    cs_user(s, "finally. thanks")
    s.reply("Thank you for your patience, Priya.")
    done(s, True, "stale retry across user turns", "resolved late",
         "The requested item is sold out; the user chooses another item, but the agent retries "
         "exchange_delivered_order_items with the same stale new_item_ids in 3 consecutive user turns, "
         "each 'Error: new item 6159919747 not found or available'. Intervene at the 3rd identical "
         "failing exchange; the user then spells it out and the agent fixes the id.")


SUPPORT = [cs_typo_email, cs_long_errands, cs_name_zip, cs_fifteen_turns, cs_loop_cancel, cs_loop_exchange]


# --------------------------------------------------------------------------------------
# Coding agents (aider / Claude Code style): Read, Edit, Bash, Grep


CODE = "coding.jsonl"


def numbered(text, first=1):
    return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(text.split("\n"), first))


class Repo:
    """Files as text; Edit replaces one unique occurrence (as the real tools do)."""

    def __init__(self, files):
        self.files = dict(files)

    def read(self, path):
        return numbered(self.files[path])

    def edit(self, path, old, new):
        text = self.files[path]
        assert text.count(old) == 1, (path, old)
        start = text[:text.index(old)].count("\n") + 1
        self.files[path] = text.replace(old, new)
        return (f"Edited {path}: {old.count(chr(10)) + 1} line(s) replaced by {new.count(chr(10)) + 1} "
                f"at line {start}:\n" + numbered(new, start))


def code_read(s, repo, thought, path, mark=False, **kw):
    s.step(thought, "Read", {"file_path": path}, repo.read(path), effect="read", mark=mark, **kw)


def code_edit(s, repo, thought, path, old, new, mark=False):
    obs = repo.edit(path, old, new)
    s.step(thought, "Edit", {"file_path": path, "old_string": old, "new_string": new}, obs,
           effect="mutation", mark=mark)


def code_bash(s, thought, command, output, error=None, run_ms=(900, 6000), mark=False):
    """`error`: the failure line when the command exits non-zero."""
    s.step(thought, "Bash", {"command": command}, output, ok=error is None, error=error, run_ms=run_ms,
           mark=mark)


def code_grep(s, thought, pattern, path, output, mark=False):
    s.step(thought, "Grep", {"pattern": pattern, "path": path}, output, effect="read", mark=mark)


def pytest_out(passed, failed=(), where="tests", secs=0.8):
    lines = []
    for name, why in failed:
        lines += [f"FAILED {where}::{name} - {why}"]
    summary = (f"{len(failed)} failed, " if failed else "") + f"{passed} passed in {secs:.2f}s"
    return "\n".join(lines + [summary]), (summary if failed else None)


LEXER = '''import re
from dataclasses import dataclass


class LexError(ValueError):
    pass


@dataclass
class Token:
    kind: str
    text: str
    pos: int


class Lexer:
    def __init__(self, src: str):
        self.src = src
        self.pos = 0

    def tokens(self):
        while self.pos < len(self.src):
            ch = self.src[self.pos]
            if ch.isspace():
                self.pos += 1
            elif ch.isdigit():
                yield self._read_number()
            elif ch in "+-*/()":
                yield Token("OP", ch, self.pos)
                self.pos += 1
            else:
                raise LexError(f"unexpected {ch!r} at {self.pos}")

    def _read_number(self) -> Token:
        start = self.pos
        while self.pos < len(self.src) and (self.src[self.pos].isdigit() or self.src[self.pos] == "."):
            self.pos += 1
        text = self.src[start:self.pos]
        return Token("NUMBER", text, start)
'''


def code_edits_lexer():
    s = new("kind-code-edits-lexer", CODE, "aider", "claude-3-5-sonnet-20241022", "dev-tools", pace=(3.0, 12.0))
    repo = Repo({"src/calc/lexer.py": LEXER})
    f = "src/calc/lexer.py"
    test = "python -m pytest tests/test_lexer.py -q"
    s.user("Add scientific notation (1e-3, 2.5E+4) and hexadecimal literals (0x1F) to the lexer in "
           "src/calc/lexer.py. tests/test_lexer.py already has the expected tokens and errors.")
    code_read(s, repo, "Let me look at the lexer first.", f)
    out, err = pytest_out(14, [("test_hex_literal", "AssertionError: assert ['NUMBER', 'IDENT'] == ['NUMBER']"),
                               ("test_hex_upper", "AssertionError: assert ['NUMBER', 'IDENT'] == ['NUMBER']"),
                               ("test_exponent", "LexError: unexpected 'e' at 1"),
                               ("test_exponent_signed", "LexError: unexpected 'E' at 3"),
                               ("test_empty_hex_literal", "Failed: DID NOT RAISE <class 'calc.lexer.LexError'>"),
                               ("test_malformed_exponent", "LexError: unexpected 'e' at 1")], "tests/test_lexer.py")
    code_bash(s, "Run the lexer tests to see what is expected.", test, out, err)
    code_edit(s, repo, "Hex literals first: a 0x prefix followed by hex digits.", f,
              '''        start = self.pos
        while self.pos < len(self.src) and (self.src[self.pos].isdigit() or self.src[self.pos] == "."):
            self.pos += 1''',
              '''        start = self.pos
        if self.src.startswith(("0x", "0X"), self.pos):
            self.pos += 2
            while self.pos < len(self.src) and self.src[self.pos] in "0123456789abcdefABCDEF":
                self.pos += 1
            return Token("NUMBER", self.src[start:self.pos], start)
        while self.pos < len(self.src) and (self.src[self.pos].isdigit() or self.src[self.pos] == "."):
            self.pos += 1''')
    code_edit(s, repo, "Now the exponent part after the mantissa.", f,
              '''        while self.pos < len(self.src) and (self.src[self.pos].isdigit() or self.src[self.pos] == "."):
            self.pos += 1
        text = self.src[start:self.pos]''',
              '''        while self.pos < len(self.src) and (self.src[self.pos].isdigit() or self.src[self.pos] == "."):
            self.pos += 1
        if self.pos < len(self.src) and self.src[self.pos] in "eE":
            self.pos += 1
            while self.pos < len(self.src) and self.src[self.pos].isdigit():
                self.pos += 1
        text = self.src[start:self.pos]''')
    out, err = pytest_out(17, [("test_exponent_signed", "LexError: unexpected '+' at 4"),
                               ("test_empty_hex_literal", "Failed: DID NOT RAISE <class 'calc.lexer.LexError'>"),
                               ("test_malformed_exponent", "AssertionError: assert ['NUMBER', 'OP'] == []")],
                         "tests/test_lexer.py")
    code_bash(s, None, test, out, err)
    code_edit(s, repo, "The exponent can have a sign.", f,
              '''        if self.pos < len(self.src) and self.src[self.pos] in "eE":
            self.pos += 1
            while self.pos < len(self.src) and self.src[self.pos].isdigit():''',
              '''        if self.pos < len(self.src) and self.src[self.pos] in "eE":
            self.pos += 1
            if self.pos < len(self.src) and self.src[self.pos] in "+-":
                self.pos += 1
            while self.pos < len(self.src) and self.src[self.pos].isdigit():''')
    code_edit(s, repo, "And an exponent without digits is an error.", f,
              '''            while self.pos < len(self.src) and self.src[self.pos].isdigit():
                self.pos += 1
        text = self.src[start:self.pos]''',
              '''            digits = self.pos
            while self.pos < len(self.src) and self.src[self.pos].isdigit():
                self.pos += 1
            if self.pos == digits:
                raise LexError(f"malformed exponent at {start}")
        text = self.src[start:self.pos]''')
    out, err = pytest_out(19, [("test_empty_hex_literal", "Failed: DID NOT RAISE <class 'calc.lexer.LexError'>")],
                         "tests/test_lexer.py")
    code_bash(s, None, test, out, err)
    code_edit(s, repo, "Last one: '0x' with no digits must raise.", f,
              '''            while self.pos < len(self.src) and self.src[self.pos] in "0123456789abcdefABCDEF":
                self.pos += 1
            return Token("NUMBER", self.src[start:self.pos], start)''',
              '''            while self.pos < len(self.src) and self.src[self.pos] in "0123456789abcdefABCDEF":
                self.pos += 1
            if self.pos == start + 2:
                raise LexError(f"empty hex literal at {start}")
            return Token("NUMBER", self.src[start:self.pos], start)''')
    out, _ = pytest_out(20, secs=0.61)
    code_bash(s, None, test, out)
    out, _ = pytest_out(63, secs=2.4)
    code_bash(s, "All lexer tests pass; run the whole suite to be safe.", "python -m pytest -q", out)
    done(s, False, "healthy: successive edits", "done, all tests pass",
         "5 edits of src/calc/lexer.py (long, overlapping old/new strings of the same method), with the "
         "lexer tests re-run between them going 6 -> 3 -> 1 -> 0 failures.")


CONFIG = '''from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml


@dataclasses.dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    debug: bool = False
    workers: int = 2
    log_level: str = "info"
    timeout_seconds: float = 30.0


def _read_yaml(path: Path) -> dict:
    with path.open() as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at top level")
    return data


def load_config(path: str | None = None) -> Settings:
    data = _read_yaml(Path(path)) if path else {}
    return Settings(**data)
'''


def code_edits_config():
    s = new("kind-code-edits-config", CODE, "claude-code", "claude-sonnet-4-20250514", "dev-tools", pace=(2.5, 12.0))
    repo = Repo({"src/app/config.py": CONFIG})
    f = "src/app/config.py"
    test = "python -m pytest tests/test_config.py -q"
    s.user("load_config() should let environment variables APP_<KEY> override values from the YAML file, "
           "coerce them to the type of the field's default, and raise ConfigError naming any unknown "
           "keys. Implement it and make tests/test_config.py pass.")
    code_grep(s, "I'll find the loader.", "def load_config", "src",
              "src/app/config.py:28:def load_config(path: str | None = None) -> Settings:")
    code_read(s, repo, None, f)
    code_edit(s, repo, "I'll need os for the environment and a prefix constant.", f,
              "import dataclasses\nfrom pathlib import Path\n\nimport yaml\n",
              "import dataclasses\nimport os\nfrom pathlib import Path\n\nimport yaml\n\nENV_PREFIX = \"APP_\"\n")
    code_edit(s, repo, "Add the ConfigError type the tests import.", f,
              '@dataclasses.dataclass\nclass Settings:\n    host: str = "127.0.0.1"',
              'class ConfigError(ValueError):\n    """A configuration that cannot be used."""\n\n\n'
              '@dataclasses.dataclass\nclass Settings:\n    host: str = "127.0.0.1"')
    code_edit(s, repo, "The YAML shape error should be a ConfigError too.", f,
              '    if not isinstance(data, dict):\n        raise ValueError(f"{path}: expected a mapping at top level")',
              '    if not isinstance(data, dict):\n        raise ConfigError(f"{path}: expected a mapping at top level")')
    code_edit(s, repo, "Now a coercion helper that follows the type of the default.", f,
              "    return data\n\n\ndef load_config(path: str | None = None) -> Settings:",
              "    return data\n\n\ndef _coerce(name: str, raw: str, default):\n"
              "    if isinstance(default, bool):\n        if raw.lower() in (\"1\", \"true\"):\n            return True\n"
              "        if raw.lower() in (\"0\", \"false\"):\n            return False\n"
              "        raise ConfigError(f\"{ENV_PREFIX}{name.upper()}: not a boolean: {raw!r}\")\n"
              "    try:\n        return type(default)(raw)\n    except ValueError:\n"
              "        raise ConfigError(f\"{ENV_PREFIX}{name.upper()}: expected {type(default).__name__}, got {raw!r}\")\n"
              "\n\ndef load_config(path: str | None = None) -> Settings:")
    code_edit(s, repo, "Then the environment overrides.", f,
              "\n\ndef load_config(path: str | None = None) -> Settings:",
              "\n\ndef _env_overrides(environ) -> dict:\n    defaults = Settings()\n    out = {}\n"
              "    for field in dataclasses.fields(Settings):\n        raw = environ.get(ENV_PREFIX + field.name.upper())\n"
              "        if raw is not None:\n            out[field.name] = _coerce(field.name, raw, getattr(defaults, field.name))\n"
              "    return out\n\n\ndef load_config(path: str | None = None) -> Settings:")
    code_edit(s, repo, "And use both in load_config, checking unknown keys first.", f,
              "    data = _read_yaml(Path(path)) if path else {}\n    return Settings(**data)",
              "    data = _read_yaml(Path(path)) if path else {}\n"
              "    known = {f.name for f in dataclasses.fields(Settings)}\n"
              "    unknown = [k for k in data if k not in known]\n    if unknown:\n"
              "        raise ConfigError(\"unknown keys: \" + \", \".join(unknown))\n"
              "    data.update(_env_overrides(os.environ))\n    return Settings(**data)")
    out, err = pytest_out(7, [("test_bool_env_accepts_yes_no", "ConfigError: APP_DEBUG: not a boolean: 'yes'"),
                              ("test_unknown_keys_listed_sorted",
                               "AssertionError: 'unknown keys: zeta, alpha' != 'unknown keys: alpha, zeta'")],
                         "tests/test_config.py")
    code_bash(s, "Run the config tests.", test, out, err)
    code_edit(s, repo, "Booleans should also accept yes/no and on/off.", f,
              "        if raw.lower() in (\"1\", \"true\"):\n            return True\n"
              "        if raw.lower() in (\"0\", \"false\"):\n            return False\n",
              "        if raw.lower() in (\"1\", \"true\", \"yes\", \"on\"):\n            return True\n"
              "        if raw.lower() in (\"0\", \"false\", \"no\", \"off\"):\n            return False\n")
    out, err = pytest_out(8, [("test_unknown_keys_listed_sorted",
                               "AssertionError: 'unknown keys: zeta, alpha' != 'unknown keys: alpha, zeta'")],
                         "tests/test_config.py")
    code_bash(s, None, test, out, err)
    code_edit(s, repo, "The unknown keys must be sorted.", f,
              "    unknown = [k for k in data if k not in known]",
              "    unknown = sorted(k for k in data if k not in known)")
    out, _ = pytest_out(9, secs=0.35)
    code_bash(s, None, test, out)
    code_bash(s, "Lint the file.", "ruff check src/app/config.py", "All checks passed!")
    done(s, False, "healthy: successive edits", "done, tests and lint pass",
         "8 edits of src/app/config.py, 6 of them in a row (imports, error type, coercion, env overrides, "
         "unknown keys), then test runs going 2 -> 1 -> 0 failures with one edit between each.")


FETCH_FUNCS = [("html", "text"), ("json", "json()"), ("robots", "text.splitlines()"), ("sitemap", "content")]


def fetch_source():
    parts = ['import requests\n\nfrom .backoff import _sleep_backoff\n']
    for name, attr in FETCH_FUNCS:
        parts.append(f'''
def fetch_{name}(session, url, timeout=10):
    resp = session.get(url, timeout=timeout)
    resp.raise_for_status()
    return resp.{attr}
''')
    return "".join(parts)


def code_edits_fetch():
    s = new("kind-code-edits-fetch", CODE, "aider", "deepseek-chat", "dev-tools", pace=(2.0, 10.0))
    f = "src/crawler/fetch.py"
    repo = Repo({f: fetch_source()})
    test = "python -m pytest tests/test_fetch.py -q"
    s.user("Add a `retries` parameter (default 3) to every fetch_* function in src/crawler/fetch.py: retry on "
           "ConnectionError and on 5xx responses, sleeping with the existing _sleep_backoff(attempt) between "
           "attempts.")
    code_read(s, repo, None, f)

    def retry_body(name, attr, sleep_last):
        guard = "            _sleep_backoff(attempt)\n" if sleep_last else \
            "            if attempt < retries - 1:\n                _sleep_backoff(attempt)\n"
        return (f"def fetch_{name}(session, url, timeout=10, retries=3):\n"
                f"    for attempt in range(retries):\n"
                f"        try:\n"
                f"            resp = session.get(url, timeout=timeout)\n"
                f"            if resp.status_code < 500:\n"
                f"                resp.raise_for_status()\n"
                f"                return resp.{attr}\n"
                f"        except requests.ConnectionError:\n"
                f"            if attempt == retries - 1:\n"
                f"                raise\n"
                f"        else:\n"
                f"{guard}"
                f"            continue\n"
                f"        _sleep_backoff(attempt)\n"
                f"    resp.raise_for_status()")

    def old_body(name, attr):
        return (f"def fetch_{name}(session, url, timeout=10):\n    resp = session.get(url, timeout=timeout)\n"
                f"    resp.raise_for_status()\n    return resp.{attr}")

    thoughts = {"html": "Start with fetch_html: a loop over attempts.", "json": "Same for fetch_json.",
                "robots": "Now fetch_robots.", "sitemap": "And fetch_sitemap."}
    for name, attr in FETCH_FUNCS[:2]:
        code_edit(s, repo, thoughts[name], f, old_body(name, attr), retry_body(name, attr, True))
    out, err = pytest_out(8, [("test_robots_retries_on_503", "TypeError: fetch_robots() got an unexpected keyword argument 'retries'"),
                              ("test_sitemap_retries_on_503", "TypeError: fetch_sitemap() got an unexpected keyword argument 'retries'"),
                              ("test_backoff_between_attempts_only", "AssertionError: assert 3 == 2"),
                              ("test_json_backoff_between_attempts_only", "AssertionError: assert 3 == 2")],
                         "tests/test_fetch.py")
    code_bash(s, "Check the two converted ones before doing the rest.", test, out, err)
    for name, attr in FETCH_FUNCS[2:]:
        code_edit(s, repo, thoughts[name], f, old_body(name, attr), retry_body(name, attr, True))
    out, err = pytest_out(8, [(f"test_{n}backoff_between_attempts_only", "AssertionError: assert 3 == 2")
                              for n in ("", "json_", "robots_", "sitemap_")], "tests/test_fetch.py")
    code_bash(s, "All four take retries now; the remaining failures are about the backoff count.", test, out, err)
    for i, (name, attr) in enumerate(FETCH_FUNCS):
        code_edit(s, repo, "No sleep after the last attempt: guard the backoff in every function." if i == 0 else None,
                  f, f"                return resp.{attr}\n        except requests.ConnectionError:\n"
                     f"            if attempt == retries - 1:\n                raise\n        else:\n"
                     f"            _sleep_backoff(attempt)\n",
                  f"                return resp.{attr}\n        except requests.ConnectionError:\n"
                  f"            if attempt == retries - 1:\n                raise\n        else:\n"
                  f"            if attempt < retries - 1:\n                _sleep_backoff(attempt)\n")
    out, _ = pytest_out(12, secs=0.44)
    code_bash(s, None, test, out)
    done(s, False, "healthy: successive edits", "done, tests pass",
         "8 edits of src/crawler/fetch.py, each a long and similar retry loop for another fetch_* "
         "function (2, then 2, then 4 in a row), with test runs between going 4 -> 4 (other causes) -> "
         "0 failures.")


DATES = '''import re

_ISO = re.compile(r"^(\\d{4})-(\\d{2})-(\\d{2})$")
_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def parse_date(text: str) -> datetime.date:
    m = _ISO.match(text.strip())
    if not m:
        raise DateParseError(f"not an ISO date: {text!r}")
    year, month, day = (int(g) for g in m.groups())
    while day > _DAYS[month - 1]:
        day -= _DAYS[month - 1]
        month += 1
    return datetime.date(year, month, day)
'''


def code_plain_dates():
    s = new("kind-code-plain-dates", CODE, "claude-code", "claude-sonnet-4-20250514", "dev-tools", pace=(2.5, 12.0))
    f = "src/util/dates.py"
    repo = Repo({f: "import datetime\n\nfrom .errors import DateParseError\n" + DATES})
    s.user("parse_date('2024-02-30') returns March 1st instead of raising. Fix it.")
    code_grep(s, None, "def parse_date", "src", "src/util/dates.py:10:def parse_date(text: str) -> datetime.date:")
    code_read(s, repo, None, f)
    probe = "python -c \"from util.dates import parse_date; print(parse_date('2024-02-30'))\""
    code_bash(s, "The while loop rolls an overflowing day into the next month. Confirm first.", probe, "2024-03-01")
    code_edit(s, repo, "datetime.date already validates the day; drop the roll-over.", f,
              "    year, month, day = (int(g) for g in m.groups())\n    while day > _DAYS[month - 1]:\n"
              "        day -= _DAYS[month - 1]\n        month += 1\n    return datetime.date(year, month, day)",
              "    year, month, day = (int(g) for g in m.groups())\n    return datetime.date(year, month, day)")
    code_bash(s, None, probe, "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
              "  File \"/repo/src/util/dates.py\", line 15, in parse_date\n    return datetime.date(year, month, day)\n"
              "ValueError: day is out of range for month", error="ValueError: day is out of range for month")
    code_read(s, repo, "It raises now, but a ValueError instead of the module's DateParseError. Let me re-read.", f)
    out, err = pytest_out(11, [("test_invalid_day_raises_parse_error",
                                "ValueError: day is out of range for month")], "tests/test_dates.py")
    code_bash(s, None, "python -m pytest tests/test_dates.py -q", out, err)
    code_edit(s, repo, "Wrap it.", f,
              "    year, month, day = (int(g) for g in m.groups())\n    return datetime.date(year, month, day)",
              "    year, month, day = (int(g) for g in m.groups())\n    try:\n        return datetime.date(year, month, day)\n"
              "    except ValueError as e:\n        raise DateParseError(f\"invalid date {text!r}: {e}\") from None")
    out, _ = pytest_out(12, secs=0.21)
    code_bash(s, None, "python -m pytest tests/test_dates.py -q", out)
    out, _ = pytest_out(148, secs=6.9)
    code_bash(s, None, "python -m pytest -q", out, run_ms=(6000, 12000))
    code_edit(s, repo, "_DAYS is unused now.", f,
              '_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]\n', '')
    code_bash(s, None, "git diff --stat", " src/util/dates.py | 10 ++++------\n 1 file changed, 4 insertions(+), 6 deletions(-)")
    done(s, False, "healthy", "done",
         "12 calls: find, read, reproduce, fix, re-run the same probe (now raising), re-read the file "
         "after the edit, tests, second fix, tests, cleanup.")


TTL = '''import time
from dataclasses import dataclass, field


@dataclass
class _Entry:
    value: object
    created: float


@dataclass
class TTLCache:
    ttl: float
    clock: callable = time.monotonic
    _data: dict = field(default_factory=dict)

    def put(self, key, value):
        self._data[key] = _Entry(value, self.clock())

    def get(self, key, default=None):
        entry = self._data.get(key)
        if entry is None:
            return default
        now = self.clock()
        if now - entry.created > self.ttl:
            del self._data[key]
            return default
        return entry.value
'''


def code_loop_ttl():
    s = new("kind-code-loop-ttl-revert", CODE, "claude-code", "claude-3-7-sonnet-20250219", "dev-tools",
            pace=(3.0, 13.0))
    f = "src/cache/ttl_cache.py"
    repo = Repo({f: TTL})
    test = "python -m pytest tests/test_ttl_cache.py -q"
    a, b = "        if now - entry.created > self.ttl:", "        if now - entry.created >= self.ttl:"
    out, err = pytest_out(6, [("test_entry_expires_at_ttl", "AssertionError: assert 'v' is None")],
                         "tests/test_ttl_cache.py")
    test_src = ("def test_entry_expires_at_ttl(clock):\n    cache = TTLCache(ttl=5.0, clock=clock)\n"
                "    cache.put('k', 'v')\n    for _ in range(50):\n        clock.advance(0.1)\n"
                "    assert cache.get('k') is None\n\n\ndef test_entry_kept_before_ttl(clock):\n"
                "    cache = TTLCache(ttl=5.0, clock=clock)\n    cache.put('k', 'v')\n    clock.advance(4.9)\n"
                "    assert cache.get('k') == 'v'")
    repo.files["tests/test_ttl_cache.py"] = test_src
    repo.files["tests/conftest.py"] = ("import pytest\n\n\nclass FakeClock:\n    def __init__(self, start=1000.0):\n"
                                       "        self.start = start\n        self.now = start\n\n"
                                       "    def advance(self, seconds):\n        self.now += seconds\n\n"
                                       "    def __call__(self):\n        return self.start\n\n\n"
                                       "@pytest.fixture\ndef clock():\n    return FakeClock()\n")
    grep_out = "tests/conftest.py:9:    def advance(self, seconds):\ntests/conftest.py:10:        self.now += seconds"
    s.user("test_entry_expires_at_ttl fails in tests/test_ttl_cache.py: an entry should be gone once its ttl "
           "has passed. Please fix the cache.")
    code_read(s, repo, "Let me read the cache.", f)
    code_bash(s, "And run the failing test.", test, out, err)
    to_b = ["The entry should be expired when exactly ttl seconds have passed, so the comparison must be >=.",
            "The test advances exactly 5.0 seconds, so at ttl the entry must be expired: use >=.",
            "Expiry at exactly ttl needs >= instead of >. Let me change it.",
            "I'll switch the comparison to >= so an entry expires at exactly ttl."]
    to_a = ["The test still fails with >=. It may be about the other test; revert to > and look again.",
            "Still failing. Revert to > and check the test setup.",
            ">= did not fix it; going back to the original comparison.",
            "Reverting to > since >= changes nothing."]
    for cycle in range(4):
        code_edit(s, repo, to_b[cycle], f, a, b, mark=cycle == 2)
        code_bash(s, None, test, out, err)
        code_read(s, repo, "Let me look at the test again.", "tests/test_ttl_cache.py")
        code_grep(s, None, "def advance", "tests", grep_out)
        code_edit(s, repo, to_a[cycle], f, b, a)
        code_bash(s, None, test, out, err)
        code_read(s, repo, None, f)
        code_bash(s, None, "git diff src/cache/ttl_cache.py", "")
    code_bash(s, "Let me print the elapsed time the test produces.",
              "python -c \"t=0.0\nfor _ in range(50): t+=0.1\nprint(repr(t))\"", "5.000000000000002")
    code_bash(s, None, "python -c \"t=0.0\nfor _ in range(50): t+=0.1\nprint(t - 0.0 > 5.0, t)\"",
              "True 5.000000000000002")
    code_read(s, repo, "5.000000000000002 > 5.0 is True, so '>' would already expire the entry if the "
              "cache saw that time. The fake clock itself must be wrong. Read conftest.", "tests/conftest.py")
    code_edit(s, repo, "FakeClock.__call__ returns the start time, not the advanced one: the cache never "
              "sees time pass, whatever the comparison. Fix the fixture.", "tests/conftest.py",
              "    def __call__(self):\n        return self.start\n",
              "    def __call__(self):\n        return self.now\n")
    out2, _ = pytest_out(7, secs=0.09)
    code_bash(s, None, test, out2)
    done(s, True, "edit-revert cycle", "fixed after 4 cycles",
         "Toggles the comparison in src/cache/ttl_cache.py between > and >= 4 times, each edit followed "
         "by the same failing test output, a re-read of the same test file, the same grep, the revert, "
         "the same test output again, the same file read and an empty git diff: a cycle of 8 calls "
         "(longer than the window of 6). The bug is in the test's fake clock, found after the 4th "
         "cycle. Intervene at the 3rd identical '>' -> '>=' edit.")


MONEY = '''export function roundMoney(amount) {
  return Math.round(amount * 100) / 100;
}

export function formatMoney(amount, currency = "USD") {
  return new Intl.NumberFormat("en-US", { style: "currency", currency }).format(roundMoney(amount));
}
'''


def code_loop_rounding():
    s = new("kind-code-loop-rounding", CODE, "aider", "gpt-4o-2024-08-06", "dev-tools", pace=(2.0, 9.0))
    f = "src/money.js"
    repo = Repo({f: MONEY, "test/money.test.js":
                 "import { roundMoney } from '../src/money.js';\n\ntest('rounds half up', () => {\n"
                 "  expect(roundMoney(1.005)).toBe(1.01);\n  expect(roundMoney(2.675)).toBe(2.68);\n});\n"})
    a, b = "  return Math.round(amount * 100) / 100;", "  return Number(amount.toFixed(2));"
    test_out = ("FAIL test/money.test.js\n  x rounds half up (4 ms)\n\n  expect(received).toBe(expected)\n"
                "  Expected: 1.01\n  Received: 1\n\nTests: 1 failed, 6 passed, 7 total")
    test_err = "Tests: 1 failed, 6 passed, 7 total"
    probe = "node -e \"console.log((1.005).toFixed(2), 1.005 * 100)\""
    s.user("roundMoney(1.005) gives 1 but accounting expects 1.01 (round half up). Fix src/money.js; "
           "test/money.test.js has the cases.")
    code_read(s, repo, None, f)
    code_bash(s, None, "npm test -- money", test_out, test_err, run_ms=(2500, 6000))
    to_b = ["Math.round on the scaled value loses the half; toFixed should round correctly.",
            "Let me try toFixed again, it rounds to two decimals directly.",
            "toFixed(2) is the standard way to round money in JS; switch to it.",
            "Use toFixed(2) instead of Math.round."]
    for cycle in range(4):
        code_edit(s, repo, to_b[cycle], f, a, b, mark=cycle == 2)
        code_bash(s, None, "npm test -- money", test_out, test_err, run_ms=(2500, 6000))
        code_bash(s, "Check what toFixed gives." if cycle == 0 else None, probe, "1.00 100.49999999999999")
        code_read(s, repo, None, "test/money.test.js")
        code_edit(s, repo, "toFixed gives 1.00 as well. Revert to Math.round." if cycle < 2 else
                  "Same failure; revert.", f, b, a)
        code_bash(s, None, "npm test -- money", test_out, test_err, run_ms=(2500, 6000))
        code_grep(s, None, "roundMoney", "src", "src/money.js:1:export function roundMoney(amount) {\n"
                  "src/money.js:6:  return new Intl.NumberFormat(\"en-US\", { style: \"currency\", currency })"
                  ".format(roundMoney(amount));")
        code_read(s, repo, None, f)
    code_edit(s, repo, "Both lose the half because 1.005 * 100 is 100.4999... Add Number.EPSILON before scaling.",
              f, a, "  return Math.round((amount + Number.EPSILON) * 100) / 100;")
    code_bash(s, None, "npm test -- money", "PASS test/money.test.js\n\nTests: 7 passed, 7 total", run_ms=(2500, 6000))
    done(s, True, "edit-revert cycle", "fixed after 4 cycles",
         "Swaps Math.round(x * 100) / 100 and Number(x.toFixed(2)) in src/money.js 4 times; both fail the "
         "same test the same way. Each cycle is 8 calls (edit, test, node probe, read test, revert, "
         "test, grep, read), all with the outputs of the previous cycle. Intervene at the 3rd "
         "identical edit to toFixed.")


def code_loop_missing_module():
    s = new("kind-code-loop-missing-module", CODE, "aider", "qwen2.5-coder-32b-instruct", "dev-tools",
            pace=(2.0, 8.0))
    vite = ('import { defineConfig } from "vite";\nimport react from "@vitejs/plugin-react";\n\n'
            'export default defineConfig({\n  plugins: [react()],\n});\n')
    logo = ('import logoUrl from "../assets/logo.svg";\n\nexport function Logo() {\n'
            '  return <img src={logoUrl} alt="Acme" className="logo" />;\n}\n')
    repo = Repo({"vite.config.ts": vite, "src/components/Logo.tsx": logo})
    build_out = ("> webapp@0.4.0 build\n> tsc -b && vite build\n\nfailed to load config from /app/vite.config.ts\n"
                 "error during build:\nError: Cannot find module 'vite-plugin-svgr'\nRequire stack:\n- /app/vite.config.ts")
    build_err = "Error: Cannot find module 'vite-plugin-svgr'"
    s.user("Render the logo as an inline SVG React component (so we can colour it with CSS) instead of an <img>.")
    code_read(s, repo, None, "vite.config.ts")
    code_edit(s, repo, "Use vite-plugin-svgr to import SVGs as components.", "vite.config.ts",
              'import react from "@vitejs/plugin-react";\n', 'import react from "@vitejs/plugin-react";\nimport svgr from "vite-plugin-svgr";\n')
    code_edit(s, repo, None, "vite.config.ts", "  plugins: [react()],", "  plugins: [react(), svgr()],")
    code_edit(s, repo, "Now the component.", "src/components/Logo.tsx",
              'import logoUrl from "../assets/logo.svg";\n\nexport function Logo() {\n'
              '  return <img src={logoUrl} alt="Acme" className="logo" />;\n}',
              'import LogoSvg from "../assets/logo.svg?react";\n\nexport function Logo() {\n'
              '  return <LogoSvg aria-label="Acme" className="logo" />;\n}')
    code_bash(s, "Build to check.", "npm run build", build_out, build_err, run_ms=(3000, 9000))
    code_bash(s, "The config is updated to use svgr, the build should work now.", "npm run build",
              build_out, build_err, run_ms=(3000, 9000))
    code_bash(s, "Let me run the build again to verify the changes.", "npm run build", build_out, build_err,
              run_ms=(3000, 9000), mark=True)
    code_bash(s, "Run the build again.", "npm run build", build_out, build_err, run_ms=(3000, 9000))
    code_bash(s, "The module is missing from node_modules. Install it.", "npm install --save-dev vite-plugin-svgr",
              "added 6 packages, and audited 412 packages in 4s\n\nfound 0 vulnerabilities", run_ms=(4000, 12000))
    code_bash(s, None, "npm run build", "> webapp@0.4.0 build\n> tsc -b && vite build\n\nvite v5.4.2 building for "
              "production...\n✓ 48 modules transformed.\ndist/index.html  0.46 kB\n✓ built in 1.92s",
              run_ms=(5000, 12000))
    done(s, True, "same failing action", "fixed after 4 failed builds",
         "'npm run build' fails 4 times in a row with the same 'Error: Cannot find module "
         "'vite-plugin-svgr'', nothing changed in between, the thoughts claiming it should work now. "
         "Intervene at the 3rd identical failing build.")


def code_loop_reread():
    s = new("kind-code-loop-reread", CODE, "aider", "qwen2.5-coder-7b-instruct", "dev-tools", pace=(1.5, 6.0))
    conftest = ('import pytest\n\nfrom app.db import make_engine\n\n\n@pytest.fixture(scope="session")\n'
                'def engine():\n    eng = make_engine("sqlite://")\n    yield eng\n    eng.dispose()\n')
    repo = Repo({"tests/conftest.py": conftest,
                 "tests/test_orders.py": "def test_create_order(db_session):\n    ...\n"})
    out = ("E       fixture 'db_session' not found\n>       available fixtures: cache, capfd, capsys, engine, "
           "monkeypatch, pytestconfig, tmp_path\n\ntests/test_orders.py:1\n1 error in 0.18s")
    s.user("tests/test_orders.py errors with \"fixture 'db_session' not found\". Fix the test setup.")
    code_bash(s, None, "python -m pytest tests/test_orders.py -q", out, "1 error in 0.18s")
    t = ("The error says the fixture 'db_session' is not found. The fixtures are defined in "
         "tests/conftest.py, so I need to read tests/conftest.py to see where db_session is defined and "
         "whether it is imported correctly.")
    for i in range(5):
        code_read(s, repo, t, "tests/conftest.py", mark=i == 2)
    code_grep(s, "db_session is not in conftest.py. Search the tests folder.", "def db_session", "tests",
              "tests/fixtures/db.py:14:def db_session(engine):")
    code_edit(s, repo, "Register the fixtures module as a plugin.", "tests/conftest.py",
              "import pytest\n", "import pytest\n\npytest_plugins = [\"tests.fixtures.db\"]\n")
    out2, _ = pytest_out(3, secs=0.3)
    code_bash(s, None, "python -m pytest tests/test_orders.py -q", out2)
    done(s, True, "reasoning and action repeated", "fixed after 5 reads",
         "The same 3-sentence thought and the same Read of tests/conftest.py 5 times in a row (the same "
         "content each time, no db_session in it). Intervene at the 3rd identical read.")


CODING = [code_edits_lexer, code_edits_config, code_edits_fetch, code_plain_dates,
          code_loop_ttl, code_loop_rounding, code_loop_missing_module, code_loop_reread]


# --------------------------------------------------------------------------------------
# Output

KINDS = [("household", HH, HOUSEHOLD), ("webshop", WS, WEBSHOP), ("qa", QA, QUESTIONS),
         ("customer_service", CS, SUPPORT), ("coding", CODE, CODING)]

IMITATES = {
    "household": "text-game household agents (ReAct prompting on 7-9B open models): a room of numbered "
                 "receptacles and objects, one action per step, 'Nothing happens.' when an action "
                 "cannot be done. Some sessions use one tool `act` {\"action\": \"go to cabinet 3\"}, "
                 "others one tool per verb (`go_to`, `open`, `take`, `put`, `look`, `examine`, `clean`, "
                 "`heat`, `cool`, `inventory`) with `{\"target\": ...}`.",
    "webshop": "web-shop agents: `search` {\"query\"} and `click` {\"target\"} over result pages, item "
               "pages with options, detail tabs and Buy Now.",
    "qa": "question-answering agents with an encyclopedia tool: `search` {\"entity\"} (the page's first "
          "paragraph, or 'Could not find [X]. Similar: [...]' as an error), `lookup` {\"keyword\"}, "
          "`finish` {\"answer\"}. The encyclopedia (the country of Aldermoor and its people) is invented.",
    "customer_service": "retail customer-service agents with many user turns: `find_user_id_by_email`, "
                        "`find_user_id_by_name_zip`, `get_user_details`, `get_order_details`, "
                        "`get_product_details`, `cancel_pending_order`, `modify_pending_order_address`, "
                        "`return_delivered_order_items`, `exchange_delivered_order_items`; each user turn is "
                        "a `user_message` (the first carries the store policy as `<relevant-memories>`), "
                        "each reply an `assistant_message`.",
    "coding": "coding agents in the style of aider and Claude Code: `Read` {\"file_path\"}, `Edit` "
              "{\"file_path\", \"old_string\", \"new_string\"}, `Bash` {\"command\"}, `Grep` {\"pattern\", "
              "\"path\"}.",
}


def build():
    """{relative file name: text} of everything the generator writes."""
    SESSIONS.clear()
    _CLOCK[0] = T0
    for _, _, makers in KINDS:
        for make in makers:
            make()
    files = {}
    labels = {}
    for kind, name, _ in KINDS:
        files[name] = "".join(s.lines() for s, _ in SESSIONS if s.file == name)
    for s, meta in SESSIONS:
        assert s.sid not in labels, s.sid
        ids = [e["event_id"] for e in s.events]
        assert len(ids) == len(set(ids)), s.sid
        ts = [e["ts"] for e in s.events]
        assert ts == sorted(ts), s.sid
        labels[s.sid] = {
            "origin": dict(ORIGIN, agent=f"{s.who['agent']} ({s.who['model']}), imitated"),
            "file": s.file,
            "events": len(s.events),
            "tool_calls": s.calls,
            "exit": meta["exit"],
            "loop": meta["loop"],
            "kind": meta["kind"],
            "intervene_at": s.intervene,
            "notes": meta["notes"],
        }
    files["labels.json"] = json.dumps({"sessions": labels}, indent=1, ensure_ascii=False) + "\n"
    files["README.md"] = readme()
    return files


def readme():
    rows = []
    for kind, name, _ in KINDS:
        mine = [meta for s, meta in SESSIONS if s.file == name]
        loops = sum(m["loop"] for m in mine)
        rows.append(f"| `{name}` | {len(mine)} ({loops} loop{'' if loops == 1 else 's'}) | {IMITATES[kind]} |")
    total = len(SESSIONS)
    loops = sum(m["loop"] for _, m in SESSIONS)
    return f"""# Synthetic sessions of five agent kinds (generated)

{total} sessions ({loops} loops, {total - loops} healthy) written for this project by
`scripts/gen_kinds.py`, which writes this directory (`python3 scripts/gen_kinds.py`; `--check`
tells whether the files are what it writes). They are **synthetic**: every room, product,
encyclopedia page, customer, file and line of dialogue was made up for loopguard; no
environment or trajectory was copied. License: the project's (MIT).

They imitate the agents the guard must handle besides the coding agents of
`../real/agent-traces`, with the patterns that make loop detection hard on them: formulaic
thoughts repeated word for word over actions that progress, long exploration sweeps, the same
error text for deliberately varied tries, many edits of one file, many user turns; and the
loops those agents really fall into.

| file | sessions | imitates |
| --- | --- | --- |
{chr(10).join(rows)}

`labels.json` has the format of `../real/agent-traces/labels.json`: per session, `origin` (the
generator), `file`, `events`, `tool_calls`, `exit`, `loop`, `kind`, `intervene_at` (the
`event_id` of the tool call at which a careful person would intervene; null for healthy runs)
and `notes`.

Conventions (those of `../real/agent-traces`): each thought is a `reasoning` event
(`final: true`) in its own response (`turn_id`), the action a `tool_call` in that response,
then `turn_end`, then the `tool_result`: `status: error` with an `error` text when the
environment says the action failed ("Nothing happens.", "Could not find entity.", "Error: ...",
a non-zero exit); `evidence.output_hash` is the first 12 hex digits of the SHA-1 of the
observation text; `evidence.effect` is `read` only for pure look/search/open-to-inspect
actions and `mutation` only for a successful take/put/buy/edit/cancel, otherwise absent.
Times are epoch milliseconds, 1-20 s between steps; `limits.max_tool_rounds` is announced
in a few sessions, as some runtimes do.

The loop criterion is the one of `../real/agent-traces`: the agent repeats an action or a
short cycle whose outcome it has already seen, or fails the same way for the same reason at
least 3 times; a person intervenes at the third repeat (for an enumerated argument, at the
third failure the same way; for a cycle, at the third time its failing step is repeated).
"""


def main(argv):
    check = "--check" in argv[1:]
    unknown = [a for a in argv[1:] if a != "--check"]
    if unknown:
        print(f"usage: {argv[0]} [--check]", file=sys.stderr)
        return 2
    files = build()
    stale = []
    for name, text in files.items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if check:
        for name in stale:
            print(f"gen_kinds: tests/data/kinds/{name} differs from what the generator writes", file=sys.stderr)
        return 1 if stale else 0
    n = len(SESSIONS)
    loops = sum(m["loop"] for _, m in SESSIONS)
    print(f"wrote {len(files)} files to {OUT.relative_to(ROOT)}: {n} sessions, {loops} loops")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
