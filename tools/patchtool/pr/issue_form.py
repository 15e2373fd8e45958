"""The YAML an upstream's issue templates use, read without a YAML library.

Tools are stdlib only, so this reads the subset GitHub issue forms (`.github/ISSUE_TEMPLATE/
*.yml`) and Markdown templates' front matter use: block mappings and sequences (a sequence
item may open a mapping: `- type: textarea`), literal and folded block scalars (`value: |`),
plain scalars continued on deeper lines, quoted scalars, flow lists (`[a, b]`) and comments.
Anything else raises with the file and line, rather than guessing.
"""

from __future__ import annotations

import json
import re
from typing import NoReturn

from ..errors import PatchToolError

_KEY_RE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*|\"[^\"]*\"|'[^']*'):(?:\s+(?P<rest>.*))?$")
_BLOCK_SCALARS = ("|", ">", "|-", ">-", "|+", ">+")

Node = object  # dict[str, Node] | list[Node] | str | bool | None


def parse_yaml(text: str, where: str) -> Node:
    """The document in `text` (`where` names it in errors)."""
    reader = _Reader(text.replace("\t", "    ").split("\n"), where)
    node = reader.node(0)
    reader.skip()
    if reader.i < len(reader.lines):
        reader.fail("unexpected indentation")
    return node


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _strip_comment(text: str) -> str:
    """`text` without a ` # comment` outside quotes."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and (i == 0 or text[i - 1] in " [,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] == " "):
            return text[:i].rstrip()
    return text.strip()


def scalar(text: str) -> Node:
    """A plain, quoted or flow-list scalar."""
    text = _strip_comment(text)
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return (
            [scalar(x) for x in re.split(r",\s*(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", inner)]
            if inner
            else []
        )
    if len(text) > 1 and text[0] == text[-1] == '"':
        return str(json.loads(text))
    if len(text) > 1 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return {"true": True, "false": False, "null": None, "~": None, "": None}.get(text, text)


class _Reader:
    """Recursive descent over indented lines; `i` is the next line to read."""

    def __init__(self, lines: list[str], where: str) -> None:
        self.lines, self.where, self.i = lines, where, 0

    def fail(self, why: str) -> NoReturn:
        raise PatchToolError(
            f"{self.where}:{self.i + 1}: {why} (not the YAML subset issue templates use)"
        )

    def skip(self) -> None:
        while self.i < len(self.lines):
            text = self.lines[self.i].strip()
            if text and not text.startswith("#"):
                return
            self.i += 1

    def node(self, indent: int) -> Node:
        self.skip()
        if self.i >= len(self.lines):
            return None
        line = self.lines[self.i]
        at = _indent(line)
        if at < indent:
            return None
        if line.strip() == "-" or line.strip().startswith("- "):
            return self.sequence(at)
        return self.mapping(at)

    def sequence(self, indent: int) -> list[Node]:
        out: list[Node] = []
        while True:
            self.skip()
            if self.i >= len(self.lines) or _indent(self.lines[self.i]) != indent:
                return out
            content = self.lines[self.i].strip()
            if not (content == "-" or content.startswith("- ")):
                return out
            rest = content[1:].lstrip()
            if not rest:
                self.i += 1
                out.append(self.node(indent + 1))
            elif _KEY_RE.match(_strip_comment(rest)):
                column = indent + len(content) - len(rest)
                self.lines[self.i] = " " * column + rest  # the item's mapping starts here
                out.append(self.mapping(column))
            else:
                self.i += 1
                out.append(scalar(rest))

    def mapping(self, indent: int) -> dict[str, Node]:
        out: dict[str, Node] = {}
        while True:
            self.skip()
            if self.i >= len(self.lines) or _indent(self.lines[self.i]) < indent:
                return out
            if _indent(self.lines[self.i]) > indent:
                self.fail("unexpected indentation")
            match = _KEY_RE.match(_strip_comment(self.lines[self.i].strip()))
            if not match:
                self.fail("want `key: value`")
            key = str(scalar(match.group("key")))
            rest = (match.group("rest") or "").strip()
            self.i += 1
            out[key] = self.value(indent, rest)

    def value(self, indent: int, rest: str) -> Node:
        """What follows `key:` on its line (`rest`) and below it."""
        if rest.split(" #")[0].strip() in _BLOCK_SCALARS:
            return self.block(indent, rest.split(" #")[0].strip())
        if rest and not rest.startswith("#"):
            return self.continued(indent, rest)
        self.skip()
        if self.i < len(self.lines):
            line = self.lines[self.i]
            deeper = _indent(line) > indent
            same_level_list = _indent(line) == indent and line.strip().startswith("-")
            if deeper or same_level_list:
                return self.node(indent if same_level_list else indent + 1)
        return None

    def continued(self, indent: int, rest: str) -> Node:
        """A plain scalar and the deeper lines that continue it (folded by spaces)."""
        parts = [rest]
        while self.i < len(self.lines) and self.lines[self.i].strip():
            line = self.lines[self.i]
            if _indent(line) <= indent or line.strip().startswith("#"):
                break
            parts.append(line.strip())
            self.i += 1
        return scalar(" ".join(parts)) if len(parts) == 1 else " ".join(parts)

    def block(self, indent: int, style: str) -> str:
        """A `|` or `>` block scalar: the deeper lines, their common indent removed."""
        lines: list[str] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip() and _indent(line) <= indent:
                break
            lines.append(line)
            self.i += 1
        while lines and not lines[-1].strip():
            lines.pop()
        body = [x for x in lines if x.strip()]
        cut = min((_indent(x) for x in body), default=0)
        text = "\n".join(x[cut:] for x in lines)
        if style.startswith(">"):
            text = re.sub(r"(?<=\S)\n(?=\S)", " ", text)
        return text if style.endswith("-") else text + "\n"
