"""The JSON reader behind roce.decode, roce.analyze and the device counters
(`python/src/pyjson.rs`): every value equal to what json.loads gives for the same text,
malformed text refused with ValueError as json.loads refuses it."""

import json
import random

import pytest

from roce import _roce

GOOD = [
    "{}",
    "[]",
    ' { "a" : [ 1 , 2 , { } , [ ] ] } ',
    '{"frame":1,"ts":1700000000.000001001,"src":"10.0.0.1","bth":{"psn":16777215,"se":false}}',
    '{"neg":-1,"min":-9223372036854775808,"max":18446744073709551615,"zero":-0}',
    '{"big":18446744073709551616,"bigger":-99999999999999999999999999}',
    '{"f":1.5,"e":1e3,"E":-2.5E-3,"p":1e+2,"tiny":5e-324,"round":0.1}',
    '{"t":true,"f":false,"n":null,"l":[true,false,null]}',
    r'{"esc":"a\"b\\c\/d\b\f\n\r\t","u":"\u00e9\u0000\u001f","pair":"\ud83d\ude00"}',
    r'{"k\"ey":1,"k\u00e9y":2}',
    '{"utf8":"h\u00e9llo \u2603 \U0001f600"}',
    '{"hex":"a1b2c3d4","name":"RC_SEND_ONLY","dup":"RC_SEND_ONLY","again":"a1b2c3d4"}',
    '[' + ','.join(json.dumps("s%d" % i) for i in range(5000)) + ']',
    '{"long":"' + "x" * 1000 + '"}',
    '"just a string"',
    "12",
    "-3.25",
]

BAD = [
    "",
    "{",
    "[1,2",
    '{"a" 1}',
    '{"a":1,}',
    "[1,]",
    '{"a":tru}',
    '"unterminated',
    '"bad \\x escape"',
    '"short \\u12"',
    '"ctrl \x01 char"',
    "01x",
    "-",
    "1.",
    "1e",
    '{"a":1} trailing',
    "{1:2}",
]


@pytest.mark.parametrize("text", GOOD)
def test_equal_to_json_loads(text):
    assert _roce._json_loads(text.encode()) == json.loads(text)


def test_types_are_json_loads_types():
    text = '{"i":1,"f":1.0,"b":true,"n":null,"s":"x","l":[]}'
    got, want = _roce._json_loads(text.encode()), json.loads(text)
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}


@pytest.mark.parametrize("text", BAD)
def test_malformed_is_a_value_error(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        _roce._json_loads(text.encode())


def test_a_lone_surrogate_is_refused():
    # json.loads makes a str holding the lone half; a Rust string cannot, and roce never
    # writes one: refused rather than changed.
    with pytest.raises(ValueError):
        _roce._json_loads(b'"lone \\ud83d"')
    with pytest.raises(ValueError):
        _roce._json_loads(b'"backwards \\ude00\\ud83d"')


def test_deep_nesting_is_refused_not_a_crash():
    with pytest.raises(ValueError):
        _roce._json_loads(b"[" * 100000 + b"]" * 100000)
    assert _roce._json_loads(b"[" * 100 + b"]" * 100) == json.loads("[" * 100 + "]" * 100)


def test_random_documents():
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    words = ["a", "é", "\u2603", "\U0001f600", '"', "\\", "\n", "\x00", "ab12", "RC_SEND_ONLY"]

    def doc(depth):
        k = rng.randrange(7 if depth < 4 else 5)
        if k == 0:
            return rng.randrange(-(1 << 70), 1 << 70)
        if k == 1:
            return rng.uniform(-1e6, 1e6)
        if k == 2:
            return "".join(rng.choice(words) for _ in range(rng.randrange(6)))
        if k == 3:
            return rng.choice([True, False, None])
        if k == 4:
            return rng.randrange(300)
        if k == 5:
            return [doc(depth + 1) for _ in range(rng.randrange(5))]
        return {"".join(rng.choice(words) for _ in range(rng.randrange(1, 3))): doc(depth + 1) for _ in range(rng.randrange(5))}

    for _ in range(2000):
        text = json.dumps(doc(0), ensure_ascii=rng.random() < 0.5)
        assert _roce._json_loads(text.encode()) == json.loads(text), f"seed {seed}: {text}"
