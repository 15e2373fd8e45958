"""The hooks of an upstream's `.pre-commit-config.yaml`, read without a YAML library.

Tools are stdlib only, so this reads the subset pre-commit configs use: `repos:` entries with
`repo`/`rev`, `hooks:` entries with `id`, `args` (flow list), `files`/`exclude` (regex
scalars), `types`/`types_or` (flow lists); block scalars (`entry: |`) are skipped. Anything it
cannot read raises with the file and line, rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import PatchToolError

_ITEM_RE = re.compile(r"^(?P<indent>\s*)-\s+(?P<key>[A-Za-z_][\w-]*):\s*(?P<value>.*)$")
_KEY_RE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w-]*):\s*(?P<value>.*)$")
_HOOK_KEYS = ("args", "files", "exclude", "types", "types_or")
_BLOCK_SCALARS = ("|", ">", "|-", ">-", "|+", ">+")


@dataclass(frozen=True)
class Hook:
    """One hook of one repo entry; `line` is its `- id:` line (1-based) for messages."""

    repo: str
    rev: str
    id: str
    line: int
    args: tuple[str, ...] = ()
    files: str = ""
    exclude: str = "^$"
    types: tuple[str, ...] = ()


def _strip_comment(text: str) -> str:
    """Drop a ` # comment` that is outside quotes."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.strip()


def _scalar(text: str, where: str) -> str:
    """A plain, single- or double-quoted YAML scalar."""
    text = _strip_comment(text)
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        body = text[1:-1]
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), body)
    if text[:1] in ("'", '"', "[", "{", "|", ">", "&", "*", "!"):
        raise PatchToolError(f"{where}: cannot read YAML value {text!r} (unsupported syntax)")
    return text


def _flow_list(text: str, where: str) -> tuple[str, ...]:
    """`[a, "b c", 'd']` -> ('a', 'b c', 'd'); a bare scalar -> (scalar,)."""
    text = _strip_comment(text)
    if not text.startswith("["):
        return (_scalar(text, where),)
    if not text.endswith("]"):
        raise PatchToolError(f"{where}: multi-line flow lists are not supported: {text!r}")
    items: list[str] = []
    current, quote = "", ""
    for ch in text[1:-1]:
        if quote:
            current += ch
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            current += ch
            quote = ch
        elif ch == ",":
            items.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        items.append(current.strip())
    return tuple(_scalar(item, where) for item in items)


def _block_list(
    lines: list[str], start: int, indent: int, where: str
) -> tuple[tuple[str, ...], int]:
    """A block sequence (`- a` lines) after `key:`; returns (items, index after it)."""
    items: list[str] = []
    i = start
    while i < len(lines):
        text = lines[i]
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        dash = len(text) - len(text.lstrip())
        if dash < indent or not stripped.startswith("- "):
            break
        i += 1
        if _strip_comment(stripped[2:]) in _BLOCK_SCALARS:
            # A multi-line item (a script): kept as a placeholder, its lines skipped.
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > dash
            ):
                i += 1
            items.append("<block>")
            continue
        items.append(_scalar(stripped[2:], f"{where}:{i}"))
    return tuple(items), i


def read_hooks(text: str, where: str) -> list[Hook]:
    """Every hook in a pre-commit config, in file order; `where` names the file in errors."""
    lines = text.splitlines()
    hooks: list[Hook] = []
    repo = rev = ""
    hook: dict[str, object] | None = None
    hook_indent = -1
    skip_deeper_than = -1

    def finish() -> None:
        if hook is not None:
            hooks.append(Hook(repo=repo, rev=rev, **hook))  # type: ignore[arg-type]

    i = 0
    while i < len(lines):
        raw = lines[i]
        number = i + 1
        i += 1
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if not stripped or stripped.startswith("#"):
            continue
        if skip_deeper_than >= 0:
            if indent > skip_deeper_than:
                continue
            skip_deeper_than = -1
        item = _ITEM_RE.match(raw)
        key_match = item or _KEY_RE.match(raw)
        if key_match is None:
            continue
        key, value = key_match["key"], key_match["value"]
        at = f"{where}:{number}"
        key_indent = indent + 2 if item else indent
        if _strip_comment(value) in _BLOCK_SCALARS:
            skip_deeper_than = key_indent
            continue
        if item and key == "repo":
            finish()
            hook, repo, rev = None, _scalar(value, at), ""
        elif key == "rev" and hook is None:
            rev = _scalar(value, at)
        elif item and key == "id":
            finish()
            hook = {"id": _scalar(value, at), "line": number}
            hook_indent = indent
        elif hook is not None and key in _HOOK_KEYS and indent > hook_indent:
            if key in ("files", "exclude"):
                hook[key] = _scalar(value, at)
            elif _strip_comment(value):
                hook[key if key != "types_or" else "types"] = _flow_list(value, at)
            else:
                items, i = _block_list(lines, i, key_indent, where)
                hook[key if key != "types_or" else "types"] = items
    finish()
    return hooks


def tag_version(rev: str) -> str:
    """`v0.9.9` -> `0.9.9`; `refs/tags/24.4.2:refs/tags/24.4.2` -> `24.4.2`."""
    ref = rev.split(":", 1)[0]
    return ref.rsplit("/", 1)[-1].removeprefix("v")
