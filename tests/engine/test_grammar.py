"""Grammar-constrained JSON: the automaton and schema rules, on a synthetic byte vocabulary.

Every single byte is a token here, so a document can be fed character by character and the
exact byte where it stops being a valid prefix is checked. Random generations, the real
Gemma 3 vocabulary and timings are in test_grammar_random.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hearth.engine.grammar import JsonConstraint, Limits, TokenTable, schema_from_format

EOS = 256
WORDS = [b'{"', b'":', b'",', b'"}', b' "', b"true", b"null", b"12", b"\\n", b"\\u00", b'\\"']
WORDS += [b'"a', b"ab", b'b"', b"\xe2\x82\xac", b"\xe2", b'": "', b'"]', b"],", b", ", b"\n  "]
WORDS += [b'":{"', b'"x', b'x"', b'": 1', b"1.5", b"e+", b"\x00a", b"<ctl>", b""]
CONTROL_ID = 256 + 1 + WORDS.index(b"<ctl>")


@pytest.fixture(scope="module")
def table() -> TokenTable:
    pieces = [bytes([i]) for i in range(256)] + [b"<eos>"] + WORDS
    return TokenTable(pieces, eos_ids=[EOS], excluded=[CONTROL_ID])


def feed(c: JsonConstraint, data: bytes) -> int:
    """Feed `data` byte by byte; the number of bytes accepted."""
    for i, b in enumerate(data):
        if not c.accepts(b):
            return i
        c.advance(b)
    return len(data)


def accepted(table: TokenTable, schema: object, doc: str | bytes, **limits: int) -> bool:
    """True when `doc` is accepted as a whole document."""
    data = doc.encode() if isinstance(doc, str) else doc
    c = JsonConstraint(table, schema, Limits(**limits) if limits else None)  # type: ignore[arg-type]
    return feed(c, data) == len(data) and c.accepts(EOS)


def stops_at(table: TokenTable, schema: object, doc: str, **limits: int) -> int:
    """Index of the first rejected byte of `doc` (len(doc) if none)."""
    c = JsonConstraint(table, schema, Limits(**limits) if limits else None)  # type: ignore[arg-type]
    return feed(c, doc.encode())


GOOD_OBJECTS = [
    "{}",
    '{"a": 1}',
    '{"a":[1,-0.5e+10,"x\\u00e9\\n",true,false,null,{},[]],"b":{"c":"\u20ac"}}',
    '{\n  "nested": {"deep": [[["x"]], {"y": -0}]},\n  "n": 12.25E-3\n}',
    '{"": "", "k": "\\"\\\\\\/\\b\\f\\n\\r\\t"}',
]


@pytest.mark.parametrize("doc", GOOD_OBJECTS)
def test_any_object_accepts_valid_documents(table, doc):
    c = JsonConstraint(table)
    assert feed(c, doc.encode()) == len(doc.encode())
    assert c.complete and c.accepts(EOS)
    assert json.loads(c.text) == json.loads(doc)


@pytest.mark.parametrize(
    ("doc", "at"),
    [
        ("[1]", 0),  # "json" means an object
        ('"x"', 0),
        ('{"a":1,}', 7),  # trailing comma
        ('{"a":01}', 6),  # leading zero
        ('{"a":-01}', 7),
        ('{"a":1.}', 7),
        ('{"a":.5}', 5),
        ('{"a":+1}', 5),
        ('{"a":1e}', 7),
        ('{"a":1e+}', 8),
        ('{"a":--1}', 6),
        ("{'a':1}", 1),
        ('{"a" 1}', 5),
        ('{"a":1 "b":2}', 7),
        ('{"a":tru}', 8),
        ('{"a":nul}', 8),
        ('{"a":"x\ny"}', 7),  # raw control character inside a string
        ('{"a":"\\x"}', 7),  # unknown escape
        ('{"a":"\\u12G4"}', 10),
        ('{"a":"\\ud83d"}', 9),  # surrogate escapes are refused
        ('{"a":1}}', 7),  # nothing after the document
        ('{"a":1} ', 7),
    ],
)
def test_any_object_rejects_at_the_first_bad_byte(table, doc, at):
    assert stops_at(table, None, doc) == at


def test_invalid_utf8_is_rejected_and_split_characters_are_accepted(table):
    c = JsonConstraint(table)
    assert feed(c, b'{"a":"\xe2\x82') == 8
    assert c.text == '{"a":"'  # the unfinished character is not shown yet
    assert not c.accepts(0x22)  # a quote cannot end a string mid-character
    assert feed(c, b'\xac"}') == 3 and json.loads(c.text) == {"a": "\u20ac"}
    for bad in (b"\xc0\xaf", b"\xed\xa0\x80", b"\xf5\x80", b"\x80", b"\xe2\x28"):
        c = JsonConstraint(table)
        assert feed(c, b'{"a":"' + bad) < 6 + len(bad), bad


def test_numbers_and_top_level_scalars(table):
    for good in ["0", "-0", "12", "-0.5e+10", "1E5", "12.25e-3", "3.0"]:
        assert accepted(table, {"type": "number"}, good), good
    for bad in ["01", "1.", "-", "1e", ".5", "+1"]:
        assert not accepted(table, {"type": "number"}, bad), bad
    c = JsonConstraint(table, {"type": "integer"})
    assert feed(c, b"12") == 2 and c.accepts(EOS) and not c.complete  # "123" is possible too
    assert not c.accepts(ord("."))
    assert accepted(table, {"type": "string"}, '"hi"')
    assert accepted(table, {"type": "boolean"}, "false")
    assert accepted(table, {"type": "null"}, "null")
    assert accepted(table, {"type": "array", "items": {"type": "integer"}}, "[1, 2]")
    assert not accepted(table, {"type": "array", "items": {"type": "integer"}}, "[1.5]")


def test_string_escapes_round_trip(table):
    doc = '{"s": "a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20AC"}'
    c = JsonConstraint(table)
    assert feed(c, doc.encode()) == len(doc) and c.complete
    assert json.loads(c.text)["s"] == 'a"b\\c/d\b\f\n\r\t\u00e9\u20ac'


def test_whitespace_is_bounded(table):
    assert accepted(table, None, "{" + " " * 20 + "}")
    assert not accepted(table, None, "{" + " " * 21 + "}")
    assert accepted(table, None, '{\n    "a":\n  1\n}')
    assert not accepted(table, None, '{\n\n"a":1}')  # one newline per run
    assert accepted(table, None, "{\n" + "\t" * 20 + "}")
    assert not accepted(table, None, "{" + " " * 4 + "}", max_ws_spaces=3)


def test_required_properties_and_closed_objects(table):
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}, "c": {}},
        "required": ["a", "ab"],
    }
    assert accepted(table, schema, '{"ab": "x", "a": 1}')
    assert stops_at(table, schema, '{"a": 1}') == 7  # "}" before "ab" is written
    assert stops_at(table, schema, '{"a": 1, "b": 2}') == 10  # "b" is not a property
    assert stops_at(table, schema, '{"a": 1, "a": 2}') == 11  # no duplicates
    assert stops_at(table, schema, '{"a": "1"}') == 6  # wrong type
    full = '{"a": 1, "ab": "", "c": [null]}'
    assert accepted(table, schema, full)
    assert stops_at(table, schema, full[:-1] + ",") == len(full) - 1  # nothing left to add
    c = JsonConstraint(table, schema)
    assert feed(c, b'{"a') == 3 and c.accepts(0x22) and c.accepts(ord("b"))
    assert not c.accepts(ord("c"))


def test_additional_properties(table):
    props = {"a": {"type": "string"}}
    open_schema = {"properties": props, "additionalProperties": {"type": "integer"}}
    assert accepted(table, open_schema, '{"a": "s", "zz": 3, "a2": 4}')
    assert stops_at(table, open_schema, '{"zz": "s"}') == 7  # additional values are integers
    assert stops_at(table, open_schema, '{"a": 3}') == 6  # a listed key uses its own schema
    assert stops_at(table, open_schema, '{"\\u0061": 3}') == 11  # ...even written escaped
    assert stops_at(table, open_schema, '{"a": "s", "a": "t"}') == 13  # no duplicate
    assert accepted(table, {"type": "object"}, '{"any": {"x": [1]}}')
    assert not accepted(table, {"properties": {}, "additionalProperties": False}, '{"a":1}')
    assert accepted(table, {"properties": {}, "additionalProperties": False}, "{}")


def test_enum_and_const(table):
    schema = {"enum": ["red", "green", 1, 12, None, True, {"k": [1]}]}
    for good in ['"red"', '"green"', "1", "12", "null", "true", '{"k":[1]}']:
        assert accepted(table, schema, good), good
    for bad in ['"re"', '"blue"', "2", "123", "false", '{"k": [1]}']:
        assert not accepted(table, schema, bad), bad
    assert accepted(table, {"const": "x"}, '"x"')
    assert not accepted(table, {"const": "x"}, '"y"')
    c = JsonConstraint(table, {"properties": {"e": {"enum": ["ab", "ac"]}}, "required": ["e"]})
    assert feed(c, b'{"e": "a') == 8
    allowed = {bytes([i]) for i in np.flatnonzero(c.mask()) if i < 256}
    assert allowed == {b"b", b"c"}


def test_string_lengths_and_array_counts(table):
    schema = {"type": "string", "minLength": 2, "maxLength": 3}
    assert [accepted(table, schema, f'"{"x" * n}"') for n in range(5)] == [0, 0, 1, 1, 0]
    assert accepted(table, schema, '"\u20ac\u20ac"')  # counted in characters, not bytes
    assert accepted(table, schema, '"\\n\\u00e9"')
    arr = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2}
    assert [accepted(table, arr, s) for s in ["[]", "[true]", "[true,false]", "[1]"]] == [
        False,
        True,
        True,
        False,
    ]
    assert stops_at(table, arr, "[true,false,true]") == 11


def test_any_of_one_of_and_nullable(table):
    schema = {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}
    assert accepted(table, schema, "5") and accepted(table, schema, '"ab"')
    assert not accepted(table, schema, '"abc"') and not accepted(table, schema, "true")
    objs = {
        "anyOf": [
            {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"a": {"type": "string"}, "b": {"type": "null"}}},
        ]
    }
    assert accepted(table, objs, '{"a": 1}') and accepted(table, objs, '{"a": "s", "b": null}')
    assert not accepted(table, objs, '{"a": 1, "b": null}') and not accepted(
        table, objs, '{"b": 1}'
    )
    assert accepted(table, {"type": "string", "nullable": True}, "null")
    assert accepted(table, {"type": ["integer", "null"]}, "null")
    tagged = {
        "oneOf": [
            {"properties": {"t": {"const": "a"}, "x": {}}, "required": ["t"]},
            {"properties": {"t": {"const": "b"}, "y": {}}, "required": ["t"]},
        ]
    }
    assert accepted(table, tagged, '{"t": "a", "x": 1}')
    assert not accepted(table, tagged, '{"t": "a", "y": 1}')
    assert accepted(table, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "3")
    with pytest.raises(ValueError, match="oneOf"):
        JsonConstraint(table, {"oneOf": [{"type": "number"}, {"type": "integer"}]})


def test_refs_and_recursion(table):
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    }
    assert accepted(table, schema, '{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}')
    assert not accepted(table, schema, '{"v": 1, "kids": [{"kids": []}]}')
    with pytest.raises(ValueError, match="itself"):
        JsonConstraint(
            table, {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
        )
    loop = {  # a -> b -> a without a container, found although b was first reached via items
        "$defs": {
            "a": {
                "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/b"}}, {"$ref": "#/$defs/b"}]
            },
            "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]},
        },
        "$ref": "#/$defs/a",
    }
    with pytest.raises(ValueError, match="itself"):
        JsonConstraint(table, loop)
    assert accepted(table, {"$ref": "#/$defs/b", "$defs": loop["$defs"] | {"a": {}}}, '"s"')
    deep = '{"v":1,"kids":[' * 3 + '{"v":1}' + "]}" * 3
    assert accepted(table, schema, deep, max_depth=2)  # the schema asks for it: no cap


def test_depth_limit_applies_to_free_values_only(table):
    deep = '{"a":' * 4 + "1" + "}" * 4
    assert accepted(table, None, deep)
    assert stops_at(table, None, deep, max_depth=4) == 15  # the 4th "{" is refused
    c = JsonConstraint(table, None, Limits(max_depth=4))
    assert feed(c, deep[:15].encode()) == 15 and c.accepts(ord("1")) and c.mask().any()
    required = {"properties": {"o": {"type": "object"}}, "required": ["o"]}
    assert accepted(
        table, {"properties": {"x": required}, "required": ["x"]}, '{"x":{"o":{}}}', max_depth=2
    )


@pytest.mark.parametrize(
    ("schema", "word"),
    [
        ({"type": "string", "pattern": "a+"}, "pattern"),
        ({"type": "integer", "minimum": 0}, "minimum"),
        ({"type": "array", "prefixItems": [{}]}, "prefixItems"),
        ({"not": {"type": "null"}}, "not"),
        ({"if": {}, "then": {}}, "if"),
        ({"patternProperties": {"a": {}}}, "patternProperties"),
        ({"$ref": "http://example.com/s.json"}, "local"),
        ({"$ref": "#/$defs/missing"}, "resolve"),
        ({"type": "array", "items": [{}]}, "tuple"),
        ({"properties": {"a": {}}, "required": ["b"]}, "required"),
        ({"allOf": [{}, {}]}, "allOf"),
        ({"type": "decimal"}, "type"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength"),
        ({"enum": []}, "enum"),
        ({"enum": ["a"], "type": "integer"}, "enum"),
        (False, "schema"),
        ([], "object"),
    ],
)
def test_unsupported_schemas_are_refused_clearly(table, schema, word):
    with pytest.raises(ValueError, match=word):
        JsonConstraint(table, schema)


def test_annotations_are_ignored(table):
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "T",
        "description": "d",
        "type": "object",
        "properties": {"when": {"type": "string", "format": "date-time", "default": "x"}},
        "required": ["when"],
        "examples": [{}],
    }
    assert accepted(table, schema, '{"when": "now"}')


def test_schema_from_format():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert schema_from_format("json") is None
    assert schema_from_format(schema) is schema
    assert schema_from_format({"type": "json_object"}) is None
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert schema_from_format(wrapped) is schema
    for bad in ["yaml", None, 3, {"type": "json_schema"}, {"type": "text"}]:
        with pytest.raises(ValueError):
            schema_from_format(bad)


def test_end_of_sequence_and_special_tokens(table):
    c = JsonConstraint(table)
    assert not c.accepts(EOS) and not c.mask()[EOS]
    assert not c.accepts(CONTROL_ID) and not c.mask()[CONTROL_ID]
    empty_id = 256 + 1 + WORDS.index(b"")
    assert not c.accepts(empty_id)  # an empty piece would let generation stall
    feed(c, b'{"a":"<ctl>"')
    assert c.text == '{"a":"<ctl>"'  # the same text typed as ordinary bytes is fine
    assert feed(c, b"}") == 1 and c.complete
    m = c.mask()
    assert m[EOS] and m.sum() == 1
    c.advance(EOS)
    assert c.complete and not c.accepts(EOS) and not c.mask().any()
    with pytest.raises(ValueError, match="not allowed"):
        c.advance(ord("}"))


def test_limits_never_lead_to_a_dead_end(table):
    lim = Limits(max_string_chars=3, max_number_chars=4, max_key_chars=2)
    c = JsonConstraint(table, {"type": "array", "items": {"type": "string"}}, lim)
    assert feed(c, b'["abc') == 5
    closing = {0x22} | {256 + 1 + WORDS.index(w) for w in (b'"]', b'",')}
    assert set(np.flatnonzero(c.mask()).tolist()) == closing
    c = JsonConstraint(table, {"type": "array", "items": {"type": "number"}}, lim)
    assert feed(c, b"[-1.") == 4 and c.accepts(ord("5")) and not c.accepts(ord("e"))
    assert feed(c, b"55") == 1  # four characters at most
    c = JsonConstraint(table, {"type": "array", "items": {"type": "number"}}, lim)
    assert feed(c, b"[123") == 4 and not c.accepts(ord(".")) and not c.accepts(ord("e"))
    c = JsonConstraint(table, {"properties": {"abc": {}}, "additionalProperties": True}, lim)
    assert feed(c, b'{"abc": 1, "abcd": 2}') == 21  # a key may exceed the listed names


def test_mask_agrees_with_accepts_everywhere(table):
    """At every prefix of these documents, mask() equals accepts() over the whole vocabulary,
    and it is never empty (no dead ends)."""
    cases = [
        (None, GOOD_OBJECTS[2]),
        (None, '{"k": "\\u00e9\\n", "x": {"ab": [true, 1.5e+3]}}'),
        (
            {"properties": {"ab": {"enum": ["x", "xy"]}, "a": {}}, "required": ["ab"]},
            '{"a": 1, "ab": "xy"}',
        ),
        (
            {"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
            '{"ab": 12, "a": "\u20ac"}',
        ),
        ({"anyOf": [{"type": "string", "maxLength": 4}, {"type": "array"}]}, '"ab\\n"'),
    ]
    vocab = range(table.vocab_size)
    for schema, doc in cases:
        c = JsonConstraint(table, schema)
        for b in doc.encode():
            m = c.mask()
            assert m.any(), c.text
            assert [bool(x) for x in m] == [c.accepts(t) for t in vocab], c.text
            c.advance(b)
        assert c.accepts(EOS)
