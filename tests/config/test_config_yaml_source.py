"""YAML read into data with the line of every key, and YAML problems as ConfigProblems."""

from __future__ import annotations

import textwrap
from pathlib import Path

from config.yaml_source import parse_yaml, read_yaml

FILE = Path("f.yaml")


def parse(text: str) -> tuple[object, dict[tuple[str | int, ...], int], list[str]]:
    document = parse_yaml(textwrap.dedent(text).removeprefix("\n"), FILE)
    return document.data, document.key_lines, [str(problem) for problem in document.problems]


def test_lines_of_keys_and_list_items() -> None:
    data, lines, problems = parse(
        """
        # comment
        agent:
          type: echo
        channels:
          - type: cli

          - type: api
            port: 1
        """
    )
    assert problems == []
    assert data == {
        "agent": {"type": "echo"},
        "channels": [{"type": "cli"}, {"type": "api", "port": 1}],
    }
    assert lines[("agent",)] == 2
    assert lines[("agent", "type")] == 3
    assert lines[("channels", 0)] == 5
    assert lines[("channels", 1)] == 7
    assert lines[("channels", 1, "port")] == 8


def test_keys_are_their_literal_text() -> None:
    data, _, _ = parse("on: 1\nyes: 2\n3: x\n")
    assert data == {"on": 1, "yes": 2, "3": "x"}


def test_values_keep_yaml_types() -> None:
    data, _, _ = parse("a: yes\nb: 1.5\nc: ~\nd: '8090'\n")
    assert data == {"a": True, "b": 1.5, "c": None, "d": "8090"}


def test_merge_keys_own_keys_override() -> None:
    data, lines, problems = parse(
        """
        base: &base {p: 1, q: 1}
        copy:
          <<: *base
          p: 2
        """
    )
    assert problems == []
    assert data == {"base": {"p": 1, "q": 1}, "copy": {"p": 2, "q": 1}}
    assert lines[("copy", "p")] == 4


def test_alias_used_twice_is_not_a_duplicate() -> None:
    data, _, problems = parse(
        """
        base: &base
          <<: {p: 0}
          p: 1
        one: *base
        two: *base
        """
    )
    assert problems == []
    assert data == {"base": {"p": 1}, "one": {"p": 1}, "two": {"p": 1}}


def test_structural_problems_are_reported_and_parsing_goes_on() -> None:
    data, _, problems = parse(
        """
        a: 1
        ? [complex]
        : 2
        a: 3
        r: &r [*r]
        """
    )
    assert problems == [
        "f.yaml:2: a key must be a plain word; write `name: value`",
        "f.yaml:4: duplicate key 'a' (first given on line 1); keep only one of them",
        "f.yaml:5: recursive YAML alias; an anchor cannot contain its own alias",
    ]
    assert data == {"a": 1, "r": [None]}


def test_syntax_errors_stop_the_file() -> None:
    for text, line in [("a: 1\n---\nb: 2\n", 2), ("a:\n\tb: 1\n", 2), ("a: *missing\n", 1)]:
        document = parse_yaml(text, FILE)
        assert document.parsed is False
        (problem,) = document.problems
        assert problem.line == line
        assert problem.message.startswith("invalid YAML: ")


def test_empty_document_is_none() -> None:
    document = parse_yaml("# only a comment\n", FILE)
    assert (document.data, document.parsed, document.problems) == (None, True, [])


def test_unreadable_files(tmp_path: Path) -> None:
    assert read_yaml(tmp_path / "absent.yaml").problems[0].message == "file not found"
    assert "directory" in read_yaml(tmp_path).problems[0].message
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    document = read_yaml(binary)
    assert document.parsed is False
    assert document.problems[0].message == "file is not valid UTF-8"
