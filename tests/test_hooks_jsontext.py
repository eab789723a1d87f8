"""mam's hook groups go in and out of a JSON settings file's text in place (mam.hooks.jsontext): whatever the
file's layout, the result holds exactly the user's settings and mam's groups, and uninstall gives the user's
document back."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mam.hooks.catalog import kinds

CLAUDE = kinds()["claude"][0]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6), inner, max_size=3), max_leaves=8)
user_group = st.fixed_dictionaries({"matcher": st.text(max_size=5), "hooks": st.just(
    [{"type": "command", "command": "user-thing"}])})
hooks = st.dictionaries(st.sampled_from(["Stop", "PreToolUse", "SessionStart", "Custom"]),
                        st.lists(user_group, min_size=1, max_size=2), max_size=3)
documents = st.tuples(st.dictionaries(st.text(max_size=6).filter(lambda k: k != "hooks"), values, max_size=3),
                      st.one_of(st.none(), hooks))


def _layout(data: dict[str, Any], how: int) -> str:
    if how == 0:
        return json.dumps(data)
    if how == 1:
        return json.dumps(data, indent=4) + "\n"
    if how == 2:
        return json.dumps(data, indent="\t").replace("\n", "\r\n") + "\r\n"
    if how == 3:
        return json.dumps(data, separators=(",", ":"))
    # a hand-written file: a member a line, each value (a hook group too) on one line, which a re-write spreads
    hooks = data.get("hooks")
    members = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items() if k != "hooks"]
    if hooks is not None:
        events = ",\n".join(f"    {json.dumps(e)}: {json.dumps(g)}" for e, g in hooks.items())
        members.append('  "hooks": {\n' + events + "\n  }" if events else '  "hooks": {}')
    return "{\n" + ",\n".join(members) + "\n}\n" if members else "{}\n"


@settings(max_examples=150, deadline=None)
@given(documents, st.integers(0, 4))
def test_install_and_uninstall_in_place_keep_the_users_document(doc: tuple[dict[str, Any], Any], how: int) -> None:
    rest, user_hooks = doc
    data = {**rest, **({"hooks": user_hooks} if user_hooks is not None else {})}
    text = _layout(data, how)
    installed = CLAUDE.add(text)
    parsed = json.loads(installed)
    assert {k: v for k, v in parsed.items() if k != "hooks"} == rest
    for event, groups in (user_hooks or {}).items():
        assert parsed["hooks"][event][:len(groups)] == groups  # the user's groups first, as they were
    assert CLAUDE.count(installed) == (5, 5)
    back = CLAUDE.remove(installed)
    expected = {k: v for k, v in data.items() if k != "hooks" or v}
    assert (json.loads(back) if back is not None else {}) == expected
    if user_hooks:  # a user's non-empty hooks: uninstall gives the file back byte for byte
        assert back == text
