"""The README and docs/ show commands that work.

Every ``reef …``, ``reef-pi …`` and ``reef-claude …`` line in a shell code block of ``README.md``
and ``docs/*.md``
must parse: the subcommand exists and its ``--help`` succeeds, and the options and arguments on
the line are ones it accepts (click's own parser, through ``typer.main.get_command``).  Dotted
``reef serve`` settings are read by reef's config layer, so they are checked with
:func:`reef_core.config.load_settings` (and ``--recipe.config.<field>`` by the recipe's own
config class); ``reef-pi`` verbs by the launcher's own argument parsers.  ``toml`` blocks must
load as settings files, and relative links must name files that exist.  The checker is tested
on lines that must fail, so a checker that passes everything fails here.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from reef_cli.main import app
from reef_core.config import load_settings
from reef_core.errors import ReefError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"", "sh", "bash", "shell", "console", "zsh"}
SETUP = ["scripts/setup.sh && .venv/bin/reef demo", "scripts/setup.sh --dev && scripts/check.sh"]

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
_OPERATORS = {"&&", "||", "|", "|&", ";", ";;", "&", "(", ")"}
_REDIRECTS = {">", ">>", "<", "<<", "<<<", ">&", "<&", "&>", ">|"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = {"env", "exec", "time", "command", "nohup"}
# an unlabelled block is read as shell when a line of it starts by running reef
_SHELL_LOOKING = re.compile(r"^\s*(\$\s+)?([A-Za-z_]\w*=\S*\s+)*(\S*/)?reef(-pi)?(\s|$)", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence
    lang: str
    text: str


@dataclass(frozen=True)
class Invocation:
    program: str  # "reef", "reef-pi" or "reef-claude"
    args: tuple[str, ...]
    where: str  # page:line

    def __str__(self) -> str:
        return shlex.join([self.program, *self.args])


# -- reading the pages -------------------------------------------------------------------------


def code_blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    fence: str | None = None
    lang, start, body = "", 0, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if fence is None:
            match = _FENCE.match(line.strip())
            if match:
                fence, lang, start, body = match.group(1), match.group(2).lower(), number, []
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            blocks.append(Block(page, start, lang, "\n".join(body)))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{page.name}:{start}: a code block is never closed"
    return blocks


def shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """``(line number, command line)`` with continuations joined; prompts (``$ ``) removed.
    In ``console`` blocks only prompted lines are commands (the rest is output)."""
    pending, first = "", 0
    for offset, raw in enumerate(block.text.splitlines(), 1):
        line = raw.rstrip()
        if not pending:
            first = block.line + offset
            stripped = line.lstrip()
            if stripped.startswith("$ "):
                line = stripped[2:]
            elif block.lang == "console":
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending


def strip_comment(line: str) -> str:
    """Drop a shell comment: ``#`` at a word start, outside quotes (``a#b`` is a word)."""
    quote: str | None = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def substitutions(line: str) -> tuple[str, list[str]]:
    """``$(…)`` and backquoted command lines taken out (each is a command line of its own)."""
    inner: list[str] = []
    out, i = [], 0
    while i < len(line):
        if line.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
            inner.append(line[i + 2 : j - 1])
            out.append("SUBSTITUTED")
            i = j
        elif line[i] == "`" and (end := line.find("`", i + 1)) > i:
            inner.append(line[i + 1 : end])
            out.append("SUBSTITUTED")
            i = end + 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out), inner


def invocations(line: str, where: str) -> list[Invocation]:
    """The ``reef`` and ``reef-pi`` commands a shell line runs (after ``&&``, ``|``, env
    assignments, inside ``$(…)``).  Raises ValueError on a line the shell could not split."""
    outer, inner = substitutions(strip_comment(line))
    found: list[Invocation] = []
    for sub in inner:
        found += invocations(sub, where)
    lexer = shlex.shlex(outer, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    segments: list[list[str]] = [[]]
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token in _OPERATORS:
            segments.append([])
        elif token in _REDIRECTS or re.fullmatch(r"\d[<>]&?\d*", token):
            skip_next = not token[-1].isdigit()
        else:
            segments[-1].append(token)
    for words in segments:
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in _WRAPPERS):
            words = words[1:]
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program in ("reef", "reef-pi", "reef-claude"):
            found.append(Invocation(program, tuple(words[1:]), where))
    return found


def page_invocations(page: Path) -> tuple[list[Invocation], list[str]]:
    """Every invocation in the page's shell blocks, and the lines that could not be split."""
    found: list[Invocation] = []
    unreadable: list[str] = []
    for block in code_blocks(page):
        if block.lang not in SHELL or (block.lang == "" and not _SHELL_LOOKING.search(block.text)):
            continue
        for number, line in shell_lines(block):
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{number}"
            try:
                found += invocations(line, where)
            except ValueError as exc:  # an unclosed quote
                if re.search(r"(^|[\s;&|(/])reef(-pi)?(\s|$)", line):
                    unreadable.append(f"{where}: `{line.strip()}`: {exc}")
    return found, unreadable


