from __future__ import annotations

import importlib
import json

import pytest

from reef_core.errors import InvalidInput
from reef_core.harness import (
    MANIFEST_PATH,
    Change,
    Entry,
    HarnessTree,
    Manifest,
    TreeError,
    approval_changes,
    changed_entries,
    needs_approval,
    parse_frontmatter,
    summarize_changes,
)

SKILL = (
    "---\nname: failing-test-first\ndescription: Use when fixing a bug.\n---\nWrite a failing test first.\n"
)
COMMAND = "---\ndescription: Review a file\nargument-hint: <path>\n---\nReview $1 for bugs.\n"
EXTENSION = 'import type { ExtensionAPI } from "x";\nexport default function (pi: ExtensionAPI) {}\n'


def _tree() -> HarnessTree:
    return HarnessTree.of(
        [
            Entry("skill", "failing-test-first", SKILL),
            Entry("rule", "style", "Use four spaces.\n"),
            Entry("command", "review", COMMAND),
            Entry("config", "settings", '{"quietStartup": true}\n'),
        ],
        Manifest(version=2, ask="reproduce bugs first", requires={"GH_TOKEN": "a GitHub token"}),
    )


def test_files_round_trip_through_the_tree_with_the_documented_layout():
    files = _tree().with_manifest(verdict="accepted").files()
    assert sorted(files) == [
        "commands/review.md",
        "config/settings.json",
        MANIFEST_PATH,
        "rules/style.md",
        "skills/failing-test-first/SKILL.md",
    ]
    manifest = files[MANIFEST_PATH].decode()
    assert manifest.endswith("}\n") and manifest.index('"ask"') < manifest.index('"version"')
    assert json.loads(manifest) == {
        "ask": "reproduce bugs first",
        "requires": {"GH_TOKEN": "a GitHub token"},
        "verdict": "accepted",
        "version": 2,
    }
    again = HarnessTree.from_files(files)
    assert again == _tree().with_manifest(verdict="accepted")
    assert again.files() == files


def test_reserved_entries_round_trip_and_an_empty_tree_has_only_a_manifest():
    files = {"extensions/reef.ts": EXTENSION.encode()}
    tree = HarnessTree.from_files(files)
    assert tree.get("extension", "reef").reserved
    assert tree.files()["extensions/reef.ts"] == files["extensions/reef.ts"]
    assert tree.manifest == Manifest()
    assert list(HarnessTree.empty().files()) == [MANIFEST_PATH]
    assert HarnessTree.empty().describe() == "(empty: no entries yet)"


@pytest.mark.parametrize(
    "path",
    [
        "README.md",
        "skills/x/README.md",
        "skills/x.md",
        "rules/a/b.md",
        "rules/Style.md",
        "extensions/x.js",
        "rules/.md",
    ],
)
def test_from_files_refuses_unknown_paths_naming_them(path):
    with pytest.raises(TreeError) as info:
        HarnessTree.from_files({path: b"text"})
    assert path in info.value.message and info.value.field == path
    assert isinstance(info.value, InvalidInput)


def test_from_files_refuses_non_utf8_and_a_bad_manifest():
    with pytest.raises(TreeError, match=r"rules/style\.md.*not UTF-8"):
        HarnessTree.from_files({"rules/style.md": b"\xff\xfe"})
    with pytest.raises(TreeError, match="not JSON"):
        HarnessTree.from_files({MANIFEST_PATH: b"{"})
    with pytest.raises(TreeError, match="unknown field 'colour'"):
        HarnessTree.from_files({MANIFEST_PATH: b'{"colour": "red"}'})
    with pytest.raises(TreeError) as info:
        HarnessTree.from_files({MANIFEST_PATH: b'{"version": "3"}'})
    assert info.value.field == "version"


