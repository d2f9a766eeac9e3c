"""Tests for ToolCall, Tool, ToolCallSpace and the JSON-schema subset validator."""

import pickle
import re

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worldgym.spaces import (
    MAX_ARGUMENT_DEPTH,
    MAX_VALIDATION_ERRORS,
    Tool,
    ToolCall,
    ToolCallError,
    ToolCallSpace,
    nesting_exceeds,
    validate_json,
)

CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "phone_number": {"type": "string", "minLength": 3, "maxLength": 20},
        "auth_info": {"type": "object", "additionalProperties": {"type": "string"}},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "channel": {"type": "string", "enum": ["voice", "sms"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": True},
        "urgent": {"type": "boolean"},
        "score": {"type": "number"},
    },
    "required": ["phone_number", "channel"],
    "additionalProperties": False,
}
TOOLS = [
    Tool("make_call", "Call a number.", CALL_SCHEMA),
    Tool("lookup", "Look a company up.", {"type": "object", "properties": {"company": {"type": "string"}},
                                         "required": ["company"]}),
]


def make_space(seed=0):
    return ToolCallSpace(TOOLS, seed=seed)


def test_contains_accepts_valid_and_rejects_invalid_calls():
    space = make_space()
    assert ToolCall("make_call", {"phone_number": "555-0101", "channel": "voice"}) in space
    assert ToolCall("lookup", {"company": "Acme", "extra": 1}) in space  # additionalProperties defaults to allowed
    assert ToolCall("nope", {}) not in space
    assert ToolCall("make_call", {"phone_number": "555-0101"}) not in space  # missing required
    assert ToolCall("make_call", {"phone_number": "555-0101", "channel": "fax"}) not in space  # enum
    assert ToolCall("make_call", {"phone_number": 5550101, "channel": "sms"}) not in space  # type
    assert ToolCall("make_call", {"phone_number": "555", "channel": "sms", "x": 1}) not in space  # no extras
    assert ToolCall("make_call", {"phone_number": "555", "channel": "sms", "priority": True}) not in space
    assert ToolCall("make_call", {"phone_number": "555", "channel": "sms", "tags": ["a", "a"]}) not in space
    assert "make_call" not in space and None not in space
    assert ToolCall("lookup", ["Acme"]) not in space  # arguments not an object


def test_validate_names_the_problem():
    space = make_space()
    assert space.validate(ToolCall("make_call", {"channel": "sms"})) == [
        "make_call: missing required argument 'phone_number'"
    ]
    (message,) = space.validate(ToolCall("make_call", {"phone_number": "555", "channel": "fax"}))
    assert message == "make_call: channel must be one of ['voice', 'sms'], got 'fax'"
    (message,) = space.validate(ToolCall("call", {}))
    assert message == "unknown tool 'call'; available tools: ['make_call', 'lookup']"
    (message,) = space.validate(ToolCallError("bad json"))
    assert message == "expected a ToolCall, got ToolCallError"


def test_sample_is_valid_and_seeded():
    space_a, space_b = make_space(seed=3), make_space(seed=3)
    samples_a = [space_a.sample() for _ in range(500)]
    assert samples_a == [space_b.sample() for _ in range(500)]
    assert all(call in space_a for call in samples_a)
    assert {call.name for call in samples_a} == {"make_call", "lookup"}
    assert samples_a != [make_space(seed=4).sample() for _ in range(500)]


def test_equality_hash_pickle_and_jsonable_round_trip():
    space = make_space(seed=1)
    space.sample()
    clone = pickle.loads(pickle.dumps(space))
    assert clone == space and hash(clone) == hash(space)
    assert clone.sample() == space.sample()  # RNG state survives pickling
    assert ToolCallSpace(TOOLS[:1]) != space
    calls = [space.sample() for _ in range(10)]
    assert space.from_jsonable(space.to_jsonable(calls)) == calls


def test_openai_tools_format():
    exported = make_space().openai_tools()
    assert [t["function"]["name"] for t in exported] == ["make_call", "lookup"]
    assert exported[0] == {"type": "function", "function": {"name": "make_call", "description": "Call a number.",
                                                            "parameters": CALL_SCHEMA}}
    assert ToolCallSpace(exported) == make_space()  # OpenAI-format dicts are accepted as tools