# -- checking one command ----------------------------------------------------------------------


def _name(path: list[str]) -> str:
    return " ".join(["reef", *path])


@cache
def _root() -> Any:
    return typer.main.get_command(app)


def _message(exc: BaseException) -> str:
    format_message = getattr(exc, "format_message", None)
    return format_message() if callable(format_message) else str(exc) or type(exc).__name__


def _option_takes_value(command: Any, name: str) -> bool | None:
    """None when ``command`` has no option ``name``."""
    for param in command.params:
        if name in (*param.opts, *param.secondary_opts) and name.startswith("-"):
            return not getattr(param, "is_flag", False) and not getattr(param, "count", False)
    return None


def resolve(args: tuple[str, ...]) -> tuple[list[str], Any, list[str], list[str]]:
    """Walk the command groups: ``(subcommand path, command, the rest of args, problems)``."""
    command, path, i = _root(), [], 0
    while isinstance(getattr(command, "commands", None), dict):
        while i < len(args) and args[i].startswith("-"):
            name, has_value, _ = args[i].partition("=")
            if name == "--help":
                return path, command, [], []
            takes_value = _option_takes_value(command, name)
            if takes_value is None:
                return path, command, [], [f"{_name(path)} has no option {name}"]
            i += 2 if takes_value and not has_value else 1
        if i == len(args):
            return path, command, [], ([] if "--version" in args else [f"{_name(path)} needs a subcommand"])
        sub = command.commands.get(args[i])
        if sub is None:
            known = ", ".join(sorted(command.commands))
            return path, command, [], [f"{_name([*path, args[i]])}: no such command ({known})"]
        command, path, i = sub, [*path, args[i]], i + 1
    return path, command, list(args[i:]), []


def reef_problems(args: tuple[str, ...]) -> list[str]:
    """What is wrong with ``reef ARGS`` as a command line ([] when it parses)."""
    path, command, rest, problems = resolve(args)
    if problems or "--help" in rest or not path:
        return problems
    try:
        ctx = command.make_context(_name(path), list(rest))
    except Exception as exc:  # click's usage errors: no such option, missing argument, bad value
        return [_message(exc)]
    if path == ["serve"]:
        return _settings_problems(list(ctx.args))
    return []


def _settings_problems(overrides: list[str]) -> list[str]:
    try:
        settings = load_settings(overrides=overrides, env={}, cwd=ROOT)
    except ReefError as exc:
        return [exc.message]
    config = dict(settings.recipe.config)
    if not config:
        return []
    try:
        if settings.recipe.name == "reefine":
            from recipes.reefine.recipe import ReefineConfig

            ReefineConfig.from_config(config)
        elif settings.recipe.name == "grpo":
            from recipes.grpo.recipe import GrpoConfig

            GrpoConfig.from_config(config)
    except ReefError as exc:
        return [f"recipe {settings.recipe.name}: {exc.message}"]
    return []


class _Parsed(Exception):
    """Raised right after a launcher verb parsed its arguments, before it does anything."""


def launcher_problems(program: str, args: tuple[str, ...], home: Path) -> list[str]:
    """What is wrong with ``reef-pi ARGS`` or ``reef-claude ARGS``: their verbs' own parsers
    judge; other arguments are the harness's and are passed to it as they are."""
    from adapters import launcher as core
    from adapters.claude_code.launcher import CLAUDE
    from adapters.pi.launcher import PI

    harness = {"reef-pi": PI, "reef-claude": CLAUDE}[program]
    if not args or args[0] not in core.COMMANDS:
        return []
    parse = core._parse

    def parse_then_stop(*a: Any, **kw: Any) -> Any:
        parse(*a, **kw)
        raise _Parsed

    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "_parse", parse_then_stop)
        try:
            code = core.main(
                harness, list(args), url="http://127.0.0.1:9", scenario="docs", env={"HOME": str(home)},
                out=io.StringIO(), err=err,
            )  # fmt: skip
        except _Parsed:
            return []
    if code == 0:
        return []
    first = err.getvalue().strip().splitlines()[:1]
    return [first[0].removeprefix(f"{program}: ") if first else f"exit code {code}"]


def problems_of(invocation: Invocation, home: Path) -> list[str]:
    if invocation.program in ("reef-pi", "reef-claude"):
        found = launcher_problems(invocation.program, invocation.args, home)
    else:
        found = reef_problems(invocation.args)
    return [f"{invocation.where}: `{invocation}`: {p}" for p in found]


# -- the pages ---------------------------------------------------------------------------------


def test_the_readme_starts_with_the_two_setup_commands():
    first = code_blocks(ROOT / "README.md")[:2]
    assert [b.text.strip() for b in first] == SETUP
    assert SETUP[1] in (ROOT / ".ci" / "run").read_text(), "CI runs the README's test command"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_parses(page: Path, tmp_path: Path):
    found, problems = page_invocations(page)
    for invocation in found:
        problems += problems_of(invocation, tmp_path)
    assert not problems, "commands in code blocks that do not parse:\n" + "\n".join(problems)