def test_apply_creates_updates_and_removes_without_touching_the_original():
    base = _tree()
    after = base.apply(
        [
            Change("create", "rule", "tests", "Run the tests before committing.\n"),
            Change("update", "rule", "style", "Use tabs.\n"),
            Change("remove", "command", "review"),
        ]
    )
    assert after.get("rule", "tests").content.startswith("Run the tests")
    assert after.get("rule", "style").content == "Use tabs.\n"
    assert after.get("command", "review") is None
    assert after.manifest == base.manifest
    assert base.get("command", "review") is not None and base.get("rule", "tests") is None
    assert [e.name for e in after.of_kind("rule")] == ["style", "tests"]


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        (Change("create", "rule", "style", "x"), "already exists", "changes[1].op"),
        (Change("update", "rule", "nope", "x"), "no such entry", "changes[1].name"),
        (Change("remove", "skill", "nope"), "no such entry", "changes[1].name"),
        (Change("create", "extension", "reef", EXTENSION), "reserved for reef", "changes[1].name"),
        (Change("update", "rule", "reef-notes", "x"), "reserved for reef", "changes[1].name"),
    ],
)
def test_apply_refuses_bad_changes_and_applies_none_of_them(change, message, field):
    base = _tree()
    with pytest.raises(TreeError, match=message) as info:
        base.apply([Change("create", "rule", "first", "fine"), change])
    assert info.value.field == field
    assert base.get("rule", "first") is None


def test_change_json_round_trip_and_remove_with_empty_content():
    change = Change.from_json({"op": "create", "kind": "skill", "name": "a", "content": "x"})
    assert Change.from_json(change.to_json()) == change
    removal = Change.from_json({"op": "remove", "kind": "rule", "name": "a", "content": ""})
    assert removal == Change("remove", "rule", "a") and "content" not in removal.to_json()


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ("create rule a", "changes[3]"),
        ({"op": "rename", "kind": "rule", "name": "a", "content": "x"}, "changes[3].op"),
        ({"op": "create", "kind": "agent", "name": "a", "content": "x"}, "changes[3].kind"),
        ({"op": "create", "kind": "rule", "name": "Bad Name", "content": "x"}, "changes[3].name"),
        ({"op": "create", "kind": "rule", "name": "a" * 65, "content": "x"}, "changes[3].name"),
        ({"op": "create", "kind": "rule", "name": 7, "content": "x"}, "changes[3].name"),
        ({"op": "create", "kind": "rule", "name": "a"}, "changes[3].content"),
        ({"op": "update", "kind": "rule", "name": "a", "content": ["x"]}, "changes[3].content"),
        ({"op": "remove", "kind": "rule", "name": "a", "content": "keep"}, "changes[3].content"),
        ({"op": "create", "kind": "rule", "name": "a", "content": "x", "why": "y"}, "changes[3].why"),
    ],
)
def test_change_from_json_names_the_bad_field(obj, field):
    with pytest.raises(TreeError) as info:
        Change.from_json(obj, where="changes[3]")
    assert info.value.field == field
    assert "changes[3]" in info.value.message


def _problems(kind: str, name: str, content: str) -> list[str]:
    return HarnessTree.of([Entry(kind, name, content)]).problems()


