"""An argparse trainer's flags read from its ``--help``, and the spec's flags checked against them.

argparse's help has a stable shape: a ``usage:`` block (options it requires without brackets, a
required group of alternatives in parentheses), then one section per argument group whose lines
name each option at a two-space indent (``  -l LR, --learning_rate LR  help``). Only that shape is
read; anything else is "not argparse" and nothing is checked. The text is the trainer's: names are
kept only when printable, and callers escape what they show.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from trials.errors import did_you_mean
from trials.spec import StudySpec

MAX_HELP_CHARS = 1 << 20
_TOKEN = re.compile(r"[\[\]()|]|[^\s\[\]()|]+")
_HEADING = re.compile(r"^\S[^:]*:\s*$")  # "options:", "optional arguments:", "training:"
_INVOCATION = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")
_ERROR = re.compile(r"^\S+: error: (.+)$", re.MULTILINE)
_HELP = ("-h", "--help")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgparseHelp:
    """The options an argparse parser takes, as its help lists them."""

    flags: tuple[str, ...]  # every option string: -l, --learning_rate, ...
    switches: frozenset[str]  # the ones that take no value (store_true, count, ...)
    # per required option, or required group of alternatives: each one's option strings
    required: tuple[tuple[tuple[str, ...], ...], ...]
    error: str | None = None  # what the parser said instead of its help (``prog: error: ...``)
    complete: bool = True  # False: a usage only (no options section names each option's aliases)

    def shown(self, group: Sequence[Sequence[str]]) -> str:
        """A required option by its long name (``--data``), a group as ``one of --a, --b``."""
        names = [next((a for a in aliases if a.startswith("--")), aliases[0]) for aliases in group]
        return names[0] if len(names) == 1 else "one of " + ", ".join(names)


def parse_help(text: str) -> ArgparseHelp | None:
    """The options in argparse's ``--help`` (or usage-and-error) output; None if it is not argparse's."""
    lines = text[:MAX_HELP_CHARS].splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines or not lines[0].startswith("usage: "):
        return None
    end = next((i for i, line in enumerate(lines) if not line.strip() or _ERROR.match(line)), len(lines))
    usage_flags, required, usage_switches = _usage(" ".join(lines[:end])[len("usage: "):])
    flags: list[str] = list(usage_flags)
    switches = set(usage_switches)
    in_section = complete = False
    for line in lines[end:]:
        if _HEADING.match(line):
            in_section = True
            continue
        complete = complete or bool(in_section and _INVOCATION.match(line))
        m = _INVOCATION.match(line) if in_section else None
        if m is None:
            continue
        for part in m.group(1).split(", "):
            words = part.split()
            if words and words[0].startswith("-") and words[0].isprintable():
                if words[0] not in flags:
                    flags.append(words[0])
                if len(words) == 1:
                    switches.add(words[0])
                else:
                    switches.discard(words[0])
    error = _ERROR.search("\n".join(lines))
    if not flags and error is None:
        return None
    return ArgparseHelp(flags=tuple(flags), switches=frozenset(switches),
                        required=tuple(tuple(_aliases(name, lines[end:]) for name in group) for group in required),
                        error=error.group(1).strip() if error else None, complete=complete)


def _usage(text: str) -> tuple[list[str], list[tuple[str, ...]], set[str]]:
    """The option strings in a usage line, the required ones (groups of alternatives), the switches."""
    flags: list[str] = []
    required: list[tuple[str, ...]] = []
    switches: set[str] = set()
    tokens = _TOKEN.findall(text)[1:]  # the program's name first
    brackets = parens = 0
    group: list[str] = []
    for i, token in enumerate(tokens):
        if token in "[]()|":
            brackets += {"[": 1, "]": -1}.get(token, 0)
            parens += {"(": 1, ")": -1}.get(token, 0)
            if token == ")" and brackets == 0 and group:
                required.append(tuple(group))
                group = []
            continue
        if not token.startswith("-") or token == "-" or not token.isprintable():
            continue
        flags.append(token)
        following = tokens[i + 1] if i + 1 < len(tokens) else "]"
        if following in "[]()|" or following.startswith("-"):
            switches.add(token)
        if brackets == 0:
            if parens:
                group.append(token)
            else:
                required.append((token,))
    return flags, required, switches


def _aliases(flag: str, lines: Sequence[str]) -> tuple[str, ...]:
    """``flag`` and the other option strings of its argument (``-l, --learning_rate``)."""
    for line in lines:
        m = _INVOCATION.match(line)
        if m:
            names = tuple(p.split()[0] for p in m.group(1).split(", ") if p.split())
            if flag in names:
                return names
    return (flag,)


def _fixed_names(args: Sequence[str]) -> list[str]:
    """The option names among a trial's fixed ``args`` (``--epochs=10`` -> ``--epochs``)."""
    return [a.split("=", 1)[0] for a in args if a.startswith("-") and a not in ("-", "--") and not _is_number(a)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class _Match:
    flag: str | None  # the trainer's option it becomes, None: none
    abbreviated: bool = False
    ambiguous: tuple[str, ...] = ()


def _match(name: str, help_: ArgparseHelp) -> _Match:
    """How argparse takes ``name``: exactly, as the one option it abbreviates (allow_abbrev, on by
    default), ambiguously, or not at all."""
    if name in help_.flags:
        return _Match(flag=name)
    if name.startswith("--"):
        prefixed = [f for f in help_.flags if f.startswith(name)]
        if len(prefixed) == 1:
            return _Match(flag=prefixed[0], abbreviated=True)
        if prefixed:
            return _Match(flag=None, ambiguous=tuple(prefixed))
    return _Match(flag=None)


def check_flags(help_: ArgparseHelp, study: StudySpec, *, args: Sequence[str] = (),
                spec_source: str = "the spec") -> tuple[list[str], list[str], int]:
    """Problems and warnings of a trial's flags against an argparse trainer's options.

    Args:
        help_: what :func:`parse_help` read.
        study: the spec's search space (each parameter becomes ``--<parameterId>=<value>``).
        args: the fixed arguments every trial gets before its parameter flags (the pool's ``args``).
        spec_source: how to name the spec in messages.

    Returns:
        (problems: argparse would refuse a trial, or a required option is never given; warnings:
        argparse accepts a flag only as an abbreviation; the number of flags checked).
    """
    problems: list[str] = []
    warnings: list[str] = []
    known = [f for f in help_.flags if f not in _HELP]
    listed = [f for f in known if f.startswith("--")] or known
    given: set[str] = set()
    sometimes: dict[str, str] = {}
    top_level = {p.parameter_id for p in study.parameters}
    named = [(f"--{p.parameter_id}", f"a parameter of {spec_source}", p.parameter_id in top_level)
             for p in study.all_parameters()]
    named += [(name, "in the trial's args", True) for name in _fixed_names(args)]
    for name, where, always in named:
        m = _match(name, help_)
        if m.ambiguous:
            problems.append(f"{name} ({where}) is ambiguous to the trainer's argparse, which refuses it: it could "
                            f"be {', '.join(m.ambiguous)}")
            continue
        if m.flag is None:
            close = did_you_mean(name, known)
            problems.append(f"{name} ({where}) is not a flag of the trainer: "
                            + (f"did you mean {close}?" if close else f"its flags: {', '.join(listed) or 'none'}"))
            continue
        if m.abbreviated:
            warnings.append(f"{name} ({where}) is not a flag of the trainer, but its argparse takes it as {m.flag} "
                            f"(a prefix: allow_abbrev, on by default); name it {m.flag} (a trainer with "
                            f"allow_abbrev=False, or a new option starting alike, refuses it)")
        if m.flag in help_.switches and name.startswith("--") and where != "in the trial's args":
            problems.append(f"{m.flag} takes no value in the trainer (a switch), but each trial gets "
                            f"{name}=VALUE, which argparse refuses")
        if always:
            given.add(m.flag)
        else:
            sometimes.setdefault(m.flag, name)
    for group in help_.required:
        options = [f for aliases in group for f in aliases]
        if any(f in given for f in options):
            continue
        conditional = next((sometimes[f] for f in options if f in sometimes), None)
        if conditional:
            problems.append(f"{conditional} is conditional in {spec_source}, so some trials do not get it, but the "
                            f"trainer requires {help_.shown(group)}")
        else:
            how = "without brackets" if len(group) == 1 else "in parentheses: a required group"
            problems.append(f"the trainer requires {help_.shown(group)} (its usage lists it {how}) but "
                            f"neither {spec_source}'s parameters nor the trial's args give it")
    return problems, warnings, len(named)
