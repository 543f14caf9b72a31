"""The README runs as written: its shell blocks, in order, in one shell, against a real `hookbus up`.

The blocks are fed to one bash, as a reader would type them. A command ending
in ``& NAME=$!`` runs in the background; like the reader, the test waits for
its first line (the README names it) before feeding the rest. The ports the
tour takes come from the variables its first block sets (free ones here); the
agent runs on the built-in model, as the README has it, and the tour checks its answer. A trailing
``# prints: TEXT`` or ``# prints N JSON objects`` comment is a claim the run's output is checked against. The Python
examples the README shows are the files in examples/, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bus.testing import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MARKER = re.compile(r"<!--\s*(readme-test: skip|include:)\s*(.*?)\s*-->")
#: A background step: ``command ... & NAME=$!`` (then the reader waits for its first line).
BACKGROUND = re.compile(r"&\s+[A-Z_]+=\$!\s*(#.*)?$")
#: The first line each background command prints once it is ready, as the README names it.
READY = {
    "hookbus up": re.compile(r"^ready \(pid \d+\)", re.M),
    "hookbus tail": re.compile(r"^tailing ", re.M),
    "hookbus serve": re.compile(r"^serving \S+ on ", re.M),
    "hookbus agent": re.compile(r"^agent \S+: serving", re.M),
}
#: The only blocks not run: the set-up commands (one installs and runs forever, one is the suite itself).
SET_UP = ["python3 -m pip install . && hookbus up", "bash scripts/test"]


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    marker: str | None  # "readme-test: skip" or "include:"
    argument: str  # the skip reason or the included path


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, each with the marker comment right above it, if any."""
    found: list[Block] = []
    lines = text.splitlines(keepends=True)
    marker: tuple[str, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if comment := MARKER.fullmatch(line.strip()):
            marker = (comment.group(1), comment.group(2))
        elif line.startswith("```"):
            lang = line[3:].strip()
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            kind, argument = marker or (None, "")
            found.append(Block(lang, "".join(lines[index + 1 : end]), kind, argument))
            index, marker = end, None
        elif line.strip():
            marker = None
        index += 1
    return found


def test_the_set_up_commands_stay_and_are_the_only_blocks_not_run() -> None:
    skipped = [block.text.strip() for block in blocks(README) if block.marker == "readme-test: skip"]
    assert skipped == SET_UP
    assert "bash scripts/test" in (ROOT / ".ci/run").read_text(), ".ci/run calls the README's test command"
    assert {block.lang for block in blocks(README)} <= {"sh", "python"}, "every block says what it is"


def test_the_python_the_readme_shows_is_the_examples_byte_for_byte() -> None:
    shown = [block for block in blocks(README) if block.lang == "python"]
    assert shown, "the README shows Python"
    for block in shown:
        assert block.marker == "include:", f"a Python block that is no file of examples/: {block.text[:60]!r}"
        assert block.text == (ROOT / block.argument).read_text(), f"README.md shows an old {block.argument}"
        assert f"python3 {block.argument}" in README or f"hookbus serve {block.argument}" in README


def test_the_block_parser_sees_markers_and_backgrounds() -> None:
    """The helpers above are not vacuous: a marker binds to the next block only; backgrounds are found."""
    sample = "<!-- include: a.py -->\n```python\nx = 1\n```\ntext\n```sh\nls\n```\n"
    parsed = blocks(sample)
    assert [(b.lang, b.marker, b.argument) for b in parsed] == [("python", "include:", "a.py"), ("sh", None, "")]
    assert BACKGROUND.search("hookbus up --workspace ws & UP=$!   # note")
    assert not BACKGROUND.search("kill $UP && wait $UP")


#: A claim about what a command prints, in a trailing comment: ``# prints: TEXT`` (``...`` elides) or
#: ``# prints N JSON objects`` (one a line).
PRINTS = re.compile(r"\s#\s+prints(?::\s+(?P<text>.+?)|\s+(?P<count>\w+) JSON objects?\b.*?)\s*$")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


@dataclass(frozen=True)
class Claim:
    """What the README says a command prints, and the markers that bound the command's output."""

    number: int
    command: str
    text: str | None  # the literal, with ``...`` for anything on the line
    count: int | None  # how many JSON objects

    @property
    def begin(self) -> str:
        return f"@@claim-{self.number}-begin"

    @property
    def end(self) -> str:
        return f"@@claim-{self.number}-end"

    def pattern(self) -> re.Pattern[str]:
        assert self.text is not None
        return re.compile(".*?".join(re.escape(part) for part in self.text.split("...")))

    def check(self, out: str) -> str | None:
        """Why the output breaks the claim; None when it holds. A literal is looked for in the whole output (a
        background command prints when it prints: ``wait $TURN`` may come after the line it claims); a count
        in the command's own output."""
        if self.text is not None:
            return None if self.pattern().search(out) else f"{self.command!r} never printed {self.text!r}"
        start = out.index(f"{self.begin}\n") + len(self.begin) + 1  # what ran before may end without a newline
        own = out[start : out.index(self.end, start)]
        objects = [line for line in own.splitlines() if line.startswith("{") and line.endswith("}")]
        return None if len(objects) == self.count else f"{self.command!r} printed {len(objects)} JSON objects"


def with_claims(script: str) -> tuple[str, list[Claim]]:
    """The script with markers echoed around each command that has a ``# prints`` claim, and the claims."""
    lines: list[str] = []
    claims: list[Claim] = []
    for line in script.splitlines(keepends=True):
        found = PRINTS.search(line.rstrip("\n"))
        if found is None:
            lines.append(line)
            continue
        count = found.group("count")
        number = None if count is None else int(count) if count.isdigit() else NUMBERS.get(count)
        assert count is None or number is not None, f"say how many in digits or words: {line.strip()!r}"
        claim = Claim(len(claims), line.split("#")[0].strip(), found.group("text"), number)
        claims.append(claim)
        lines += [f"echo {claim.begin}\n", line]
        if not BACKGROUND.search(line.rstrip("\n")):
            lines.append(f"echo {claim.end}\n")
    return "".join(lines), claims


def test_the_output_claims_are_found_and_checked_as_written() -> None:
    """The claim parser is not vacuous: literals and counts are found, and a wrong claim fails."""
    script, claims = with_claims("ls   # prints: a ... b\nx & X=$!  # prints: ready\ny  # prints two JSON objects\n")
    assert [(c.text, c.count) for c in claims] == [("a ... b", None), ("ready", None), (None, 2)]
    assert script.splitlines()[:3] == ["echo @@claim-0-begin", "ls   # prints: a ... b", "echo @@claim-0-end"]

    def ran(first: str, third: str) -> str:  # what bash prints running the script, given what ls and y print
        ls = f"\n@@claim-0-begin\n{first}@@claim-0-end\n"
        return ls + f"@@claim-1-begin\nready\n@@claim-2-begin\n{third}@@claim-2-end\n"

    assert claims[0].check(ran("a then b\n", "")) is None and claims[1].check(ran("", "")) is None
    assert claims[0].check(ran("b then a\n", "")) is not None, "a literal nobody printed"
    assert claims[0].check(ran("a\nb\n", "")) is not None, "a literal is one line"
    assert claims[2].check(ran("", '{"a":1}\n{"b":2}\n')) is None
    assert claims[2].check(ran("", '{"a":1}\n')) is not None, "one JSON object too few"
    _, readme_claims = with_claims("".join(b.text for b in blocks(README) if b.lang == "sh"))
    assert len(readme_claims) >= 6, "the tour's output comments are claims the test checks"


def chunks(script: str) -> list[tuple[str, str | None]]:
    """The script cut after each background step: (text to feed, the background command or None)."""
    out: list[tuple[str, str | None]] = []
    current: list[str] = []
    for line in script.splitlines(keepends=True):
        current.append(line)
        if BACKGROUND.search(line.rstrip("\n")):
            command = next((name for name in READY if line.startswith(name)), None)
            assert command is not None, f"the README starts {line.strip()!r}: which line says it is ready?"
            out.append(("".join(current), command))
            current = []
    if "".join(current).strip():
        out.append(("".join(current), None))
    return out


class Shell:
    """One bash fed from a pipe, its stdout and stderr together, read as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.output = ""
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.output += chunk.decode(errors="replace")

    async def feed(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        await self.proc.stdin.drain()

    async def wait_for(self, pattern: re.Pattern[str], after: int, what: str, timeout: float = 90.0) -> None:
        def seen() -> bool:
            if self.proc.returncode is not None and not pattern.search(self.output, after):
                raise AssertionError(f"bash exited ({self.proc.returncode}) before {what}:\n{self.output}")
            return pattern.search(self.output, after) is not None

        try:
            await wait_until(seen, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- output so far:\n{self.output}") from None

    async def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = await asyncio.wait_for(self.proc.wait(), 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group is the tour's: anything it left running
            await asyncio.gather(self._reader, return_exceptions=True)
        return code


def tour_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "HOOKBUS_WORKSPACE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this environment's hookbus
    env.update(
        NATS_PORT=str(free_port()),
        API_PORT=str(free_port()),
        METRICS_PORT=str(free_port()),
        PYTHONPATH=str(ROOT),  # the examples import bus from this tree
    )
    return env


@pytest.mark.timeout(600)  # the whole tour: a bus, an agent, a module, a dozen commands
async def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.fail("the README's tour uses curl")
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("js", "__pycache__"))
    runnable = [b.text for b in blocks(README) if b.lang == "sh" and b.marker != "readme-test: skip"]
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "--noprofile",
        "--norc",
        "-s",
        cwd=tmp_path,
        env=tour_environment(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    shell = Shell(proc)
    try:
        await shell.feed("set -euo pipefail\n")
        script, claims = with_claims("".join(runnable))
        for number, (text, background) in enumerate(chunks(script)):
            start = len(shell.output)
            await shell.feed(text)
            if background is not None:
                await shell.wait_for(READY[background], start, f"{background} to be ready (step {number})")
            else:
                await shell.feed(f"echo @@step-{number}-done\n")
                await shell.wait_for(re.compile(f"^@@step-{number}-done$", re.M), start, f"step {number} to end")
    finally:
        code = await shell.close()
    out = shell.output
    assert code == 0, out
    expected = [
        "no approved handlers: this workspace's embedded bus is new",  # hookbus up on a new workspace
        "prx.lifecycle.tool_call depth=0 session=s1",  # hookbus tail
        "prx.lifecycle.error depth=0",
        "    stdout | ALERT rate limited",  # hookbus journal --kind shell_hook
        "stdout | ALERT rate limited",  # hookbus hooks test
        "tool_call shell 0",  # examples/quickstart.py
        "serving guard.no_rm on tool.call (fail-closed), waiting for approval",
        "approved guard.no_rm",
        '"decision":"cancel"',
        "detached guard.no_rm",
        "would fire: a turn on agent 'eva' at depth 1",
        "spend-check: on eva.spend.day -> agent eva",  # hookbus triggers, from the running engine
        "hookbus_events_emitted_total",
        "hookbus up: stopped",
    ]
    broken = [why for claim in claims if (why := claim.check(out)) is not None]
    assert broken == [], f"the README's output comments: {broken}\n--- output:\n{out}"
    missing = [line for line in expected if line not in out]
    assert missing == [], f"{missing}\n--- output:\n{out}"
    assert '"event":"tool_call"' in (tmp_path / "ws" / "audit.jsonl").read_text()
    assert re.search(r"^agents\n  eva ", out, re.M), "hookbus status lists the agent"
    assert re.search(r"^.*\btrigger\b.*\bspend-check\b.*\bfired\b", out, re.M), "the journal has the firing"
    # The trigger's turn, answered by the built-in model: the prompt the trigger made is the one it quotes.
    assert re.search(r'"answer":"Built-in model hookbus-builtin here: \d+ messages read; the last from the user said '
                     r'\\"We spent 42 USD today', out), "the turn's answer"  # fmt: skip
    assert out.count("module guard is gone") == 1, "one log line per fact, however many views hookbus up runs"
    assert "Traceback" not in out