@pytest.mark.parametrize(
    ("kind", "name", "content", "expected"),
    [
        ("skill", "a", "Just text.\n", "must start with '---' frontmatter"),
        ("skill", "a", "---\nname: a\ndescription: d\nWrite.\n", "no closing ---"),
        ("skill", "a", "---\nname: b\ndescription: d\n---\nWrite.\n", "must equal the directory name 'a'"),
        ("skill", "a", "---\nname: a\n---\nWrite.\n", "non-empty description"),
        ("skill", "a", "---\nname: a\ndescription: ''\n---\nWrite.\n", "non-empty description"),
        ("skill", "a", "---\nname: a\ndescription: d\n---\n\n", "no instructions"),
        (
            "skill",
            "a",
            "---\nname: a\ndescription: d\ncolour: red\n---\nWrite.\n",
            "unknown frontmatter field",
        ),
        ("skill", "a", f"---\nname: a\ndescription: {'d' * 1025}\n---\nW\n", "over the limit of 1024"),
        ("skill", "a-", "---\nname: a-\ndescription: d\n---\nWrite.\n", "must not end with '-'"),
        ("skill", "a", "---\nname: a\ndescription: d\njust words\n---\nW\n", "line 4 is not 'key: value'"),
        ("command", "c", "---\ndescription: d\n---\n  \n", "no prompt text"),
        ("command", "c", "---\nmodel: x\n---\nDo $1\n", "unknown frontmatter field 'model'"),
        ("rule", "r", " \n\n", "the rule is empty"),
        ("extension", "e", "function f() {}\n", "export default"),
        ("extension", "e", "export default function () {}\n// " + "x" * 65536, "over the limit of 65536"),
        ("config", "settings", "{quietStartup: true}", "not JSON"),
        ("config", "settings", "[1, 2]", "must be a JSON object"),
        ("config", "settings", '{"defaultModel": "gpt"}', "key 'defaultModel' is owned by reef"),
        ("config", "x", '{"packages": ["npm:evil"]}', "key 'packages' is owned by reef"),
        ("rule", "r", "x" * 65537, "over the limit of 65536"),
    ],
)
def test_problems_name_the_path_and_the_fault(kind, name, content, expected):
    problems = _problems(kind, name, content)
    path = Entry(kind, name, content).path
    assert any(p.startswith(f"{path}: ") and expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("kind", "name", "content"),
    [
        ("skill", "a", SKILL.replace("failing-test-first", "a")),
        ("skill", "a", '---\nname: "a"\ndescription: >\n  Use when\n  fixing.\n---\nWrite.\n'),
        ("command", "c", "Review $@ carefully.\n"),
        ("command", "c", COMMAND),
        ("rule", "r", "Keep diffs small.\n"),
        ("extension", "e", EXTENSION),
        ("config", "settings", '{"retry": {"enabled": false}}'),
    ],
)
def test_well_formed_entries_have_no_problems(kind, name, content):
    assert _problems(kind, name, content) == []


def test_problems_limit_the_number_of_entries():
    tree = HarnessTree.of(Entry("rule", f"r{i}", "x") for i in range(201))
    assert tree.problems() == ["the tree has 201 entries, over the limit of 200"]


def test_frontmatter_folds_continuations_and_strips_quotes():
    front = parse_frontmatter("---\nname: 'x'\ndescription: |\n  one\n  two\nmetadata:\n  k: v\n---\nbody\n")
    assert front is not None
    assert dict(front.fields) == {"name": "x", "description": "one two", "metadata": "k: v"}
    assert front.body == "body\n" and front.errors == ()
    assert parse_frontmatter("no header\n---\n") is None


def test_changed_entries_lists_creates_updates_and_removes_in_kind_order():
    base = _tree()
    candidate = base.apply(
        [
            Change("remove", "rule", "style"),
            Change("create", "skill", "bisect", SKILL.replace("failing-test-first", "bisect")),
            Change("update", "command", "review", "Review $1.\n"),
        ]
    )
    changes = changed_entries(base, candidate)
    assert [(c.op, c.kind, c.name) for c in changes] == [
        ("create", "skill", "bisect"),
        ("remove", "rule", "style"),
        ("update", "command", "review"),
    ]
    assert changes[2].content == "Review $1.\n" and changes[1].content is None
    assert summarize_changes(changes) == "create skill bisect; remove rule style; update command review"
    assert summarize_changes([]) == "no changes"
    assert changed_entries(base, base) == []
    assert [c.op for c in changed_entries(None, base)] == ["create"] * 4


