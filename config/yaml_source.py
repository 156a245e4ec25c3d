"""YAML files read into plain data, remembering the line of every key.

PyYAML's `safe_load` forgets where things were, so the document is composed into nodes (which
carry marks) and built by hand. Keys are taken as their literal text, so `on:` or `yes:` stay
strings rather than YAML 1.1 booleans, and a repeated key is an error instead of silently
overwriting the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from config.problems import ConfigProblem, DataPath

YAML_SUFFIXES = (".yaml", ".yml")
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(slots=True)
class YamlDocument:
    """A YAML file's data with the line (1-based) of each key and of each scalar value.

    `key_lines` maps the path of every mapping entry to its key's line, every list item to
    the line it starts on, and the empty path to the line of the root node.
    """

    file: Path
    data: object
    key_lines: dict[DataPath, int] = field(default_factory=dict)
    value_lines: dict[DataPath, int] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)
    #: False when the file could not be read or parsed at all: there is nothing to validate.
    parsed: bool = True

    def line_of(self, path: DataPath) -> int | None:
        """The line of `path`, or of the nearest enclosing entry that exists."""
        for length in range(len(path), -1, -1):
            line = self.key_lines.get(path[:length])
            if line is not None:
                return line
        return None


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


class _DocumentBuilder:
    def __init__(self, loader: yaml.SafeLoader, document: YamlDocument) -> None:
        self._loader = loader
        self._document = document
        self._building: set[int] = set()
        # Key nodes written in each mapping itself, as opposed to merged in by `<<`.
        self._own_keys: dict[int, set[int]] = {}

    def build(self, node: Node, path: DataPath) -> object:
        if id(node) in self._building:
            # An alias to one of its own ancestors would expand forever.
            self._problem(node, "recursive YAML alias", "an anchor cannot contain its own alias")
            return None
        self._building.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return [self._item(item, (*path, index)) for index, item in enumerate(node.value)]
            self._document.value_lines[path] = _line(node)
            return self._loader.construct_object(node, deep=True)
        finally:
            self._building.discard(id(node))

    def _item(self, node: Node, path: DataPath) -> object:
        self._document.key_lines[path] = _line(node)
        return self.build(node, path)

    def _mapping(self, node: MappingNode, path: DataPath) -> dict[str, object]:
        own_keys = self._own_keys.setdefault(
            id(node), {id(key) for key, _ in node.value if key.tag != _MERGE_TAG}
        )
        # Expands `<<: *anchor` merge keys in place, as PyYAML's own constructor does: merged
        # entries come first, so the mapping's own keys override them.
        self._loader.flatten_mapping(node)
        result: dict[str, object] = {}
        written: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self._problem(key_node, "a key must be a plain word", "write `name: value`")
                continue
            key = str(key_node.value)
            entry = (*path, key)
            is_own = id(key_node) in own_keys
            if is_own and key in written:
                first = self._document.key_lines[entry]
                self._problem(
                    key_node,
                    f"duplicate key '{key}' (first given on line {first})",
                    "keep only one of them",
                )
                continue
            if is_own:
                written.add(key)
            self._document.key_lines[entry] = _line(key_node)
            result[key] = self.build(value_node, entry)
        return result

    def _problem(self, node: Node, message: str, suggestion: str) -> None:
        self._document.problems.append(
            ConfigProblem(self._document.file, _line(node), message, suggestion)
        )


def _yaml_problem(file: Path, error: yaml.YAMLError) -> ConfigProblem:
    line: int | None = None
    text = "invalid YAML"
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        line = int(mark.line) + 1 if mark is not None else None
        # Only the problem and its context: the snippet PyYAML adds would echo the line,
        # which may hold a secret.
        parts = [part for part in (error.context, error.problem) if part]
        if parts:
            text = "invalid YAML: " + ", ".join(parts)
    return ConfigProblem(file, line, text, "fix the YAML syntax (indentation, quotes, colons)")


def parse_yaml(text: str, file: Path) -> YamlDocument:
    """Build the document; invalid YAML leaves `data` as None with the problem recorded."""
    document = YamlDocument(file=file, data=None)
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            document.key_lines[()] = _line(root)
            document.data = _DocumentBuilder(loader, document).build(root, ())
    except yaml.YAMLError as error:
        document.data = None
        document.parsed = False
        document.problems.append(_yaml_problem(file, error))
    finally:
        loader.dispose()
    return document


def read_yaml(path: Path) -> YamlDocument:
    """Read and parse one file; an unreadable file becomes a problem, not an exception."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _unreadable(path, "file not found", "check the path")
    except IsADirectoryError:
        return _unreadable(path, "is a directory, not a YAML file", "give the path of a file")
    except UnicodeDecodeError:
        return _unreadable(path, "file is not valid UTF-8", "save it as UTF-8 text")
    except OSError as error:
        return _unreadable(path, f"cannot read file: {error.strerror}", "check its permissions")
    return parse_yaml(text, path)


def _unreadable(path: Path, message: str, suggestion: str) -> YamlDocument:
    document = YamlDocument(file=path, data=None, parsed=False)
    document.problems.append(ConfigProblem(path, None, message, suggestion))
    return document
