"""response_format and vLLM-style guided_* constraints through llguidance, against the real server: even the tiny
base model must produce output that follows the grammar."""
import json
import re

import jsonschema
import openai
import pytest

from pocketcli.sampling_params import StructuredOutputParams

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


def test_json_schema_output_validates_for_every_choice(client, model_name):
    response = client.chat.completions.create(
        model=model_name, messages=ASK, max_tokens=40, temperature=1.0, seed=7, n=2,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    assert len(response.choices) == 2
    for choice in response.choices:  # n=2: two sequences in one batch, each with its own matcher
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_json_object_parses(live_server, client, model_name):
    # the base model never stops adding keys on its own: favour "}" so the object closes within the budget
    status, tokenized = live_server.request("POST", "/tokenize", {"prompt": "}", "add_special_tokens": False})
    assert status == 200 and tokenized["count"] == 1
    response = client.chat.completions.create(model=model_name, messages=ASK, max_tokens=30, temperature=0,
                                              logit_bias={str(tokenized["tokens"][0]): 20},
                                              response_format={"type": "json_object"})
    assert isinstance(json.loads(response.choices[0].message.content), dict)
    assert response.choices[0].finish_reason == "stop"


def test_guided_regex_on_completions_streamed_equals_whole(client, model_name):
    pattern = r"[a-z]{2,6} [0-9]{3}"
    kwargs = dict(model=model_name, prompt="Code:", max_tokens=16, temperature=0,
                  extra_body={"guided_regex": pattern})
    whole = client.completions.create(**kwargs).choices[0]
    assert re.fullmatch(pattern, whole.text) and whole.finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs) if c.choices)
    assert streamed == whole.text


def test_guided_choice_and_grammar(client, model_name):
    choice = client.chat.completions.create(model=model_name, messages=ASK, max_tokens=8, temperature=0,
                                            extra_body={"guided_choice": ["yes", "no"]})
    assert choice.choices[0].message.content in ("yes", "no")
    grammar = 'start: "(" NUMBER ")"\nNUMBER: /[1-9][0-9]?/'
    lark = client.completions.create(model=model_name, prompt="x", max_tokens=8, temperature=0.8, seed=1,
                                      extra_body={"guided_grammar": grammar})
    assert re.fullmatch(r"\([1-9][0-9]?\)", lark.choices[0].text)


@pytest.mark.parametrize("extra, param", [
    ({"guided_regex": "a("}, None),
    ({"guided_grammar": "start: ("}, None),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_regex": "a+", "guided_choice": ["x"]}, "guided_choice"),
])
def test_bad_constraints_are_400(client, model_name, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_name, messages=ASK, max_tokens=4, extra_body=extra)
    assert info.value.status_code == 400 and info.value.body["param"] == param


def test_json_schema_without_schema_is_400(client, model_name):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_name, messages=ASK, max_tokens=4,
                                       response_format={"type": "json_schema", "json_schema": {"name": "x"}})


def test_constraint_masks_validate_and_roll_back(engine_loop):
    """The engine-side object: batched masks allow only grammar tokens; validate_tokens/rollback for drafts."""
    engine = engine_loop.engine
    backend, tokenizer = engine.structured_output, engine.tokenizer
    constraint = backend.make_constraint(StructuredOutputParams("regex", "ab[0-9]+"))
    other = backend.make_constraint(StructuredOutputParams("json_object"))
    allowed = backend.fill_allowed([constraint, other])
    assert allowed.shape == (2, engine.hparams.vocab_size)
    assert all(tokenizer.decode([t]).startswith(("a", "ab")) for t in allowed[0].nonzero()[0])
    assert all(tokenizer.decode([t]).lstrip().startswith("{") for t in allowed[1].nonzero()[0])
    ids = tokenizer.encode("ab12", add_special=False)
    assert constraint.validate_tokens(ids + tokenizer.encode("x", add_special=False)) == len(ids)
    for token_id in ids:
        assert constraint.accept(token_id)
    assert not constraint.is_finished  # more digits may follow
    assert constraint.rollback(len(ids))
    assert constraint.validate_tokens(ids) == len(ids)


def test_apply_allowed_mask_on_a_hand_made_batch():
    import numpy as np

    from pocketcli.engine.sampler import apply_allowed_mask

    logits = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    allowed = np.array([[True, False, True], [False, True, False]])
    out = apply_allowed_mask(logits, allowed)
    assert out.tolist() == [[1.0, -np.inf, 3.0], [-np.inf, -1.0, -np.inf]]
    row = logits[0]
    assert apply_allowed_mask(row, None) is row