def test_constructor_rejects_bad_tools():
    with pytest.raises(ValueError, match="at least one tool"):
        ToolCallSpace([])
    with pytest.raises(ValueError, match=re.escape("duplicates ['lookup']")):
        ToolCallSpace([TOOLS[1], TOOLS[1]])
    with pytest.raises(ValueError, match="must be a JSON schema of type 'object'"):
        Tool("x", "", {"type": "string"})
    with pytest.raises(ValueError, match="identifier"):
        Tool("not a name", "", {"type": "object"})
    with pytest.raises(ValueError, match="missing the field 'parameters'"):
        ToolCallSpace([{"type": "function", "function": {"name": "x"}}])


def test_tool_calls_are_hashable_and_serialisable():
    call = ToolCall("lookup", {"company": "Acme"})
    assert hash(call) == hash(ToolCall("lookup", {"company": "Acme"}))
    assert call.to_json() == '{"name": "lookup", "arguments": {"company": "Acme"}}'
    assert ToolCall("f", {"b": 1, "a": 2}).to_json() == '{"name": "f", "arguments": {"b": 1, "a": 2}}'  # in order
    assert "object" in ToolCall("lookup", {"company": object()}).to_json()  # never raises


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats(-10, 10, allow_nan=False) | st.text(max_size=25),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
object_values = st.fixed_dictionaries(
    {}, optional={key: json_values for key in list(CALL_SCHEMA["properties"]) + ["other"]}
)


@settings(max_examples=400, deadline=None)
@given(value=object_values)
def test_validator_agrees_with_jsonschema(value):
    ours = not validate_json(value, CALL_SCHEMA)
    reference = jsonschema.Draft202012Validator(CALL_SCHEMA).is_valid(value)
    assert ours == reference


def test_validator_agrees_with_jsonschema_on_sampled_calls():
    space = make_space(seed=11)
    for _ in range(200):
        call = space.sample()
        jsonschema.validate(dict(call.arguments), space.tools[call.name].parameters)


def test_numpy_rng_accepted_as_seed():
    space = ToolCallSpace(TOOLS, seed=np.random.default_rng(5))
    assert space.sample() in space


def test_contains_never_raises_on_odd_values():
    space = ToolCallSpace([Tool("t", "", {"type": "object", "properties": {
        "xs": {"type": "array", "uniqueItems": True}}})])
    assert ToolCall("t", {"xs": [object(), 1]}) in space  # untyped items, unique by repr
    assert ToolCall(["t"], {}) not in space  # unhashable name
    assert ToolCall("t", {"xs": [1, 1.0]}) not in space  # JSON-equal items are duplicates (as jsonschema says)
    assert ToolCall("t", {"xs": [{"a": 1}, {"a": 1.0}]}) not in space
    assert ToolCall("t", {"xs": [True, 1]}) in space  # true and 1 differ in JSON


def test_tool_call_equality_and_hash_follow_json_semantics():
    assert ToolCall("a", {"x": 1}) == ToolCall("a", {"x": 1.0})
    assert hash(ToolCall("a", {"x": 1})) == hash(ToolCall("a", {"x": 1.0}))
    assert ToolCall("a", {"x": True}) != ToolCall("a", {"x": 1})
    assert len({ToolCall("a", {"x": 1}), ToolCall("a", {"x": 1.0})}) == 1


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 2000},
    {"type": "integer", "maximum": -5000},
    {"type": "number", "minimum": 5000},
    {"type": "integer", "minimum": 0.5, "maximum": 1.5},
    {"type": "string", "maxLength": 0},
    {"type": "string", "minLength": 40},
])
def test_sample_respects_one_sided_bounds(schema):
    space = ToolCallSpace([Tool("t", "", {"type": "object", "properties": {"v": schema}, "required": ["v"]})],
                          seed=0)
    for _ in range(50):
        call = space.sample()
        assert call in space
        jsonschema.validate(dict(call.arguments), space.tools["t"].parameters)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_nesting_limit_and_cycles():
    space = ToolCallSpace([Tool("t", "", {"type": "object"})])
    assert nesting_exceeds(_nested(32), 32) is False and nesting_exceeds(_nested(33), 32) is True
    assert ToolCall("t", {"x": _nested(MAX_ARGUMENT_DEPTH - 1)}) in space
    (message,) = space.validate(ToolCall("t", {"x": _nested(MAX_ARGUMENT_DEPTH)}))
    assert message == (f"t: arguments must not nest lists or objects more than {MAX_ARGUMENT_DEPTH} "
                       "levels deep")
    cycle: list = []
    cycle.append(cycle)
    assert nesting_exceeds(cycle, 1000) and ToolCall("t", {"x": cycle}) not in space
    shared = [[1]] * 3
    wide = [shared] * 10_000  # shared containers are walked once per depth, not once per path
    assert nesting_exceeds(wide, 3) is False