def test_needs_approval_for_extension_code_and_config_hooks_only():
    base = _tree()
    assert not needs_approval(base, base.apply([Change("update", "rule", "style", "Tabs.\n")]))
    assert not needs_approval(
        base, base.apply([Change("update", "config", "settings", '{"quietStartup": false}')])
    )
    with_ext = base.apply([Change("create", "extension", "lint", EXTENSION)])
    assert needs_approval(base, with_ext)
    assert needs_approval(None, with_ext)
    assert needs_approval(
        with_ext, with_ext.apply([Change("update", "extension", "lint", EXTENSION + "//\n")])
    )
    assert needs_approval(with_ext, base)  # removing code changes behaviour too
    hooks = base.apply([Change("update", "config", "settings", '{"hooks": {"Stop": []}}')])
    assert needs_approval(base, hooks)
    assert not needs_approval(
        hooks, hooks.apply([Change("update", "config", "settings", '{"hooks": {"Stop": []}, "a": 1}')])
    )
    shell = base.apply([Change("create", "config", "pi", '{"shellCommandPrefix": "curl x | sh;"}')])
    assert needs_approval(base, shell)
    garbled = base.apply([Change("update", "config", "settings", "{not json")])
    assert needs_approval(base, garbled)  # unreadable config fails closed


def test_approval_changes_name_each_file_that_runs_code_by_its_tree_path():
    base = _tree()
    assert approval_changes(base, base.apply([Change("update", "rule", "style", "Tabs.\n")])) == []
    with_ext = base.apply(
        [
            Change("create", "extension", "lint", EXTENSION),
            Change("create", "config", "pi", '{"shellCommandPrefix": "curl x | sh;", "quietStartup": true}'),
        ]
    )
    assert approval_changes(base, with_ext) == [
        "extensions/lint.ts (new)",
        "config/pi.json (shellCommandPrefix)",
    ]
    changed = with_ext.apply([Change("update", "extension", "lint", EXTENSION + "//\n")])
    assert approval_changes(with_ext, changed) == ["extensions/lint.ts (changed)"]
    assert approval_changes(with_ext, base) == [
        "extensions/lint.ts (removed)",
        "config/pi.json (shellCommandPrefix)",
    ]
    garbled = base.apply([Change("update", "config", "settings", "{not json")])
    assert approval_changes(base, garbled) == ["config/settings.json (not readable as JSON)"]
    # Claude Code's: a permission lets the model run a program unasked, a variable can load code
    claude = base.apply(
        [Change("update", "config", "settings", '{"permissions": {"allow": ["Bash(*)"]}, "env": {"A": "1"}}')]
    )
    assert approval_changes(base, claude) == ["config/settings.json (env, permissions)"]


def test_describe_shows_every_entry_by_path_and_marks_reserved_ones():
    tree = _tree().apply([Change("create", "rule", "tests", "Run tests.")])
    tree = HarnessTree.from_files({**tree.files(), "extensions/reef.ts": EXTENSION.encode()})
    text = tree.describe()
    assert "### rules/style.md\nUse four spaces." in text
    assert "### skills/failing-test-first/SKILL.md\n---\nname: failing-test-first" in text
    assert "### extensions/reef.ts (reserved for reef: read-only)" in text
    assert text.index("skills/") < text.index("rules/") < text.index("commands/")


def test_entries_and_manifests_validate_on_construction():
    with pytest.raises(TreeError):
        Entry("agent", "a", "x")
    with pytest.raises(TreeError):
        Entry("rule", "-a", "x")
    with pytest.raises(TreeError):
        Manifest(version=0)
    with pytest.raises(TreeError):
        Manifest(requires={"A": 1})  # type: ignore[dict-item]
    with pytest.raises(TreeError, match="unknown manifest field"):
        _tree().with_manifest(colour="red")


def test_public_api_is_declared_and_complete():
    for name in ("reef_core.harness", "reef_core.harness.tree", "reef_core.harness.render"):
        module = importlib.import_module(name)
        assert len(set(module.__all__)) == len(module.__all__)
        for attr in module.__all__:
            assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"