def test_the_pages_show_commands_at_all():
    """Guards the extractor: if it silently found nothing, every page would pass."""
    found = [i for page in PAGES for i in page_invocations(page)[0]]
    programs = {(i.program, i.args[0] if i.args else "") for i in found}
    assert {("reef", "demo"), ("reef", "serve"), ("reef", "evolve"), ("reef-pi", "evolve")} <= programs
    assert len(found) >= 30


def test_every_subcommand_shown_has_working_help():
    """``reef … --help`` succeeds for every subcommand path the pages use (in process)."""
    paths = set()
    for page in PAGES:
        for invocation in page_invocations(page)[0]:
            if invocation.program == "reef":
                path, _, _, problems = resolve(invocation.args)
                if not problems:
                    paths.add(tuple(path))
    assert ("serve",) in paths
    runner = CliRunner()
    for path in sorted(paths):
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, f"reef {' '.join(path)} --help: {result.output}"


def test_the_installed_command_answers_help():
    """One real run of the entry point the README names."""
    script = Path(sys.executable).with_name("reef")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "reef_cli"]
    done = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "evolve" in done.stdout


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_toml_blocks_are_valid_settings_files(page: Path, tmp_path: Path):
    for block in code_blocks(page):
        if block.lang == "toml":
            file = tmp_path / "reef.toml"
            file.write_text(block.text)
            try:
                load_settings(file=file, env={}, cwd=tmp_path)
            except ReefError as exc:
                pytest.fail(f"{page.name}:{block.line}: {exc.message}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_files_that_exist(page: Path):
    text = "\n".join(line for line in page.read_text().splitlines())
    missing = [
        target
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme] == []


# -- the checker itself --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "reef nonexistent-verb",
        ".venv/bin/reef evolve myproject 'text' --no-such-flag",
        "reef evolve myproject",  # the text is missing
        "reef evolve myproject text --timeout soon",
        "reef scenario frobnicate",
        "reef --no-such-global status",
        "REEF_URL=http://127.0.0.1:8901 reef log myproject --kind",
        "reef serve --inference.upstream-urll http://127.0.0.1:11434",
        "reef serve --inference.upstream-api grpc",
        "reef serve --port 8900",  # settings are dotted
        "reef serve --recipe reefine --recipe.config.no-such-budget 3",
        "scripts/setup.sh && .venv/bin/reef demo --model-size big",
        'echo "$(reef nonexistent-verb)"',
        "reef-pi evolve 'text' --no-such-flag",
        "reef-pi report --feedback 'no score'",
        "reef-pi update --release",
    ],
)
def test_the_checker_reports_a_bad_line(line: str, tmp_path: Path):
    found = invocations(line, "test")
    assert found, f"no reef command found in {line!r}"
    assert [p for i in found for p in problems_of(i, tmp_path)], f"{line!r} passed the check"


@pytest.mark.parametrize(
    "line",
    [
        "scripts/setup.sh && .venv/bin/reef demo",
        'FOO=1 .venv/bin/reef evolve myproject "a b # not a comment" --wait  # a comment',
        "reef --debug releases myproject --state-dir .reef/reefine --json",
        "reef serve -c reef.toml --recipe reefine --reef.port=8902 --storage.fsync",
        "reef serve --recipe grpo --recipe.config.group-size 8",
        "reef log myproject --kind report --kind ask -n 20 > items.txt",
        "reef --version",
        "reef scenario show myproject --json",
        "reef-pi -p 'anything pi takes' --model x",
        "reef-pi versions v2",
        "reef-pi help",
    ],
)
def test_the_checker_passes_a_good_line(line: str, tmp_path: Path):
    found = invocations(line, "test")
    assert found
    assert [p for i in found for p in problems_of(i, tmp_path)] == []


def test_the_extractor_reads_blocks_and_continuations(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```sh\nreef serve \\\n    --reef.port 8901   # note\n```\n"
        "```console\n$ reef status\nreef 1.0 serving on http://x\n```\n"
        "```text\nreef nonexistent\n```\n"
        "```\nreef_cli/   the `reef` command\n```\n"
        "```\n.venv/bin/reef nonexistent\n```\n"
    )
    blocks = code_blocks(page)
    assert [b.lang for b in blocks] == ["sh", "console", "text", "", ""]
    lines = [line for b in blocks[:2] for _, line in shell_lines(b)]
    assert lines == ["reef serve      --reef.port 8901   # note", "reef status"]
    found, unreadable = page_invocations(page)
    # the text block and the unlabelled listing are not shell; the unlabelled command is
    assert [str(i) for i in found] == ["reef serve --reef.port 8901", "reef status", "reef nonexistent"]
    assert unreadable == []