def test_odd_values_never_break_validation_equality_or_json():
    space = ToolCallSpace(TOOLS)
    huge = 10**5000  # str() of it raises ValueError past Python's int-to-string limit
    cycle: list = []
    cycle.append(cycle)
    for arguments in ({"phone_number": "555", "channel": "sms", "priority": huge},
                      {"phone_number": "555", "channel": "sms", "tags": [huge, huge]},
                      {"phone_number": "555", "channel": huge}, {huge: 1}, {"tags": cycle},
                      {"tags": _nested(100_000)}, {"score": float("nan")}, {"score": float("-inf")}):
        call = ToolCall("make_call", arguments)
        assert call not in space and space.validate(call)
        assert all(len(message) < 300 for message in space.validate(call))
        assert isinstance(call.to_json(), str) and isinstance(hash(call), int)
        assert call == ToolCall("make_call", arguments) and call != ToolCall("make_call", {})
    call = ToolCall("make_call", {"phone_number": "555", "channel": "sms", "priority": huge})
    (message,) = space.validate(call)
    assert message == "make_call: priority must be <= 5, got an integer of more than 600 digits"
    assert ToolCall("a", {"x": huge}) != ToolCall("a", {"x": huge + 1})
    assert ToolCall("a", {"x": huge}) == ToolCall("a", {"x": 10**5000})


def test_unknown_tool_hint_for_case_and_compatibility_forms():
    space = make_space()
    (message,) = space.validate(ToolCall("MAKE_CALL", {}))
    assert message.endswith("(did you mean 'make_call'?)")
    (message,) = space.validate(ToolCall("\uff4dake_call", {}))  # fullwidth m
    assert message.endswith("(did you mean 'make_call'?)")
    (message,) = space.validate(ToolCall("m\u0430ke_call", {}))  # Cyrillic a: no compatibility form
    assert "did you mean" not in message


def test_validation_stops_at_the_first_bound_and_caps_its_errors():
    """A cheap message must not buy an expensive answer: a million bad items or unknown keys give a bounded
    list of short errors, and nothing of the value is echoed back beyond a short excerpt."""
    space = ToolCallSpace([Tool("tag", "Tag items.", {"type": "object", "additionalProperties": False, "properties": {
        "items": {"type": "array", "maxItems": 4, "items": {"type": "integer"}},
        "labels": {"type": "array", "items": {"type": "integer"}}}})])
    too_many = space.validate(ToolCall("tag", {"items": ["x"] * 1_000_000}))
    assert too_many == ["tag: items must have at most 4 items, got 1000000"]
    all_bad = space.validate(ToolCall("tag", {"labels": ["x"] * 1_000_000}))
    assert len(all_bad) == MAX_VALIDATION_ERRORS + 1 and all_bad[-1] == "tag: further errors not listed"
    unknown = space.validate(ToolCall("tag", {f"k{i}": "v" * 1000 for i in range(300_000)}))
    assert len(unknown) == MAX_VALIDATION_ERRORS + 1 and sum(map(len, unknown)) < 2000
    assert len(space.validate(ToolCall("tag", {"items": "y" * 10_000_000}))[0]) < 200


@pytest.mark.parametrize("arguments", [
    {"fields": [10**5000, 10**5000]},  # str() of such an int raises ValueError
    {"auth_info": {"zip_code": -(10**5000)}},
    {"ids": list(range(10**5))},
])
def test_a_call_summary_is_bounded_and_never_raises(arguments: dict) -> None:
    text = ToolCall("lookup", arguments).summary(200)
    assert text.startswith("lookup") and len(text) <= 200
